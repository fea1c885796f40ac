package mitigate

import (
	"context"
	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// backend is a real Redis to run the executor suite against.
type backend struct {
	rdb   Redis
	topo  *Topology
	addrs []string // every primary
}

func startStandalone(t *testing.T) backend {
	t.Helper()
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return backend{rdb: c, topo: StandaloneTopology(s.Addr()), addrs: []string{s.Addr()}}
}

func startCluster(t *testing.T) backend {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topo, err := NewTopology(ctx, TopologyOptions{Seeds: cl.Addrs()})
	if err != nil {
		t.Fatalf("NewTopology: %v", err)
	}
	t.Cleanup(func() { _ = topo.Close() })
	if got := topo.Primaries(); got != 3 {
		t.Fatalf("primaries: got %d; want 3", got)
	}
	return backend{rdb: c, topo: topo, addrs: cl.Addrs()}
}

// names returns n names for key, checking that in a cluster they lie on different primaries.
func (b backend) names(t *testing.T, key string, n int, kind Kind) []Node {
	t.Helper()
	nodes, err := b.topo.Names(key, n, kind)
	if err != nil {
		t.Fatalf("Names(%q, %d, %s): %v", key, n, kind, err)
	}
	if b.topo.IsCluster() && n <= b.topo.Primaries() {
		seen := map[string]bool{}
		for _, nd := range nodes {
			if seen[nd.Primary] {
				t.Fatalf("Names(%q): two names on primary %s: %v", key, nd.Primary, nodes)
			}
			seen[nd.Primary] = true
		}
	}
	return nodes
}

// keys SCANs every primary directly for pattern.
func (b backend) keys(t *testing.T, pattern string) []string {
	t.Helper()
	var out []string
	for _, a := range b.addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		iter := c.Scan(context.Background(), 0, pattern, 1000).Iterator()
		for iter.Next(context.Background()) {
			out = append(out, iter.Val())
		}
		err := iter.Err()
		_ = c.Close()
		if err != nil {
			t.Fatalf("SCAN %s on %s: %v", pattern, a, err)
		}
	}
	slices.Sort(out)
	return out
}

// noneLeft fails t when any key hotkeyd creates for copies or sub-counters, or a stash,
// is left on any primary.
func (b backend) noneLeft(t *testing.T, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if got := b.keys(t, p); len(got) > 0 {
			t.Errorf("keys matching %q left: %q; want none", p, got)
		}
	}
}

// entry makes a plan entry of kind for key with nodes.
func execEntry(key string, kind Kind, mode Mode, nodes []Node) Entry {
	e := Entry{Key: key, Kind: kind, Mode: mode, Reason: "test", Since: time.Unix(1, 0), Expires: time.Unix(100, 0)}
	switch kind {
	case Copies:
		e.Copies = nodes
	case ShardedCounter:
		e.SubCounters = nodes
	}
	return e
}

func execPlan(entries ...Entry) Plan {
	return Plan{Version: 1, Generated: time.Now(), Primaries: 1, Entries: entries}
}

type testExec struct {
	*Executor
	reg *prometheus.Registry
}

func newTestExecutor(t *testing.T, b backend, refresh, grace time.Duration) testExec {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, err := NewExecutor(ExecutorOptions{Redis: b.rdb, RefreshPeriod: refresh, GracePeriod: grace, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatalf("NewExecutor: %v", err)
	}
	return testExec{e, reg}
}

// count returns hotkeyd_mitigation_actions_total{kind,action}.
func (e testExec) count(kind Kind, action string) float64 {
	return testutil.ToFloat64(e.actions.WithLabelValues(string(kind), action))
}

// run starts Run and returns a function that closes the executor and waits for Run.
func (e testExec) run(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	return func() {
		t.Helper()
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		if err := e.Close(cctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: got %v; want nil after Close", err)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// eventually polls cond every 20ms until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecutorStandalone(t *testing.T) {
	t.Parallel()
	runSuite(t, startStandalone(t))
}

func TestExecutorCluster(t *testing.T) {
	t.Parallel()
	runSuite(t, startCluster(t))
}

// runSuite runs every executor test against one backend, one after the other (Recover
// scans the whole backend). Each test's executors are a fleet of their own: the fleet's
// locks on the scans that the executors of the tests before took are freed first.
func runSuite(t *testing.T, b backend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, backend)
	}{
		{"CopiesTypesAndTTL", testCopiesTypesAndTTL},
		{"CopiesRefresh", testCopiesRefresh},
		{"CopiesEnd", testCopiesEnd},
		{"CounterExact", testCounterExact},
		{"CounterCrash", testCounterCrash},
		{"CloseLeavesNothing", testCloseLeavesNothing},
		{"RecoverLateLeftovers", testRecoverLateLeftovers},
		{"FoldStuckOnActive", testFoldStuckOnActive},
		{"ReadAcrossGenExpiry", testReadAcrossGenExpiry},
		{"ListedSubCounters", testListedSubCounters},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newFleet(t, b)
			tc.fn(t, b)
		})
	}
}

