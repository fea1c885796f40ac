package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestCopiesRepairRacesWrites: repairs (started by marking the key unsure, as a write
// of unknown outcome does) run while the key is written again and again through the
// client, with single commands and with pipelines. No write is lost in the copies, a
// read that starts after a write returned sees it or a later one, and once the writes
// stop the copies hold the last value and the reads go to them. (A read made while a
// write is under way may see it, and the next one not yet: client/doc.go says so.)
func TestCopiesRepairRacesWrites(t *testing.T) {
	t.Run("command", func(t *testing.T) {
		testRepairRacesWrites(t, "cp:repair:race:command", func(ctx context.Context, rdb redis.UniversalClient, key, v string) error {
			return rdb.Set(ctx, key, v, 0).Err()
		})
	})
	t.Run("pipeline", func(t *testing.T) {
		testRepairRacesWrites(t, "cp:repair:race:pipeline", func(ctx context.Context, rdb redis.UniversalClient, key, v string) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key, v, 0)
				return nil
			})
			return err
		})
	})
}

func testRepairRacesWrites(t *testing.T, key string, write func(ctx context.Context, rdb redis.UniversalClient, key, v string) error) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	names := copyNames(key, 2)
	ps.publish(copiesEntry(key, names, time.Minute))
	im := standalone(srv.Addr())
	rdb, c := attach(t, im, ps, Options{})
	ctx := context.Background()
	if err := rdb.Set(ctx, key, "0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	kp := c.follower.cur.Load().lookup(key)
	const writes = 300
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErr error
	var acked atomic.Int64 // the last value whose write returned
	// A reader: never older than what was written before it began.
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			floor := acked.Load()
			s, err := rdb.Get(ctx, key).Result()
			if err != nil {
				readErr = err
				return
			}
			if v, _ := strconv.Atoi(s); int64(v) < floor {
				readErr = fmt.Errorf("GET returned %s, begun after the write of %d returned", s, floor)
				return
			}
		}
	})
	wg.Go(func() { // marks, as writes of unknown outcome do
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.unsure(key, kp)
			time.Sleep(time.Duration(c.pick(3000)) * time.Microsecond)
		}
	})
	for i := 1; i <= writes; i++ {
		if err := write(ctx, rdb, key, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		acked.Store(int64(i))
		time.Sleep(time.Duration(c.pick(500)) * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	waitFor(t, func() bool { return kp.readCopies(c.now()) != nil })
	plain := im.new()
	defer plain.Close()
	for _, n := range names {
		if v := plain.Get(ctx, n).Val(); v != strconv.Itoa(writes) {
			t.Errorf("copy %s = %q after the repairs; want %d (a write was lost in the copies)", n, v, writes)
		}
	}
	if st := c.Stats().Copies; st.Repairs == 0 {
		t.Errorf("copy stats %+v; want some repairs", st)
	}
}

// splitAcross returns the primary of cl that owns key and two copy names of key that
// other primaries own, with those primaries.
func splitAcross(t *testing.T, cl *redistest.Cluster, key string) (primary *redistest.Server, names []string, owners []*redistest.Server) {
	t.Helper()
	probe := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer probe.Close()
	owner := func(k string) *redistest.Server {
		addr, err := probe.MasterForKey(context.Background(), k)
		if err != nil {
			t.Fatalf("MasterForKey(%s): %v", k, err)
		}
		for _, n := range cl.Nodes() {
			if n.Addr() == addr.Options().Addr {
				return n
			}
		}
		t.Fatalf("MasterForKey(%s) = %s, not a node of the cluster", k, addr.Options().Addr)
		return nil
	}
	primary = owner(key)
	for i := 1; len(names) < 2; i++ {
		n := "{hk:copy" + strconv.Itoa(i) + ":0}" + key
		if o := owner(n); o != primary {
			names, owners = append(names, n), append(owners, o)
		}
	}
	return primary, names, owners
}

// clusterSplit is a key split across a 3-primary cluster (see splitOnCluster).
type clusterSplit struct {
	rdb     *redis.ClusterClient
	c       *Client
	kp      *keyPlan
	primary *redistest.Server   // the original's
	names   []string            // the copies
	owners  []*redistest.Server // the copies' primaries, other than primary
}

// splitOnCluster starts a 3-primary cluster and a plan server whose plan splits key into
// two copies on the other primaries, attaches a client whose go-redis reads time out
// after readTimeout and retry nothing, and sets key to value.
func splitOnCluster(t *testing.T, key, value string, readTimeout time.Duration) clusterSplit {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	var sp clusterSplit
	sp.primary, sp.names, sp.owners = splitAcross(t, cl, key)
	ps := startPlanServer(t)
	ps.publish(copiesEntry(key, sp.names, time.Minute))
	sp.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: readTimeout, MaxRetries: -1})
	t.Cleanup(func() { sp.rdb.Close() })
	sp.c = attachTo(t, sp.rdb, ps, Options{})
	if err := sp.rdb.Set(context.Background(), key, value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	sp.kp = sp.c.follower.cur.Load().lookup(key)
	return sp
}

// TestCopiesRepairAfterPrimaryKill: the primary holding a split key's original is killed
// (kill -9) and a write of the key fails; its replica takes over. Reads of the key go
// back to the copies on the other primaries soon after, without a new plan, and never
// return a value older than one returned before.
func TestCopiesRepairAfterPrimaryKill(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	key := "cp:repair:kill"
	primary, names, _ := splitAcross(t, cl, key)
	replica := cl.AddReplica(t, primary)
	ps := startPlanServer(t)
	ps.publish(copiesEntry(key, names, time.Minute))
	// ClusterStateReloadInterval: go-redis's default (60s) would keep it sending the
	// key's commands to the dead primary for up to a minute after the failover.
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, MaxRetries: 1, ClusterStateReloadInterval: time.Second})
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{})
	version := c.Stats().Plan.Version
	if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := redis.NewClient(&redis.Options{Addr: primary.Addr()}).Wait(ctx, 1, 2000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the primary: %d, %v; want the SET on the replica", n, err)
	}
	primary.Kill()
	if err := rdb.Set(ctx, key, "2", 0).Err(); err == nil {
		t.Fatal("SET with the primary killed succeeded; the test needs it to fail")
	}
	if st := c.Stats().Copies; st.MirrorErrors != 1 {
		t.Fatalf("copy stats %+v after the failed SET; want 1 mirror error", st)
	}
	alive := []*redistest.Server{replica}
	for _, n := range cl.Nodes() {
		if n != primary {
			alive = append(alive, n)
		}
	}
	cl.Failover(t, replica, "TAKEOVER", alive...)
	// go-redis finds the new primary when it reloads the cluster's slots (about a second
	// after its last load); from the first GET it answers, the copies take the reads
	// again within the repair's backoff.
	reads := c.Stats().Copies.Reads
	start := time.Now()
	var back time.Time
	last := ""
	for n := 0; c.Stats().Copies.Reads == reads; n++ {
		switch {
		case back.IsZero() && time.Since(start) > 30*time.Second:
			t.Fatal("the original was not reachable again within 30s of the failover")
		case !back.IsZero() && time.Since(back) > 4*time.Second:
			t.Fatalf("copy reads did not resume within 4s of the original answering again (copy stats %+v)", c.Stats().Copies)
		}
		v, err := rdb.Get(ctx, key).Result()
		if err == nil {
			if back.IsZero() {
				back = time.Now()
			}
			if v < last {
				t.Fatalf("GET %d: %q after %q: reads went back in time", n, v, last)
			}
			last = v
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("original back %v after the failover, copy reads %v after that", back.Sub(start).Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	for i := range 20 {
		if v, err := rdb.Get(ctx, key).Result(); err != nil || v < last {
			t.Fatalf("GET %d after the repair: %q, %v; want %q or later", i, v, err, last)
		}
	}
	if st := c.Stats(); st.Plan.Version != version || st.Copies.Repairs != 1 {
		t.Errorf("plan version %d, copy stats %+v; want version %d and 1 repair", st.Plan.Version, st.Copies, version)
	}
}

// TestHungCopyNodeHoldsNoWrites: the primary of one of a split key's copies hangs
// (SIGSTOP, as a long fork or a stalled disk does) while the key is marked, so a repair
// is due. Writes of the key, whose original is on a healthy primary, go on meanwhile:
// a repair attempt that held the key's stripe until the hung node's read timeout (2 s
// here) made every write of the key wait for it, and a writer whose deadline was
// shorter failed (18–19 write errors in 12 s in the review that found it).
func TestHungCopyNodeHoldsNoWrites(t *testing.T) {
	ctx := context.Background()
	key := "cp:repair:hung"
	sp := splitOnCluster(t, key, "0", 2*time.Second)
	rdb, c, kp, names, primary := sp.rdb, sp.c, sp.kp, sp.names, sp.primary
	hung := sp.owners[0]
	hung.Pause(t)
	c.unsure(key, kp) // as a write of unknown outcome does: a repair is due
	// Within the cluster's node timeout (5 s), after which the others would mark the hung
	// node as failed and refuse writes.
	failed, n, last := 0, 0, "0"
	for start := time.Now(); time.Since(start) < 3*time.Second; n++ {
		v := strconv.Itoa(n + 1)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := rdb.Set(wctx, key, v, 0).Err(); err != nil {
			failed++
			t.Logf("write %d: %v", n+1, err)
		} else {
			last = v
		}
		cancel()
		time.Sleep(10 * time.Millisecond)
	}
	hung.Resume(t)
	if failed > 0 {
		t.Errorf("%d of %d writes of the key (original on %s, healthy) failed with a copy's node hung; want none", failed, n, primary.Addr())
	}
	waitFor(t, func() bool { return kp.readCopies(c.now()) != nil })
	for _, name := range names {
		if v := rdb.Get(internal(ctx), name).Val(); v != last {
			t.Errorf("copy %s = %q after the repair; want %s, the last value written", name, v, last)
		}
	}
}

// TestHungCopyNodeReads: with a copy's primary hung, reads of the split key stop going
// to that copy after the first one that times out, and come back to the copies once it
// answers again. Each read sent to it waited for the read timeout before the original
// answered, for as long as the node hung and nothing wrote the key (the verifying review
// saw reads stop for 4 s of a 12 s hang, 4 readers, 1 s timeout).
func TestHungCopyNodeReads(t *testing.T) {
	ctx := context.Background()
	key := "cp:read:hung"
	sp := splitOnCluster(t, key, "v", 300*time.Millisecond)
	rdb, c, kp, owners := sp.rdb, sp.c, sp.kp, sp.owners
	owners[0].Pause(t)
	fallbacks := c.Stats().Copies.Fallbacks
	const reads = 20 // within the cluster's node timeout (5 s) even at 300 ms each
	for i := range reads {
		if v, err := rdb.Get(ctx, key).Result(); v != "v" || err != nil {
			t.Fatalf("GET %d with a copy's node hung: %q, %v; want v from the original", i, v, err)
		}
	}
	if n := c.Stats().Copies.Fallbacks - fallbacks; n > 1 {
		t.Errorf("%d of %d reads went to a copy first and fell back; want 1 at most: the first that timed out turns the copy reads off", n, reads)
	}
	owners[0].Resume(t)
	waitFor(t, func() bool { return kp.readCopies(c.now()) != nil })
	reads0 := c.Stats().Copies.Reads
	for range 10 {
		rdb.Get(ctx, key)
	}
	if c.Stats().Copies.Reads == reads0 {
		t.Error("no read went to the copies after the node answered again")
	}
}
