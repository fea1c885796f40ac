package mitigate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Lifecycle of the plan across many evaluations: hysteresis of reports, overrides of keys
// the plan cannot carry, the plan's size, predictions arriving and leaving. Pure: the
// planner takes the clock as an argument.

// sdkMaxPlanBytes is the largest plan body the SDK accepts (client/plan.go maxPlanBytes).
const sdkMaxPlanBytes = 16 << 20

// countChanges runs ticks one second apart from t0 for d, with keys(s) at second s, and
// returns how many Updates reported a change and how many changed more than leases.
func countChanges(t *testing.T, p *Planner, d time.Duration, namer Namer, keys func(s int) []KeyStats) (changes, substantive int, last Plan) {
	t.Helper()
	for at := time.Duration(0); at < d; at += time.Second {
		plan, changed := p.Update(t0.Add(at), keys(int(at/time.Second)), namer)
		if changed {
			changes++
			if !sameEntries(plan.Entries, last.Entries, false) {
				substantive++
			}
		}
		last = plan
	}
	return changes, substantive, last
}

// TestPlannerReportRowFlap: a hot key whose rates swing around a threshold between two
// rows of the table that both end in a report (here on standalone Redis without SDK
// clients: 45k/s fits one node's budget, 55k/s is beyond it and copies are skipped). The
// report must not be rewritten at every swing: the plan would get a new version every
// tick, and every client a long-poll answer every second, for a key nothing is done for.
func TestPlannerReportRowFlap(t *testing.T) {
	tests := []struct {
		name string
		key  func(s int) KeyStats
	}{
		{"read-fits and read-standalone", func(s int) KeyStats {
			return KeyStats{Key: "k", ReadRate: float64(45_000 + 10_000*(s%2)), Hot: true}
		}},
		{"read-fits and write-report", func(s int) KeyStats {
			if s%2 == 0 {
				return KeyStats{Key: "k", ReadRate: 20_000, WriteRate: 19_000, Hot: true}
			}
			return KeyStats{Key: "k", ReadRate: 19_000, WriteRate: 20_000, Hot: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, PlannerOptions{})
			const period = 10 * time.Minute
			changes, substantive, last := countChanges(t, p, period, nil, func(s int) []KeyStats { return []KeyStats{tt.key(s)} })
			if _, ok := last.Find("k", Report); !ok {
				t.Fatalf("entries %s; want a report", kinds(last, "k"))
			}
			if max := 2 + int(period/(DefaultLease/2)); changes > max || substantive > 2 {
				t.Errorf("%d plan changes (%d beyond leases) in %v of swings; want at most %d (start, one row change, one renewal per half lease)",
					changes, substantive, period, max)
			}
		})
	}
}

// TestPlannerReportOverrideAtOnce: what an operator does shows in the report at the next
// evaluation, without waiting for any hysteresis of the report's rows.
func TestPlannerReportOverrideAtOnce(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	namer := planNamer{primaries: 3}
	hot := []KeyStats{{Key: "k", ReadRate: 240_000, Hot: true}}
	p.Update(t0, hot, namer)
	if err := p.Forbid("k", Copies); err != nil {
		t.Fatal(err)
	}
	plan, changed := p.Update(t0.Add(time.Second), hot, namer)
	r, ok := plan.Find("k", Report)
	if !changed || !ok || r.Override != Forbidden || !strings.Contains(r.Reason, "copies forbidden by an operator") {
		t.Fatalf("after Forbid: changed %v, report %+v; want the forbidden copies in the report at once", changed, r)
	}
	p.Clear("k")
	plan, _ = p.Update(t0.Add(2*time.Second), hot, namer)
	if _, ok := plan.Find("k", Copies); !ok {
		t.Fatalf("after Clear: %s; want copies back at once", kinds(plan, "k"))
	}
}

