package mitigate

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// wantDecision is one expected decision: its kind, the row that fired, N and the words an operator
// must find in its reason and trade-off.
type wantDecision struct {
	kind     Kind
	rule     string
	n        int
	mode     Mode
	reason   []string
	tradeOff []string
}

func TestDecide(t *testing.T) {
	// checkDecisions compares TTLs and flush intervals with the defaults; the table was
	// written for these values.
	if DefaultL1TTL != time.Second || DefaultFlushInterval != 100*time.Millisecond {
		t.Fatalf("defaults: L1 TTL %v, flush interval %v; want 1s and 100ms", DefaultL1TTL, DefaultFlushInterval)
	}
	tests := []struct {
		name      string
		rules     Rules
		k         KeyStats
		primaries int
		want      []wantDecision
	}{
		{
			name: "cool key: nothing", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 500_000, SDKShare: 1},
		},
		{
			name: "read-hot, SDK clients cover it: L1", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 80_000, Hot: true, SDKShare: 0.95},
			want: []wantDecision{{kind: L1, rule: RuleReadL1, mode: Enforce,
				reason:   []string{"read 80k/s, 95% from SDK clients", "L1 for 1s leaves 4k/s from other clients", "50k/s budget"},
				tradeOff: []string{"up to 1s old", "single-flight"}}},
		},
		{
			name: "read-hot, no SDK clients, fits one node: report", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 30_000, Hot: true},
			want: []wantDecision{{kind: Report, rule: RuleReadFits, mode: Recommend,
				reason: []string{"read 30k/s, 0% from SDK clients", "no action needed"}}},
		},
		{
			name: "read-hot, non-SDK reads above the budget: copies capped at primaries, and L1", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.03},
			want: []wantDecision{
				{kind: L1, rule: RuleReadCopies, mode: Enforce, reason: []string{"alongside 3 copies"}},
				{kind: Copies, rule: RuleReadCopies, n: 3, mode: Observe,
					reason:   []string{"read 240k/s, 3% from SDK clients", "233k/s from other clients is above one node's 50k/s budget", "split into 3 copies", "5 needed, capped at 3 primaries"},
					tradeOff: []string{"every write costs 4 writes"}},
			},
		},
		{
			name: "read-hot, total above one node's capacity though SDK clients cover the budget", primaries: 6,
			k: KeyStats{Key: "k", ReadRate: 120_000, Hot: true, SDKShare: 0.9},
			want: []wantDecision{
				{kind: L1, rule: RuleReadCopies, mode: Enforce},
				{kind: Copies, rule: RuleReadCopies, n: 3, mode: Observe, reason: []string{"120k/s in all is above one node's 100k/s capacity", "split into 3 copies"}},
			},
		},
		{
			name: "large values: bytes/s size the copies", primaries: 6,
			k:    KeyStats{Key: "k", ReadRate: 10_000, BytesRate: 120e6, Hot: true},
			want: []wantDecision{{kind: Copies, rule: RuleReadCopies, n: 3, mode: Observe, reason: []string{"moving 120 MB/s is above one node's 50 MB/s budget"}}},
		},
		{
			name: "just above the budget: at least 2 copies", primaries: 3,
			k:    KeyStats{Key: "k", ReadRate: 60_000, Hot: true},
			want: []wantDecision{{kind: Copies, rule: RuleReadCopies, n: 2, mode: Observe, reason: []string{"split into 2 copies"}}},
		},
		{
			name: "read-hot but written often, SDK clients: not split, L1 only", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 200_000, WriteRate: 50_000, Hot: true, SDKShare: 0.5},
			want: []wantDecision{{kind: L1, rule: RuleReadWritten, mode: Enforce,
				reason: []string{"writes are 20% of its traffic (limit 10%)", "not split", "every write would cost 4 writes", "L1 for 1s"}}},
		},
		{
			name: "read-hot but written often, no SDK clients: report", primaries: 3,
			k:    KeyStats{Key: "k", ReadRate: 200_000, WriteRate: 50_000, Hot: true},
			want: []wantDecision{{kind: Report, rule: RuleReadWritten, mode: Recommend, reason: []string{"not split", "no automatic action"}}},
		},
		{
			name: "standalone, SDK clients: copies skipped, L1", primaries: 1,
			k:    KeyStats{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5},
			want: []wantDecision{{kind: L1, rule: RuleReadStandalone, mode: Enforce, reason: []string{"copies skipped: standalone Redis has one primary"}}},
		},
		{
			name: "standalone, no SDK clients: report", primaries: 1,
			k:    KeyStats{Key: "k", ReadRate: 240_000, Hot: true},
			want: []wantDecision{{kind: Report, rule: RuleReadStandalone, mode: Recommend, reason: []string{"copies skipped", "no automatic action"}}},
		},
		{
			name: "write-hot counter that fits, SDK clients: batched", primaries: 3,
			k: KeyStats{Key: "c", ReadRate: 100, WriteRate: 20_000, Counter: true, Hot: true, SDKShare: 0.9},
			want: []wantDecision{{kind: BatchedCounter, rule: RuleCounterBatched, mode: Enforce,
				reason:   []string{"written 20k/s by INCR/DECR, 90% from SDK clients", "one INCRBY per 100ms"},
				tradeOff: []string{"up to 100ms late", "its last 100ms, or all since Redis became unreachable"}}},
		},
		{
			name: "write-hot counter that fits, no SDK clients: report", primaries: 3,
			k:    KeyStats{Key: "c", WriteRate: 20_000, Counter: true, Hot: true},
			want: []wantDecision{{kind: Report, rule: RuleCounterFits, mode: Recommend, reason: []string{"no action needed"}}},
		},
		{
			name: "write-hot counter beyond one node: sharded over the primaries, and batched", primaries: 3,
			k: KeyStats{Key: "c", WriteRate: 150_000, Counter: true, Hot: true, SDKShare: 0.5},
			want: []wantDecision{
				{kind: BatchedCounter, rule: RuleCounterSharded, mode: Enforce, reason: []string{"alongside 3 sub-counters"}},
				{kind: ShardedCounter, rule: RuleCounterSharded, n: 3, mode: Observe,
					reason:   []string{"150k/s in all is above one node's 100k/s capacity", "spread over 3 sub-counters"},
					tradeOff: []string{"costs 5 commands", "exact"}},
			},
		},
		{
			name: "write-hot counter beyond one node, no SDK clients: sharded only", primaries: 3,
			k:    KeyStats{Key: "c", WriteRate: 60_000, Counter: true, Hot: true},
			want: []wantDecision{{kind: ShardedCounter, rule: RuleCounterSharded, n: 3, mode: Observe}},
		},
		{
			name: "sub-counters capped at 16 on a large cluster", primaries: 40,
			k:    KeyStats{Key: "c", WriteRate: 60_000, Counter: true, Hot: true},
			want: []wantDecision{{kind: ShardedCounter, rule: RuleCounterSharded, n: 16, mode: Observe}},
		},
		{
			name: "sub-counters as configured", primaries: 3, rules: Rules{SubCounters: 5},
			k:    KeyStats{Key: "c", WriteRate: 60_000, Counter: true, Hot: true},
			want: []wantDecision{{kind: ShardedCounter, rule: RuleCounterSharded, n: 5, mode: Observe}},
		},
		{
			name: "write-hot counter beyond one node on standalone, SDK clients: batched", primaries: 1,
			k:    KeyStats{Key: "c", WriteRate: 150_000, Counter: true, Hot: true, SDKShare: 0.5},
			want: []wantDecision{{kind: BatchedCounter, rule: RuleCounterAlone, mode: Enforce, reason: []string{"sharded counter skipped: standalone Redis has one primary"}}},
		},
		{
			name: "write-hot counter beyond one node on standalone, no SDK clients: report", primaries: 1,
			k:    KeyStats{Key: "c", WriteRate: 150_000, Counter: true, Hot: true},
			want: []wantDecision{{kind: Report, rule: RuleCounterAlone, mode: Recommend, reason: []string{"sharded counter skipped", "no automatic action"}}},
		},
		{
			name: "write-hot key that is not a counter: report", primaries: 3,
			k:    KeyStats{Key: "s", ReadRate: 1_000, WriteRate: 60_000, Hot: true, SDKShare: 1},
			want: []wantDecision{{kind: Report, rule: RuleWriteReport, mode: Recommend, reason: []string{"written 60k/s (98% of its traffic) and not a counter", "no automatic action"}}},
		},
		{
			name: "predicted, no traffic yet: L1 armed", primaries: 3,
			k:    KeyStats{Key: "score:match42", PredictedBy: []string{"final"}},
			want: []wantDecision{{kind: L1, rule: RulePredicted, mode: Enforce, reason: []string{"predicted by final", "no traffic seen yet"}}},
		},
		{
			name: "predicted counter, no traffic yet: L1 and batching armed", primaries: 3,
			k: KeyStats{Key: "likes", Counter: true, PredictedBy: []string{"launch", "promo"}},
			want: []wantDecision{
				{kind: L1, rule: RulePredicted, mode: Enforce, reason: []string{"predicted by launch, promo"}},
				{kind: BatchedCounter, rule: RulePredicted, mode: Enforce},
			},
		},
		{
			name: "predicted, not hot yet, expected rate fits: L1 though the SDK share is unknown", primaries: 3,
			k:    KeyStats{Key: "k", ReadRate: 20_000, PredictedBy: []string{"sale"}},
			want: []wantDecision{{kind: L1, rule: RuleReadL1, mode: Enforce, reason: []string{"predicted by sale; read 20k/s"}}},
		},
		{
			name: "predicted, expected rate beyond one node: copies armed", primaries: 3,
			k: KeyStats{Key: "k", ReadRate: 150_000, PredictedBy: []string{"sale"}},
			want: []wantDecision{
				{kind: L1, rule: RuleReadCopies, mode: Enforce},
				{kind: Copies, rule: RuleReadCopies, n: 3, mode: Observe},
			},
		},
		{
			name: "key that is not UTF-8: report", primaries: 3,
			k:    KeyStats{Key: "k\xff", ReadRate: 80_000, Hot: true, SDKShare: 1},
			want: []wantDecision{{kind: Report, rule: RuleBinaryKey, mode: Recommend, reason: []string{"not valid UTF-8"}}},
		},
		{
			name: "key the agent cut short: report, as its start names another key", primaries: 3,
			k:    KeyStats{Key: "session:", ReadRate: 240_000, Hot: true, SDKShare: 1, Truncated: true},
			want: []wantDecision{{kind: Report, rule: RuleTruncatedKey, mode: Recommend, reason: []string{"longer than limits.max_key_bytes"}}},
		},
		{
			name: "the empty key is a key: L1", primaries: 3,
			k:    KeyStats{Key: "", ReadRate: 80_000, Hot: true, SDKShare: 0.95},
			want: []wantDecision{{kind: L1, rule: RuleReadL1, mode: Enforce}},
		},
		{
			name: "modes as configured", primaries: 3, rules: Rules{Modes: map[Kind]Mode{Copies: Enforce, L1: Recommend}},
			k:    KeyStats{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5},
			want: []wantDecision{{kind: L1, rule: RuleReadCopies, mode: Recommend}, {kind: Copies, rule: RuleReadCopies, n: 3, mode: Enforce}},
		},
		{
			name: "settings as configured: TTL, capacity, headroom", primaries: 8,
			rules: Rules{L1TTL: 2 * time.Second, NodeCapacity: 10_000, Headroom: 0.8},
			k:     KeyStats{Key: "k", ReadRate: 30_000, Hot: true, SDKShare: 0.5},
			want: []wantDecision{
				{kind: L1, rule: RuleReadCopies, mode: Enforce, reason: []string{"L1 for 2s"}},
				{kind: Copies, rule: RuleReadCopies, n: 4, mode: Observe, reason: []string{"8k/s budget", "10k/s capacity"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDecisions(t, tt.rules.Decide(tt.k, tt.primaries), tt.k.Key, tt.rules, tt.want)
		})
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func describe(ds []Decision) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "[%s %s n=%d %s: %s]", d.Kind, d.Rule, d.N, d.Mode, d.Reason)
	}
	return b.String()
}

