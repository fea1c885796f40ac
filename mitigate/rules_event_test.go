package mitigate

import (
	"slices"
	"strings"
	"testing"
)

// TestDecideEventListed: a registry event's explicit mitigations (KeyStats.Kinds) choose
// the decisions of the keys it predicts. With no predicting event left to the rules
// (Auto false) the decisions are exactly the listed kinds, armed before traffic; with one
// (Auto true) the table's decisions come first and the listed kinds it did not choose are
// added. docs/registry.md, docs/plan.md row event-listed.
func TestDecideEventListed(t *testing.T) {
	const sale = "flash-sale-0314"
	tests := []struct {
		name      string
		rules     Rules
		k         KeyStats
		primaries int
		want      []wantDecision
	}{
		{
			name: "copies listed, no rate expected, no traffic: 2 copies armed at once", primaries: 3,
			k: KeyStats{Key: "sale:sku:1", PredictedBy: []string{sale}, Kinds: []Kind{Copies}},
			want: []wantDecision{{kind: Copies, rule: RuleEventListed, n: 2, mode: Observe,
				reason:   []string{"listed by event " + sale, "2 copies"},
				tradeOff: []string{"every write costs 3 writes"}}},
		},
		{
			name: "copies listed, sized from the expected read rate before traffic", primaries: 6,
			k: KeyStats{Key: "sale:sku:1", PredictedBy: []string{sale}, Kinds: []Kind{Copies}, ExpectedReadRate: 240_000},
			want: []wantDecision{{kind: Copies, rule: RuleEventListed, n: 5, mode: Observe,
				reason: []string{"listed by event " + sale, "240k/s", "5 copies"}}},
		},
		{
			name: "copies listed, capped at the primaries", primaries: 3,
			k: KeyStats{Key: "sale:sku:1", ReadRate: 240_000, Hot: true, PredictedBy: []string{sale}, Kinds: []Kind{Copies}},
			want: []wantDecision{{kind: Copies, rule: RuleEventListed, n: 3, mode: Observe,
				reason: []string{"3 copies", "5 needed, capped at 3 primaries"}}},
		},
		{
			name: "copies listed, mode from the rules", primaries: 3,
			rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}},
			k:     KeyStats{Key: "sale:sku:1", PredictedBy: []string{sale}, Kinds: []Kind{Copies}},
			want:  []wantDecision{{kind: Copies, rule: RuleEventListed, n: 2, mode: Enforce}},
		},
		{
			name: "l1 and sharded_counter listed: exactly those, whatever the table would pick", primaries: 3,
			k: KeyStats{Key: "cart:7:count", ReadRate: 20_000, WriteRate: 15_000, Counter: true, Hot: true,
				PredictedBy: []string{sale}, Kinds: []Kind{ShardedCounter, L1}},
			want: []wantDecision{
				{kind: L1, rule: RuleEventListed, mode: Enforce, reason: []string{"listed by event " + sale, "L1 for 1s"}},
				{kind: ShardedCounter, rule: RuleEventListed, n: 3, mode: Observe,
					reason: []string{"listed by event " + sale, "3 sub-counters"}, tradeOff: []string{"5 commands"}},
			},
		},
		{
			name: "l1 and sharded_counter listed, no traffic yet: both armed", primaries: 3,
			k: KeyStats{Key: "cart:7:count", PredictedBy: []string{sale}, Kinds: []Kind{L1, ShardedCounter}},
			want: []wantDecision{
				{kind: L1, rule: RuleEventListed, mode: Enforce},
				{kind: ShardedCounter, rule: RuleEventListed, n: 3, mode: Observe},
			},
		},
		{
			name: "batched_counter listed", primaries: 3,
			k:    KeyStats{Key: "likes", WriteRate: 500_000, Counter: true, Hot: true, PredictedBy: []string{sale}, Kinds: []Kind{BatchedCounter}},
			want: []wantDecision{{kind: BatchedCounter, rule: RuleEventListed, mode: Enforce, reason: []string{"listed by event " + sale, "100ms"}}},
		},
		{
			name: "only l1 listed on a key far beyond one node: l1 only", primaries: 3,
			k:    KeyStats{Key: "k", ReadRate: 500_000, Hot: true, PredictedBy: []string{sale}, Kinds: []Kind{L1}},
			want: []wantDecision{{kind: L1, rule: RuleEventListed, mode: Enforce}},
		},
		{
			name: "copies listed on standalone Redis: a report says why", primaries: 1,
			k: KeyStats{Key: "sale:sku:1", PredictedBy: []string{sale}, Kinds: []Kind{Copies}},
			want: []wantDecision{{kind: Report, rule: RuleEventListed, mode: Recommend,
				reason: []string{"listed by event " + sale, "copies need ≥ 2 primaries", "standalone"}}},
		},
		{
			name: "l1, copies and sharded_counter listed on standalone: l1 and one report", primaries: 1,
			k: KeyStats{Key: "k", PredictedBy: []string{sale}, Kinds: []Kind{L1, Copies, ShardedCounter}},
			want: []wantDecision{
				{kind: L1, rule: RuleEventListed, mode: Enforce},
				{kind: Report, rule: RuleEventListed, mode: Recommend,
					reason: []string{"copies need ≥ 2 primaries", "sharded_counter needs ≥ 2 primaries"}},
			},
		},
		{
			name: "auto and listed copies: the table's L1, plus copies", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 30_000, Hot: true, SDKShare: 1,
				PredictedBy: []string{"match42", sale}, ListedBy: []string{sale}, Auto: true, Kinds: []Kind{Copies}},
			want: []wantDecision{
				{kind: L1, rule: RuleReadL1, mode: Enforce},
				{kind: Copies, rule: RuleEventListed, n: 2, mode: Observe, reason: []string{"listed by event " + sale + ":"}},
			},
		},
		{
			name: "auto and listed copies, no traffic: the predicted row's L1, plus copies", primaries: 3,
			k: KeyStats{Key: "k", PredictedBy: []string{"match42", sale}, ListedBy: []string{sale}, Auto: true, Kinds: []Kind{Copies}},
			want: []wantDecision{
				{kind: L1, rule: RulePredicted, mode: Enforce},
				{kind: Copies, rule: RuleEventListed, n: 2, mode: Observe},
			},
		},
		{
			name: "auto and listed copies, the table chose copies itself: kept once", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.03,
				PredictedBy: []string{"match42", sale}, ListedBy: []string{sale}, Auto: true, Kinds: []Kind{Copies}},
			want: []wantDecision{
				{kind: L1, rule: RuleReadCopies, mode: Enforce},
				{kind: Copies, rule: RuleReadCopies, n: 3, mode: Observe},
			},
		},
		{
			name: "auto and listed l1 on a written key: the table's report is dropped", primaries: 3,
			k: KeyStats{Key: "session:77", WriteRate: 60_000, Hot: true,
				PredictedBy: []string{"match42", sale}, ListedBy: []string{sale}, Auto: true, Kinds: []Kind{L1}},
			want: []wantDecision{{kind: L1, rule: RuleEventListed, mode: Enforce}},
		},
		{
			name: "auto and listed copies on standalone: the table's report says why copies were skipped", primaries: 1,
			k: KeyStats{Key: "session:77", WriteRate: 60_000, Hot: true,
				PredictedBy: []string{"match42", sale}, ListedBy: []string{sale}, Auto: true, Kinds: []Kind{Copies}},
			want: []wantDecision{{kind: Report, rule: RuleWriteReport + " " + RuleEventListed, mode: Recommend,
				reason: []string{"not a counter", "listed by event " + sale, "copies need ≥ 2 primaries"}}},
		},
		{
			name: "listed kinds of a key no event predicts are ignored", primaries: 3,
			k:    KeyStats{Key: "k", ReadRate: 30_000, Hot: true, SDKShare: 1, Kinds: []Kind{Copies}},
			want: []wantDecision{{kind: L1, rule: RuleReadL1, mode: Enforce}},
		},
		{
			name: "binary key: a report, never a listed mitigation", primaries: 3,
			k:    KeyStats{Key: "\xff\xfe", PredictedBy: []string{sale}, Kinds: []Kind{Copies}},
			want: []wantDecision{{kind: Report, rule: RuleBinaryKey, mode: Recommend}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDecisions(t, tt.rules.Decide(tt.k, tt.primaries), tt.k.Key, tt.rules, tt.want)
		})
	}
}

