package mitigate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// planNamer is a pure naming function for planner tests: copy i of key is "{hk<i>}key" on
// primary i mod primaries. It is not a Redis mock; real names are Topology's to test.
type planNamer struct {
	primaries int
	err       error
	host      string // varies the primaries' addresses, to play a topology change
}

func (f planNamer) Primaries() int { return f.primaries }

func (f planNamer) Names(key string, n int, kind Kind) ([]Node, error) {
	if f.err != nil {
		return nil, f.err
	}
	tag := "hk"
	if kind == ShardedCounter {
		tag = "hc"
	}
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{Name: fmt.Sprintf("{%s%d}%s", tag, i, key), Slot: i, Primary: fmt.Sprintf("%s%d:6379", cmpString(f.host, "10.0.0."), i%f.primaries+1)}
	}
	return nodes, nil
}

func cmpString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var t0 = time.Date(2026, 3, 1, 20, 0, 0, 0, time.UTC)

func newPlanner(t *testing.T, o PlannerOptions) *Planner {
	t.Helper()
	p, err := NewPlanner(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func kinds(p Plan, key string) string {
	var ks []string
	for _, e := range p.Entries {
		if e.Key == key {
			ks = append(ks, string(e.Kind))
		}
	}
	return strings.Join(ks, ",")
}

// readHot is a key that L1 alone covers.
func readHot(key string, hot bool) KeyStats {
	return KeyStats{Key: key, ReadRate: 80_000, Hot: hot, SDKShare: 0.95}
}

// Each row is one rule of the hysteresis: a key hot at t0 only (or as listed), looked at
// at a later time.
func TestPlannerHysteresis(t *testing.T) {
	tests := []struct {
		name    string
		hotAt   []time.Duration // offsets from t0 at which the key is hot; cool at every other tick
		at      time.Duration   // when the plan is read
		present bool
	}{
		{"started at once", []time.Duration{0}, 0, true},
		{"stays for MinActive though cool", []time.Duration{0}, 29 * time.Second, true},
		{"stays until cool for CoolDown", []time.Duration{0}, 59 * time.Second, true},
		{"removed after MinActive and CoolDown", []time.Duration{0}, 60 * time.Second, false},
		{"heat restarts the cool-down", []time.Duration{0, 50 * time.Second}, 109 * time.Second, true},
		{"and it ends CoolDown after the last heat", []time.Duration{0, 50 * time.Second}, 110 * time.Second, false},
		{"MinActive holds a mitigation that cooled at once", []time.Duration{0}, 1 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, PlannerOptions{})
			var plan Plan
			for off := time.Duration(0); off <= tt.at; off += time.Second {
				hot := false
				for _, h := range tt.hotAt {
					hot = hot || h == off
				}
				plan, _ = p.Update(t0.Add(off), []KeyStats{readHot("k", hot)}, planNamer{primaries: 3})
			}
			if _, got := plan.Find("k", L1); got != tt.present {
				t.Fatalf("at t0+%v: L1 present %v; want %v (entries %s)", tt.at, got, tt.present, kinds(plan, "k"))
			}
		})
	}
}

// MinActive holds a mitigation whose cool-down is short.
func TestPlannerMinActive(t *testing.T) {
	p := newPlanner(t, PlannerOptions{MinActive: 30 * time.Second, CoolDown: 5 * time.Second})
	p.Update(t0, []KeyStats{readHot("k", true)}, nil)
	for _, c := range []struct {
		at      time.Duration
		present bool
	}{{10 * time.Second, true}, {29 * time.Second, true}, {30 * time.Second, false}} {
		plan, _ := p.Update(t0.Add(c.at), nil, nil)
		if _, got := plan.Find("k", L1); got != c.present {
			t.Errorf("at t0+%v: L1 present %v; want %v", c.at, got, c.present)
		}
	}
}

