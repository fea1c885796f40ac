package client

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestCopiesCluster runs concurrent writers and readers of a key split into 3 copies on
// the 3 primaries of a real cluster, all through the SDK. The bound it checks: a read
// that starts after a write through the SDK has returned sees that write or a later one.
// Writers INCR, so values grow with the order of writes: each reader notes the highest
// value whose INCR had returned before its read started, and its read must not be lower.
// Reads must also spread over the primaries (each takes a third of them, not all).
func TestCopiesCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	topo, err := mitigate.NewTopology(ctx, mitigate.TopologyOptions{Seeds: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	key := "score:match42"
	nodes, err := topo.Names(key, 3, mitigate.Copies)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	ps := startPlanServer(t)
	ps.publish(copiesEntry(key, names, time.Minute))
	im := impl{"cluster", cl.Addrs(), func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	}}
	rdb, c := attach(t, im, ps, Options{Rand: seeded(5)})
	if err := rdb.Set(ctx, key, "0", 0).Err(); err != nil {
		t.Fatal(err)
	}

	var floor atomic.Int64 // the highest value whose INCR has returned
	var stale, reads atomic.Int64
	deadline := time.Now().Add(400 * time.Millisecond)
	before := redisGetsEach(t, cl.Addrs()...)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				n, err := rdb.Incr(ctx, key).Result()
				if err != nil {
					t.Error(err)
					return
				}
				for {
					f := floor.Load()
					if n <= f || floor.CompareAndSwap(f, n) {
						break
					}
				}
			}
		})
	}
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				f := floor.Load()
				s, err := rdb.Get(ctx, key).Result()
				if err != nil {
					t.Error(err)
					return
				}
				v, _ := strconv.ParseInt(s, 10, 64)
				reads.Add(1)
				if v < f {
					stale.Add(1)
					t.Errorf("read %d after a write of %d had returned", v, f)
				}
			}
		})
	}
	wg.Wait()
	after := redisGetsEach(t, cl.Addrs()...)

	// The copies end where the original ends.
	plain := im.new()
	defer plain.Close()
	want := plain.Get(ctx, key).Val()
	for _, n := range names {
		if v := plain.Get(ctx, n).Val(); v != want {
			t.Errorf("copy %s = %q; want the original's %q", n, v, want)
		}
	}
	total := 0
	for i := range after {
		total += after[i] - before[i]
	}
	st := c.Stats().Copies
	t.Logf("%d writes, %d reads (%d stale), per-primary GETs %v, copy stats %+v", floor.Load(), reads.Load(), stale.Load(), diff(after, before), st)
	if floor.Load() < 10 || reads.Load() < 100 {
		t.Fatalf("only %d writes and %d reads; the test did not exercise much", floor.Load(), reads.Load())
	}
	for i := range after {
		share := float64(after[i]-before[i]) / float64(total)
		if share > 0.45 || share < 0.2 {
			t.Errorf("primary %s took %.2f of the reads; want about 1/3 each", cl.Addrs()[i], share)
		}
	}
	if st.MirrorErrors != 0 || st.Fallbacks != 0 {
		t.Errorf("copy stats %+v; want no mirror errors or fallbacks", st)
	}
}

func diff(a, b []int) []int {
	out := make([]int, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}
