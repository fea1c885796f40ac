package client

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// TestCopyReadMissingCopy: a read of a split key that reaches a copy the agent has not
// written yet (or has already deleted, the entry having ended while this client still
// holds it) must not answer as though the key did not exist. GET and HGET get nil from
// the missing copy and read the original again; reads whose answer for a missing key is
// an empty list, an empty hash, 0 or -2 must do the same.
func TestCopyReadMissingCopy(t *testing.T) {
	srv := redistest.Start(t)
	im := standalone(srv.Addr())
	ctx := context.Background()
	plain := im.new()
	defer plain.Close()
	keys := map[string]func(){
		"mc:str":  func() { plain.Set(ctx, "mc:str", "v", time.Hour) },
		"mc:zset": func() { plain.ZAdd(ctx, "mc:zset", redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2, Member: "b"}) },
		"mc:hash": func() { plain.HSet(ctx, "mc:hash", "f", "v") },
		"mc:list": func() { plain.RPush(ctx, "mc:list", "x", "y") },
	}
	ps := startPlanServer(t)
	var entries []mitigate.Entry
	for k, write := range keys {
		write() // the original only: the agent has not written the copies yet
		entries = append(entries, copiesEntry(k, copyNames(k, 2), time.Minute))
	}
	slices.SortFunc(entries, func(a, b mitigate.Entry) int { return strings.Compare(a.Key, b.Key) })
	ps.publish(entries...)
	rdb, _ := attach(t, im, ps, Options{Rand: seeded(5)})
	for _, tc := range []struct {
		name string
		read func() (string, error)
		want string
	}{
		{"GET", func() (string, error) { return rdb.Get(ctx, "mc:str").Result() }, "v"},
		{"STRLEN", func() (string, error) { n, err := rdb.StrLen(ctx, "mc:str").Result(); return fmt.Sprint(n), err }, "1"},
		{"EXISTS", func() (string, error) { n, err := rdb.Exists(ctx, "mc:str").Result(); return fmt.Sprint(n), err }, "1"},
		{"TTL", func() (string, error) { d, err := rdb.TTL(ctx, "mc:str").Result(); return fmt.Sprint(d > 0), err }, "true"},
		{"ZRANGE", func() (string, error) {
			v, err := rdb.ZRange(ctx, "mc:zset", 0, -1).Result()
			return fmt.Sprint(v), err
		}, "[a b]"},
		{"ZCARD", func() (string, error) { n, err := rdb.ZCard(ctx, "mc:zset").Result(); return fmt.Sprint(n), err }, "2"},
		{"HGETALL", func() (string, error) { v, err := rdb.HGetAll(ctx, "mc:hash").Result(); return fmt.Sprint(v), err }, "map[f:v]"},
		{"LRANGE", func() (string, error) {
			v, err := rdb.LRange(ctx, "mc:list", 0, -1).Result()
			return fmt.Sprint(v), err
		}, "[x y]"},
		{"TYPE", func() (string, error) { return rdb.Type(ctx, "mc:list").Result() }, "list"},
	} {
		for i := range 4 { // each read picks a copy at random: try several
			if got, err := tc.read(); err != nil || got != tc.want {
				t.Errorf("%s through the SDK (try %d) with the copies not written: %q, %v; want %q, as the original", tc.name, i, got, err, tc.want)
				break
			}
		}
	}
}