// newFleet frees the fleet's locks on the scans (RecoverKey, SweepKey) on b: the next
// executors scan as if no other executor had.
func newFleet(t *testing.T, b backend) {
	t.Helper()
	mustDo(t, b.rdb, "DEL", RecoverKey)
	mustDo(t, b.rdb, "DEL", SweepKey)
}

// testCloseLeavesNothing: with copies and a sharded counter active and a Run going, Close
// deletes every copy and folds every sub-counter.
func testCloseLeavesNothing(t *testing.T, b backend) {
	ctx := context.Background()
	e := newTestExecutor(t, b, 50*time.Millisecond, time.Minute)
	if err := b.rdb.Do(ctx, "SET", "close:page", "v").Err(); err != nil {
		t.Fatal(err)
	}
	subs := b.names(t, "close:likes", 2, ShardedCounter)
	p := execPlan(execEntry("close:page", Copies, Enforce, b.names(t, "close:page", 2, Copies)),
		execEntry("close:likes", ShardedCounter, Enforce, subs))
	e.Offer(p)
	stop := e.run(t)
	eventually(t, "copies written", func() bool { return len(b.keys(t, "{hk:copy*close:page")) == 2 })
	for i := range 10 {
		if err := IncrCounter(ctx, b.rdb, "close:likes", subs, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	b.noneLeft(t, "{hk:copy*", "{hk:sub*", "{hk:t*}stash:*")
	if got, err := b.rdb.Do(ctx, "GET", "close:likes").Int64(); err != nil || got != 45 {
		t.Errorf("close:likes after Close: got %d, %v; want 45", got, err)
	}
	if err := e.Apply(ctx, p); err == nil {
		t.Errorf("Apply after Close: got nil; want an error")
	}
	if problems, err := testutil.GatherAndLint(e.reg); err != nil || len(problems) > 0 {
		t.Errorf("metrics lint: %v %v; want no problems", problems, err)
	}
}

func TestNewExecutorOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name string
		o    ExecutorOptions
		want string // error substring; "" for none
	}{
		{"zero but redis", ExecutorOptions{Redis: c}, ""},
		{"no redis", ExecutorOptions{}, "no Redis client"},
		{"negative refresh", ExecutorOptions{Redis: c, RefreshPeriod: -1}, "refresh period"},
		{"negative grace", ExecutorOptions{Redis: c, GracePeriod: -1}, "grace period"},
		{"negative rescan", ExecutorOptions{Redis: c, RescanPeriod: -1}, "rescan period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewExecutor(tc.o)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v; want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			case tc.want == "" && (e.refresh != DefaultRefreshPeriod || e.grace != DefaultLease):
				t.Fatalf("defaults: got refresh %v grace %v; want %v %v", e.refresh, e.grace, DefaultRefreshPeriod, DefaultLease)
			}
		})
	}
	reg := prometheus.NewRegistry()
	if _, err := NewExecutor(ExecutorOptions{Redis: c, Registry: reg}); err != nil {
		t.Fatal(err)
	}
	// Every series exists at 0 from the start, so that rate() and increase() see the first
	// action (a counter that appears at 1 reads as no increase).
	if n, err := testutil.GatherAndCount(reg, "hotkeyd_mitigation_actions_total"); err != nil || n != 10 {
		t.Errorf("%d series of hotkeyd_mitigation_actions_total before any action (%v); want 10", n, err)
	}
	if _, err := NewExecutor(ExecutorOptions{Redis: c, Registry: reg}); err == nil {
		t.Errorf("second executor on one registry: got nil; want a registration error")
	}
}

// TestExecutorNoLeak: Run and Close leave no goroutine behind.
func TestExecutorNoLeak(t *testing.T) {
	b := startStandalone(t)
	ctx := context.Background()
	if err := b.rdb.Do(ctx, "SET", "leak:k", "v").Err(); err != nil { // warm the pool
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	e := newTestExecutor(t, b, 20*time.Millisecond, 50*time.Millisecond)
	e.Offer(execPlan(execEntry("leak:k", Copies, Enforce, b.names(t, "leak:k", 2, Copies))))
	stop := e.run(t)
	eventually(t, "copies written", func() bool { return e.count(Copies, ActionCopyRefresh) >= 4 })
	if _, err := ReadCounter(ctx, b.rdb, "leak:c", b.names(t, "leak:c", 3, ShardedCounter)); err != nil {
		t.Fatal(err)
	}
	stop()
	leaktest.Wait(t, before)
	b.noneLeft(t, "{hk:copy*")
}
