package detector

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// simulate sends 1-in-100 samples, drawn at random, of one key at rate requests/s and of a
// background of bg requests/s over keys each seen once, for d in 1 ms steps, evaluating
// every 100 ms tick; it returns how many times the key turned hot and how many
// background keys did.
func simulate(t *testing.T, minSamples int, rate, bg float64, d time.Duration) (key, others int) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
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
	noise := 0
	for i := range int(d / time.Millisecond) {
		if r.Float64() < rate/1000/100 {
			det.Add([]byte("k"), false, 0, 100, 0)
		}
		if r.Float64() < bg/1000/100 {
			noise++
			det.Add(fmt.Appendf(nil, "bg:%d", noise), false, 0, 100, 0)
		}
		now = now.Add(time.Millisecond)
		if i%100 != 99 {
			continue
		}
		det.Advance(now)
		s := det.Ranked(now, All, 0)
		_, changes := tr.Update(&s)
		for _, c := range changes {
			switch {
			case c.Hot && c.Key == "k":
				key++
			case c.Hot:
				others++
			}
		}
	}
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
