package detector

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// simRun drives a Detector and a Tracker with default rules but MinSamples for up to d in
// 1 ms steps of simulated time: each step, add(i, r) adds the samples of millisecond i
// (r draws the samples), and every 100 ms the window is evaluated and each change goes
// to seen, which ends the run by returning false.
func simRun(t *testing.T, r *rand.Rand, minSamples int, d time.Duration, add func(det *Detector, i int, r *rand.Rand), seen func(i int, c Change) bool) {
	t.Helper()
	det, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules := DefaultRules()
	rules.MinSamples = minSamples
	tr, err := NewTracker(rules)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	det.Advance(now)
	for i := range int(d / time.Millisecond) {
		add(det, i, r)
		now = now.Add(time.Millisecond)
		if i%100 != 99 {
			continue
		}
		det.Advance(now)
		s := det.Ranked(now, All, 0)
		_, changes := tr.Update(&s)
		for _, c := range changes {
			if !seen(i, c) {
				return
			}
		}
	}
}

// simulate sends 1-in-100 samples, drawn at random, of one key at rate requests/s and of a
// background of bg requests/s over keys each seen once, for d; it returns how many times
// the key turned hot and how many background keys did.
func simulate(t *testing.T, minSamples int, rate, bg float64, d time.Duration) (key, others int) {
	t.Helper()
	noise := 0
	simRun(t, rand.New(rand.NewPCG(1, 2)), minSamples, d, func(det *Detector, _ int, r *rand.Rand) {
		if r.Float64() < rate/1000/100 {
			det.Add([]byte("k"), false, 0, 100, 0)
		}
		if r.Float64() < bg/1000/100 {
			noise++
			det.Add(fmt.Appendf(nil, "bg:%d", noise), false, 0, 100, 0)
		}
	}, func(_ int, c Change) bool {
		switch {
		case c.Hot && c.Key == "k":
			key++
		case c.Hot:
			others++
		}
		return true
	})
	return key, others
}

// TestMinSamplesSimulated runs quiet agents, sampled 1 in 100 at random, for 10 simulated
// minutes each. The figures the docs quote come from here (go test ./detector -run
// TestMinSamplesSimulated -v): without the floor, thousands of background keys seen once
// turn hot; with it none does, and a key at 13 % of the traffic turns hot no more often.
func TestMinSamplesSimulated(t *testing.T) {
	if testing.Short() {
		t.Skip("10 simulated minutes per case")
	}
	for _, tc := range []struct{ rate, bg float64 }{{108, 800}, {300, 2000}, {600, 5000}} {
		keyOff, noiseOff := simulate(t, 0, tc.rate, tc.bg, 10*time.Minute)
		keyOn, noiseOn := simulate(t, 5, tc.rate, tc.bg, 10*time.Minute)
		t.Logf("key at %.0f/s in %.0f/s of background: turned hot %d times without the floor, %d with it; background keys %d and %d",
			tc.rate, tc.bg, keyOff, keyOn, noiseOff, noiseOn)
		if noiseOn != 0 {
			t.Errorf("%d background keys seen once or twice turned hot with the floor; want 0", noiseOn)
		}
		if keyOn == 0 || keyOn > keyOff {
			t.Errorf("the key turned hot %d times with the floor, %d without; want at least once and no more often", keyOn, keyOff)
		}
	}
}

// delayAfterJump simulates, sampled 1 in 100 at random with seed, a background of bg
// requests/s over 20,000 keys for 5 s, then a key jumping from nothing to rate requests/s
// (writes when write is true), and returns how long after the jump it turned hot, in
// 100 ms evaluations; an hour if not within 15 s.
func delayAfterJump(t *testing.T, seed uint64, minSamples int, rate, bg float64, write bool) time.Duration {
	t.Helper()
	const jump = 5000 // ms
	delay := time.Hour
	simRun(t, rand.New(rand.NewPCG(seed, 7)), minSamples, 20*time.Second, func(det *Detector, i int, r *rand.Rand) {
		if i >= jump && r.Float64() < rate/1000/100 {
			det.Add([]byte("k"), write, 0, 100, 0)
		}
		if r.Float64() < bg/1000/100 {
			det.Add(fmt.Appendf(nil, "bg:%d", r.IntN(20_000)), false, 0, 100, 0)
		}
	}, func(i int, c Change) bool {
		if c.Hot && c.Key == "k" && i >= jump {
			delay = time.Duration(i-jump+1) * time.Millisecond
			return false
		}
		return true
	})
	return delay
}

// TestMinSamplesDelaySimulated is what hot.min_samples costs in detection time, in
// simulated time (100 runs of each case, 20 with -race; go test ./detector -run
// TestMinSamplesDelaySimulated -v prints the table docs/BENCHMARKS.md quotes). A key at
// 10× its threshold is flagged in the same ticks with or without the floor; a key at 1.2–
// 2.4× its threshold on a quiet agent, which the share rule flagged from one or two
// samples, now waits for five.
func TestMinSamplesDelaySimulated(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 1,600 s of traffic")
	}
	for _, tc := range []struct {
		name     string
		rate, bg float64
		write    bool
	}{
		{"reads at 10× the rate threshold, quiet agent", 10_000, 800, false},
		{"reads at 2.4× the rate threshold, quiet agent", 2_400, 800, false},
		{"writes at 2.4× the rate threshold, quiet agent", 1_200, 800, true},
		{"reads at 2.4× the rate threshold, busy agent", 2_400, 20_000, false},
	} {
		runs := 100
		if raceEnabled {
			runs = 20 // ten times slower: the figures come from runs without -race
		}
		var p50, p99 [2]time.Duration
		for i, m := range []int{0, 5} {
			var ds []time.Duration
			for seed := range uint64(runs) {
				ds = append(ds, delayAfterJump(t, seed, m, tc.rate, tc.bg, tc.write))
			}
			slices.Sort(ds)
			p50[i], p99[i] = ds[runs/2], ds[runs*99/100-1]
		}
		t.Logf("%s (%.0f/s in %.0f/s): p50 %v, p99 %v without the floor; p50 %v, p99 %v with it", tc.name, tc.rate, tc.bg, p50[0], p99[0], p50[1], p99[1])
		if tc.rate == 10_000 && p99[1] > p99[0]+100*time.Millisecond {
			t.Errorf("%s: p99 %v with the floor, %v without; want at most one tick more", tc.name, p99[1], p99[0])
		}
	}
}
