package agent

import (
	"context"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/redis/go-redis/v9"
)

// TestPlanFollowsSlotMove: a copy's slot moves to the primary of another copy, so both
// sit on one primary and the split relieves nothing. The agent must re-place the copy
// within seconds — the executor's client meets the move at its next copy refresh — not
// at the topology's periodic refresh (30 s).
func TestPlanFollowsSlotMove(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	const key = "score:moving"
	if err := rdb.Set(ctx, key, "v", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	a := runAgent(t, Options{RedisAddrs: cl.Addrs()})
	waitFor(t, func() bool { return a.namer() != nil })
	if err := a.planner.Pin(key, mitigate.Copies, mitigate.Enforce); err != nil {
		t.Fatal(err)
	}
	send := func() {
		a.Accept(sampler.Batch{Source: "proxy", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte(key), Op: sampler.OpRead, Count: 200}}})
	}
	var e mitigate.Entry
	waitFor(t, func() bool {
		send()
		var ok bool
		e, ok = a.store.Current().Find(key, mitigate.Copies)
		return ok && len(e.Copies) >= 2
	})
	for _, c := range e.Copies { // the executor wrote them
		waitFor(t, func() bool { return rdb.Get(ctx, c.Name).Val() == "v" })
	}
	moved, other := e.Copies[0], e.Copies[1]
	cl.MoveSlot(t, moved.Slot, moved.Primary, other.Primary)
	start := time.Now()
	for {
		send()
		now, ok := a.store.Current().Find(key, mitigate.Copies)
		primaries := map[string]bool{}
		renamed := false
		for _, c := range now.Copies {
			primaries[c.Primary] = true
			if c.Name == moved.Name {
				renamed = false
				break
			}
			renamed = true
		}
		if ok && renamed && len(primaries) == len(now.Copies) {
			t.Logf("copies re-placed %v after the slot move: %+v", time.Since(start).Round(time.Millisecond), now.Copies)
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("5s after slot %d of copy %s moved to %s (the primary of copy %s): copies %+v; want the copy renamed, each copy on its own primary",
				moved.Slot, moved.Name, other.Primary, other.Name, now.Copies)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
