package mitigate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSweepTurnRefusedReview2: a Redis user that may use the claims but not SweepKey (an
// ACL written from ExecutorOptions.ID's list) must not turn the periodic scan off in
// silence: the failed SET is counted and logged, and the scan runs all the same, so a
// copy nobody claims is deleted.
func TestSweepTurnRefusedReview2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t) // b.rdb is the admin's client
	mustDo(t, b.rdb, "ACL", "SETUSER", "hk", "on", ">pw", "~{hk:*", "~hk:claim{hk:*", "~rv2:*", "+@all")
	rdb := redis.NewClient(&redis.Options{Addr: b.addrs[0], Username: "hk", Password: "pw"})
	defer rdb.Close()

	stray := b.names(t, "rv2:stray", 2, Copies)
	for _, n := range stray {
		mustDo(t, b.rdb, "SET", n.Name, "old")
	}
	clock := newExecClock()
	const grace = time.Minute
	ex := newLoggedExecutor(t, ExecutorOptions{Redis: rdb, GracePeriod: grace, RescanPeriod: 10 * grace, Now: clock.Now})
	e, buf := ex.Executor, ex.log
	defer e.Close(ctx)
	_ = e.Refresh(ctx) // schedules the sweep
	clock.Add(10*grace + 10*grace/4 + time.Second)
	_ = e.Refresh(ctx) // the sweep is due
	if got := ex.count("", ActionError) + ex.count(Copies, ActionError); got < 1 {
		t.Errorf("error actions after a refused SET %s: got %v; want ≥ 1 (counted and logged)", SweepKey, got)
	}
	if !strings.Contains(buf.String(), "sweep") {
		t.Errorf("log after a refused SET %s does not mention it:\n%s", SweepKey, buf.String())
	}
	b.absent(t, "copy nobody claims, after the due sweep whose turn could not be taken", stray)
}