// TestPlannerPinBinaryKey: a key that is not valid UTF-8 cannot be named in the JSON
// plan (encoding/json writes U+FFFD for each bad byte, so clients would apply the entry
// to another key, and copies named after the real key would be written under other
// names). docs/plan.md: such keys get a report, never a mitigation — pinned or not.
func TestPlannerPinBinaryKey(t *testing.T) {
	const bin = "user:\xff\xfe:cart"
	p := newPlanner(t, PlannerOptions{})
	namer := planNamer{primaries: 3}
	pinErr := p.Pin(bin, L1, Enforce)
	_ = p.Pin(bin, Copies, Enforce)
	for _, keys := range [][]KeyStats{nil, {{Key: bin, ReadRate: 240_000, Hot: true, SDKShare: 1}}} {
		plan, _ := p.Update(t0, keys, namer)
		for _, e := range plan.Entries {
			if !utf8.ValidString(e.Key) && e.Kind != Report {
				t.Errorf("hot %v: entry %s for %q (pin error %v); want no mitigation for a key that is not valid UTF-8, a report at most",
					keys != nil, e.Kind, e.Key, pinErr)
			}
		}
		if _, ok := plan.Find(bin, Report); keys != nil && !ok {
			t.Errorf("hot: %s; want a report for the key that is not valid UTF-8", kinds(plan, bin))
		}
	}
	// Forbidding stays possible: it hides the key's report.
	if err := p.Forbid(bin, Report); err != nil {
		t.Errorf("Forbid(binary key, report): %v; want it accepted", err)
	}
}

// TestPlannerPlanSizeBound: more hot keys than a plan can carry (long keys, many copies).
// A plan the SDK refuses as too large is refused whole: every client would run
// unmitigated. The planner must keep the encoded plan within the SDK's limit, keeping
// enforced entries first, and the plan must not change every tick at the bound.
func TestPlannerPlanSizeBound(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes plans of megabytes")
	}
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	namer := planNamer{primaries: 16}
	keys := make([]KeyStats, 3000)
	for i := range keys {
		keys[i] = KeyStats{Key: fmt.Sprintf("%04d:%s", i, strings.Repeat("x", 500)), ReadRate: 800_000 - float64(i), Hot: true, SDKShare: 0.5}
	}
	var plans []Plan
	for s := range 3 {
		plan, _ := p.Update(t0.Add(time.Duration(s)*time.Second), keys, namer)
		plan.Version = uint64(s + 1)
		plans = append(plans, plan)
	}
	plan := plans[2]
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ") // as the agent serves it
	if err := enc.Encode(plan); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > sdkMaxPlanBytes {
		t.Fatalf("plan of %d entries encodes to %d bytes; want at most the SDK's %d", len(plan.Entries), buf.Len(), sdkMaxPlanBytes)
	}
	if len(plan.Entries) == 0 {
		t.Fatalf("empty plan; want as many entries as fit")
	}
	if _, err := DecodePlan(buf.Bytes()); err != nil {
		t.Fatalf("DecodePlan: %v", err)
	}
	// The hottest keys come first.
	if _, ok := plan.Find(keys[0].Key, L1); !ok {
		t.Errorf("the hottest key has no L1 entry; want the hottest keys kept")
	}
	if !sameEntries(plans[1].Entries, plans[2].Entries, true) {
		t.Errorf("at the bound, the plan changed between two ticks with the same keys")
	}
	if got, want := p.Withheld(), 2*len(keys)-len(plan.Entries); got != want {
		t.Errorf("Withheld %d; want %d (two entries a key, %d published)", got, want, len(plan.Entries))
	}
	if got := len(p.Active()); got != 2*len(keys) {
		t.Errorf("%d active; want %d: withheld entries stay active", got, 2*len(keys))
	}
	t.Logf("%d of %d entries published, %d bytes", len(plan.Entries), 2*len(keys), buf.Len())
}

