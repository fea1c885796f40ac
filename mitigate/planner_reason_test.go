package mitigate

import (
	"strings"
	"testing"
	"time"
)

// TestPlannerReasonFollowsRule: an entry's reason states the row of the table that decides
// it now. Found by an operator: a key read at 11.5k/s on standalone Redis, then at 110k/s,
// kept the report "it fits one node's 50k/s budget … no action needed" while the table
// said read-standalone. A row further up the table (fits → beyond one node → split)
// shows at the next evaluation; a row further down once the higher row has not applied
// for CoolDown (as a smaller N does); figures that move within a row change nothing.
func TestPlannerReasonFollowsRule(t *testing.T) {
	const (
		any = iota
		changed
		same
	)
	type step struct {
		at     time.Duration
		k      KeyStats
		kind   Kind
		change int    // any, changed or same: what Update must say
		want   string // the reason contains it; "" when the entry must be absent
		not    string // the reason does not contain it ("" for no check)
	}
	read := func(reads, writes, sdk float64) KeyStats {
		return KeyStats{Key: "k", ReadRate: reads, WriteRate: writes, SDKShare: sdk, Hot: true}
	}
	counter := func(writes, sdk float64) KeyStats {
		return KeyStats{Key: "k", WriteRate: writes, SDKShare: sdk, Counter: true, Hot: true}
	}
	const noAction = "no action needed"
	tests := []struct {
		name      string
		primaries int // 0: no topology (standalone)
		steps     []step
	}{
		{"standalone report: read-fits, then read-standalone", 0, []step{
			{0, read(11_500, 0, 0), Report, changed, noAction, ""},
			{time.Second, read(110_000, 0, 0), Report, changed, "copies skipped: standalone Redis has one primary", noAction},
			// Rates moving within the row leave the plan alone.
			{2 * time.Second, read(117_000, 0, 0), Report, same, "read 110k/s", ""},
			{3 * time.Second, read(108_000, 0, 0), Report, same, "read 110k/s", ""},
			// Back down: the higher row stands until it has not applied for CoolDown.
			{4 * time.Second, read(11_500, 0, 0), Report, same, "copies skipped", noAction},
			{62 * time.Second, read(11_600, 0, 0), Report, any, "copies skipped", noAction},
			{63 * time.Second, read(11_600, 0, 0), Report, changed, noAction, "copies skipped"},
		}},
		{"cluster report: read-fits, then read-written", 3, []step{
			{0, read(40_000, 0, 0), Report, changed, noAction, ""},
			{time.Second, read(240_000, 60_000, 0), Report, changed, "not split", noAction},
		}},
		{"cluster report: read-fits, then read-copies", 3, []step{
			{0, read(40_000, 0, 0), Report, changed, noAction, ""},
			// "No action needed" beside copies: the report ends at once...
			{time.Second, read(240_000, 0, 0), Report, changed, "", ""},
			{time.Second, read(240_000, 0, 0), Copies, same, "split into 3 copies", ""},
			// ...and comes back only once the copies have cooled.
			{2 * time.Second, read(40_000, 0, 0), Report, same, "", ""},
			{60 * time.Second, read(40_000, 0, 0), Copies, any, "split into 3 copies", ""},
			{61 * time.Second, read(40_000, 0, 0), Report, changed, noAction, ""},
		}},
		{"cluster L1: read-l1, then read-copies", 3, []step{
			{0, read(80_000, 0, 0.5), L1, changed, "within one node's 50k/s budget", ""},
			{time.Second, read(240_000, 0, 0.5), L1, changed, "alongside 3 copies", "within one node's"},
		}},
		{"cluster L1: read-written, then read-copies", 3, []step{
			{0, read(240_000, 60_000, 0.5), L1, changed, "not split", ""},
			{time.Second, read(240_000, 0, 0.5), L1, changed, "alongside 3 copies", "not split"},
		}},
		{"cluster L1: read-copies, then read-written once the copies are gone", 3, []step{
			{0, read(240_000, 0, 0.5), L1, changed, "alongside 3 copies", ""},
			// The copies cool for CoolDown, and the reason that names them stays as long.
			{time.Second, read(240_000, 60_000, 0.5), L1, same, "alongside 3 copies", ""},
			{59 * time.Second, read(240_000, 60_000, 0.5), L1, any, "alongside 3 copies", ""},
			{60 * time.Second, read(240_000, 60_000, 0.5), L1, changed, "not split", "alongside"},
		}},
		{"cluster batched counter: counter-batched, then counter-sharded", 3, []step{
			{0, counter(40_000, 0.5), BatchedCounter, changed, "fits one node's", ""},
			{time.Second, counter(240_000, 0.5), BatchedCounter, changed, "alongside 3 sub-counters", "fits one node's"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce, ShardedCounter: Enforce}}})
			var namer Namer
			if tt.primaries > 0 {
				namer = planNamer{primaries: tt.primaries}
			}
			for _, s := range tt.steps {
				plan, ch := p.Update(t0.Add(s.at), []KeyStats{s.k}, namer)
				e, ok := plan.Find("k", s.kind)
				if s.want == "" {
					if ok || s.change == changed && !ch || s.change == same && ch {
						t.Errorf("at t0+%v: changed %v, entries %s; want no %s entry, changed %v", s.at, ch, kinds(plan, "k"), s.kind, s.change == changed)
					}
					continue
				}
				if !ok {
					t.Fatalf("at t0+%v: entries %s; want a %s entry", s.at, kinds(plan, "k"), s.kind)
				}
				if s.change == changed && !ch || s.change == same && ch {
					t.Errorf("at t0+%v: changed %v; want %v (reason %q)", s.at, ch, s.change == changed, e.Reason)
				}
				if !strings.Contains(e.Reason, s.want) || s.not != "" && strings.Contains(e.Reason, s.not) {
					t.Errorf("at t0+%v: %s reason %q; want it to say %q and not %q", s.at, s.kind, e.Reason, s.want, s.not)
				}
			}
		})
	}
}

// TestPlannerReasonRowFlapCluster: a key swinging every second between two rows that
// state different loads changes the plan once when it first rises, then holds: the
// higher row (and its copies) stays stated while it applies within CoolDown.
func TestPlannerReasonRowFlapCluster(t *testing.T) {
	tests := []struct {
		name string
		key  func(s int) KeyStats
	}{
		{"report of read-fits and copies of read-copies", func(s int) KeyStats {
			return KeyStats{Key: "k", ReadRate: float64(45_000 + 10_000*(s%2)), Hot: true}
		}},
		{"L1 of read-l1 and of read-copies", func(s int) KeyStats {
			return KeyStats{Key: "k", ReadRate: float64(90_000 + 20_000*(s%2)), SDKShare: 0.5, Hot: true}
		}},
		{"L1 of read-written and of read-copies", func(s int) KeyStats {
			return KeyStats{Key: "k", ReadRate: 240_000, WriteRate: float64(60_000 * (s % 2)), SDKShare: 0.5, Hot: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce}}})
			const period = 10 * time.Minute
			changes, substantive, _ := countChanges(t, p, period, planNamer{primaries: 3}, func(s int) []KeyStats { return []KeyStats{tt.key(s)} })
			if max := 2 + int(period/(DefaultLease/2)); changes > max || substantive > 2 {
				t.Errorf("%d plan changes (%d beyond leases) in %v of swings; want at most %d (start, one row change, one renewal per half lease)",
					changes, substantive, period, max)
			}
		})
	}
}
