package client

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// waitLog waits up to d for buf to contain want, and reports whether it did.
func waitLog(buf *logbuf.Buffer, want string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestAttachDefaultLoggerReview: an app that copies the README's three lines (no
// Options.Logger) must see the SDK's warnings in its default log, not lose them.
func TestAttachDefaultLoggerReview(t *testing.T) {
	var buf logbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	srv := redistest.Start(t)
	ps := startPlanServer(t)
	ps.fail(http.StatusServiceUnavailable, []byte(`{"error":"planner not ready"}`))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, err := Attach(rdb, Options{Agent: ps.URL(), NoReports: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !waitLog(&buf, "fetching the plan failed", 3*time.Second) {
		t.Fatalf("default log after a failed plan fetch: %q; want a line saying fetching the plan failed", buf.String())
	}
}

// TestAttachTwiceReview: a second Attach to an rdb that already has a live Client would
// report every command twice, keep two L1s and mirror writes twice; it is refused until
// the first Client is closed.
func TestAttachTwiceReview(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c1, err := Attach(rdb, Options{Agent: ps.URL(), NoReports: true})
	if err != nil {
		t.Fatal(err)
	}
	// c1's goroutines (its long-poll's connection among them) are up before the count.
	waitFor(t, func() bool { return ps.waitingPolls() > 0 })
	base := runtime.NumGoroutine()
	c2, err := Attach(rdb, Options{Agent: ps.URL()})
	if err == nil {
		c2.Close()
		t.Fatal("second Attach to the same rdb succeeded; want an error")
	}
	if !strings.Contains(err.Error(), "already") {
		t.Errorf("second Attach = %q; want it to say rdb already has a Client", err)
	}
	leaktest.Wait(t, base)
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	c3, err := Attach(rdb, Options{Agent: ps.URL(), NoReports: true})
	if err != nil {
		t.Fatalf("Attach after Close = %v; want nil", err)
	}
	c3.Close()
	// Another rdb to the same server is another client: allowed.
	rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb2.Close()
	c4, err := Attach(rdb2, Options{Agent: ps.URL(), NoReports: true})
	if err != nil {
		t.Fatalf("Attach to a second rdb = %v; want nil", err)
	}
	c4.Close()
}

// TestAttachNilReview: a typed nil rdb is refused before anything starts (it panicked
// after starting the Reporter's goroutine), and Close of a nil or zero Client does not
// panic.
func TestAttachNilReview(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, rdb := range []redis.UniversalClient{nil, (*redis.Client)(nil), (*redis.ClusterClient)(nil)} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Attach(%T(nil)) panicked: %v", rdb, r)
				}
			}()
			c, err := Attach(rdb, Options{})
			if err == nil || !strings.Contains(err.Error(), "nil") {
				t.Errorf("Attach(%T(nil)) = %v, %v; want an error saying rdb is nil", rdb, c, err)
			}
		}()
	}
	leaktest.Wait(t, base)
	for name, c := range map[string]*Client{"nil": nil, "zero": {}} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Close of a %s Client panicked: %v", name, r)
				}
			}()
			if err := c.Close(); err != nil {
				t.Errorf("Close of a %s Client = %v; want nil", name, err)
			}
		}()
	}
}

// TestAttachRingReview: Attach supports *redis.Client and *redis.ClusterClient; a Ring
// (whose Watch runs on a shard's client, past the Ring's hooks, and whose shards the
// agent's plan knows nothing of) is refused with an error naming the supported types.
func TestAttachRingReview(t *testing.T) {
	srv := redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	defer ring.Close()
	base := runtime.NumGoroutine()
	c, err := Attach(ring, Options{})
	if err == nil {
		c.Close()
		t.Fatal("Attach(*redis.Ring) succeeded; want an error")
	}
	if !strings.Contains(err.Error(), "*redis.Client or *redis.ClusterClient") || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("Attach(*redis.Ring) = %q; want it to name the Ring and the supported types", err)
	}
	leaktest.Wait(t, base)
}