// The example from the brief, word for word where it can be: an SRE at 2 a.m. reads it.
func TestDecideReasonReads(t *testing.T) {
	got := Rules{}.Decide(KeyStats{Key: "score:match42", ReadRate: 240_000, Hot: true, SDKShare: 0.03}, 3)
	const want = "read 240k/s, 3% from SDK clients; 233k/s from other clients is above one node's 50k/s budget, " +
		"240k/s in all is above one node's 100k/s capacity: split into 3 copies (5 needed, capped at 3 primaries: each still takes 80k/s)"
	if len(got) != 2 || got[1].Reason != want {
		t.Fatalf("got %s; want copies with reason %q", describe(got), want)
	}
}

func TestRulesValidate(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		err   string // "" for valid
	}{
		{"zero value", Rules{}, ""},
		{"all set", Rules{L1TTL: 2 * time.Second, NodeCapacity: 1, Headroom: 1, NodeBandwidth: 1, MaxWriteShare: 0.5,
			SubCounters: 2, MaxSubCounters: 2, FlushInterval: time.Second, Modes: map[Kind]Mode{Report: Observe, Copies: Enforce}}, ""},
		{"negative TTL", Rules{L1TTL: -1}, "L1 TTL -1ns: must be in (0, 1h]"},
		{"huge TTL", Rules{L1TTL: 2 * time.Hour}, "L1 TTL 2h0m0s: must be in (0, 1h]"},
		{"negative capacity", Rules{NodeCapacity: -5}, "node capacity -5"},
		{"headroom above 1", Rules{Headroom: 1.5}, "headroom 1.5: must be in (0, 1]"},
		{"negative bandwidth", Rules{NodeBandwidth: -1}, "node bandwidth -1"},
		{"write share 1", Rules{MaxWriteShare: 1}, "max write share 1: must be in (0, 1)"},
		{"one sub-counter", Rules{SubCounters: 1}, "sub-counters 1: must be in [2, 256]"},
		{"one max sub-counter", Rules{MaxSubCounters: 1}, "max sub-counters 1: must be in [2, 256]"},
		{"long flush", Rules{FlushInterval: 2 * time.Minute}, "flush interval 2m0s: must be in (0, 1m]"},
		{"unknown kind", Rules{Modes: map[Kind]Mode{"cache": Enforce}}, `mode for kind "cache": use l1, copies`},
		{"bad mode", Rules{Modes: map[Kind]Mode{L1: "on"}}, `mode "on": use observe, recommend or enforce`},
		{"enforced report", Rules{Modes: map[Kind]Mode{Report: Enforce}}, "a report has nothing to enforce"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rules.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("got %v; want no error", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("got %v; want an error saying %q", err, tt.err)
			}
		})
	}
}

