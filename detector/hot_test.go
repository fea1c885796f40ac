package detector

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// snap builds a one-second snapshot holding one key with the given read and write rates,
// in traffic of total requests per second.
func snap(at time.Time, key string, reads, writes, total uint64) *Snapshot {
	return &Snapshot{
		At: at, Covered: time.Second, Reads: total, TickSpan: 100 * time.Millisecond,
		Keys: []Key{{Key: key, Reads: reads, Writes: writes, TickReads: reads / 10, TickWrites: writes / 10}},
	}
}

func TestRulesValidate(t *testing.T) {
	tests := []struct {
		mod func(*Rules)
		err string
	}{
		{func(r *Rules) { r.Read.Rate = -1 }, "read rate -1"},
		{func(r *Rules) { r.Write.Share = 1.5 }, "write share 1.5"},
		{func(r *Rules) { r.MinSamples = -1 }, "min samples -1"},
		{func(r *Rules) { r.CoolRatio = 1 }, "cool ratio 1"},
		{func(r *Rules) { r.CoolTicks = 0 }, "cool ticks 0"},
		{func(r *Rules) { r.Overrides = []Override{{Pattern: "a*b*"}} }, `pattern "a*b*"`},
		{func(r *Rules) { r.Overrides = []Override{{Pattern: ""}} }, `pattern ""`},
		{func(r *Rules) { r.Overrides = []Override{{Pattern: "x", Read: Threshold{Rate: -5}}} }, `override "x" read rate -5`},
	}
	for _, tt := range tests {
		r := DefaultRules()
		tt.mod(&r)
		if _, err := NewTracker(r); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("error %v; want one containing %q", err, tt.err)
		}
	}
}

func TestThresholds(t *testing.T) {
	r := DefaultRules()
	r.Overrides = []Override{
		{Pattern: "score:*", Read: Threshold{Rate: 5000}},
		{Pattern: "score:final*", Read: Threshold{Rate: 20000}, Write: Threshold{Share: 0.5}},
		{Pattern: "cfg", Write: Threshold{Rate: 1}},
		{Pattern: "cfg*", Write: Threshold{Rate: 2}},
	}
	tests := []struct {
		key         string
		read, write Threshold
	}{
		{"user:1", Threshold{1000, 0.05}, Threshold{500, 0.05}},
		{"score:match42", Threshold{5000, 0.05}, Threshold{500, 0.05}},
		{"score:final", Threshold{20000, 0.05}, Threshold{500, 0.5}},
		{"cfg", Threshold{1000, 0.05}, Threshold{1, 0.05}},
		{"cfg2", Threshold{1000, 0.05}, Threshold{2, 0.05}},
	}
	for _, tt := range tests {
		rd, wr := r.thresholds(tt.key)
		if rd != tt.read || wr != tt.write {
			t.Errorf("%s: read %+v write %+v; want %+v %+v", tt.key, rd, wr, tt.read, tt.write)
		}
	}
}

func TestHotByRateAndShare(t *testing.T) {
	tests := []struct {
		name                 string
		reads, writes, total uint64
		hot                  bool
	}{
		{"reads at the rate", 1000, 0, 100_000, true},
		{"reads below rate and share", 999, 0, 100_000, false},
		{"writes at the rate", 0, 500, 100_000, true},
		{"share over 5%", 600, 0, 10_000, true},
		{"share over 5% but below the minimum rate", 90, 0, 1_000, false},
		{"write share", 0, 300, 5_000, true},
	}
	for _, tt := range tests {
		tr, _ := NewTracker(DefaultRules())
		levels, changes := tr.Update(snap(t0, "k", tt.reads, tt.writes, tt.total))
		if levels[0].Hot != tt.hot || (len(changes) == 1) != tt.hot {
			t.Errorf("%s: hot %v, changes %v; want hot %v", tt.name, levels[0].Hot, changes, tt.hot)
		}
	}
}

