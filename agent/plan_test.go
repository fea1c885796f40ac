package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/redis/go-redis/v9"
)

// feedFrom sends reads of key at rate requests per second for d, as feed does, from a
// source that follows the plan or not.
func feedFrom(a *Agent, c *clock, key string, rate float64, d time.Duration, followsPlan bool) {
	const step = 10 * time.Millisecond
	n := uint32(rate * step.Seconds() / 100)
	for el := time.Duration(0); el < d; el += step {
		a.Accept(sampler.Batch{Source: "test", Rate: 0.01, FollowsPlan: followsPlan, Samples: []sampler.Sample{{Key: []byte(key), Op: sampler.OpRead, Count: n}}})
		c.add(step)
		if c.now().Sub(t0)%a.opts.Detector.Tick == 0 {
			a.evaluate()
		}
	}
}

func TestPlanL1ForSDKReaders(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	feedFrom(a, c, "score:match42", 20_000, time.Second, true)
	w := do(t, h, "GET", "/v1/plan", "")
	p, err := mitigate.DecodePlan(w.Body.Bytes())
	if err != nil {
		t.Fatalf("GET /v1/plan: %d %s: %v", w.Code, w.Body, err)
	}
	e, ok := p.Find("score:match42", mitigate.L1)
	if !ok || e.Mode != mitigate.Enforce || time.Duration(e.TTL) != time.Second {
		t.Fatalf("plan %+v; want an enforced L1 entry with TTL 1s for score:match42", p)
	}
	if etag := w.Header().Get("ETag"); etag != fmt.Sprintf("%q", fmt.Sprint(p.Version)) {
		t.Errorf("ETag %s; want the version %d", etag, p.Version)
	}
	top := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=1", ""))
	if got := top.Keys[0].Mitigations; len(got) != 1 || got[0] != "l1:enforce" {
		t.Errorf("topk mitigations %v; want [l1:enforce]", got)
	}
	// Long-poll: nothing new within the wait answers 304; a newer plan answers at once.
	if w := do(t, h, "GET", fmt.Sprintf("/v1/plan?after=%d&wait=50ms", p.Version), ""); w.Code != http.StatusNotModified {
		t.Errorf("long-poll with nothing new: %d; want 304", w.Code)
	}
	if w := do(t, h, "GET", fmt.Sprintf("/v1/plan?after=%d", p.Version-1), ""); w.Code != http.StatusOK {
		t.Errorf("after an older version: %d; want 200", w.Code)
	}
	done := make(chan int, 1)
	go func() {
		done <- do(t, h, "GET", fmt.Sprintf("/v1/plan?after=%d&wait=10s", p.Version), "").Code
	}()
	time.Sleep(50 * time.Millisecond)
	if err := a.planner.Forbid("score:match42", mitigate.L1); err != nil {
		t.Fatal(err)
	}
	a.evaluate()
	select {
	case code := <-done:
		if code != http.StatusOK {
			t.Errorf("long-poll woken by a new plan: %d; want 200", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll not woken by a new plan")
	}
	for _, bad := range []string{"/v1/plan?after=x", "/v1/plan?after=1&wait=5m", "/v1/plan?wait=-1s"} {
		if w := do(t, h, "GET", bad, ""); w.Code != http.StatusBadRequest {
			t.Errorf("GET %s: %d; want 400", bad, w.Code)
		}
	}
}

// TestPlanGeneratedOfAnotherRun: a client names the plan it holds by version and
// generated. A restarted agent counts versions from 1 again; when it reaches the client's
// version with another plan (another generated), it must answer that plan at once, not
// wait past it or answer 304.
func TestPlanGeneratedOfAnotherRun(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	feedFrom(a, c, "score:match42", 20_000, time.Second, true)
	p, err := mitigate.DecodePlan(do(t, h, "GET", "/v1/plan", "").Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	gen := func(g time.Time) string { return url.QueryEscape(g.Format(time.RFC3339Nano)) }
	held := fmt.Sprintf("/v1/plan?after=%d&generated=%s&wait=50ms", p.Version, gen(p.Generated))
	if w := do(t, h, "GET", held, ""); w.Code != http.StatusNotModified {
		t.Errorf("GET %s (the plan held): %d; want 304", held, w.Code)
	}
	other := fmt.Sprintf("/v1/plan?after=%d&generated=%s&wait=10s", p.Version, gen(p.Generated.Add(-time.Hour)))
	w := do(t, h, "GET", other, "")
	got, err := mitigate.DecodePlan(w.Body.Bytes())
	if w.Code != http.StatusOK || err != nil || !got.Generated.Equal(p.Generated) {
		t.Errorf("GET %s (another run's plan of the same version): %d %s; want 200 with the current plan", other, w.Code, w.Body)
	}
	if w := do(t, h, "GET", "/v1/plan?after=1&generated=yesterday", ""); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "generated") {
		t.Errorf("generated=yesterday: %d %s; want 400 naming generated", w.Code, w.Body)
	}
}

// TestPlanNoCache: docs/plan.md promises Cache-Control: no-cache with the ETag, on 200 and
// on 304, so that no HTTP cache between agent and SDK serves an old plan.
func TestPlanNoCache(t *testing.T) {
	a, _, h := newTestAgent(t, Options{})
	v := a.store.Current().Version
	for _, target := range []string{"/v1/plan", fmt.Sprintf("/v1/plan?after=%d&wait=10ms", v)} {
		w := do(t, h, "GET", target, "")
		if got := w.Header().Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: %d with Cache-Control %q; want no-cache", target, w.Code, got)
		}
	}
}

func TestOverridesAPI(t *testing.T) {
	_, _, h := newTestAgent(t, Options{AuthToken: "tk"})
	auth := []string{"Authorization", "Bearer tk"}
	body := `{"key":"score:match42","kind":"l1","action":"pin","mode":"enforce"}`
	if w := do(t, h, "POST", "/v1/plan/overrides", body); w.Code != http.StatusUnauthorized {
		t.Errorf("POST without token: %d; want 401", w.Code)
	}
	if w := do(t, h, "POST", "/v1/plan/overrides", body, auth...); w.Code != http.StatusCreated {
		t.Fatalf("POST pin: %d %s; want 201", w.Code, w.Body)
	}
	big := `{"key":"` + strings.Repeat("x", maxOverrideBytes) + `","kind":"l1","action":"pin"}`
	if w := do(t, h, "POST", "/v1/plan/overrides", big, auth...); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "over 65536 bytes") {
		t.Errorf("POST of %d bytes: %d %s; want 413 naming the limit", len(big), w.Code, w.Body)
	}
	tests := []struct{ body, err string }{
		{`{"key":"","kind":"l1","action":"pin"}`, "key: empty"},
		{`{"key":"k","kind":"magic","action":"pin"}`, `kind: "magic"`},
		{`{"key":"k","kind":"l1","action":"nuke"}`, `action: "nuke"`},
		{`{"key":"k","kind":"l1","action":"pin","mode":"loud"}`, `mode: mode "loud"`},
		{`{"key":"k","kind":"l1","action":"forbid","mode":"enforce"}`, "only a pin takes a mode"},
		{`{"key":"k","kind":"l1","action":"pin","extra":1}`, `unknown field "extra"`},
	}
	for _, tt := range tests {
		w := do(t, h, "POST", "/v1/plan/overrides", tt.body, auth...)
		if e := decode[map[string]string](t, w); w.Code != 400 || !strings.Contains(e["error"], tt.err) {
			t.Errorf("POST %s: %d %q; want 400 containing %q", tt.body, w.Code, e["error"], tt.err)
		}
	}
	got := decode[map[string][]mitigate.Override](t, do(t, h, "GET", "/v1/plan/overrides", ""))
	if o := got["overrides"]; len(o) != 1 || o[0].Key != "score:match42" || o[0].Action != "pin" {
		t.Errorf("overrides %+v; want the one pin", o)
	}
	if w := do(t, h, "DELETE", "/v1/plan/overrides/score:match42", "", auth...); w.Code != 200 {
		t.Errorf("DELETE: %d; want 200", w.Code)
	}
	if w := do(t, h, "DELETE", "/v1/plan/overrides/score:match42", "", auth...); w.Code != 404 {
		t.Errorf("DELETE again: %d; want 404", w.Code)
	}
}

