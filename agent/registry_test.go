package agent

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPredictedEventArmsBeforeTraffic is the registry's end-to-end proof, on simulated
// time: an event registered for a key puts the key's mitigation in the plan at
// start − lead, before its first sample; once traffic comes, GET /v1/registry/{id} reports
// observed against expected; a hot key no event predicted counts as a surprise.
func TestPredictedEventArmsBeforeTraffic(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	start := t0.Add(10 * time.Second)
	body := fmt.Sprintf(`{"id":"final","name":"the final","patterns":["score:match42"],
		"start":%q,"end":%q,"lead":"5s","expected_read_rate":50000,"mitigations":["auto"],"owner":"sports"}`,
		start.Format(time.RFC3339), start.Add(time.Minute).Format(time.RFC3339))
	if w := do(t, h, "POST", "/v1/registry", body); w.Code != http.StatusCreated {
		t.Fatalf("POST /v1/registry: %d %s; want 201", w.Code, w.Body)
	}
	a.evaluate()
	if _, ok := a.store.Current().Find("score:match42", mitigate.L1); ok {
		t.Fatal("the key is in the plan 10 s before the start, 5 s before the lead")
	}
	c.add(6 * time.Second) // 4 s before the start: inside the 5 s lead
	a.evaluate()
	e, ok := a.store.Current().Find("score:match42", mitigate.L1)
	if !ok || len(e.PredictedBy) != 1 || e.PredictedBy[0] != "final" {
		t.Fatalf("plan %+v; want score:match42 armed with L1, predicted by final, before any sample", a.store.Current())
	}
	// The SRE looking the key up before the spike sees it armed, not a 404.
	if k := decode[Key](t, do(t, h, "GET", "/v1/keys/score:match42", "")); len(k.PredictedBy) != 1 || len(k.Mitigations) == 0 {
		t.Fatalf("GET /v1/keys/score:match42 before any sample: %+v; want predicted by final, with its mitigation", k)
	}

	c.add(4 * time.Second) // the start; traffic arrives
	feedFrom(a, c, "score:match42", 20_000, 2*time.Second, true)
	feedFrom(a, c, "surprise:key", 5_000, time.Second, false)
	rep := decode[eventReply](t, do(t, h, "GET", "/v1/registry/final", ""))
	r := rep.Report
	if r == nil || r.State != "running" || r.ExpectedReadRate != 50000 {
		t.Fatalf("report %+v; want a running occurrence expecting 50,000 reads/s", r)
	}
	if math.Abs(r.ObservedPeakReadRate-20_000) > 2_000 || r.ReadRatio == nil || math.Abs(*r.ReadRatio-0.4) > 0.05 {
		t.Errorf("observed peak %v, ratio %v; want about 20,000/s and 0.4", r.ObservedPeakReadRate, r.ReadRatio)
	}
	if r.HotKeysTotal != 1 || r.HotKeys[0].Key != "score:match42" {
		t.Errorf("hot keys under the event %+v; want score:match42", r.HotKeys)
	}
	top := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=5", ""))
	for _, k := range top.Keys {
		if k.Key == "score:match42" && (len(k.PredictedBy) != 1 || k.PredictedBy[0] != "final") {
			t.Errorf("topk predicted_by %v; want [final]", k.PredictedBy)
		}
	}
	if got := testutil.ToFloat64(a.metrics.surprises); got != 1 {
		t.Errorf("hotkeyd_surprise_hot_keys_total %v; want 1 (surprise:key)", got)
	}
	m := do(t, h, "GET", "/metrics", "").Body.String()
	if !strings.Contains(m, `hotkeyd_event_expected_rate{event="final",op="read"} 50000`) {
		t.Errorf("/metrics lacks the event's expected rate")
	}
}

func TestRegistryAPI(t *testing.T) {
	_, _, h := newTestAgent(t, Options{AuthToken: "tk"})
	auth := []string{"Authorization", "Bearer tk"}
	ev := `{"id":"sale","patterns":["sale:sku:*"],"start":"2026-12-01T12:00:00+01:00","end":"2026-12-01T12:30:00+01:00","lead":"2m","expected_read_rate":80000}`
	if w := do(t, h, "POST", "/v1/registry", ev); w.Code != http.StatusUnauthorized {
		t.Errorf("POST without token: %d; want 401", w.Code)
	}
	if w := do(t, h, "POST", "/v1/registry", ev, auth...); w.Code != http.StatusCreated {
		t.Fatalf("POST: %d %s; want 201", w.Code, w.Body)
	}
	if w := do(t, h, "POST", "/v1/registry", ev, auth...); w.Code != http.StatusConflict {
		t.Errorf("POST of the same id: %d; want 409", w.Code)
	}
	bad := []struct{ body, field string }{
		{`{"id":"x","patterns":["k"],"start":"2026-12-01T12:00:00Z","end":"2026-12-01T11:00:00Z"}`, "end"},
		{`{"id":"x","patterns":["*"],"start":"2026-12-01T12:00:00Z","end":"2026-12-01T13:00:00Z"}`, "patterns"},
		{`{"id":"x","patterns":["k"],"start":"2026-12-01T12:00:00Z","end":"2026-12-01T13:00:00Z","mitigations":["magic"]}`, "mitigations"},
		{`{"id":"x","patterns":["k"],"start":"2026-12-01T12:00:00Z","end":"2026-12-01T13:00:00Z","expected_read_rate":-5}`, "expected_read_rate"},
	}
	for _, b := range bad {
		w := do(t, h, "POST", "/v1/registry", b.body, auth...)
		if e := decode[map[string]string](t, w); w.Code != 400 || !strings.Contains(e["error"], b.field) {
			t.Errorf("POST %s: %d %q; want 400 naming %s", b.body, w.Code, e["error"], b.field)
		}
	}
	list := decode[map[string][]map[string]any](t, do(t, h, "GET", "/v1/registry", ""))
	if len(list["events"]) != 1 {
		t.Errorf("GET /v1/registry: %v; want one event", list)
	}
	put := strings.Replace(ev, `"expected_read_rate":80000`, `"expected_read_rate":90000`, 1)
	if w := do(t, h, "PUT", "/v1/registry/sale", put, auth...); w.Code != http.StatusOK {
		t.Errorf("PUT: %d %s; want 200", w.Code, w.Body)
	}
	if w := do(t, h, "PUT", "/v1/registry/other", put, auth...); w.Code != http.StatusBadRequest {
		t.Errorf("PUT with a different id in the body: %d; want 400", w.Code)
	}
	if w := do(t, h, "DELETE", "/v1/registry/sale", "", auth...); w.Code != http.StatusOK {
		t.Errorf("DELETE: %d; want 200", w.Code)
	}
	if w := do(t, h, "GET", "/v1/registry/sale", ""); w.Code != http.StatusNotFound {
		t.Errorf("GET after DELETE: %d; want 404", w.Code)
	}
}
