package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// TestKeyLookupSlashes: keys may contain "/", also doubled, leading, or as "." and ".."
// segments; /v1/keys/{escaped key} answers for that very key, not a redirect to another.
func TestKeyLookupSlashes(t *testing.T) {
	keys := []string{"a//b", "/lead", "x/../y", "p/./q", "trail/", "sess:/"}
	a, c, h := newTestAgent(t, Options{})
	for i, k := range keys {
		a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{{Key: []byte(k), Op: sampler.OpRead, Count: uint32(i + 1)}}})
	}
	c.add(time.Second / 2)
	a.evaluate()
	for i, k := range keys {
		w := do(t, h, "GET", "/v1/keys/"+url.PathEscape(k), "")
		if w.Code != http.StatusOK {
			t.Errorf("GET /v1/keys/%s: %d %s; want 200", url.PathEscape(k), w.Code, w.Header().Get("Location"))
			continue
		}
		got := decode[Key](t, w)
		if want := float64(2 * (i + 1)); got.Key != k || got.ReadRate != want {
			t.Errorf("GET /v1/keys/%s: key %q read_rate %v; want %q, %v", url.PathEscape(k), got.Key, got.ReadRate, k, want)
		}
	}
}

// TestDropSourcesBounded: reports dropped with made-up sources (malformed, or without the
// token) do not grow the series of hotkeyd_samples_dropped_total without bound.
func TestDropSourcesBounded(t *testing.T) {
	_, _, h := newTestAgent(t, Options{})
	for i := range 200 {
		body := fmt.Sprintf(`{"source":"src-%d","samples":[{"key":"k","op":"zap"}]}`, i)
		if w := do(t, h, "POST", "/v1/samples", body); w.Code != http.StatusBadRequest {
			t.Fatalf("malformed report: %d; want 400", w.Code)
		}
	}
	body := do(t, h, "GET", "/metrics", "").Body.String()
	// One series per source label (at most maxSources, and "other"), plus those of source
	// "unknown", made at 0 for every reason.
	if n, want := strings.Count(body, "hotkeyd_samples_dropped_total{"), maxSources+1+len(dropReasons); n > want {
		t.Errorf("%d dropped series; want at most %d", n, want)
	}
}

// TestHashKeysRegistryReport: with HashKeys, the report of GET /v1/registry/{id} names the
// keys that got hot under a prefix pattern by their hash, as the rest of the API does.
func TestHashKeysRegistryReport(t *testing.T) {
	a, c, h := newTestAgent(t, Options{HashKeys: true})
	body := fmt.Sprintf(`{"id":"sale","patterns":["sale:sku:*"],"start":%q,"end":%q,"expected_read_rate":50000}`,
		t0.Format(time.RFC3339), t0.Add(time.Hour).Format(time.RFC3339))
	if w := do(t, h, "POST", "/v1/registry", body); w.Code != http.StatusCreated {
		t.Fatalf("POST /v1/registry: %d %s; want 201", w.Code, w.Body)
	}
	feed(a, c, "sale:sku:4711", 20_000, 2*time.Second)
	w := do(t, h, "GET", "/v1/registry/sale", "")
	rep := decode[eventReply](t, w)
	if rep.Report == nil || rep.Report.HotKeysTotal != 1 {
		t.Fatalf("report %+v; want one hot key", rep.Report)
	}
	if strings.Contains(w.Body.String(), "sale:sku:4711") {
		t.Errorf("GET /v1/registry/sale shows the key name with hash_keys on:\n%s", w.Body)
	}
	hash := a.display("sale:sku:4711")
	if rep.Report.HotKeys[0].Key != hash || rep.Report.PeakReadKey != hash {
		t.Errorf("hot key %q, peak read key %q; want the hash %q", rep.Report.HotKeys[0].Key, rep.Report.PeakReadKey, hash)
	}
}

// TestHashKeysLookupFromReadRanking: with HashKeys, a hash that GET /v1/topk?op=read shows
// is accepted back by GET /v1/keys/{key}, also for a key outside the combined ranking.
func TestHashKeysLookupFromReadRanking(t *testing.T) {
	a, c, h := newTestAgent(t, Options{HashKeys: true, Detector: detector.Options{K: 2, Shards: 1}})
	for range 10 {
		a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{
			{Key: []byte("w1"), Op: sampler.OpWrite, Count: 300},
			{Key: []byte("w2"), Op: sampler.OpWrite, Count: 200},
			{Key: []byte("r1"), Op: sampler.OpRead, Count: 50},
		}})
		c.add(50 * time.Millisecond)
		a.evaluate()
	}
	top := decode[TopK](t, do(t, h, "GET", "/v1/topk?op=read", ""))
	if len(top.Keys) != 1 || top.Keys[0].Key != a.display("r1") {
		t.Fatalf("op=read keys %+v; want r1's hash alone", top.Keys)
	}
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/"+top.Keys[0].Key, ""))
	if k.Key != top.Keys[0].Key || k.ReadRate != top.Keys[0].ReadRate {
		t.Errorf("/v1/keys/%s: key %q read_rate %v; want %q, %v", top.Keys[0].Key, k.Key, k.ReadRate, top.Keys[0].Key, top.Keys[0].ReadRate)
	}
}

