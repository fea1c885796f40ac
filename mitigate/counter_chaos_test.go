package mitigate

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// chaosClient is a cluster client with short timeouts, so that a test sees a dead or
// hung node in well under a second rather than go-redis's default seconds.
func chaosClient(t *testing.T, c *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(),
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// caughtUp waits until replica has applied everything its primary has written.
func caughtUp(t *testing.T, primary, replica *redistest.Server) {
	t.Helper()
	offset := func(addr, field string) string {
		info, err := redistest.Command(addr, "", "INFO", "replication")
		if err != nil {
			t.Fatalf("%s INFO replication: %v", addr, err)
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				return v
			}
		}
		return ""
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, r := offset(primary.Addr(), "master_repl_offset"), offset(replica.Addr(), "slave_repl_offset")
		if m != "" && m == r {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s at offset %s; primary %s at %s after 5s", replica.Addr(), r, primary.Addr(), m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readEventually reads key's counter until the cluster answers again (a failover), at
// most 10s.
func readEventually(t *testing.T, rdb Redis, key string, subs []Node) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := ReadCounter(ctx, rdb, key, subs)
		cancel()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("ReadCounter(%q) still failing 10s after the failover: %v", key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFoldSurvivesFailover: the key's primary fails over to a replica that had not yet
// received the fold that ended a sharded counter. Redis replicates asynchronously, so a
// failover may lose the last writes a primary acknowledged; but the increments here were
// made, and replicated, long before. The fold moved them into one unreplicated INCRBY and
// then dropped the stash that held them: the failover must not take them along.
func TestFoldSurvivesFailover(t *testing.T) {
	const key, total = "fo:likes:post:9", 300
	c := redistest.StartCluster(t, 3)
	rdb := chaosClient(t, c)
	topo := newTopology(t, TopologyOptions{Seeds: c.Addrs()})
	home := primaryAt(t, c, topo.PrimaryOfKey(key))
	replica := c.AddReplica(t, home)
	subs, err := topo.Names(key, 3, ShardedCounter)
	if err != nil {
		t.Fatalf("Names: %v", err)
	}
	e := newTestExecutor(t, backend{rdb: rdb, topo: topo, addrs: c.Addrs()}, time.Hour, time.Hour)
	ctx := context.Background()
	if err := e.Apply(ctx, execPlan(execEntry(key, ShardedCounter, Enforce, subs))); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range total {
		if err := IncrCounterRand(ctx, rdb, r, key, subs, 1); err != nil {
			t.Fatalf("IncrCounter: %v", err)
		}
	}
	if v := readEventually(t, rdb, key, subs); v != total {
		t.Fatalf("before the fold: counter %d; want %d", v, total)
	}
	caughtUp(t, home, replica)

	// The replica falls behind (its link breaks, and it is too slow to reconnect); the
	// entry ends, and the executor folds.
	replica.Pause(t)
	if _, err := redistest.Command(home.Addr(), "", "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica: %v", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = e.Apply(fctx, execPlan())
	cancel()
	t.Logf("fold with the replica behind: %v (folds %v)", err, e.count(ShardedCounter, ActionCounterFold))
	if v := readEventually(t, rdb, key, subs); v != total {
		t.Fatalf("after the fold: counter %d; want %d", v, total)
	}

	// The primary dies before the replica has the fold; the replica takes over.
	home.Kill()
	replica.Resume(t)
	c.Failover(t, replica, "TAKEOVER", others(c, home)...)
	fresh := chaosClient(t, c) // rdb's slot table is go-redis's, and stale: see TestExecutorAfterFailover
	if v := readEventually(t, fresh, key, subs); v != total {
		t.Errorf("after the failover: counter %d; want %d (increments acknowledged and replicated before the fold)", v, total)
	}
	// A later round completes whatever the failover left, exactly. (go-redis learns of a
	// failover with no MOVED only at its next periodic reload: hurry it.)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rdb.ReloadState(rctx)
	for err := e.Refresh(rctx); err != nil; err = e.Refresh(rctx) {
		if rctx.Err() != nil {
			t.Fatalf("the rounds after the failover: %v; want the folds completed", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	live := []string{replica.Addr()}
	for _, n := range others(c, home) {
		live = append(live, n.Addr())
	}
	if left := (backend{addrs: live}).keys(t, "{hk:t*}stash:*"); len(left) > 0 {
		t.Errorf("stashes left after the round: %q", left)
	}
	if v := readEventually(t, fresh, key, subs); v != total {
		t.Errorf("after the next round: counter %d; want %d", v, total)
	}
}
