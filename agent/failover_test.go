package agent

import (
	"context"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestExecutorClientFollowsFailover: a primary dies and its replica takes over. The
// executor's cluster client (copy refreshes, folds) must reach the new primary within a
// few seconds. go-redis learns of a failover without a MOVED only when it reloads its
// slot table, every 60 s by default, so until then every command for that shard failed.
func TestExecutorClientFollowsFailover(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	a := runAgent(t, Options{RedisAddrs: c.Addrs()})
	waitFor(t, func() bool { return a.redis.Load() != nil }) // the agent connected to the cluster
	rdb := a.redis.Load().rdb.(*redis.ClusterClient)
	ctx := context.Background()
	const key = "failover:k"
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	node, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var primary *redistest.Server
	var alive []*redistest.Server
	for _, n := range c.Nodes() {
		if n.Addr() == node.Options().Addr {
			primary = n
		} else {
			alive = append(alive, n)
		}
	}
	replica := c.AddReplica(t, primary)
	primary.Kill()
	c.Failover(t, replica, "TAKEOVER", alive...)
	start := time.Now()
	for {
		got, err := rdb.Get(ctx, key).Result()
		if err == nil && got == "v" {
			t.Logf("reached the new primary %v after the failover", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("GET %s 20s after the failover: %q, %v; want the new primary %s to answer", key, got, err, replica.Addr())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
