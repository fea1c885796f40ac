package sketch

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestWindowForgets(t *testing.T) {
	w, err := NewWindow(WindowOptions{Options: Options{Width: 64, Depth: 2}, Ticks: 3})
	if err != nil {
		t.Fatal(err)
	}
	w.Add(1, 5)
	w.Advance()
	w.Add(1, 7)
	if got := w.Estimate(1); got != 12 {
		t.Errorf("after ticks of 5 and 7: %d; want 12", got)
	}
	if got := w.EstimateTick(1); got != 7 {
		t.Errorf("current tick: %d; want 7", got)
	}
	w.Advance()
	w.Advance() // the tick holding 5 leaves
	if got := w.Estimate(1); got != 7 {
		t.Errorf("after the first tick left: %d; want 7", got)
	}
	w.Advance()
	if got := w.Estimate(1); got != 0 {
		t.Errorf("after every tick left: %d; want 0", got)
	}
}

// TestWindowMatchesExact slides a window over a skewed stream and checks every key's
// window estimate against its exact count over the same ticks: never below, and the
// over-count of the heavy keys small.
func TestWindowMatchesExact(t *testing.T) {
	const ticks, perTick, steps = 10, 5_000, 40
	w, _ := NewWindow(WindowOptions{Options: Options{Width: 4096, Depth: 4}, Ticks: ticks})
	r := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(r, 1.1, 1, 100_000)
	history := make([]map[uint64]uint32, 0, steps)
	for step := 0; step < steps; step++ {
		if step > 0 {
			w.Advance()
		}
		cur := make(map[uint64]uint32)
		for i := 0; i < perTick; i++ {
			h := mix(z.Uint64())
			cur[h]++
			w.Add(h, 1)
		}
		history = append(history, cur)
		exact := make(map[uint64]uint32)
		for _, m := range history[max(0, len(history)-ticks):] {
			for h, c := range m {
				exact[h] += c
			}
		}
		var total uint32
		for _, c := range exact {
			total += c
		}
		for h, c := range exact {
			est := w.Estimate(h)
			if est < c {
				t.Fatalf("step %d: window estimate %d below exact %d", step, est, c)
			}
			if c > total/100 && float64(est-c) > 0.01*float64(c) {
				t.Errorf("step %d: key with %d (≥1%% of window) estimated %d: over 1%% error", step, c, est)
			}
		}
	}
}

func TestWindowSumMatchesTicks(t *testing.T) {
	w, _ := NewWindow(WindowOptions{Options: Options{Width: 64, Depth: 2}, Ticks: 4})
	r := rand.New(rand.NewPCG(5, 6))
	for step := 0; step < 50; step++ {
		for i := 0; i < 200; i++ {
			w.Add(mix(r.Uint64N(500)), uint32(r.IntN(3)+1))
		}
		w.Advance()
		for g := 0; g < len(w.cells); g += w.stride {
			var s uint64
			for tk := 1; tk <= w.ticks; tk++ {
				s += uint64(w.cells[g+tk])
			}
			if s != uint64(w.cells[g]) && s < math.MaxUint32 {
				t.Fatalf("step %d group %d: sum %d; want Σ ticks = %d", step, g, w.cells[g], s)
			}
		}
	}
}

func TestDistinct(t *testing.T) {
	d, err := NewDistinct(4)
	if err != nil {
		t.Fatal(err)
	}
	for tick := 0; tick < 4; tick++ {
		for i := 0; i < 25_000; i++ {
			d.Insert(mix(uint64(tick*25_000 + i)))
			d.Insert(mix(uint64(tick*25_000 + i))) // repeats do not count
		}
		if tick < 3 {
			d.Advance()
		}
	}
	if got := d.Estimate(); math.Abs(float64(got)-100_000) > 3_000 {
		t.Errorf("distinct over 4 ticks: %d; want 100,000 ± 3 %%", got)
	}
	d.Advance() // the first tick's 25,000 keys leave
	if got := d.Estimate(); math.Abs(float64(got)-75_000) > 2_250 {
		t.Errorf("distinct after one tick left: %d; want 75,000 ± 3 %%", got)
	}
	if _, err := NewDistinct(0); err == nil {
		t.Error("NewDistinct(0): no error; want one")
	}
}

func TestWindowSum(t *testing.T) {
	w, _ := NewWindow(WindowOptions{Options: Options{Width: 64, Depth: 3}, Ticks: 5})
	for h := uint64(0); h < 100; h++ {
		w.Add(mix(h), uint32(h))
		if h%10 == 0 {
			w.Advance()
		}
	}
	s := w.Sum()
	for h := uint64(0); h < 100; h++ {
		if got, want := s.Estimate(mix(h)), w.Estimate(mix(h)); got != want {
			t.Errorf("key %d: Sum estimate %d; want the window's %d", h, got, want)
		}
	}
}