// TestNoFlapping drives a key around its threshold: it turns hot once, stays hot while it
// hovers above the cool line, and cools only after CoolTicks evaluations below it.
func TestNoFlapping(t *testing.T) {
	tr, _ := NewTracker(DefaultRules())
	at := t0
	var changes []Change
	eval := func(reads uint64) {
		at = at.Add(100 * time.Millisecond)
		_, c := tr.Update(snap(at, "k", reads, 0, 1e6))
		changes = append(changes, c...)
	}
	for i := 0; i < 50; i++ { // around the threshold: 1,050, 950, 1,050 …
		eval(uint64(1000 + 50*(1-2*(i%2))))
	}
	for i := 0; i < 50; i++ { // between the cool line (700) and the threshold
		eval(750)
	}
	if len(changes) != 1 || !changes[0].Hot {
		t.Fatalf("changes while hovering: %+v; want one, to hot", changes)
	}
	for i := 0; i < 9; i++ {
		eval(600)
	}
	if len(changes) != 1 {
		t.Fatalf("cooled after 9 evaluations below the line; want 10")
	}
	eval(800) // back above the cool line resets the count
	for i := 0; i < 9; i++ {
		eval(600)
	}
	if len(changes) != 1 {
		t.Fatalf("cooled although the run below the line was broken")
	}
	eval(600)
	if len(changes) != 2 || changes[1].Hot {
		t.Fatalf("changes %+v; want a second one, to cool", changes)
	}
	if tr.Hot() != 0 {
		t.Errorf("%d hot keys after cooling; want 0", tr.Hot())
	}
}

func TestDelayAndForget(t *testing.T) {
	tr, _ := NewTracker(DefaultRules())
	// The tick is over the threshold (2,000/s) before the window is (200 in the window).
	s := snap(t0, "flash", 200, 0, 1e6)
	s.Keys[0].TickReads = 200
	if _, c := tr.Update(s); len(c) != 0 {
		t.Fatalf("hot on the tick alone: %v", c)
	}
	_, c := tr.Update(snap(t0.Add(200*time.Millisecond), "flash", 1500, 0, 1e6))
	if len(c) != 1 || c[0].Delay != 200*time.Millisecond {
		t.Fatalf("changes %+v; want flash hot with a 200ms delay", c)
	}
	// The key leaves the ranking: it cools after CoolTicks evaluations, then is forgotten.
	for i := 0; i < 10; i++ {
		tr.Update(&Snapshot{At: t0.Add(time.Duration(i+3) * 100 * time.Millisecond), Covered: time.Second})
	}
	if len(tr.states) != 0 {
		t.Errorf("%d states kept after the key left and cooled; want 0", len(tr.states))
	}
}

// TestMinSamples runs sampled traffic through a real Detector into a Tracker.
func TestMinSamples(t *testing.T) {
	type source struct {
		key      string
		every    uint32 // the weight of one sample: 1 in every
		perTick  int    // samples in each 100 ms tick
		oneEvery int    // else one sample every oneEvery ticks
	}
	// run sends the sources and a background, bgPerTick samples of 1 in 100 a tick, each
	// of a key of its own, for 5 s, and returns the keys that turned hot.
	run := func(t *testing.T, minSamples int, bgPerTick int, sources ...source) map[string]bool {
		t.Helper()
		rules := DefaultRules()
		rules.MinSamples = minSamples
		hotAt := runTicks(t, rules, 50, bgPerTick, func(tick int) (items []Item) {
			for _, s := range sources {
				n := s.perTick
				if s.oneEvery > 0 && tick%s.oneEvery == 0 {
					n = 1
				}
				for range n {
					items = append(items, Item{Key: []byte(s.key), N: s.every})
				}
			}
			return items
		})
		hot := map[string]bool{}
		for k := range hotAt {
			hot[k] = true
		}
		return hot
	}
	only := func(t *testing.T, hot map[string]bool, want ...string) {
		t.Helper()
		var got []string
		for k := range hot {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("hot keys %v; want %v", got[:min(len(got), 8)], want)
		}
	}

	// A quiet agent: 1,500 requests/s sampled 1 in 100, 15 samples a second, the
	// background's each of a key of its own. A key seen once reads as 100/s, 6.7 % of the
	// traffic: hot by share without the floor. warm, 500/s of it at 1 in 50 (10 samples a
	// window), is hot by share with the floor too.
	warm := source{key: "warm", every: 50, perTick: 1}
	t.Run("quiet", func(t *testing.T) {
		only(t, run(t, 5, 1, warm), "warm")
		if hot := run(t, 0, 1, warm); len(hot) < 20 {
			t.Errorf("with MinSamples 0, %d keys turned hot; want the background's too", len(hot))
		}
	})
	// A heavily sampled source, 1 in 10,000, in busy traffic (so no key is near 5 %): one
	// sample reads as 10,000/s, ten times the read threshold. heavy is seen in every tick.
	rare := source{key: "rare", every: 10_000, oneEvery: 20}
	heavy := source{key: "heavy", every: 10_000, perTick: 1}
	t.Run("sparse", func(t *testing.T) {
		only(t, run(t, 5, 100, rare, heavy), "heavy")
		if hot := run(t, 0, 100, rare, heavy); !hot["rare"] {
			t.Errorf("with MinSamples 0, rare did not turn hot; the test cannot tell")
		}
	})
}

