package agent

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/registry"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// timedStore is a registry store that records when each Version call began and, once
// it has, when it ended (zero while it runs).
type timedStore struct {
	registry.Store
	mu    sync.Mutex
	calls [][2]time.Time
}

func (s *timedStore) Version(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	i := len(s.calls)
	s.calls = append(s.calls, [2]time.Time{time.Now()})
	s.mu.Unlock()
	v, err := s.Store.Version(ctx)
	s.mu.Lock()
	s.calls[i][1] = time.Now()
	s.mu.Unlock()
	return v, err
}

// during reports whether t falls strictly inside one of the Version calls, ended or
// still running.
func (s *timedStore) during(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if c[0].Before(t) && (c[1].IsZero() || t.Before(c[1])) {
			return true
		}
	}
	return false
}

// TestRegistryReadsDoNotHoldTicks: with the registry in Redis (every agent of a fleet),
// a Redis that hangs — the node may be the very one a hot key overloads — must not hold
// up the evaluation loop: detection goes on while the registry is read. The test pauses
// Redis (SIGSTOP), so that each registry read waits for its timeout, and wants an
// evaluation published while a read is under way, which cannot happen if the loop
// itself waits for the read.
func TestRegistryReadsDoNotHoldTicks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	rs, err := registry.NewRedis(rdb, registry.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &timedStore{Store: rs}
	a := runAgent(t, Options{Events: store})

	srv.Pause(t)
	defer srv.Resume(t)
	deadline := time.Now().Add(10 * time.Second)
	seen := 0
	var last time.Time
	for ; time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		at := a.view.Load().at
		if at.Equal(last) {
			continue
		}
		last = at
		seen++
		if store.during(at) {
			return // an evaluation while a registry read waited on the paused Redis
		}
	}
	t.Fatalf("no evaluation published during a registry read of the paused Redis in 10 s (%d evaluations in all): the evaluation loop waits for the registry", seen)
}

// TestRegistryReadCutByStopNotWarned: a registry read that the agent's stop cuts short is
// not a failing store; it logged "registry: reading the version; keeping the events
// armed…" as a warning at one stop in six in a soak.
func TestRegistryReadCutByStopNotWarned(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rs, err := registry.NewRedis(rdb, registry.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	a, c, _ := newTestAgent(t, Options{Events: rs})
	a.log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the stop, as the read begins
	c.add(2 * time.Second)
	a.refreshIndex(ctx, c.now())
	if s := logs.String(); strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR") {
		t.Errorf("a read cut short by the stop was logged as a failure:\n%s", s)
	}
	// A store that fails while the agent runs is still reported.
	srv.Stop()
	c.add(2 * time.Second)
	a.refreshIndex(context.Background(), c.now())
	if s := logs.String(); !strings.Contains(s, "registry: reading the version") {
		t.Errorf("a failing store was not reported:\n%s", s)
	}
}

// slowList is a registry store whose first List takes delay: a Redis store read at start
// while Redis is busy.
type slowList struct {
	registry.Store
	delay time.Duration
	once  sync.Once
}

func (s *slowList) List(ctx context.Context) ([]registry.Event, error) {
	s.once.Do(func() { time.Sleep(s.delay) })
	return s.Store.List(ctx)
}

// TestRegistryLoadedBeforeFirstPlan: an agent that starts while a key an event lists
// mitigations for is already hot plans the event's kinds only. The first evaluation ran
// before the registry's first read had ended, and the table's choice for the key (here,
// batching the write-hot counter that the event arms L1 for instead) went into the plan
// and stayed for min_active: a minute of what the operator had left out on purpose.
func TestRegistryLoadedBeforeFirstPlan(t *testing.T) {
	ctx := context.Background()
	mem := registry.NewMemory(registry.MemoryOptions{})
	now := time.Now()
	if _, err := mem.Create(ctx, registry.Event{ID: "ev", Patterns: []string{"ev:ctr"},
		Start: now.Add(-time.Minute), End: now.Add(time.Hour), Mitigations: []string{"l1"}}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{HTTPListen: "127.0.0.1:0", UDPListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		Events: &slowList{Store: mem, delay: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	feedCounter := func() {
		s := sampler.Sample{Key: []byte("ev:ctr"), Op: sampler.OpWrite, Counter: true}
		a.Accept(sampler.Batch{Source: "t", Rate: 0.01, FollowsPlan: true, Samples: slices.Repeat([]sampler.Sample{s}, 20)})
	}
	feedCounter() // hot from the first tick
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	kinds := func() []mitigate.Kind {
		var ks []mitigate.Kind
		for _, e := range a.planner.Active() {
			if e.Key == "ev:ctr" {
				ks = append(ks, e.Kind)
			}
		}
		return ks
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(kinds(), mitigate.L1) {
		if time.Now().After(deadline) {
			t.Fatalf("no L1 for ev:ctr in 10 s; the plan has %v for it", kinds())
		}
		feedCounter()
		time.Sleep(50 * time.Millisecond)
	}
	if got := kinds(); !slices.Equal(got, []mitigate.Kind{mitigate.L1}) {
		t.Errorf("the plan has %v for ev:ctr; want only what its event lists, [l1]", got)
	}
}