// A key driven around the thresholds for ten minutes: hot and cool in turn, its rate
// crossing the budget and the count of copies it needs. The plan changes once when it
// starts, at most once per half lease to renew, and once when the key has cooled.
func TestPlannerNoFlapping(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	namer := planNamer{primaries: 6}
	var last Plan
	changes, substantive := 0, 0
	tick := func(at time.Duration, k KeyStats) {
		plan, changed := p.Update(t0.Add(at), []KeyStats{k}, namer)
		if changed {
			changes++
			if !sameEntries(plan.Entries, last.Entries, false) {
				substantive++
			}
		} else if !sameEntries(plan.Entries, last.Entries, true) {
			t.Fatalf("at t0+%v: entries changed but Update said not", at)
		}
		last = plan
	}
	const period = 10 * time.Minute
	for at := time.Duration(0); at < period; at += time.Second {
		s := int(at / time.Second)
		k := KeyStats{Key: "k", SDKShare: 0.5, Hot: s%7 < 3}
		// Reads swing between 140k/s (3 copies) and 160k/s (4 copies), and every fifth
		// second to 90k/s, where copies are not needed at all.
		switch {
		case s%5 == 4:
			k.ReadRate = 90_000
		case s%2 == 0:
			k.ReadRate = 160_000
		default:
			k.ReadRate = 140_000
		}
		tick(at, k)
	}
	t.Logf("%d changes, %d substantive, in %v of swings", changes, substantive, period)
	if e, ok := last.Find("k", Copies); !ok || len(e.Copies) != 4 {
		t.Fatalf("after %v of swings: copies %+v; want 4, the largest N needed", period, e.Copies)
	}
	if substantive > 2 {
		t.Errorf("%d substantive plan changes in %v of swings; want at most 2 (start, and 3 → 4 copies)", substantive, period)
	}
	if max := 2 + int(period/(DefaultLease/2)); changes > max {
		t.Errorf("%d plan changes in %v; want at most %d (start and one renewal per half lease)", changes, period, max)
	}
	// Cool for good: the plan ends the mitigations CoolDown later, in one change.
	before := substantive
	for at := period; at < period+2*time.Minute; at += time.Second {
		tick(at, KeyStats{Key: "k"})
	}
	if len(last.Entries) != 0 {
		t.Errorf("two minutes after the key cooled: entries %s; want none", kinds(last, "k"))
	}
	if got := substantive - before; got != 1 {
		t.Errorf("%d substantive changes while the key cooled; want 1", got)
	}
}

// A smaller N waits CoolDown; a larger one comes at once.
func TestPlannerResize(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	namer := planNamer{primaries: 6}
	n := func(at time.Duration, rate float64) int {
		plan, _ := p.Update(t0.Add(at), []KeyStats{{Key: "k", ReadRate: rate, Hot: true}}, namer)
		e, _ := plan.Find("k", Copies)
		return len(e.Copies)
	}
	steps := []struct {
		at   time.Duration
		rate float64
		want int
	}{
		{0, 110_000, 3},
		{10 * time.Second, 160_000, 4},  // up at once
		{20 * time.Second, 110_000, 4},  // down waits
		{79 * time.Second, 110_000, 4},  // still waiting
		{80 * time.Second, 110_000, 3},  // CoolDown after it first wanted fewer
		{90 * time.Second, 60_000, 3},   // down waits again
		{100 * time.Second, 110_000, 3}, // back to 3: the wait for 2 is over
		{160 * time.Second, 60_000, 3},  // wait for 2 starts again from here
		{219 * time.Second, 60_000, 3},
		{220 * time.Second, 60_000, 2},
	}
	for _, s := range steps {
		if got := n(s.at, s.rate); got != s.want {
			t.Errorf("at t0+%v, read %v/s: %d copies; want %d", s.at, s.rate, got, s.want)
		}
	}
}

// Rates that move without crossing a row of the table leave the plan alone: the reason
// is written when the mitigation starts.
func TestPlannerReasonStable(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	first, _ := p.Update(t0, []KeyStats{{Key: "k", ReadRate: 80_000, Hot: true, SDKShare: 0.95}}, nil)
	second, changed := p.Update(t0.Add(time.Second), []KeyStats{{Key: "k", ReadRate: 85_000, Hot: true, SDKShare: 0.96}}, nil)
	if changed || !sameEntries(first.Entries, second.Entries, true) {
		t.Fatalf("rates moved within a row: changed %v, entries %+v; want the same plan", changed, second.Entries)
	}
	// Reports keep their reason too.
	p.Update(t0, []KeyStats{{Key: "w", WriteRate: 60_000, Hot: true}}, nil)
	a, _ := p.Update(t0.Add(time.Second), []KeyStats{{Key: "w", WriteRate: 70_000, Hot: true}}, nil)
	e, _ := a.Find("w", Report)
	if !strings.Contains(e.Reason, "60k/s") {
		t.Fatalf("report reason %q; want the rate when it started, 60k/s", e.Reason)
	}
}