// TestDecideEventListedNamesListers: the reason of a listed kind names the events that
// listed kinds, not an auto event predicting the same key; with no ListedBy it names
// every predicting event.
func TestDecideEventListedNamesListers(t *testing.T) {
	got := Rules{}.Decide(KeyStats{Key: "k", PredictedBy: []string{"a", "b", "c"}, ListedBy: []string{"b", "c"}, Auto: true, Kinds: []Kind{Copies}}, 3)
	d := got[len(got)-1]
	if d.Kind != Copies || !strings.Contains(d.Reason, "listed by events b, c:") || strings.Contains(d.Reason, "a,") {
		t.Errorf("got %s; want copies listed by events b, c", describe(got))
	}
	got = Rules{}.Decide(KeyStats{Key: "k", PredictedBy: []string{"x", "y"}, Kinds: []Kind{Copies}}, 3)
	if len(got) != 1 || !strings.HasPrefix(got[0].Reason, "listed by events x, y:") {
		t.Errorf("got %s; want copies listed by events x, y", describe(got))
	}
}

// TestPlannerEventListed: the planner takes listed decisions as they are: copies of a key
// with no traffic and a sharded counter of a key never seen written by INCR are named on
// different primaries and published (enforced here) at the first Update.
func TestPlannerEventListed(t *testing.T) {
	topo, err := TopologyFromRanges([]SlotRange{{0, 5460, "10.0.0.1:6379"}, {5461, 10922, "10.0.0.2:6379"}, {10923, 16383, "10.0.0.3:6379"}})
	if err != nil {
		t.Fatal(err)
	}
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce, ShardedCounter: Enforce}}})
	plan, _ := p.Update(t0, []KeyStats{
		{Key: "sale:sku:1", PredictedBy: []string{"flash-sale-0314"}, Kinds: []Kind{Copies}},
		{Key: "cart:7:count", PredictedBy: []string{"flash-sale-0314"}, Kinds: []Kind{L1, ShardedCounter}},
	}, topo)
	plan.Version = 1 // the Store's part
	if err := plan.Validate(); err != nil {
		t.Fatalf("plan %+v: %v; want a valid plan", plan, err)
	}
	var kinds []string
	for _, e := range plan.Entries {
		kinds = append(kinds, e.Key+" "+string(e.Kind))
		if !e.Since.Equal(t0) || !slices.Equal(e.PredictedBy, []string{"flash-sale-0314"}) {
			t.Errorf("entry %s %s: since %v, predicted by %v; want since %v, predicted by flash-sale-0314", e.Key, e.Kind, e.Since, e.PredictedBy, t0)
		}
	}
	if want := "cart:7:count l1,cart:7:count sharded_counter,sale:sku:1 copies"; strings.Join(kinds, ",") != want {
		t.Fatalf("plan entries %q; want %q", kinds, want)
	}
	for _, e := range plan.Entries {
		if e.Kind == L1 {
			continue
		}
		nodes := slices.Concat(e.Copies, e.SubCounters)
		primaries := map[string]bool{}
		for _, n := range nodes {
			primaries[n.Primary] = true
		}
		if want := map[Kind]int{Copies: 2, ShardedCounter: 3}[e.Kind]; len(nodes) != want || len(primaries) != want {
			t.Errorf("entry %s %s: nodes %+v; want %d on different primaries", e.Key, e.Kind, nodes, want)
		}
	}
}

