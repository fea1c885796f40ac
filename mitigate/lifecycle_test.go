package mitigate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tests of the lifecycle of copies and sub-counters across agent restarts and failures.
// They run in runSuite, on a standalone server and on a 3-primary cluster.

// execClock is a clock tests move by hand.
type execClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

// newExecClock returns a clock at 2026-03-01 00:00 UTC.
func newExecClock() *execClock {
	return &execClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *execClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *execClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newClockedExecutor is an executor on rdb whose grace periods follow clock, closed when
// the test ends.
func newClockedExecutor(t *testing.T, rdb Redis, clock *execClock, grace time.Duration) *Executor {
	t.Helper()
	e := newLoggedExecutor(t, ExecutorOptions{Redis: rdb, GracePeriod: grace, Now: clock.Now}).Executor
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// interposer is a real Redis client with a hook that runs before each command: the tests
// use it to make something happen between two steps of the protocol, or to fail one step.
// The commands themselves go to the real server.
type interposer struct {
	Redis
	before func(ctx context.Context, args []any) error // a non-nil error fails the command unsent
}

func (r interposer) Do(ctx context.Context, args ...any) *redis.Cmd {
	if err := r.before(ctx, args); err != nil {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(err)
		return cmd
	}
	return r.Redis.Do(ctx, args...)
}

// ForEachMaster lets Recover reach every primary of a cluster through an interposer, as
// through the client it wraps; a standalone client is its only master.
func (r interposer) ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error {
	if m, ok := r.Redis.(masters); ok {
		return m.ForEachMaster(ctx, fn)
	}
	return fn(ctx, r.Redis.(*redis.Client))
}

// isScript reports whether args run s (EVALSHA, or EVAL after NOSCRIPT).
func isScript(args []any, s script) bool {
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	return (name == "EVALSHA" && args[1] == s.sha) || (name == "EVAL" && args[1] == s.src)
}

// testRecoverLateLeftovers: a copy and a sub-counter that a client still holding the
// crashed agent's plan writes after the new agent's Recover scanned are deleted and folded
// once the grace period has passed, so none leaks and no increment stays out of the key.
func testRecoverLateLeftovers(t *testing.T, b backend) {
	ctx := context.Background()
	const key, page = "late:likes", "late:page"
	subs := b.names(t, key, 3, ShardedCounter)
	copies := b.names(t, page, 2, Copies)
	clock := newExecClock()
	const grace = time.Minute
	e := newClockedExecutor(t, b.rdb, clock, grace)
	// The new agent starts with an empty plan and finds nothing to clean up.
	if err := e.Apply(ctx, execPlan()); err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	// A client whose lease on the crashed agent's plan has not run out yet writes a
	// sub-counter and a copy.
	if err := IncrCounter(ctx, b.rdb, key, subs[1:2], 7); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Do(ctx, "SET", copies[0].Name, "stale").Err(); err != nil {
		t.Fatal(err)
	}
	// Its lease runs out; one grace period later every leftover is gone.
	clock.Add(grace)
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != 7 {
		t.Errorf("GET %s one grace period after Recover: got %d, %v; want 7 (the stale writer's increment folded in)", key, got, err)
	}
	b.noneLeft(t, "{hk:copy*", "{hk:sub*", "{hk:t*}stash:*")
	b.rdb.Do(ctx, "DEL", key)
}

// testFoldStuckOnActive: a fold of a sub-counter the plan still uses, interrupted after
// step b (its stash left, its marker set), is completed at the next round, not when the
// entry ends. Otherwise the stash outlives its marker (FoldMemory) under a long-lived
// (pinned) entry, and readers and the final fold count it a second time.
func testFoldStuckOnActive(t *testing.T, b backend) {
	ctx := context.Background()
	const key = "stuck:likes"
	subs := b.names(t, key, 2, ShardedCounter)
	var failOnce sync.Once
	rdb := interposer{Redis: b.rdb, before: func(_ context.Context, args []any) error {
		var err error
		if isScript(args, foldDrop) {
			failOnce.Do(func() { err = errors.New("injected: connection reset during step c") })
		}
		return err
	}}
	clock := newExecClock()
	e := newClockedExecutor(t, rdb, clock, time.Minute)
	if err := e.Apply(ctx, execPlan(execEntry(key, ShardedCounter, Enforce, subs))); err != nil {
		t.Fatal(err)
	}
	// A sub-counter written before the restart; Recover folds it, and step c fails.
	if err := IncrCounter(ctx, b.rdb, key, subs[:1], 5); err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(ctx); err == nil {
		t.Fatalf("Recover: got nil; want the injected error")
	}
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	b.noneLeft(t, "{hk:t*}stash:*")
	// What a stash left behind does once its marker expires (FoldMemory later; here the
	// markers are deleted, as Redis does at expiry).
	for _, m := range b.keys(t, "{hk:t*}done:*") {
		if err := b.rdb.Do(ctx, "DEL", m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := ReadCounter(ctx, b.rdb, key, subs); err != nil || got != 5 {
		t.Errorf("ReadCounter after the fold markers expired: got %d, %v; want 5", got, err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != 5 {
		t.Errorf("GET %s after Close: got %d, %v; want 5", key, got, err)
	}
	b.noneLeft(t, "{hk:sub*", "{hk:t*}stash:*")
	b.rdb.Do(ctx, "DEL", key, genName(key))
}

// testReadAcrossGenExpiry: the fold count of a key expires (FoldMemory after its last
// fold) while a reader is between its two looks at it, and a fold lands right then. The
// count must not come back to the value the reader saw first, or the reader accepts a
// read that counts the fold's value twice (in the sub-counter and in the key).
func testReadAcrossGenExpiry(t *testing.T, b backend) {
	ctx := context.Background()
	const key = "genexp:likes"
	subs := b.names(t, key, 2, ShardedCounter)
	// One fold long ago: the key holds 3 and gen is 1. Then 5 more in a sub-counter.
	if err := IncrCounter(ctx, b.rdb, key, subs[:1], 3); err != nil {
		t.Fatal(err)
	}
	if _, err := foldSub(ctx, b.rdb, key, subs[0].Name); err != nil {
		t.Fatal(err)
	}
	if err := IncrCounter(ctx, b.rdb, key, subs[:1], 5); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	fired := false
	rdb := interposer{Redis: b.rdb, before: func(ctx context.Context, args []any) error {
		if !isScript(args, readBase) {
			return nil
		}
		var err error
		once.Do(func() {
			fired = true
			// Between the reader's look at the sub-counters and its look at the key:
			// gen's TTL runs out (Redis deletes it), and the executor folds the
			// sub-counter.
			if err = b.rdb.Do(ctx, "DEL", genName(key)).Err(); err == nil {
				_, err = foldSub(ctx, b.rdb, key, subs[0].Name)
			}
		})
		return err
	}}
	if got, err := ReadCounter(ctx, rdb, key, subs); err != nil || got != 8 {
		t.Errorf("ReadCounter across gen's expiry and a fold: got %d, %v; want 8", got, err)
	}
	if !fired {
		t.Errorf("ReadCounter never ran readBase: the expiry and the fold were not interposed")
	}
	b.rdb.Do(ctx, "DEL", key, genName(key))
}

// testListedSubCounters: the list of a key's sub-counters lets a reader with no plan read
// the key exactly (ReadListedCounter). A sub-counter stays listed while its entry is on,
// after the entry ended until it has been folded and quiet for the grace period, and
// while a fold of it keeps failing; a list whose sub-counters were folded by an earlier
// run's Close is emptied one grace period after Recover.
func testListedSubCounters(t *testing.T, b backend) {
	ctx := context.Background()
	const key = "listed:likes"
	subs := b.names(t, key, 2, ShardedCounter)
	read := func(when string, want int64) {
		t.Helper()
		if got, err := ReadListedCounter(ctx, b.rdb, key); err != nil || got != want {
			t.Fatalf("ReadListedCounter %s: got %d, %v; want %d", when, got, err, want)
		}
	}
	listed := func(when string, want int) {
		t.Helper()
		if got := len(b.keys(t, listName(key))); got != want {
			t.Fatalf("lists of %s %s: %d; want %d", key, when, got, want)
		}
	}
	read("of a key that does not exist", 0)
	var failFold bool // step a of every fold fails while set
	rdb := interposer{Redis: b.rdb, before: func(_ context.Context, args []any) error {
		if failFold && isScript(args, foldMove) {
			return errors.New("injected: the sub-counter's node is unreachable")
		}
		return nil
	}}
	clock := newExecClock()
	const grace = time.Minute
	e := newClockedExecutor(t, rdb, clock, grace)
	if err := e.Apply(ctx, execPlan(execEntry(key, ShardedCounter, Enforce, subs))); err != nil {
		t.Fatal(err)
	}
	// Writers list a sub-counter, then increment it.
	if err := b.rdb.Do(ctx, "INCRBY", key, 2).Err(); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int64{5, 7} {
		if err := ListSubCounter(ctx, b.rdb, key, subs[i].Name); err != nil {
			t.Fatal(err)
		}
		if err := IncrCounter(ctx, b.rdb, key, subs[i:i+1], n); err != nil {
			t.Fatal(err)
		}
	}
	read("while sharded", 14)

	// The entry ends; the first fold of the sub-counters fails.
	failFold = true
	if err := e.Apply(ctx, execPlan()); err == nil {
		t.Fatal("Apply of a plan without the entry: got nil; want the injected error")
	}
	read("after the entry ended, its folds failing", 14)
	clock.Add(grace)
	if err := e.Refresh(ctx); err == nil {
		t.Fatal("Refresh: got nil; want the injected error")
	}
	listed("one grace period after the end, the folds still failing", 1)
	read("one grace period after the end, the folds still failing", 14)

	// The folds succeed; the sub-counters stay listed until quiet for the grace period.
	failFold = false
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	read("after the fold", 14)
	clock.Add(grace)
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	listed("one grace period after the fold", 0)
	read("with no sub-counter listed", 14)

	// A list left by an earlier run whose Close folded its sub-counters: a new run's
	// Recover empties it one grace period later.
	if err := ListSubCounter(ctx, b.rdb, key, subs[0].Name); err != nil {
		t.Fatal(err)
	}
	e2 := newClockedExecutor(t, b.rdb, clock, grace)
	if err := e2.Apply(ctx, execPlan()); err != nil {
		t.Fatal(err)
	}
	if err := e2.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	listed("right after Recover", 1)
	clock.Add(grace)
	if err := e2.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	listed("one grace period after Recover", 0)
	read("at the end", 14)
	b.noneLeft(t, "{hk:sub*", "{hk:t*}stash:*")
	b.rdb.Do(ctx, "DEL", key, genName(key))
}