// Each mode row: observe stays out of the plan, recommend and enforce are published.
func TestPlannerModes(t *testing.T) {
	hot := []KeyStats{{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5}}
	tests := []struct {
		name  string
		modes map[Kind]Mode
		want  map[Kind]Mode // published entries and their mode
	}{
		{"defaults: copies observed, L1 enforced", nil, map[Kind]Mode{L1: Enforce}},
		{"copies recommended", map[Kind]Mode{Copies: Recommend}, map[Kind]Mode{L1: Enforce, Copies: Recommend}},
		{"copies enforced, L1 observed", map[Kind]Mode{Copies: Enforce, L1: Observe}, map[Kind]Mode{Copies: Enforce}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: tt.modes}})
			plan, _ := p.Update(t0, hot, planNamer{primaries: 3})
			if len(plan.Entries) != len(tt.want) {
				t.Fatalf("published %s; want %d entries", kinds(plan, "k"), len(tt.want))
			}
			for _, e := range plan.Entries {
				if e.Mode != tt.want[e.Kind] {
					t.Errorf("%s: mode %s; want %s", e.Kind, e.Mode, tt.want[e.Kind])
				}
			}
			if got := len(p.Active()); got != 2 {
				t.Errorf("%d active mitigations; want 2 (L1 and copies, observed ones included)", got)
			}
		})
	}
}

func TestPlannerPin(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Now: func() time.Time { return t0 }})
	namer := planNamer{primaries: 3}
	if err := p.Pin("cold", Copies, Enforce); err != nil {
		t.Fatal(err)
	}
	if err := p.Pin("cold", L1, ""); err != nil {
		t.Fatal(err)
	}
	plan, changed := p.Update(t0, nil, namer)
	if !changed {
		t.Errorf("pins made no change; want one")
	}
	c, ok := plan.Find("cold", Copies)
	if !ok || c.Override != Pinned || c.Mode != Enforce || len(c.Copies) != 2 || !strings.Contains(c.Reason, "pinned by an operator") {
		t.Fatalf("pinned copies %+v; want 2 enforced copies, override pinned, reason saying so", c)
	}
	if l, ok := plan.Find("cold", L1); !ok || l.Mode != Enforce || l.Override != Pinned || l.TTL != Duration(time.Second) {
		t.Fatalf("pinned L1 %+v; want enforced, 1s, override pinned", l)
	}
	// Pins outlast any cool-down.
	plan, _ = p.Update(t0.Add(10*time.Minute), nil, namer)
	if kinds(plan, "cold") != "l1,copies" {
		t.Fatalf("ten minutes on: %s; want l1,copies", kinds(plan, "cold"))
	}
	// A pin on a hot key marks the rules' own entry.
	hot := []KeyStats{{Key: "hot", ReadRate: 80_000, Hot: true, SDKShare: 1}}
	if err := p.Pin("hot", L1, Recommend); err != nil {
		t.Fatal(err)
	}
	plan, _ = p.Update(t0.Add(10*time.Minute+time.Second), hot, namer)
	if e, _ := plan.Find("hot", L1); e.Override != Pinned || e.Mode != Recommend {
		t.Fatalf("pinned hot L1 %+v; want override pinned, mode recommend", e)
	}
	// Clear ends what only the pin held, at the next update; the rules' own stays.
	if n := p.Clear("cold"); n != 2 {
		t.Errorf("Clear removed %d overrides; want 2", n)
	}
	p.Clear("hot")
	plan, _ = p.Update(t0.Add(10*time.Minute+2*time.Second), hot, namer)
	if kinds(plan, "cold") != "" {
		t.Errorf("after Clear: %s; want nothing for cold", kinds(plan, "cold"))
	}
	if e, ok := plan.Find("hot", L1); !ok || e.Override != "" || e.Mode != Enforce {
		t.Errorf("after Clear: hot L1 %+v; want the rules' enforced entry, no override", e)
	}
}

// Copies cannot be pinned on standalone Redis: the plan says so.
func TestPlannerPinStandalone(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	if err := p.Pin("k", Copies, Enforce); err != nil {
		t.Fatal(err)
	}
	plan, _ := p.Update(t0, nil, nil)
	e, ok := plan.Find("k", Report)
	if !ok || !strings.Contains(e.Reason, "standalone Redis has one primary: skipped") || len(plan.Entries) != 1 {
		t.Fatalf("entries %+v; want one report saying copies are skipped on standalone Redis", plan.Entries)
	}
}

