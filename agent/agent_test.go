package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// clock is a settable clock for tests.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// newTestAgent returns an agent with a fake clock and no listeners, its window started.
func newTestAgent(t *testing.T, o Options) (*Agent, *clock, http.Handler) {
	t.Helper()
	c := &clock{t: t0}
	o.Now = c.now
	o.Logger = slog.New(slog.DiscardHandler)
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	a.det.Advance(c.now())
	return a, c, a.Handler()
}

func do(t *testing.T, h http.Handler, method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("status %d, body %q: %v", w.Code, w.Body, err)
	}
	return v
}

// feed sends reads of key at rate requests per second for d, in steps of 10 ms, sampled
// 1 in 100, evaluating every tick as the loop would.
func feed(a *Agent, c *clock, key string, rate float64, d time.Duration) {
	drive(a, c, d, true, flow{key: key, rate: rate, sampleRate: 0.01})
}

func TestTopKAndHot(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	body := `{"source":"app-1","sample_rate":0.01,"samples":[
		{"key":"score:match42","op":"read","count":30,"bytes":512},
		{"key":"likes","op":"write","count":1},
		{"key":"user:1","op":"read"}]}`
	if w := do(t, h, "POST", "/v1/samples", body); w.Code != http.StatusAccepted {
		t.Fatalf("POST /v1/samples: %d %s; want 202", w.Code, w.Body)
	}
	c.add(500 * time.Millisecond)
	a.evaluate()
	got := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=2", ""))
	if len(got.Keys) != 2 || got.Keys[0].Key != "score:match42" || got.Keys[1].Key != "likes" {
		t.Fatalf("topk keys %+v; want score:match42, likes", got.Keys)
	}
	// 3,000 reads in the 500 ms since the start: 6,000/s, over the 1,000/s threshold.
	if k := got.Keys[0]; k.ReadRate != 6000 || !k.Hot || k.HotSince == nil || !k.HotSince.Equal(c.now()) {
		t.Errorf("score:match42: %+v; want read_rate 6000, hot since %v", k, c.now())
	}
	// 200 writes/s is over the minimum rate but only 3 % of traffic: not hot.
	if k := got.Keys[1]; k.WriteRate != 200 || k.Hot {
		t.Errorf("likes: %+v; want write_rate 200, not hot", k)
	}
	if got.TotalRate != 6400 || got.WindowSeconds != 0.5 {
		t.Errorf("total_rate %v over %v s; want 6400 over 0.5", got.TotalRate, got.WindowSeconds)
	}
	w := decode[TopK](t, do(t, h, "GET", "/v1/topk?op=write", ""))
	if len(w.Keys) != 1 || w.Keys[0].Key != "likes" {
		t.Errorf("op=write keys %+v; want likes alone", w.Keys)
	}
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/"+url.PathEscape("score:match42"), ""))
	if k.ReadRate != 6000 || !k.Hot {
		t.Errorf("/v1/keys/score:match42: %+v; want read_rate 6000, hot", k)
	}
	if k := decode[Key](t, do(t, h, "GET", "/v1/keys/never:seen", "")); k.Rate != 0 || k.Hot {
		t.Errorf("/v1/keys/never:seen: %+v; want rate 0", k)
	}
}

func TestBadRequests(t *testing.T) {
	_, _, h := newTestAgent(t, Options{})
	tests := []struct {
		method, target, body string
		code                 int
		err                  string
	}{
		{"GET", "/v1/topk?n=0", "", 400, "n: \"0\""},
		{"GET", "/v1/topk?n=x", "", 400, "n: \"x\""},
		{"GET", "/v1/topk?op=delete", "", 400, "op: \"delete\""},
		{"POST", "/v1/samples", `{"source":"a","samples":[{"key":"k","op":"zap"}]}`, 400, "samples[0].op"},
		{"POST", "/v1/samples", `{"source":"a","sample_rate":2,"samples":[]}`, 400, "sample_rate"},
		{"POST", "/v1/samples", `not json`, 400, ""},
	}
	for _, tt := range tests {
		w := do(t, h, tt.method, tt.target, tt.body)
		e := decode[map[string]string](t, w)
		if w.Code != tt.code || !strings.Contains(e["error"], tt.err) {
			t.Errorf("%s %s: %d %q; want %d with an error containing %q", tt.method, tt.target, w.Code, e["error"], tt.code, tt.err)
		}
	}
}