// TestPlanOnCluster runs the agent against a real 3-primary cluster: a key read far beyond
// one node's budget by non-SDK clients gets copies (observe by default, so pinned to
// enforce here) named on three different primaries; the plan is stored in Redis; the
// node shares show the lopsided cluster.
func TestPlanOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { rdb.Close() }) // cleanups run last first: this one after the check below
	if err := rdb.Set(ctx, "score:match42", "3-1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after the agent has stopped: it left no copy behind
		var left atomic.Int64 // ForEachMaster runs on every primary at once
		err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			keys, err := node.Keys(ctx, "{hk:*").Result()
			left.Add(int64(len(keys)))
			return err
		})
		if err != nil || left.Load() != 0 {
			t.Errorf("after the agent stopped: %d keys named {hk:…} left (%v); want 0", left.Load(), err)
		}
	})
	a := runAgent(t, Options{RedisAddrs: cl.Addrs()})
	waitFor(t, func() bool { return a.namer() != nil })
	if err := a.planner.Pin("score:match42", mitigate.Copies, mitigate.Enforce); err != nil {
		t.Fatal(err)
	}
	send := func() {
		a.Accept(sampler.Batch{Source: "proxy", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte("score:match42"), Op: sampler.OpRead, Count: 200}}})
	}
	var plan mitigate.Plan
	waitFor(t, func() bool {
		send()
		var ok bool
		plan = a.store.Current()
		_, ok = plan.Find("score:match42", mitigate.Copies)
		return ok
	})
	e, _ := plan.Find("score:match42", mitigate.Copies)
	primaries := map[string]bool{}
	for _, c := range e.Copies {
		if !strings.Contains(c.Name, "score:match42") || c.Primary == "" {
			t.Errorf("copy %+v; want the key in its name and a primary", c)
		}
		primaries[c.Primary] = true
	}
	if len(e.Copies) < 2 || len(primaries) != len(e.Copies) {
		t.Errorf("copies %+v; want at least 2, each on a different primary", e.Copies)
	}
	for _, c := range e.Copies { // the executor wrote them, TTL kept
		waitFor(t, func() bool { return rdb.Get(ctx, c.Name).Val() == "3-1" })
		if ttl := rdb.PTTL(ctx, c.Name).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("copy %s: TTL %v; want the original's (under 1h)", c.Name, ttl)
		}
	}
	waitFor(t, func() bool {
		b, err := rdb.Get(ctx, PlanKey).Bytes()
		if err != nil {
			return false
		}
		var stored mitigate.Plan
		return json.Unmarshal(b, &stored) == nil && stored.Version >= plan.Version
	})
	waitFor(t, func() bool {
		send()
		resp, err := http.Get("http://" + a.HTTPAddr().String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `hotkeyd_node_share{primary=`) &&
			strings.Contains(string(b), `hotkeyd_mitigations{kind="copies",mode="enforce"} 1`)
	})
}