func TestPlannerForbid(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	namer := planNamer{primaries: 3}
	hot := []KeyStats{{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5}}
	plan, _ := p.Update(t0, hot, namer)
	if kinds(plan, "k") != "l1,copies" {
		t.Fatalf("before Forbid: %s; want l1,copies", kinds(plan, "k"))
	}
	if err := p.Forbid("k", Copies); err != nil {
		t.Fatal(err)
	}
	// The forbidden mitigation ends at the next update, without waiting for hysteresis.
	plan, changed := p.Update(t0.Add(time.Second), hot, namer)
	if !changed || kinds(plan, "k") != "l1,report" {
		t.Fatalf("after Forbid: changed %v, %s; want l1,report", changed, kinds(plan, "k"))
	}
	r, _ := plan.Find("k", Report)
	if r.Override != Forbidden || !strings.Contains(r.Reason, "copies forbidden by an operator (the rules wanted it: read 240k/s") {
		t.Fatalf("report %+v; want override forbidden and the rules' reason", r)
	}
	// Forbidding Report hides the key's reports.
	if err := p.Forbid("k", Report); err != nil {
		t.Fatal(err)
	}
	plan, _ = p.Update(t0.Add(2*time.Second), hot, namer)
	if kinds(plan, "k") != "l1" {
		t.Fatalf("after forbidding reports: %s; want l1", kinds(plan, "k"))
	}
	// A pin replaces a forbid of the same kind.
	if err := p.Pin("k", Copies, ""); err != nil {
		t.Fatal(err)
	}
	plan, _ = p.Update(t0.Add(3*time.Second), hot, namer)
	if e, ok := plan.Find("k", Copies); !ok || e.Override != Pinned || len(e.Copies) != 3 {
		t.Fatalf("after Pin: copies %+v; want 3, pinned", e)
	}
}

