package agent

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestEventListedCopiesArmBeforeTraffic: an event that lists its mitigations
// (`"mitigations": ["copies"]`) gets exactly those, armed at start − lead before any
// sample, sized from its expected read rate (2 copies when it expects none). The event
// chooses the kind; Rules.Modes chooses its mode: observe by default (metrics only),
// enforce when the operator says so. On standalone Redis the plan says why no copies.
func TestEventListedCopiesArmBeforeTraffic(t *testing.T) {
	tests := []struct {
		name      string
		modes     map[mitigate.Kind]mitigate.Mode
		expected  string // expected_read_rate, JSON
		primaries int    // 0: no topology known (standalone)
		mode      mitigate.Mode
		n         int
	}{
		{name: "enforced", modes: map[mitigate.Kind]mitigate.Mode{mitigate.Copies: mitigate.Enforce}, expected: "0", primaries: 3, mode: mitigate.Enforce, n: 2},
		{name: "observed by default", expected: "0", primaries: 3, mode: mitigate.Observe, n: 2},
		{name: "sized from the expected rate", modes: map[mitigate.Kind]mitigate.Mode{mitigate.Copies: mitigate.Enforce}, expected: "120000", primaries: 3, mode: mitigate.Enforce, n: 3},
		{name: "standalone", expected: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, c, h := newTestAgent(t, Options{Planner: mitigate.PlannerOptions{Rules: mitigate.Rules{Modes: tt.modes}}})
			if tt.primaries > 0 {
				a.redis.Store(&redisState{topo: testTopology(t, tt.primaries)})
			}
			start := t0.Add(10 * time.Second)
			body := fmt.Sprintf(`{"id":"flash-sale-0314","patterns":["sale:sku:1"],"start":%q,"end":%q,"lead":"5s",
				"expected_read_rate":%s,"mitigations":["copies"],"owner":"shop"}`,
				start.Format(time.RFC3339), start.Add(time.Minute).Format(time.RFC3339), tt.expected)
			if w := do(t, h, "POST", "/v1/registry", body); w.Code != http.StatusCreated {
				t.Fatalf("POST /v1/registry: %d %s; want 201", w.Code, w.Body)
			}
			a.evaluate()
			if act := a.planner.Active(); len(act) != 0 {
				t.Fatalf("active %+v 10 s before the start, 5 s before the lead; want nothing", act)
			}
			c.add(5 * time.Second) // start − lead
			a.evaluate()
			armed := start.Add(-5 * time.Second)

			act := a.planner.Active()
			if tt.primaries == 0 {
				e, ok := a.store.Current().Find("sale:sku:1", mitigate.Report)
				if len(act) != 1 || !ok || !strings.Contains(e.Reason, "listed by event flash-sale-0314") || !strings.Contains(e.Reason, "copies need ≥ 2 primaries") {
					t.Fatalf("active %+v; want one report saying copies need 2 primaries", act)
				}
				return
			}
			if len(act) != 1 || act[0].Key != "sale:sku:1" || act[0].Kind != mitigate.Copies {
				t.Fatalf("active %+v at start − lead; want exactly copies of sale:sku:1 (the event lists no l1)", act)
			}
			e := act[0]
			if e.Mode != tt.mode || len(e.Copies) != tt.n || !e.Since.Equal(armed) ||
				len(e.PredictedBy) != 1 || e.PredictedBy[0] != "flash-sale-0314" || !strings.Contains(e.Reason, "listed by event flash-sale-0314") {
				t.Errorf("copies %+v; want %s, %d copies, since %v, predicted and listed by flash-sale-0314", e, tt.mode, tt.n, armed)
			}
			_, inPlan := a.store.Current().Find("sale:sku:1", mitigate.Copies)
			if inPlan != (tt.mode != mitigate.Observe) {
				t.Errorf("copies in the plan: %v; want %v in mode %s", inPlan, tt.mode != mitigate.Observe, tt.mode)
			}
			m := do(t, h, "GET", "/metrics", "").Body.String()
			if want := fmt.Sprintf(`hotkeyd_mitigations{kind="copies",mode=%q} 1`, tt.mode); !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		})
	}
}

// testTopology returns a cluster of n primaries with equal slot ranges.
func testTopology(t *testing.T, n int) *mitigate.Topology {
	t.Helper()
	var ranges []mitigate.SlotRange
	for i := range n {
		ranges = append(ranges, mitigate.SlotRange{Start: i * mitigate.SlotCount / n, End: (i+1)*mitigate.SlotCount/n - 1,
			Primary: fmt.Sprintf("10.0.0.%d:6379", i+1)})
	}
	topo, err := mitigate.TopologyFromRanges(ranges)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestEventListedBesideAutoEvent: a key predicted by an auto event and by one that lists
// copies gets the table's decision (L1, before traffic) and the copies, whose reason names
// the event that listed them, not the auto one.
func TestEventListedBesideAutoEvent(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	a.redis.Store(&redisState{topo: testTopology(t, 3)})
	start := t0.Add(10 * time.Second)
	for _, ev := range []struct{ id, mitigations string }{{"match42", `["auto"]`}, {"flash-sale-0314", `["copies"]`}} {
		body := fmt.Sprintf(`{"id":%q,"patterns":["score:match42"],"start":%q,"end":%q,"lead":"5s","mitigations":%s}`,
			ev.id, start.Format(time.RFC3339), start.Add(time.Minute).Format(time.RFC3339), ev.mitigations)
		if w := do(t, h, "POST", "/v1/registry", body); w.Code != http.StatusCreated {
			t.Fatalf("POST /v1/registry: %d %s; want 201", w.Code, w.Body)
		}
	}
	c.add(5 * time.Second)
	a.evaluate()
	var got []string
	for _, e := range a.planner.Active() {
		got = append(got, fmt.Sprintf("%s %s %s: %s", e.Key, e.Kind, e.Mode, e.Reason))
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "score:match42 l1 enforce: predicted by flash-sale-0314, match42; no traffic seen yet") ||
		!strings.HasPrefix(got[1], "score:match42 copies observe: listed by event flash-sale-0314: ") {
		t.Fatalf("active %q; want the predicted row's L1 and copies listed by flash-sale-0314", got)
	}
}
