package mitigate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tests of the scans for leftovers in a fleet (one agent per app pod, every agent on one
// cluster): the periodic sweep handles every kind of leftover, not copies only.

// TestSweepFoldsCrashedCounters: executor B enforces a sharded counter, its clients
// increment the sub-counters (listing them first, as writers do), a fold of one of them is
// interrupted after step a (its value in a stash), and B crashes: no Close, and no agent
// of B's pod ever starts again. Executor A, another agent of the fleet that never held
// the entry and started long before (no Recover now), runs its rounds: its periodic scan
// folds the sub-counters and completes the stash, so that a plain GET of the key reads
// the total, and one grace period later the key's list of sub-counters is empty.
func TestSweepFoldsCrashedCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startCluster(t)
	const key, grace = "fleet:sweep:likes", time.Minute
	subs := b.names(t, key, 3, ShardedCounter)
	clock := newExecClock()

	eb := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "crashing-B", GracePeriod: grace, Now: clock.Now})
	if err := eb.Apply(ctx, execPlan(execEntry(key, ShardedCounter, Enforce, subs))); err != nil {
		t.Fatalf("B Apply: %v", err)
	}
	// B's clients: 1 into the key before the split, then 5, 7 and 11 into the sub-counters.
	mustDo(t, b.rdb, "INCRBY", key, 1)
	for i, n := range []int64{5, 7, 11} {
		if err := ListSubCounter(ctx, b.rdb, key, subs[i].Name); err != nil {
			t.Fatal(err)
		}
		mustDo(t, b.rdb, "INCRBY", subs[i].Name, n)
	}
	const total = 1 + 5 + 7 + 11
	// A fold of sub-counter 3 interrupted after step a: its 11 sits in a stash.
	if err := foldMove.run(ctx, b.rdb, []string{subs[2].Name, stashName(subs[2].Name)}, "crashed-fold").Err(); err != nil {
		t.Fatal(err)
	}
	// B crashes now: never closed, never used again. A copy nobody claims tells whether
	// a periodic scan ran at all.
	stray := b.names(t, "fleet:sweep:stray", 1, Copies)
	mustDo(t, b.rdb, "SET", stray[0].Name, "left")

	if got, err := ReadListedCounter(ctx, b.rdb, key); err != nil || got != total {
		t.Fatalf("ReadListedCounter after B's crash: %d, %v; want %d", got, err, total)
	}
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != 1 {
		t.Fatalf("GET %s after B's crash: %d, %v; want 1 (nothing folded yet)", key, got, err)
	}

	// A scans every half grace period (plus up to an eighth); it never held the entry.
	ea := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "sweeper-A", GracePeriod: grace, RescanPeriod: grace / 2, Now: clock.Now})
	defer ea.Close(ctx)
	if err := ea.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	// Three rounds a half grace period apart: the first schedules the sweep, a later one
	// runs it (due within five eighths of a grace period).
	rounds(t, clock, grace/2, 3, nil, ea)
	b.absent(t, "after A's periodic scan", stray)
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != total {
		t.Errorf("GET %s after A's periodic scan: %d, %v; want %d (every sub-counter and the stash folded)", key, got, err, total)
	}
	b.noneLeft(t, "{hk:sub*", "{hk:t*}stash:*")
	if got := ea.count(ShardedCounter, ActionCounterRecover); got != 1 {
		t.Errorf("A counter_recover: %v; want 1 (the stash)", got)
	}
	if got, err := ReadListedCounter(ctx, b.rdb, key); err != nil || got != total {
		t.Errorf("ReadListedCounter after A's periodic scan: %d, %v; want %d", got, err, total)
	}
	// The sub-counters drain in A for one grace period, then leave the list.
	rounds(t, clock, grace/2, 3, nil, ea)
	b.noneLeft(t, "{hk:t*}subs:*")
	if got, err := ReadListedCounter(ctx, b.rdb, key); err != nil || got != total {
		t.Errorf("ReadListedCounter after the sub-counters left the list: %d, %v; want %d", got, err, total)
	}
}