func TestDefaultModes(t *testing.T) {
	want := map[Kind]Mode{L1: Enforce, Copies: Observe, ShardedCounter: Observe, BatchedCounter: Enforce, Report: Recommend}
	for _, k := range Kinds {
		if got := (Rules{}).Mode(k); got != want[k] {
			t.Errorf("mode of %s: got %s; want %s", k, got, want[k])
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ got, want string }{
		{fmtRate(0), "0/s"},
		{fmtRate(950), "950/s"},
		{fmtRate(999.6), "1k/s"},
		{fmtRate(1500), "1.5k/s"},
		{fmtRate(240_000), "240k/s"},
		{fmtRate(999_600), "1M/s"},
		{fmtRate(2_400_000), "2.4M/s"},
		{fmtBytes(512), "512 B/s"},
		{fmtBytes(60e6), "60 MB/s"},
		{fmtShare(0), "0%"},
		{fmtShare(0.004), "<1%"},
		{fmtShare(0.03), "3%"},
		{fmtShare(1), "100%"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q; want %q", i, tt.got, tt.want)
		}
	}
}

// TestRulesSubCountersNameable: a SubCounters that Names cannot make (above MaxNames) is
// refused by Validate, not accepted and then turned into a naming report on every
// write-hot counter.
func TestRulesSubCountersNameable(t *testing.T) {
	r := Rules{SubCounters: MaxNames + 1}
	err := r.Validate()
	if err != nil {
		if want := fmt.Sprintf("sub-counters %d", MaxNames+1); !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v; want an error saying %q", err, want)
		}
		return
	}
	topo, terr := TopologyFromRanges([]SlotRange{{0, 5460, "10.0.0.1:6379"}, {5461, 10922, "10.0.0.2:6379"}, {10923, 16383, "10.0.0.3:6379"}})
	if terr != nil {
		t.Fatal(terr)
	}
	p := newPlanner(t, PlannerOptions{Rules: r})
	p.Update(t0, []KeyStats{{Key: "likes", WriteRate: 500_000, Counter: true, Hot: true}}, topo)
	var got []string
	for _, e := range p.Active() {
		got = append(got, string(e.Kind)+": "+e.Reason)
	}
	t.Fatalf("Rules{SubCounters: %d}.Validate() = nil; want an error. The planner then makes: %q", MaxNames+1, got)
}