func TestPlannerOverrides(t *testing.T) {
	at := t0
	p := newPlanner(t, PlannerOptions{Now: func() time.Time { return at }})
	if err := p.Pin("b", Copies, Recommend); err != nil {
		t.Fatal(err)
	}
	at = at.Add(time.Minute)
	if err := p.Forbid("a", L1); err != nil {
		t.Fatal(err)
	}
	if err := p.Pin("a", ShardedCounter, ""); err != nil {
		t.Fatal(err)
	}
	got := p.Overrides()
	want := []Override{
		{Key: "a", Kind: L1, Action: ActionForbid, At: t0.Add(time.Minute)},
		{Key: "a", Kind: ShardedCounter, Action: ActionPin, At: t0.Add(time.Minute)},
		{Key: "b", Kind: Copies, Action: ActionPin, Mode: Recommend, At: t0},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	errs := []struct {
		err  error
		want string
	}{
		{p.Pin("", L1, ""), "pin: key missing"},
		{p.Pin("k", Report, ""), `pin "k": kind "report": use l1, copies, sharded_counter or batched_counter`},
		{p.Pin("k", "cache", ""), `kind "cache"`},
		{p.Pin("k", L1, "on"), `mode "on": use observe, recommend or enforce`},
		{p.Forbid("", L1), "forbid: key missing"},
		{p.Forbid("k", "cache"), `forbid "k": kind "cache": use l1, copies`},
	}
	for _, e := range errs {
		if e.err == nil || !strings.Contains(e.err.Error(), e.want) {
			t.Errorf("got %v; want an error saying %q", e.err, e.want)
		}
	}
	if n := p.Clear("nobody"); n != 0 {
		t.Errorf("Clear of a key without overrides: %d; want 0", n)
	}
}

func TestPlannerPredicted(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	plan, changed := p.Update(t0, []KeyStats{{Key: "score:match42", PredictedBy: []string{"final"}}}, planNamer{primaries: 3})
	e, ok := plan.Find("score:match42", L1)
	if !changed || !ok || len(e.PredictedBy) != 1 || e.PredictedBy[0] != "final" || e.Mode != Enforce {
		t.Fatalf("predicted key: changed %v, entry %+v; want an enforced L1 entry predicted by final", changed, e)
	}
}

func TestPlannerNamingFails(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	hot := []KeyStats{{Key: "k", ReadRate: 240_000, Hot: true}}
	plan, _ := p.Update(t0, hot, planNamer{primaries: 3, err: errors.New("topology: no slot map yet")})
	e, ok := plan.Find("k", Report)
	if !ok || !strings.Contains(e.Reason, "copies wanted but could not be named: topology: no slot map yet") || len(plan.Entries) != 1 {
		t.Fatalf("entries %+v; want one report naming the error", plan.Entries)
	}
	// Once names come, the copies start.
	plan, _ = p.Update(t0.Add(time.Second), hot, planNamer{primaries: 3})
	if e, ok := plan.Find("k", Copies); !ok || len(e.Copies) != 3 {
		t.Fatalf("with a namer that works: copies %+v; want 3", e)
	}
}

// Copies follow the topology: when a slot moves, the plan names the new primary.
func TestPlannerTopologyChange(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	hot := []KeyStats{{Key: "k", ReadRate: 240_000, Hot: true}}
	p.Update(t0, hot, planNamer{primaries: 3})
	plan, changed := p.Update(t0.Add(time.Second), hot, planNamer{primaries: 3, host: "10.0.1."})
	e, _ := plan.Find("k", Copies)
	if !changed || len(e.Copies) != 3 || !strings.HasPrefix(e.Copies[0].Primary, "10.0.1.") {
		t.Fatalf("after the topology changed: changed %v, copies %+v; want the new primaries", changed, e.Copies)
	}
}

// Leases: entries expire Lease after their last renewal, renewed (a change) once half of
// it has passed, all together.
func TestPlannerLease(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	hot := []KeyStats{readHot("a", true)}
	plan, _ := p.Update(t0, hot, nil)
	if e, _ := plan.Find("a", L1); !e.Expires.Equal(t0.Add(DefaultLease)) {
		t.Fatalf("expires %v; want %v", e.Expires, t0.Add(DefaultLease))
	}
	steps := []struct {
		at      time.Duration
		keys    []KeyStats
		changed bool
		expires time.Duration
	}{
		{10 * time.Second, hot, false, 60 * time.Second},
		{29 * time.Second, hot, false, 60 * time.Second},
		{30 * time.Second, hot, true, 90 * time.Second},                              // half the lease: renewed
		{40 * time.Second, append(hot, readHot("b", true)), true, 100 * time.Second}, // a change renews every entry
		{41 * time.Second, append(hot, readHot("b", true)), false, 100 * time.Second},
	}
	for _, s := range steps {
		plan, changed := p.Update(t0.Add(s.at), s.keys, nil)
		if changed != s.changed {
			t.Errorf("at t0+%v: changed %v; want %v", s.at, changed, s.changed)
		}
		for _, e := range plan.Entries {
			if !e.Expires.Equal(t0.Add(s.expires)) {
				t.Errorf("at t0+%v: %s expires at t0+%v; want t0+%v", s.at, e.Key, e.Expires.Sub(t0), s.expires)
			}
		}
	}
	// An empty plan needs no renewal.
	q := newPlanner(t, PlannerOptions{})
	for at := time.Duration(0); at < 5*time.Minute; at += 10 * time.Second {
		if _, changed := q.Update(t0.Add(at), nil, nil); changed {
			t.Fatalf("at t0+%v: an empty plan changed", at)
		}
	}
}

// Standalone Redis, or no topology at all: the plan says copies are skipped.
func TestPlannerStandalone(t *testing.T) {
	for _, namer := range []Namer{nil, planNamer{primaries: 1}} {
		p := newPlanner(t, PlannerOptions{})
		plan, _ := p.Update(t0, []KeyStats{{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5}}, namer)
		e, ok := plan.Find("k", L1)
		if !ok || len(plan.Entries) != 1 || !strings.Contains(e.Reason, "copies skipped: standalone Redis") || plan.Primaries != 1 {
			t.Errorf("namer %v: plan %+v; want L1 alone, its reason saying copies are skipped, 1 primary", namer, plan)
		}
	}
}

func TestNewPlannerErrors(t *testing.T) {
	tests := []struct {
		o    PlannerOptions
		want string
	}{
		{PlannerOptions{MinActive: -1}, "min active -1ns: must be ≥ 0"},
		{PlannerOptions{CoolDown: -1}, "cool-down -1ns: must be ≥ 0"},
		{PlannerOptions{Lease: time.Second}, "lease 1s: must be 2s to 1h0m0s"},
		{PlannerOptions{Lease: 2 * time.Hour}, "lease 2h0m0s: must be 2s to 1h0m0s"},
		{PlannerOptions{Rules: Rules{Headroom: 2}}, "headroom 2"},
	}
	for _, tt := range tests {
		if _, err := NewPlanner(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewPlanner(%+v): got %v; want an error saying %q", tt.o, err, tt.want)
		}
	}
}

// Updates, overrides and reads from many goroutines (run with -race).
func TestPlannerConcurrent(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key := fmt.Sprintf("k%d", i%5)
				switch g % 4 {
				case 0:
					p.Update(t0.Add(time.Duration(i)*time.Second), []KeyStats{readHot(key, i%3 == 0)}, planNamer{primaries: 3})
				case 1:
					_ = p.Pin(key, Copies, "")
					p.Clear(key)
				case 2:
					_ = p.Forbid(key, L1)
				default:
					_ = p.Overrides()
					_ = p.Active()
				}
			}
		})
	}
	wg.Wait()
}