func TestAuth(t *testing.T) {
	_, _, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	body := `{"source":"a","samples":[{"key":"k","op":"read"}]}`
	// Each 401 says which of the two is wrong: no bearer token, or not the agent's.
	if w := do(t, h, "POST", "/v1/samples", body); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "needs the header") {
		t.Errorf("no token: %d %s; want 401 naming the header", w.Code, w.Body)
	}
	if w := do(t, h, "POST", "/v1/samples", body, "Authorization", "Bearer wrong"); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "is not the agent's auth.token") {
		t.Errorf("wrong token: %d %s; want 401 saying the token does not match", w.Code, w.Body)
	}
	if w := do(t, h, "POST", "/v1/samples", body, "Authorization", "Bearer s3cret"); w.Code != http.StatusAccepted {
		t.Errorf("right token: %d; want 202", w.Code)
	}
	if w := do(t, h, "GET", "/v1/topk", ""); w.Code != http.StatusOK {
		t.Errorf("GET without a token: %d; want 200", w.Code)
	}
}

func TestTruncateAndHash(t *testing.T) {
	// KeyMinRatio -1: every ranked key has per-key series, this one at 2/s too.
	a, c, h := newTestAgent(t, Options{MaxKeyBytes: 8, HashKeys: true, KeyMinRatio: -1})
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{{Key: []byte("averyveryverylongkey"), Op: sampler.OpRead}}})
	c.add(time.Second / 2)
	a.evaluate()
	got := decode[TopK](t, do(t, h, "GET", "/v1/topk", ""))
	if len(got.Keys) != 1 || !got.Keys[0].Truncated {
		t.Fatalf("keys %+v; want one, truncated", got.Keys)
	}
	if name := got.Keys[0].Key; !strings.HasPrefix(name, "h:") || strings.Contains(name, "avery") {
		t.Errorf("key shown as %q; want a hash", name)
	}
	if r, _ := a.det.Estimate([]byte("averyver")); r != 1 {
		t.Errorf("truncated key counted %d times; want 1", r)
	}
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/"+got.Keys[0].Key, ""))
	if k.Rate != 2 {
		t.Errorf("/v1/keys/<hash>: rate %v; want 2 (one read in 0.5 s)", k.Rate)
	}
	body := do(t, h, "GET", "/metrics", "").Body.String()
	if strings.Contains(body, "avery") || !strings.Contains(body, got.Keys[0].Key) {
		t.Errorf("/metrics shows the key name, or not its hash")
	}
}

// TestDetectionDelay: a key that jumps from nothing to 10× the threshold is flagged within
// a few ticks of simulated time, and the delay is recorded.
func TestDetectionDelay(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	feed(a, c, "background", 500, 3*time.Second)
	jump := c.now()
	var flagged time.Time
	for i := 0; i < 100 && flagged.IsZero(); i++ {
		feed(a, c, "flash:sku", 10_000, 10*time.Millisecond)
		got := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=1", ""))
		if len(got.Keys) == 1 && got.Keys[0].Key == "flash:sku" && got.Keys[0].Hot {
			flagged = c.now()
		}
	}
	if flagged.IsZero() {
		t.Fatal("flash:sku at 10× the threshold was not flagged within 1 s")
	}
	delay := flagged.Sub(jump)
	t.Logf("flagged %v after the jump (simulated time, 100 ms ticks)", delay)
	if delay > time.Second {
		t.Errorf("flagged after %v; want within 1s", delay)
	}
	if n := testutil.CollectAndCount(a.metrics.delay); n != 1 {
		t.Errorf("delay histogram has %d series; want 1", n)
	}
}