// checkDecisions compares the decisions Decide made for key under rules with what is
// wanted (TestDecide, TestDecideEventListed).
func checkDecisions(t *testing.T, got []Decision, key string, rules Rules, want []wantDecision) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d decisions %s; want %d", len(got), describe(got), len(want))
	}
	for i, w := range want {
		d := got[i]
		if d.Key != key || d.Kind != w.kind || d.Rule != w.rule || d.N != w.n || d.Mode != w.mode {
			t.Errorf("decision %d: got %s %s rule %s n %d mode %s; want %s %s rule %s n %d mode %s",
				i, d.Key, d.Kind, d.Rule, d.N, d.Mode, key, w.kind, w.rule, w.n, w.mode)
		}
		for _, s := range w.reason {
			if !strings.Contains(d.Reason, s) {
				t.Errorf("decision %d: got reason %q; want it to say %q", i, d.Reason, s)
			}
		}
		for _, s := range w.tradeOff {
			if !strings.Contains(d.TradeOff, s) {
				t.Errorf("decision %d: got trade-off %q; want it to say %q", i, d.TradeOff, s)
			}
		}
		switch {
		case d.Reason == "":
			t.Errorf("decision %d: got no reason; want one", i)
		case d.Kind == L1 && d.TTL != cmpOr(rules.L1TTL, DefaultL1TTL):
			t.Errorf("decision %d: got TTL %v; want %v", i, d.TTL, cmpOr(rules.L1TTL, DefaultL1TTL))
		case d.Kind == BatchedCounter && d.FlushInterval != DefaultFlushInterval:
			t.Errorf("decision %d: got flush interval %v; want %v", i, d.FlushInterval, DefaultFlushInterval)
		case d.Kind != Report && d.Kind != L1 && d.Kind != BatchedCounter && d.TradeOff == "":
			t.Errorf("decision %d: got no trade-off for %s; want one", i, d.Kind)
		}
	}
}