// TestPlannerEventLeavesHotKey: an event that predicted a key ends while the key is still
// hot by detection. The mitigations stay, with the same since and names, and the plan
// changes once (predicted_by dropped), not at every tick.
func TestPlannerEventLeavesHotKey(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	namer := planNamer{primaries: 3}
	pred := KeyStats{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5, PredictedBy: []string{"final"}}
	first, _ := p.Update(t0, []KeyStats{pred}, namer)
	hot := pred
	hot.PredictedBy = nil
	changes := 0
	last := first // a change at the first tick counts only if it changes more than leases
	for s := 1; s <= 120; s++ {
		plan, changed := p.Update(t0.Add(time.Duration(s)*time.Second), []KeyStats{hot}, namer)
		if changed && !sameEntries(plan.Entries, last.Entries, false) {
			changes++
		}
		if kinds(plan, "k") != "l1,copies" {
			t.Fatalf("at t0+%ds: %s; want l1,copies throughout", s, kinds(plan, "k"))
		}
		last = plan
	}
	if changes != 1 {
		t.Errorf("%d changes beyond leases after the event ended; want 1", changes)
	}
	for _, kind := range []Kind{L1, Copies} {
		a, _ := first.Find("k", kind)
		b, _ := last.Find("k", kind)
		if !a.Since.Equal(b.Since) || fmt.Sprint(a.Copies) != fmt.Sprint(b.Copies) || len(b.PredictedBy) != 0 {
			t.Errorf("%s: since %v → %v, copies %v → %v, predicted_by %v; want since and names kept, predicted_by gone",
				kind, a.Since, b.Since, a.Copies, b.Copies, b.PredictedBy)
		}
	}
}

// TestPlannerEventArmsMitigatedKey: an event starts predicting a key the table already
// mitigates: predicted_by is added to the entries, which keep their since and names.
func TestPlannerEventArmsMitigatedKey(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
	namer := planNamer{primaries: 3}
	hot := KeyStats{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5}
	first, _ := p.Update(t0, []KeyStats{hot}, namer)
	pred := hot
	pred.PredictedBy, pred.Kinds, pred.Auto = []string{"final"}, []Kind{Copies}, true
	plan, changed := p.Update(t0.Add(time.Second), []KeyStats{pred}, namer)
	if !changed {
		t.Fatalf("event armed: no change; want predicted_by added")
	}
	for _, kind := range []Kind{L1, Copies} {
		a, _ := first.Find("k", kind)
		b, ok := plan.Find("k", kind)
		if !ok || !a.Since.Equal(b.Since) || fmt.Sprint(a.Copies) != fmt.Sprint(b.Copies) || fmt.Sprint(b.PredictedBy) != "[final]" {
			t.Errorf("%s: %+v; want since and names kept, predicted_by [final]", kind, b)
		}
	}
	if _, again := p.Update(t0.Add(2*time.Second), []KeyStats{pred}, namer); again {
		t.Errorf("same event, same rates: changed again; want no change")
	}
}

// TestPlannerRenewalCadence: a steady plan for ten minutes changes at the start and once
// per half lease, no more, no less.
func TestPlannerRenewalCadence(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	const period = 10 * time.Minute
	changes, substantive, _ := countChanges(t, p, period, nil, func(int) []KeyStats { return []KeyStats{readHot("k", true)} })
	if want := 1 + int((period-time.Second)/(DefaultLease/2)); changes != want || substantive != 1 {
		t.Errorf("%d changes (%d beyond leases) in %v; want %d (start and one renewal per half lease) and 1", changes, substantive, period, want)
	}
}

// TestPlannerPinThenForbid: a pin replaced by a forbid of the same kind ends the entry at
// once, and a Clear of both ends the forbid's report too.
func TestPlannerPinThenForbid(t *testing.T) {
	p := newPlanner(t, PlannerOptions{})
	namer := planNamer{primaries: 3}
	if err := p.Pin("cold", Copies, Enforce); err != nil {
		t.Fatal(err)
	}
	plan, _ := p.Update(t0, nil, namer)
	if e, ok := plan.Find("cold", Copies); !ok || len(e.Copies) != 2 {
		t.Fatalf("pinned on a cold key: %+v; want 2 copies", e)
	}
	if err := p.Forbid("cold", Copies); err != nil {
		t.Fatal(err)
	}
	plan, _ = p.Update(t0.Add(time.Second), nil, namer)
	if kinds(plan, "cold") != "" {
		t.Fatalf("after Forbid replaced the pin: %s; want nothing", kinds(plan, "cold"))
	}
	if got := p.Overrides(); len(got) != 1 || got[0].Action != ActionForbid {
		t.Fatalf("overrides %v; want the forbid alone", got)
	}
}

