package mitigate

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestScanLeavesLiveSubCounters: executor A's scan finds the sub-counters of a sharded
// counter that executor B, alive, still enforces. A must not drain them: draining takes a
// sub-counter off its key's list once it has stayed empty for a grace period, and a
// writer of B's pod that listed it before that and increments it after would write where
// readers (ReadListedCounter) do not look. B claims its sub-counters as it claims its
// copies, so A leaves them on the list, and does not fold them round after round. Once
// B is gone (its claims expired), A's next scan drains them and takes them off the list.
func TestScanLeavesLiveSubCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startCluster(t)
	const key, grace = "fleet:live:likes", time.Minute
	subs := b.names(t, key, 2, ShardedCounter)
	clock := newExecClock()
	eb := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "live-B", GracePeriod: grace, Now: clock.Now})
	defer eb.Close(ctx)
	if err := eb.Apply(ctx, execPlan(execEntry(key, ShardedCounter, Enforce, subs))); err != nil {
		t.Fatalf("B Apply: %v", err)
	}
	for _, s := range subs {
		if err := ListSubCounter(ctx, b.rdb, key, s.Name); err != nil {
			t.Fatal(err)
		}
		mustDo(t, b.rdb, "INCRBY", s.Name, 3)
	}
	ea := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "scanner-A", GracePeriod: grace, Now: clock.Now})
	defer ea.Close(ctx)
	if err := ea.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	if err := ea.Recover(ctx); err != nil {
		t.Fatalf("A Recover: %v", err)
	}
	// Two grace periods of rounds with no writes: B renews its claims meanwhile.
	rounds(t, clock, grace/4, 8, nil, ea, eb)
	listed, err := b.rdb.Do(ctx, "SMEMBERS", listName(key)).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if !slices.Contains(listed, s.Name) {
			t.Errorf("sub-counter %s taken off the list while B enforces it (list %q); want it listed", s.Name, listed)
		}
	}
	if got, err := ReadListedCounter(ctx, b.rdb, key); err != nil || got != 6 {
		t.Errorf("ReadListedCounter = %d, %v; want 6", got, err)
	}
	if got := ea.count(ShardedCounter, ActionCounterKeptClaimed); got != 4 {
		t.Errorf("A counter_kept_claimed: %v; want 4 (each sub-counter at Recover's scan and at the rescan a grace period later)", got)
	}
	ea.mu.Lock()
	draining := len(ea.draining)
	ea.mu.Unlock()
	if draining != 0 {
		t.Errorf("A drains %d sub-counters B enforces; want none (folded once, then left to B)", draining)
	}

	// B crashes: its claims expire after a grace period, and A's next Recover (a rescan
	// would do the same) drains the sub-counters and, a grace period later, unlists them.
	mustDo(t, b.rdb, "INCRBY", subs[0].Name, 4)
	clock.Add(grace + time.Second)
	mustDo(t, b.rdb, "DEL", RecoverKey) // the lock A's first Recover took, on Redis's clock
	if err := ea.Recover(ctx); err != nil {
		t.Fatalf("A Recover after B's crash: %v", err)
	}
	rounds(t, clock, grace/4, 6, nil, ea)
	if listed, err := b.rdb.Do(ctx, "SMEMBERS", listName(key)).StringSlice(); err != nil || len(listed) != 0 {
		t.Errorf("list after B's claims expired and A drained: %q, %v; want empty", listed, err)
	}
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != 10 {
		t.Errorf("GET %s after A drained B's sub-counters: %d, %v; want 10", key, got, err)
	}
}
