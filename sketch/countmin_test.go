package sketch

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestOptions(t *testing.T) {
	tests := []struct {
		o            Options
		width, depth int
		err          string
	}{
		{Options{}, DefaultWidth, DefaultDepth, ""},
		{Options{Width: 64, Depth: 1}, 64, 1, ""},
		{Options{Epsilon: 0.001, Delta: 0.01}, 4096, 5, ""},
		{Options{Epsilon: 0.5}, 64, DefaultDepth, ""},
		{Options{Width: 1000}, 0, 0, "width 1000: must be a power of two"},
		{Options{Width: 32}, 0, 0, "width 32"},
		{Options{Width: 1 << 25}, 0, 0, "width 33554432"},
		{Options{Depth: 17}, 0, 0, "depth 17: must be in [1, 16]"},
		{Options{Depth: -1}, 0, 0, "depth -1"},
		{Options{Epsilon: 1.5}, 0, 0, "epsilon 1.5: must be in (0, 1)"},
		{Options{Delta: -0.1}, 0, 0, "delta -0.1"},
	}
	for _, tt := range tests {
		s, err := New(tt.o)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("New(%+v): error %v; want one containing %q", tt.o, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("New(%+v): %v", tt.o, err)
			continue
		}
		if s.Width() != tt.width || s.Depth() != tt.depth {
			t.Errorf("New(%+v): %d×%d; want %d×%d", tt.o, s.Depth(), s.Width(), tt.depth, tt.width)
		}
	}
}

// zipfStream returns n draws from a Zipf distribution over keys hashed 0..imax, with a
// fixed seed, and the exact counts.
func zipfStream(n int, s float64, imax uint64) ([]uint64, map[uint64]uint32) {
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, s, 1, imax)
	keys := make([]uint64, n)
	exact := make(map[uint64]uint32)
	for i := range keys {
		h := mix(z.Uint64())
		keys[i] = h
		exact[h]++
	}
	return keys, exact
}

// mix turns small integers into well-spread hashes (splitmix64's finaliser).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func TestCountMinNeverUnderCounts(t *testing.T) {
	keys, exact := zipfStream(200_000, 1.1, 50_000)
	cu, _ := New(Options{Width: 1024, Depth: 4})
	for _, h := range keys {
		cu.Add(h, 1)
	}
	plain := make([]uint32, 4*1024) // a count-min sketch without conservative update
	for _, h := range keys {
		for i := 0; i < 4; i++ {
			plain[cu.cell(i, h)]++
		}
	}
	var errCU, errPlain uint64
	for h, c := range exact {
		est := cu.Estimate(h)
		if est < c {
			t.Fatalf("estimate %d of a key seen %d times: under-count", est, c)
		}
		p := plain[cu.cell(0, h)]
		for i := 1; i < 4; i++ {
			p = min(p, plain[cu.cell(i, h)])
		}
		if est > p {
			t.Fatalf("conservative estimate %d above plain %d", est, p)
		}
		errCU += uint64(est - c)
		errPlain += uint64(p - c)
	}
	if errCU >= errPlain {
		t.Errorf("total over-count with conservative update %d; want below plain update's %d", errCU, errPlain)
	}
	t.Logf("total over-count: conservative %d, plain %d", errCU, errPlain)
}

func TestCountMinErrorBound(t *testing.T) {
	// With ε = 0.001 and δ = 0.01, at most about 1 % of keys may exceed ε·N.
	const n = 300_000
	keys, exact := zipfStream(n, 1.05, 100_000)
	s, _ := New(Options{Epsilon: 0.001, Delta: 0.01})
	for _, h := range keys {
		s.Add(h, 1)
	}
	bound := uint32(0.001 * n)
	var over int
	for h, c := range exact {
		if s.Estimate(h)-c > bound {
			over++
		}
	}
	if frac := float64(over) / float64(len(exact)); frac > 0.01 {
		t.Errorf("%d of %d keys (%.3f) over-counted by more than εN = %d; want at most δ = 0.01", over, len(exact), frac, bound)
	}
}

func TestCountMinSaturates(t *testing.T) {
	s, _ := New(Options{Width: 64, Depth: 2})
	s.Add(7, 1<<31)
	s.Add(7, 1<<31)
	if got := s.Add(7, 5); got != 1<<32-1 {
		t.Errorf("estimate after overflow %d; want %d", got, uint32(1<<32-1))
	}
}

func TestMerge(t *testing.T) {
	a, _ := New(Options{Width: 256, Depth: 3})
	b, _ := New(Options{Width: 256, Depth: 3})
	keys, exact := zipfStream(20_000, 1.2, 5_000)
	for i, h := range keys {
		if i%2 == 0 {
			a.Add(h, 1)
		} else {
			b.Add(h, 1)
		}
	}
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	for h, c := range exact {
		if got := a.Estimate(h); got < c {
			t.Fatalf("merged estimate %d; want ≥ the true %d", got, c)
		}
	}
	c, _ := New(Options{Width: 512, Depth: 3})
	if err := a.Merge(c); !errors.Is(err, ErrShape) {
		t.Errorf("merge of 256 and 512 wide sketches: %v; want ErrShape", err)
	}
}

func TestAddAllocs(t *testing.T) {
	s, _ := New(Options{})
	w, _ := NewWindow(WindowOptions{})
	d, _ := NewDistinct(10)
	var h uint64
	if n := testing.AllocsPerRun(1000, func() { h++; s.Add(mix(h), 1) }); n != 0 {
		t.Errorf("CountMin.Add: %v allocs; want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { h++; w.Add(mix(h), 1) }); n != 0 {
		t.Errorf("Window.Add: %v allocs; want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { h++; d.Insert(mix(h)) }); n != 0 {
		t.Errorf("Distinct.Insert: %v allocs; want 0", n)
	}
	d.Advance()
	if n := testing.AllocsPerRun(1000, func() { h++; d.Insert(mix(h)) }); n != 0 {
		t.Errorf("Distinct.Insert after Advance: %v allocs; want 0", n)
	}
}

// TestOptionsTinyBounds checks that an Epsilon or Delta too small for the largest shape is
// an error naming it, not a silent 64-wide or 1-deep sketch (their float-to-int
// conversions overflowed).
func TestOptionsTinyBounds(t *testing.T) {
	tests := []struct {
		o   Options
		err string
	}{
		{Options{Epsilon: 1e-300}, "epsilon 1e-300: must be at least"},
		{Options{Epsilon: 1e-10}, "epsilon 1e-10: must be at least"},
		{Options{Delta: 5e-324}, "delta 5e-324: must be at least"},
		{Options{Delta: 1e-10}, "delta 1e-10: must be at least"},
	}
	for _, tt := range tests {
		s, err := New(tt.o)
		if err == nil {
			t.Errorf("New(%+v): %d×%d sketch; want an error containing %q", tt.o, s.Depth(), s.Width(), tt.err)
			continue
		}
		if !strings.Contains(err.Error(), tt.err) {
			t.Errorf("New(%+v): error %q; want one containing %q", tt.o, err, tt.err)
		}
	}
}