// TestOverridesForbidReport: docs/plan.md: "Forbidding `report` hides the key's reports";
// the planner takes it, so the API must too. A pin of report (no mitigation to apply)
// stays refused, with what is allowed.
func TestOverridesForbidReport(t *testing.T) {
	_, _, h := newTestAgent(t, Options{})
	w := do(t, h, "POST", "/v1/plan/overrides", `{"key":"ctr","kind":"report","action":"forbid"}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("POST forbid report: %d %s; want 201", w.Code, w.Body)
	}
	got := decode[map[string][]mitigate.Override](t, do(t, h, "GET", "/v1/plan/overrides", ""))
	if o := got["overrides"]; len(o) != 1 || o[0].Kind != mitigate.Report || o[0].Action != mitigate.ActionForbid {
		t.Errorf("overrides %+v; want the forbid of report", o)
	}
	w = do(t, h, "POST", "/v1/plan/overrides", `{"key":"ctr","kind":"report","action":"pin"}`)
	if e := decode[map[string]string](t, w); w.Code != 400 || !strings.Contains(e["error"], "l1, copies, sharded_counter or batched_counter") {
		t.Errorf("POST pin report: %d %q; want 400 naming the kinds a pin takes", w.Code, e["error"])
	}
}

// A key the agent cut to MaxKeyBytes gets a report, not an L1 that would cache the key
// its start names; the empty key gets its L1 like any other, and the plan with both
// decodes in clients.
func TestPlanTruncatedAndEmptyKeys(t *testing.T) {
	a, c, h := newTestAgent(t, Options{MaxKeyBytes: 16})
	long := "session:" + strings.Repeat("x", 40)
	for range 100 {
		feedFrom(a, c, long, 20_000, 10*time.Millisecond, true)
		feedFrom(a, c, "", 20_000, 10*time.Millisecond, true)
	}
	w := do(t, h, "GET", "/v1/plan", "")
	p, err := mitigate.DecodePlan(w.Body.Bytes())
	if err != nil {
		t.Fatalf("GET /v1/plan: %d %s: %v", w.Code, w.Body, err)
	}
	short := long[:16]
	if _, ok := p.Find(short, mitigate.L1); ok {
		t.Errorf("plan %s: an L1 for %q, the start of a longer key; want none", w.Body, short)
	}
	if e, ok := p.Find(short, mitigate.Report); !ok || !strings.Contains(e.Reason, "max_key_bytes") {
		t.Errorf("plan %s: want a report for %q saying it was cut short", w.Body, short)
	}
	if e, ok := p.Find("", mitigate.L1); !ok || e.Mode != mitigate.Enforce {
		t.Errorf("plan %s: want an enforced L1 for the empty key", w.Body)
	}
}