// BenchmarkPlannerUpdate is one evaluation of a steady plan: n hot keys (read-hot with L1,
// read-hot with copies, counters), nothing changing but the clock.
func BenchmarkPlannerUpdate(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			p, err := NewPlanner(PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
			if err != nil {
				b.Fatal(err)
			}
			namer := planNamer{primaries: 3}
			keys := make([]KeyStats, n)
			for i := range keys {
				k := fmt.Sprintf("bench:key:%d", i)
				switch i % 3 {
				case 0:
					keys[i] = KeyStats{Key: k, ReadRate: 80_000, Hot: true, SDKShare: 0.9}
				case 1:
					keys[i] = KeyStats{Key: k, ReadRate: 240_000, Hot: true, SDKShare: 0.5}
				default:
					keys[i] = KeyStats{Key: k, WriteRate: 60_000, Counter: true, Hot: true, SDKShare: 1}
				}
			}
			now := t0
			b.ReportAllocs()
			var sink int
			for b.Loop() {
				now = now.Add(time.Second)
				plan, _ := p.Update(now, keys, namer)
				sink += len(plan.Entries)
			}
			if sink == 0 {
				b.Fatal("no entries")
			}
		})
	}
}

// TestEntrySizeBound: the planner's size bound of an entry is never below what the agent
// writes (indented JSON), whatever the key's bytes, and the quick bound never below it.
func TestEntrySizeBound(t *testing.T) {
	long := time.Date(2026, 3, 1, 20, 15, 0, 123456789, time.FixedZone("x", 5*3600+30*60))
	nodes := func(key string, n int) []Node {
		out := make([]Node, n)
		for i := range out {
			out[i] = Node{Name: fmt.Sprintf("{hk:copy%d:40915}%s", i+1, key), Slot: 16383, Primary: "[2001:db8::1]:6379"}
		}
		return out
	}
	keys := []string{"k", "<script>&amp;\"\\", "ctl\x00\x01\n\t\x1f", "bin\xff\xfe\xc3", "ünïcødé 🔥 \u2028\u2029", strings.Repeat("<", 512)}
	for _, key := range keys {
		for _, e := range []Entry{
			{Key: key, Kind: L1, Mode: Enforce, Reason: "r " + key, TradeOff: "t", Since: long, Expires: long.Add(time.Hour), TTL: Duration(time.Hour - 1)},
			{Key: key, Kind: Copies, Mode: Recommend, Reason: key, TradeOff: key, Since: long, Expires: long.Add(time.Minute), Override: Pinned,
				PredictedBy: []string{key, "<ev>", ""}, Copies: nodes(key, 16)},
			{Key: key, Kind: ShardedCounter, Mode: Observe, Since: long, Expires: long.Add(time.Minute), SubCounters: nodes(key, 256)},
			{Key: key, Kind: BatchedCounter, Mode: Enforce, Since: long, Expires: long.Add(time.Minute), FlushInterval: Duration(time.Minute - 1), Override: Forbidden},
			{Key: key, Kind: Report, Mode: Recommend, Reason: strings.Repeat(key, 10), Since: long, Expires: long.Add(time.Minute)},
		} {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetIndent("", "  ")
			if err := enc.Encode(Plan{Version: 1 << 63, Generated: long, Primaries: 1 << 30, Entries: []Entry{e}}); err != nil {
				t.Fatal(err)
			}
			exact, quick := planJSONFixed+e.encodedSize(), planJSONFixed+e.sizeBound()
			if buf.Len() > exact || exact > quick {
				t.Errorf("key %q kind %s: encodes to %d bytes; bound %d, quick bound %d; want encoded ≤ bound ≤ quick", key, e.Kind, buf.Len(), exact, quick)
			}
		}
	}
}