// recoverLockKey, spelled out: operators write ACLs for it.
const recoverLockKey = "{hotkeyd}recover"

// logSays reports how many lines of e's log contain s.
func logSays(e claimsExec, s string) int { return strings.Count(e.log.String(), s) }

// TestRecoverFleetOneScan: five agents of a fleet start at about the same time (a rolling
// deploy, a scale-up): their Recovers scan the keyspace about once between them, not once
// each, and so do their rescans one grace period later; the one scan still deletes the
// copy nobody claims. Counted in SCAN calls (INFO commandstats).
func TestRecoverFleetOneScan(t *testing.T) {
	t.Parallel()
	if RecoverKey != recoverLockKey {
		t.Fatalf("RecoverKey = %q; want %q", RecoverKey, recoverLockKey)
	}
	ctx := context.Background()
	b := startStandalone(t)
	const unrelated = 5000
	fillUnrelated(t, b, unrelated)
	stray := b.names(t, "fleet:one:stray", 1, Copies)
	mustDo(t, b.rdb, "SET", stray[0].Name, "left by a crashed agent")
	// A grace period far longer than the test: the lock taken by the first scan is held
	// throughout, on Redis's clock; the executors' clock only decides when rescans are due.
	const n, grace = 5, time.Minute
	clock := newExecClock()
	execs := make([]claimsExec, n)
	for i := range execs {
		execs[i] = newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: fmt.Sprintf("pod-%d", i), GracePeriod: grace, Now: clock.Now})
		defer execs[i].Close(ctx)
		if err := execs[i].Apply(ctx, execPlan()); err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
	}
	pass := (unrelated + 999) / 1000
	scanned := func(what string, passes int) {
		t.Helper()
		calls := scanCalls(t, b)
		t.Logf("%s: %d SCAN calls over %d keys (one pass of COUNT 1000: about %d)", what, calls, unrelated+1, pass)
		if limit := passes*pass*3/2 + 2; calls > limit {
			t.Errorf("%s: %d SCAN calls; want ≤ %d (%d pass(es) over the keyspace, not one per executor)", what, calls, limit, passes)
		}
	}
	mustDo(t, b.rdb, "CONFIG", "RESETSTAT")
	var wg sync.WaitGroup
	for i, e := range execs {
		wg.Go(func() {
			if err := e.Recover(ctx); err != nil {
				t.Errorf("Recover %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	scanned("five Recovers", 1)
	b.absent(t, "after the Recovers", stray)
	skipped := 0
	for _, e := range execs {
		skipped += logSays(e, "scan skipped")
	}
	if skipped != n-1 {
		t.Errorf("Recovers that logged a skipped scan: %d; want %d", skipped, n-1)
	}

	// One grace period later every executor's round runs its rescan: one of them scans.
	mustDo(t, b.rdb, "SET", stray[0].Name, "written by a stale client after the scan")
	mustDo(t, b.rdb, "CONFIG", "RESETSTAT")
	clock.Add(grace)
	for i, e := range execs {
		if err := e.Refresh(ctx); err != nil {
			t.Errorf("Refresh %d: %v", i, err)
		}
	}
	scanned("five rescans", 1)
	b.absent(t, "after the rescans", stray)
}

// TestRecoverSkippedStillCleans: executor A's Recover takes the lock; then leftovers
// appear (a crashed agent's copy and sharded counter, its clients' writes); executor B
// starts within the grace period and skips its scan: the leftovers stay. Once A's lock
// has expired (Redis's clock: the grace period is 3 s) B's rescan, one grace period after
// its Recover, takes the lock and cleans them up.
func TestRecoverSkippedStillCleans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startCluster(t)
	const key, grace = "fleet:skip:likes", 3 * time.Second
	clock := newExecClock()
	ea := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "early-A", GracePeriod: grace, Now: clock.Now})
	defer ea.Close(ctx)
	if err := ea.Apply(ctx, execPlan()); err != nil {
		t.Fatal(err)
	}
	if err := ea.Recover(ctx); err != nil {
		t.Fatalf("A Recover: %v", err)
	}
	if got, err := b.rdb.Do(ctx, "GET", recoverLockKey).Text(); err != nil || got != ea.ID() {
		t.Errorf("GET %s after A's Recover: %q, %v; want A's id %q (its scan took the lock)", recoverLockKey, got, err, ea.ID())
	}
	// What a crashed agent left after A's scan: a copy, a listed sub-counter with 9 in it.
	stray := b.names(t, "fleet:skip:stray", 1, Copies)
	mustDo(t, b.rdb, "SET", stray[0].Name, "left")
	subs := b.names(t, key, 2, ShardedCounter)
	if err := ListSubCounter(ctx, b.rdb, key, subs[1].Name); err != nil {
		t.Fatal(err)
	}
	mustDo(t, b.rdb, "INCRBY", subs[1].Name, 9)
	mustDo(t, b.rdb, "INCRBY", key, 1)

	eb := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "late-B", GracePeriod: grace, Now: clock.Now})
	defer eb.Close(ctx)
	if err := eb.Apply(ctx, execPlan()); err != nil {
		t.Fatal(err)
	}
	if err := eb.Recover(ctx); err != nil {
		t.Fatalf("B Recover: %v", err)
	}
	// Skipped: A scanned within the grace period (a few commands ago).
	if logSays(eb, "scan skipped") != 1 {
		t.Errorf("B's Recover: no skipped scan logged, A's lock held; want it skipped")
	}
	b.exist(t, "after B's skipped Recover", stray)
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != 1 {
		t.Errorf("GET %s after B's skipped Recover: %d, %v; want 1 (nothing folded)", key, got, err)
	}

	// A's lock expires on Redis's clock; then B's rescan is due on its own.
	waitFor(t, "A's recover lock to expire", 30*time.Second, func() bool {
		n, err := b.rdb.Do(ctx, "EXISTS", recoverLockKey).Int()
		return err == nil && n == 0
	})
	clock.Add(grace)
	if err := eb.Refresh(ctx); err != nil {
		t.Fatalf("B Refresh (its rescan): %v", err)
	}
	b.absent(t, "after B's rescan", stray)
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != 10 {
		t.Errorf("GET %s after B's rescan: %d, %v; want 10 (the sub-counter folded)", key, got, err)
	}
	b.noneLeft(t, "{hk:sub*")
	if got, err := b.rdb.Do(ctx, "GET", recoverLockKey).Text(); err != nil || got != eb.ID() {
		t.Errorf("GET %s after B's rescan: %q, %v; want B's id %q (it took the lock)", recoverLockKey, got, err, eb.ID())
	}
}

// TestRecoverLockFails: when the lock cannot be taken (here every command on it fails as
// an ACL without it would), Recover scans all the same, and counts and logs an error.
func TestRecoverLockFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t)
	stray := b.names(t, "fleet:acl:stray", 1, Copies)
	mustDo(t, b.rdb, "SET", stray[0].Name, "left")
	noLock := func(_ context.Context, args []any) error {
		if slices.Contains(args, any(recoverLockKey)) {
			return errors.New("NOPERM this user has no permissions to access one of the keys used as arguments")
		}
		return nil
	}
	e := newLoggedExecutor(t, ExecutorOptions{Redis: interposer{Redis: b.rdb, before: noLock}, GracePeriod: time.Minute})
	defer e.Close(ctx)
	if err := e.Apply(ctx, execPlan()); err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Recover with the lock unreachable: %v; want the lock's error", err)
	}
	b.absent(t, "after Recover with the lock unreachable", stray)
	if got := e.count("", ActionError); got != 1 {
		t.Errorf("error count: %v; want 1 (the lock)", got)
	}
}

// waitFor polls cond every 50ms until it holds, failing t after d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
