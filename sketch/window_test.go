package sketch

import (
	"math"
	"math/rand/v2"
	"slices"
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
			if want := min(s, math.MaxUint32); uint64(w.cells[g]) != want {
				t.Fatalf("step %d group %d: sum %d; want Σ ticks = %d", step, g, w.cells[g], want)
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

// TestWindowAdvanceVisitsWhatItMust checks the ticks' bitmaps, by which Advance visits only
// the cells the forgotten tick counted in: after every step of random adds (some
// saturating), advances and resets, each bit is set exactly when its tick's counter is
// non-zero, and the cells equal those of a window advanced by scanning every cell.
func TestWindowAdvanceVisitsWhatItMust(t *testing.T) {
	for _, ticks := range []int{1, 3, 10, 16} {
		w, _ := NewWindow(WindowOptions{Options: Options{Width: 128, Depth: 3}, Ticks: ticks})
		ref, _ := NewWindow(WindowOptions{Options: Options{Width: 128, Depth: 3}, Ticks: ticks})
		r := rand.New(rand.NewPCG(uint64(ticks), 9))
		for step := range 2_000 {
			switch op := r.IntN(100); {
			case op < 80:
				h, n := mix(r.Uint64N(500)), uint32(r.IntN(4))
				if r.IntN(50) == 0 {
					n = math.MaxUint32 - 1 // saturates what it meets
				}
				w.Add(h, n)
				ref.Add(h, n)
			case op < 99:
				w.Advance()
				advanceByScan(ref)
			default:
				w.Reset()
				ref.Reset()
			}
			if !slices.Equal(w.cells, ref.cells) {
				t.Fatalf("ticks %d, step %d: cells differ from a full scan's", ticks, step)
			}
			for k := range ticks {
				for cell := range w.width * w.depth {
					set := w.set[k*w.words+cell>>6]>>(cell&63)&1 == 1
					if nonzero := w.cells[cell*w.stride+1+k] != 0; set != nonzero {
						t.Fatalf("ticks %d, step %d, tick %d, cell %d: bit %v, counter non-zero %v", ticks, step, k, cell, set, nonzero)
					}
				}
			}
		}
	}
}

// advanceByScan is Advance visiting every cell: the reference for the bitmaps' version.
func advanceByScan(w *Window) {
	w.cur = (w.cur + 1) % w.ticks
	t := 1 + w.cur
	for g := 0; g < len(w.cells); g += w.stride {
		if c := w.cells[g+t]; c != 0 {
			w.cells[g+t] = 0
			if w.cells[g] == math.MaxUint32 {
				w.cells[g] = w.sumTicks(g)
			} else {
				w.cells[g] -= c
			}
		}
	}
}

// TestDistinctSkipsIdleTicks checks that ticks with no insert leave the estimate alone
// and that a tick used, forgotten and used again counts only its new keys.
func TestDistinctSkipsIdleTicks(t *testing.T) {
	d, _ := NewDistinct(3)
	if got := d.Estimate(); got != 0 {
		t.Fatalf("empty: %d; want 0", got)
	}
	for i := range 1_000 {
		d.Insert(mix(uint64(i)))
	}
	d.Advance()
	d.Advance()
	if got := d.Estimate(); math.Abs(float64(got)-1_000) > 30 {
		t.Errorf("after two idle ticks: %d; want 1,000 ± 3 %%", got)
	}
	d.Advance() // the used tick comes round again and is forgotten
	if got := d.Estimate(); got != 0 {
		t.Errorf("after the used tick left: %d; want 0", got)
	}
	for i := range 500 {
		d.Insert(mix(uint64(10_000 + i)))
	}
	if got := d.Estimate(); math.Abs(float64(got)-500) > 15 {
		t.Errorf("reused tick: %d; want 500 ± 3 %%", got)
	}
}

// TestWindowSaturatedTickLeaves checks that when a tick whose count saturated the window's
// sum leaves, the counts of the ticks still in the window stay counted.
func TestWindowSaturatedTickLeaves(t *testing.T) {
	w, err := NewWindow(WindowOptions{Options: Options{Width: 64, Depth: 2}, Ticks: 3})
	if err != nil {
		t.Fatal(err)
	}
	w.Add(1, math.MaxUint32)
	w.Advance()
	w.Add(1, 5)
	if got := w.Estimate(1); got != math.MaxUint32 {
		t.Fatalf("saturated: %d; want %d", got, uint32(math.MaxUint32))
	}
	w.Advance()
	w.Add(1, 7)
	w.Advance() // the saturated tick leaves; 5 and 7 remain
	if got := w.Estimate(1); got != 12 {
		t.Errorf("after the saturated tick left: %d; want 12", got)
	}
	w.Advance() // the 5 leaves
	if got := w.Estimate(1); got != 7 {
		t.Errorf("after the tick of 5 left: %d; want 7", got)
	}
}