// TestPlannerClearPinKeepsCoolDown: a pin held a mitigation the rules also wanted; the key
// cools, and the operator clears the pin soon after. The rules wanted it less than
// CoolDown ago, so it cools down as if never pinned instead of ending at once (and starting
// again, new since and all, if the key turns hot within the cool-down).
func TestPlannerClearPinKeepsCoolDown(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Now: func() time.Time { return t0 }})
	namer := planNamer{primaries: 3}
	hot := []KeyStats{readHot("k", true)}
	p.Update(t0, hot, namer)
	if err := p.Pin("k", L1, ""); err != nil {
		t.Fatal(err)
	}
	p.Update(t0.Add(40*time.Second), hot, namer)            // pinned and wanted by the rules
	p.Update(t0.Add(50*time.Second), nil, namer)            // the key cools; the pin holds it
	p.Clear("k")                                            //
	plan, _ := p.Update(t0.Add(60*time.Second), nil, namer) // 10s after the rules last wanted it
	if e, ok := plan.Find("k", L1); !ok || e.Override != "" || !e.Since.Equal(t0) {
		t.Fatalf("10s after the rules last wanted it, pin cleared: L1 %+v (found %v); want it kept (since %v, no override) for the 60s cool-down", e, ok, t0)
	}
	plan, _ = p.Update(t0.Add(40*time.Second+DefaultCoolDown), nil, namer)
	if kinds(plan, "k") != "" {
		t.Errorf("a cool-down after the rules last wanted it: %s; want nothing", kinds(plan, "k"))
	}
}

// TestPlannerClockStepsBack: the clock steps back by more than a lease while a mitigation
// is active. The lease must still be renewed on the new clock, and the plan must still
// decode at clients: an entry whose Since (on the old clock) is after its Expires (now +
// lease, on the new clock) fails DecodePlan, so clients would reject every plan until the
// clock caught up.
func TestPlannerClockStepsBack(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	hot := []KeyStats{readHot("a", true)}
	p.Update(t0, hot, nil)
	back := t0.Add(10*time.Second - 2*time.Minute) // 10 s later, the clock 2 min back
	if plan, changed := p.Update(back, hot, nil); !changed {
		e, _ := plan.Find("a", L1)
		t.Errorf("at the step: changed false, expires %v; want the lease renewed to %v", e.Expires, back.Add(DefaultLease))
	} else if e, ok := plan.Find("a", L1); !ok || !e.Expires.Equal(back.Add(DefaultLease)) {
		t.Errorf("at the step: entry %+v (found %v); want the lease renewed to %v", e, ok, back.Add(DefaultLease))
	}
	plan, _ := p.Update(back.Add(time.Second), append(hot, readHot("b", true)), nil)
	for _, k := range []string{"a", "b"} {
		if _, ok := plan.Find(k, L1); !ok {
			t.Fatalf("after the step: %s for %s; want l1", kinds(plan, k), k)
		}
	}
	plan.Version = 2
	data, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodePlan(data); err != nil {
		t.Errorf("DecodePlan after the clock stepped back: %v; want a valid plan", err)
	}
	for _, e := range plan.Entries {
		if e.Since.After(back.Add(time.Second)) {
			t.Errorf("%s since %v; want no later than now %v", e.Key, e.Since, back.Add(time.Second))
		}
	}
}