func TestPerKeySeriesFollowTopK(t *testing.T) {
	a, c, h := newTestAgent(t, Options{Detector: detector.Options{K: 2}})
	feed(a, c, "a", 5000, 500*time.Millisecond)
	body := do(t, h, "GET", "/metrics", "").Body.String()
	if !strings.Contains(body, `hotkeyd_key_rate{key="a",op="read"}`) {
		t.Fatalf("no series for key a:\n%s", body)
	}
	// a goes quiet; after the window passes it leaves the top-k and its series go.
	feed(a, c, "b", 1000, 2*time.Second)
	body = do(t, h, "GET", "/metrics", "").Body.String()
	if strings.Contains(body, `key="a"`) {
		t.Errorf("series for key a remain after it left the top-k")
	}
	if !strings.Contains(body, `key="b"`) {
		t.Errorf("no series for key b")
	}
}

func TestSourcesLabelBounded(t *testing.T) {
	a, _, _ := newTestAgent(t, Options{})
	for i := 0; i < 200; i++ {
		a.Accept(sampler.Batch{Source: fmt.Sprint("src-", i), Rate: 1, Samples: []sampler.Sample{{Key: []byte("k"), Op: sampler.OpRead}}})
	}
	if n := testutil.CollectAndCount(a.metrics.samples); n > maxSources+1 {
		t.Errorf("%d source series; want at most %d", n, maxSources+1)
	}
	if got := testutil.ToFloat64(a.metrics.samples.WithLabelValues("other")); got != 200-maxSources {
		t.Errorf("other: %v samples; want %d", got, 200-maxSources)
	}
}

func TestWeight(t *testing.T) {
	if w := weight(3, 1); w != 3 {
		t.Errorf("weight(3, 1) = %d; want 3", w)
	}
	if w := weight(0, 100); w != 100 {
		t.Errorf("weight(0, 100) = %d; want 100 (count 0 is 1)", w)
	}
	var sum uint64
	for i := 0; i < 100_000; i++ {
		sum += uint64(weight(1, 1/0.3))
	}
	if mean := float64(sum) / 100_000; mean < 3.31 || mean > 3.36 {
		t.Errorf("mean weight at rate 0.3: %v; want 3.33 (unbiased rounding)", mean)
	}
}