// TestGetLoadTimeoutReview: LoadTimeout bounds the wait of Get's callers even when the
// load ignores its context; the load goes on in the background and its value is cached.
func TestGetLoadTimeoutReview(t *testing.T) {
	base := runtime.NumGoroutine()
	c, err := NewCache(CacheOptions{LoadTimeout: 100 * time.Millisecond, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	time.AfterFunc(3*time.Second, free) // so that the test ends when Get waits for the load
	load := func(context.Context) ([]byte, error) {
		<-release // ignores its context
		return []byte("v"), nil
	}
	start := time.Now()
	_, err = c.Get(context.Background(), "k", load)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "LoadTimeout") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with a load that ignores its context = %v; want an error naming LoadTimeout, wrapping context.DeadlineExceeded", err)
	}
	if took > time.Second {
		t.Errorf("Get returned after %v; want about LoadTimeout (100ms)", took)
	}
	free()
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Entries == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	v, err := c.Get(context.Background(), "k", func(context.Context) ([]byte, error) {
		t.Error("load called again; want the late value cached")
		return nil, nil
	})
	if err != nil || string(v) != "v" {
		t.Errorf("Get after the late load = %q, %v; want v, nil", v, err)
	}
	c.Close()
	leaktest.Wait(t, base)
}

// TestGetNilLoadReview: Get with a nil load says so.
func TestGetNilLoadReview(t *testing.T) {
	c, err := NewCache(CacheOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(context.Background(), "k", nil)
	if err == nil || !strings.Contains(err.Error(), "load is nil") {
		t.Errorf("Get(ctx, k, nil) = %v; want an error saying load is nil", err)
	}
}

// TestPlanLeasesRunOutLoggedReview: when the held plan's leases run out the app is
// unmitigated; that is logged once at Warn, and taking a plan again once at Info.
func TestPlanLeasesRunOutLoggedReview(t *testing.T) {
	var buf logbuf.Buffer
	ps := startPlanServer(t)
	f := &follower{url: ps.URL() + "/v1/plan", wait: time.Second, http: &http.Client{Timeout: 5 * time.Second},
		now: time.Now, log: slog.New(slog.NewTextHandler(&buf, nil)), min: 100 * time.Millisecond, max: 200 * time.Millisecond}
	ps.publish(l1Entry("k", time.Second, 500*time.Millisecond))
	runFollower(t, f)
	ps.fail(http.StatusServiceUnavailable, nil)
	if !waitLog(&buf, "leases have run out", 3*time.Second) {
		t.Fatalf("log after the leases ran out: %q; want a line saying the leases have run out", buf.String())
	}
	time.Sleep(500 * time.Millisecond)
	if n := strings.Count(buf.String(), "leases have run out"); n != 1 {
		t.Errorf("%d lines saying the leases have run out; want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "level=WARN msg=\"hotkeyd: the plan's leases have run out") {
		t.Errorf("log: %q; want the lapse at WARN", buf.String())
	}
	ps.fail(0, nil)
	ps.publish(l1Entry("k", time.Second, time.Minute))
	if !waitLog(&buf, "level=INFO", 3*time.Second) {
		t.Fatalf("log after a plan came again: %q; want an INFO line", buf.String())
	}
}

// TestPlanRetryBeforeLeasesEndReview: the backoff never sleeps past the held plan's
// leases, so an agent back before they end renews them before the app is unmitigated.
func TestPlanRetryBeforeLeasesEndReview(t *testing.T) {
	var buf logbuf.Buffer
	ps := startPlanServer(t)
	// Retries at 0.5, 1.5, 3.5, 7.5 s after the first failure with this backoff; the
	// leases end 5 s after the plan came and the agent is back after 4 s.
	f := &follower{url: ps.URL() + "/v1/plan", wait: time.Second, http: &http.Client{Timeout: 5 * time.Second},
		now: time.Now, log: slog.New(slog.NewTextHandler(&buf, nil)), min: 500 * time.Millisecond, max: 30 * time.Second}
	ps.publish(l1Entry("k", time.Second, 5*time.Second))
	runFollower(t, f)
	taken := time.Now()
	ps.fail(http.StatusServiceUnavailable, nil)
	time.Sleep(4 * time.Second)
	ps.mu.Lock()
	ps.status = 0
	ps.plan = mitigate.Plan{Version: ps.plan.Version + 1, Generated: planNow, Primaries: 3,
		Entries: []mitigate.Entry{l1Entry("k", time.Second, time.Minute)}}
	ps.wakeLocked()
	ps.mu.Unlock()
	for f.updates.Load() < 2 && time.Since(taken) < 10*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(taken); f.updates.Load() < 2 || d > 5*time.Second {
		t.Errorf("the renewed plan came %v after the last; want before its leases ended (5s)\n%s", d.Round(time.Millisecond), buf.String())
	}
}

// runFollower runs f until the test ends, and returns once it has taken a plan (or 5 s
// have passed).
func runFollower(t *testing.T, f *follower) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(5 * time.Second)
	for f.updates.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}