// TestMetricsBinaryKeys: binary keys (key_b64) and keys cut inside a UTF-8 character by
// max_key_bytes are not valid UTF-8; /metrics still answers, with a series for each.
func TestMetricsBinaryKeys(t *testing.T) {
	a, c, h := newTestAgent(t, Options{MaxKeyBytes: 8})
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{ // all hot, so all with series
		{Key: []byte("bin:\xff\xfe"), Op: sampler.OpRead, Count: 5000},
		{Key: []byte("bin:\xff\xfd"), Op: sampler.OpRead, Count: 4000},
		{Key: []byte("ключ:1"), Op: sampler.OpRead, Count: 3000}, // cut to 8 bytes: half a "ч"
	}})
	c.add(time.Second / 2)
	a.evaluate()
	w := do(t, h, "GET", "/metrics", "")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s; want 200", w.Code, w.Body)
	}
	if n := strings.Count(w.Body.String(), `hotkeyd_key_hot{`); n != 3 {
		t.Errorf("%d hotkeyd_key_hot series; want 3:\n%s", n, w.Body)
	}
}

// TestHashKeysExecutorLogs: with HashKeys, the log lines of the mitigations the agent
// carries out in Redis name the key by its hash, as the agent's own lines do.
func TestHashKeysExecutorLogs(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	const key = "user:alice@example.com:profile"
	if err := rdb.Set(ctx, key, "secret", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	a, err := New(Options{HashKeys: true, RedisAddrs: cl.Addrs(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	waitFor(t, func() bool { return a.namer() != nil })
	if err := a.planner.Pin(key, mitigate.Copies, mitigate.Enforce); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		a.Accept(sampler.Batch{Source: "proxy", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte(key), Op: sampler.OpRead, Count: 200}}})
		return strings.Contains(logs.String(), "mitigation action")
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if out := logs.String(); strings.Contains(out, "alice") {
		t.Errorf("logs show the key name with hash_keys on:\n%s", out)
	}
}

// TestErrorsAreJSON: docs/api.md: errors are always {"error":"…"}, also for a method an
// endpoint does not take and a path the API does not have.
func TestErrorsAreJSON(t *testing.T) {
	_, _, h := newTestAgent(t, Options{})
	tests := []struct {
		method, target string
		code           int
		allow          string
	}{
		{"POST", "/v1/topk", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"DELETE", "/v1/keys/k", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/topkk", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		w := do(t, h, tt.method, tt.target, "")
		if w.Code != tt.code {
			t.Errorf("%s %s: %d; want %d", tt.method, tt.target, w.Code, tt.code)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q; want application/json", tt.method, tt.target, ct)
		}
		if e := decode[map[string]string](t, w); e["error"] == "" {
			t.Errorf("%s %s: body %q; want {\"error\":\"…\"}", tt.method, tt.target, w.Body)
		}
		if got := w.Header().Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: Allow %q; want %q", tt.method, tt.target, got, tt.allow)
		}
	}
}

// TestUDPMaxSamplesPerReport: limits.max_samples_per_report caps the samples of one
// datagram as of one POST /v1/samples: a datagram with more is dropped as too_large.
func TestUDPMaxSamplesPerReport(t *testing.T) {
	a := runAgent(t, Options{UDPReaders: 1, MaxSamplesPerReport: 2})
	conn, err := net.Dial("udp", a.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := func(k string) sampler.Sample { return sampler.Sample{Key: []byte(k), Op: sampler.OpRead} }
	big, err := sampler.AppendReport(nil, sampler.Batch{Source: "u", Rate: 1, Samples: []sampler.Sample{s("big"), s("big"), s("big")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	small, err := sampler.AppendReport(nil, sampler.Batch{Source: "u", Rate: 1, Samples: []sampler.Sample{s("small")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One reader takes datagrams in order: once small is counted, big was read before it.
	waitFor(t, func() bool {
		conn.Write(big)
		conn.Write(small)
		r, _ := a.det.Estimate([]byte("small"))
		return r > 0
	})
	if r, _ := a.det.Estimate([]byte("big")); r != 0 {
		t.Errorf("a datagram of 3 samples with max_samples_per_report 2: %d reads counted; want 0, dropped", r)
	}
	if got := testutil.ToFloat64(a.metrics.drops.WithLabelValues("u", sampler.DropTooLarge)); got == 0 {
		t.Errorf("hotkeyd_samples_dropped_total{reason=%q}: 0; want the dropped datagrams", sampler.DropTooLarge)
	}
}