// TestRunUDPAndShutdown runs a real agent on loopback: a UDP report is counted, the API
// answers, and cancelling the context stops everything and leaves no goroutine behind.
func TestRunUDPAndShutdown(t *testing.T) {
	before := runtime.NumGoroutine()
	a, err := New(Options{HTTPListen: "127.0.0.1:0", UDPListen: "127.0.0.1:0", UDPReaders: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	base := "http://" + a.HTTPAddr().String()
	waitFor(t, func() bool {
		r, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})

	conn, err := net.Dial("udp", a.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dgram, err := sampler.AppendReport(nil, sampler.Batch{Source: "udp-test", Rate: 0.5, Samples: []sampler.Sample{{Key: []byte("via:udp"), Op: sampler.OpWrite, Counter: true}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		conn.Write(dgram)
		r, _ := a.det.Estimate([]byte("via:udp"))
		_, w := a.det.Estimate([]byte("via:udp"))
		return r == 0 && w >= 2
	})
	resp, err := http.Get(base + "/v1/topk?op=write")
	if err != nil {
		t.Fatal(err)
	}
	var got TopK
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if len(got.Keys) == 0 || got.Keys[0].Key != "via:udp" || !got.Keys[0].Counter {
		t.Errorf("write top-k %+v; want via:udp marked counter", got.Keys)
	}
	resp, _ = http.Get(base + "/healthz")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz: %d; want 200", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v; want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10 s after cancel")
	}
	http.DefaultClient.CloseIdleConnections()
	leaktest.Wait(t, before)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAcceptAllocs(t *testing.T) {
	a, _, _ := newTestAgent(t, Options{})
	samples := make([]sampler.Sample, 50)
	for i := range samples {
		samples[i] = sampler.Sample{Key: []byte(fmt.Sprintf("key:%d", i)), Op: sampler.OpRead, Count: 1}
	}
	b := sampler.Batch{Source: "app", Rate: 0.01, Samples: samples}
	a.Accept(b) // warm the pool, the source counter and the rankings
	if n := testing.AllocsPerRun(100, func() { a.Accept(b) }); n > 0 {
		t.Errorf("Accept of 50 samples: %v allocations; want 0", n)
	}
}

// TestKeyHistory: /v1/keys/{key} carries one point a second while the key is ranked.
func TestKeyHistory(t *testing.T) {
	a, c, h := newTestAgent(t, Options{History: 3})
	feed(a, c, "score:match42", 5000, 5*time.Second)
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/score:match42", ""))
	if len(k.History) != 3 {
		t.Fatalf("history %+v; want the last 3 seconds", k.History)
	}
	for i, p := range k.History {
		if i > 0 && p.At.Sub(k.History[i-1].At) != time.Second {
			t.Errorf("points %v and %v are not a second apart", k.History[i-1].At, p.At)
		}
		if p.ReadRate < 4000 || !p.Hot {
			t.Errorf("point %+v; want about 5,000 reads/s, hot", p)
		}
	}
}

// TestShutdownEndsPlanWaits: SDK clients hold GET /v1/plan?wait= open all the time. A
// stopping agent answers them at once (304, no newer plan), so the HTTP server's shutdown
// does not wait out its time limit and warn.
func TestShutdownEndsPlanWaits(t *testing.T) {
	var logs logbuf.Buffer
	a, err := New(Options{HTTPListen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// Signalled from the handler, not from the connection's state: net/http drops a
	// request it has read once Shutdown has begun, without an answer, so "active" alone
	// would let the test stop the agent before the request was taken.
	active := make(chan struct{}, 1)
	h := a.http.Handler
	a.http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case active <- struct{}{}:
		default:
		}
		h.ServeHTTP(w, r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	version := a.store.Current().Version
	status := make(chan int, 1)
	go func() {
		r, err := http.Get(fmt.Sprintf("http://%s/v1/plan?after=%d&wait=60s", a.HTTPAddr(), version))
		if err != nil {
			t.Errorf("the waiting plan request: %v", err)
			status <- 0
			return
		}
		r.Body.Close()
		status <- r.StatusCode
	}()
	<-active // the request is being served: waiting for a newer plan
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v; want nil", err)
	}
	if s := <-status; s != http.StatusNotModified {
		t.Errorf("the waiting plan request: status %d; want 304", s)
	}
	if strings.Contains(logs.String(), "http shutdown") {
		t.Errorf("the shutdown waited for the plan request:\n%s", logs.String())
	}
}

// TestKeyHistoryClockStepsBack: the clock steps back a minute. History points are one a
// second of the agent's running, so they keep coming on the new clock rather than stopping
// until the clock is back where it was.
func TestKeyHistoryClockStepsBack(t *testing.T) {
	a, c, h := newTestAgent(t, Options{History: 10})
	feed(a, c, "score:match42", 5000, 3*time.Second)
	c.add(-time.Minute)
	feed(a, c, "score:match42", 5000, 3*time.Second)
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/score:match42", ""))
	want := c.now().Truncate(time.Second) // the second of the last evaluation
	if last := k.History[len(k.History)-1]; !last.At.Equal(want) {
		t.Fatalf("last point at %v (%d points); want one at %v", last.At, len(k.History), want)
	}
}

// TestSenderTruncatedKey: a key its sender cut (op bit 3, as the SDK does for keys too long
// for a datagram) is shown truncated even when it fits the agent's own limit, and the
// datagram decodes into the agent as any other.
func TestSenderTruncatedKey(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	data, err := sampler.AppendReport(nil, sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{
		{Key: []byte("cut:abc"), Op: sampler.OpRead, Truncated: true},
		{Key: []byte("whole"), Op: sampler.OpRead},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b sampler.Batch
	if _, err := sampler.DecodeReport(&b, data); err != nil {
		t.Fatal(err)
	}
	a.Accept(b)
	c.add(time.Second / 2)
	a.evaluate()
	for key, want := range map[string]bool{"cut:abc": true, "whole": false} {
		k := decode[Key](t, do(t, h, "GET", "/v1/keys/"+key, ""))
		if k.Truncated != want {
			t.Errorf("/v1/keys/%s: truncated %v; want %v", key, k.Truncated, want)
		}
	}
}
