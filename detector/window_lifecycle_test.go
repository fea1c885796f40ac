package detector

import (
	"math"
	"testing"
	"time"
)

// steady adds reads of key at rate requests/s from *now for d, in 10 ms steps, calling
// Advance every tick when advance is true (the loop keeping up) and never otherwise (the
// loop lagging).
func steady(d *Detector, now *time.Time, key string, rate float64, span time.Duration, advance bool) {
	const step = 10 * time.Millisecond
	per := uint32(rate * step.Seconds())
	for el := time.Duration(0); el < span; el += step {
		d.Add([]byte(key), false, 0, per, 0)
		*now = now.Add(step)
		if advance && now.Sub(t0)%d.opts.Tick == 0 {
			d.Advance(*now)
		}
	}
}

func readRate(t *testing.T, d *Detector, now time.Time, key string) float64 {
	t.Helper()
	s := d.Snapshot(now, All, 0)
	for _, k := range s.Keys {
		if k.Key == key {
			return s.Rate(k.Reads)
		}
	}
	t.Fatalf("%s not in the snapshot at %v", key, now)
	return 0
}

// TestLateAdvanceRateOverElapsed: the evaluation loop runs 400 ms late (a GC pause, a
// starved CPU). The current tick then holds 500 ms of traffic; the rate must be computed
// over the time the counts really cover, not one tick's length, or a steady 800/s key
// shows as 1,040/s: over the 1,000/s read threshold, a phantom hot key.
func TestLateAdvanceRateOverElapsed(t *testing.T) {
	d, _ := New(Options{})
	now := t0
	d.Advance(now)
	steady(d, &now, "k", 800, 2*time.Second, true)
	steady(d, &now, "k", 800, 400*time.Millisecond, false) // no Advance: the loop lags
	if got := readRate(t, d, now, "k"); math.Abs(got-800) > 8 {
		t.Errorf("after a 400ms lag: read rate %v; want 800", got)
	}
	_, tick := d.Covered(now)
	if tick != 400*time.Millisecond {
		t.Errorf("tick span %v after a 400ms lag; want 400ms (the current tick's real length)", tick)
	}
	d.Advance(now)
	steady(d, &now, "k", 800, 3*time.Second, true)
	if got := readRate(t, d, now, "k"); math.Abs(got-800) > 8 {
		t.Errorf("3s after the lag: read rate %v; want 800", got)
	}
}

// TestStallLongerThanWindow: the loop stalls 2 s, longer than the 1 s window. The late
// Advance clears every tick, so the window restarts: the rates of the next ticks are over
// the time since then, not over a full window that holds no traffic.
func TestStallLongerThanWindow(t *testing.T) {
	d, _ := New(Options{})
	now := t0
	d.Advance(now)
	steady(d, &now, "k", 800, 2*time.Second, true)
	steady(d, &now, "k", 800, 2*time.Second, false)
	if got := readRate(t, d, now, "k"); math.Abs(got-800) > 8 {
		t.Errorf("at the end of a 2s stall: read rate %v; want 800", got)
	}
	d.Advance(now)
	steady(d, &now, "k", 800, 100*time.Millisecond, true)
	if got := readRate(t, d, now, "k"); math.Abs(got-800) > 8 {
		t.Errorf("100ms after a 2s stall: read rate %v; want 800", got)
	}
}