// TestMinSamplesHysteresis: the sample floor holds for turning hot only. A key at 15 % of
// a quiet agent's traffic, seen in 3 samples of 1 in 100 a window and now and then in 6,
// turns hot once and stays hot; with the floor also on cooling it went out after each
// window of 6, in again at the next (the flapping a 10-minute simulation showed: 111
// episodes).
func TestMinSamplesHysteresis(t *testing.T) {
	tr, _ := NewTracker(DefaultRules())
	at := t0
	hot := 0
	for i := range 100 {
		reads := uint64(300) // 3 samples: under the floor of 5
		if i%11 == 0 {
			reads = 600
		}
		s := snap(at, "k", reads, 0, 2000)
		s.Keys[0].Weight = 100
		_, changes := tr.Update(s)
		for _, c := range changes {
			if c.Hot {
				hot++
			}
		}
		at = at.Add(100 * time.Millisecond)
	}
	if hot != 1 {
		t.Errorf("k turned hot %d times; want once", hot)
	}
	// A key that never has 5 samples does not turn hot at all.
	tr, _ = NewTracker(DefaultRules())
	s := snap(at, "thin", 400, 0, 2000)
	s.Keys[0].Weight = 100
	if levels, changes := tr.Update(s); len(changes) != 0 || levels[0].Level != 0 {
		t.Errorf("thin (4 samples): changes %v, level %v; want none and 0", changes, levels[0].Level)
	}
}

// One sample from a sparser sampler (1 in 100,000, in a fleet that samples 1 in 10)
// raises a key's weight, and with it the count it needs to turn hot, only for the window
// or two that follow: the key still turns hot once it is heavy, as a key without that
// sample does. (Before, the weight stayed as long as the key was ranked, and the key never
// turned hot.)
func TestMinSamplesStraySparseSample(t *testing.T) {
	hotAt := runTicks(t, DefaultRules(), 60, 100, func(tick int) (items []Item) {
		perTick := 8 // 800/s, under the read threshold (1,000/s) and 5 % of the traffic
		if tick >= 10 {
			perTick = 30 // 3,000/s
		}
		for _, key := range []string{"stray", "control"} {
			for range perTick {
				items = append(items, Item{Key: []byte(key), N: 10})
			}
		}
		if tick == 5 {
			items = append(items, Item{Key: []byte("stray"), N: 100_000})
		}
		return items
	})
	control, ok := hotAt["control"]
	if !ok || control < 10 {
		t.Fatalf("control turned hot at tick %d (%v); want once it jumps, at tick 10 or after", control, ok)
	}
	// The stray sample leaves the window (10 ticks) at tick 15; its weight is gone from
	// the key two windows later at the latest (tick 25), and the key then has 30 samples
	// a tick.
	stray, ok := hotAt["stray"]
	if !ok || stray > 26 {
		t.Errorf("stray turned hot at tick %d (%v); want by tick 26, two windows after its sparse sample (control: tick %d)", stray, ok, control)
	}
	for k, at := range hotAt {
		if k != "stray" && k != "control" {
			t.Errorf("%s turned hot at tick %d; want only stray and control", k, at)
		}
	}
}

// runTicks runs ticks of 100 ms through a detector and a tracker with rules. Each tick
// holds bgPerTick background samples of 1 in 100, each of a key of its own (100 of them
// make 100,000 requests/s, so that no key is hot by share alone), and the items of
// more(tick). It returns the tick at which each key first turned hot.
func runTicks(t *testing.T, rules Rules, ticks, bgPerTick int, more func(tick int) []Item) map[string]int {
	t.Helper()
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTracker(rules)
	if err != nil {
		t.Fatal(err)
	}
	hotAt := map[string]int{}
	now, noise := t0, 0
	d.Advance(now)
	for tick := range ticks {
		var items []Item
		for range bgPerTick {
			noise++
			items = append(items, Item{Key: fmt.Appendf(nil, "bg:%d", noise), N: 100})
		}
		d.AddBatch(append(items, more(tick)...))
		now = now.Add(100 * time.Millisecond)
		d.Advance(now)
		snap := d.Ranked(now, All, 0)
		_, changes := tr.Update(&snap)
		for _, c := range changes {
			if _, seen := hotAt[c.Key]; c.Hot && !seen {
				hotAt[c.Key] = tick
			}
		}
	}
	return hotAt
}
