package mitigate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSweepRetriedAfterFailReview3: the periodic scan took the fleet's turn (SweepKey)
// and then failed (one SCAN refused). It stays due and the next round runs it again, as
// handleScan promises ("the periodic scan stays due"): the turn is this executor's own,
// and nobody else of the fleet scans while it holds it. Before the fix the retry's SET NX
// found the executor's own SweepKey, took it for another executor's scan and put the
// scan off for a whole RescanPeriod: the fleet had no periodic scan for that period.
func TestSweepRetriedAfterFailReview3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t)
	var armed atomic.Bool
	rdb := redis.NewClient(&redis.Options{Addr: b.addrs[0]})
	defer rdb.Close()
	rdb.AddHook(failScans{on: &armed, tries: new(atomic.Int64), once: true})

	const grace = time.Minute
	clock := newExecClock()
	e := newLoggedExecutor(t, ExecutorOptions{Redis: rdb, ID: "sweeper", GracePeriod: grace, RescanPeriod: 10 * grace, Now: clock.Now})
	defer e.Close(ctx)
	if err := e.Apply(ctx, execPlan()); err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(ctx); err != nil { // schedules the sweep
		t.Fatal(err)
	}
	stray := b.names(t, "rv3:sweep:stray", 1, Copies)
	mustDo(t, b.rdb, "SET", stray[0].Name, "left by a crashed agent")

	// The sweep falls due; its SCAN fails.
	armed.Store(true)
	clock.Add(10*grace + 10*grace/4 + time.Second)
	if err := e.Refresh(ctx); err == nil {
		t.Fatalf("Refresh with the sweep's SCAN failing: nil; want its error")
	}
	if armed.Load() {
		t.Fatalf("no SCAN was sent: the sweep did not run")
	}
	if got, err := b.rdb.Do(ctx, "GET", SweepKey).Text(); err != nil || got != e.ID() {
		t.Fatalf("GET %s after the failed sweep: %q, %v; want this executor's id", SweepKey, got, err)
	}
	b.exist(t, "after the failed sweep", stray)

	// The next round: the sweep is still due, and runs.
	clock.Add(time.Second)
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh after the failed sweep: %v", err)
	}
	b.absent(t, "one round after the failed sweep (retried)", stray)
}

// TestClaimKeyPrunedOnRenewReview3: executors A and B use the same copies; A crashes (no
// Close, so its member stays in each claim key). B keeps renewing its own claims, which
// push the claim keys' expiry on, and nothing deletes the copies (the entry goes on). A
// claim key must still hold one member per agent using the copy (docs/plan.md), not one
// per agent that ever did: B's renewals drop the members whose claims have expired.
// Before the fix A's member stayed as long as B renewed (with agents crashing over
// weeks, a hot copy's claim key grew without bound).
func TestClaimKeyPrunedOnRenewReview3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t)
	const key, grace = "rv3:prune:page", time.Minute
	mustDo(t, b.rdb, "SET", key, "v")
	names := b.names(t, key, 2, Copies)
	clock := newExecClock()
	ea := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "crashed-A", GracePeriod: grace, Now: clock.Now})
	eb := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "live-B", GracePeriod: grace, Now: clock.Now})
	defer eb.Close(ctx)
	plan := execPlan(execEntry(key, Copies, Enforce, names))
	for _, e := range []claimsExec{ea, eb} {
		if err := e.Apply(ctx, plan); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	for _, n := range names {
		if got := b.claimants(t, n.Name); !slices.Equal(got, []string{"crashed-A", "live-B"}) {
			t.Fatalf("claim key of %s: %q; want both", n.Name, got)
		}
	}
	// A crashes now. Three grace periods of B's rounds (renewals every half).
	rounds(t, clock, grace/2, 6, nil, eb)
	for _, n := range names {
		if got := b.claimants(t, n.Name); !slices.Equal(got, []string{"live-B"}) {
			t.Errorf("claim key of %s two grace periods after A's claim expired: members %q; want [live-B]", n.Name, got)
		}
	}
	b.exist(t, "B's copies", names)
}

// failScans is a go-redis hook that fails SCAN commands while on (a primary unreachable),
// without sending them, counting them in tries; with once it turns itself off after the
// first.
type failScans struct {
	on    *atomic.Bool
	tries *atomic.Int64
	once  bool
}

func (failScans) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f failScans) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !strings.EqualFold(cmd.Name(), "scan") {
			return next(ctx, cmd)
		}
		if fail := f.on.Load() && (!f.once || f.on.CompareAndSwap(true, false)); !fail {
			return next(ctx, cmd)
		}
		f.tries.Add(1)
		err := errors.New("LOADING Redis is loading the dataset in memory")
		cmd.SetErr(err)
		return err
	}
}

func (failScans) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestScanRetryBacksOff: a scan for leftovers that keeps failing is retried at the next
// round once, then after waits that double from RefreshPeriod up to the grace period, not
// every round: each try reads every primary that still answers, so during a long outage
// of one primary the others would otherwise be scanned back to back. Once scans work
// again the next one runs at its time.
func TestScanRetryBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t)
	var on atomic.Bool
	var tries atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: b.addrs[0]})
	defer rdb.Close()
	rdb.AddHook(failScans{on: &on, tries: &tries})

	const refresh, grace = time.Second, time.Minute
	clock := newExecClock()
	e := newLoggedExecutor(t, ExecutorOptions{Redis: rdb, ID: "backoff", RefreshPeriod: refresh, GracePeriod: grace, Now: clock.Now})
	defer e.Close(ctx)
	on.Store(true)
	if err := e.Recover(ctx); err == nil {
		t.Fatal("Recover with every SCAN failing: nil; want its error")
	}
	// 100 rounds a second apart. The rescan, due one grace period after Recover, fails
	// too, and then its retries: at 60 s, 61 s, 63 s, 67 s, 75 s and 91 s with the waits
	// doubling from RefreshPeriod; one a round (41) without.
	for range 100 {
		clock.Add(refresh)
		_ = e.Refresh(ctx)
	}
	if got := tries.Load(); got < 5 || got > 9 {
		t.Errorf("SCAN tries in 100 s with every scan failing: %d; want about 7 (Recover's, then the rescan's after waits of 1, 2, 4, 8 and 16 s), not one a round", got)
	}
	on.Store(false)
	stray := b.names(t, "rv3:backoff:stray", 1, Copies)
	mustDo(t, b.rdb, "SET", stray[0].Name, "left")
	for range 70 { // the wait is at most the grace period
		clock.Add(refresh)
		if err := e.Refresh(ctx); err != nil {
			t.Fatalf("Refresh once scans work: %v", err)
		}
	}
	b.absent(t, "once scans work again", stray)
}
