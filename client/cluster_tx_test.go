package client

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestClusterWatchWrite: a ClusterClient runs Watch's transaction on the node's own
// client, not through the hooks Attach added to the ClusterClient. A write made there
// (the optimistic-lock pattern: WATCH, GET, MULTI SET, EXEC) must still drop this
// client's L1 value of the key and stop its copy reads, so the app reads its own write
// right after Watch returns. Run with the node clients made after Attach (the
// ClusterClient not used before) and before it (used before Attach).
func TestClusterWatchWrite(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	for _, usedBefore := range []bool{false, true} {
		name := "fresh"
		if usedBefore {
			name = "used-before-attach"
		}
		t.Run(name, func(t *testing.T) {
			ps := startPlanServer(t)
			l1Key, splitKey := name+":l1", name+":split"
			ps.publish(l1Entry(l1Key, time.Minute, time.Minute), copiesEntry(splitKey, copyNames(splitKey, 2), time.Minute))
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
			t.Cleanup(func() { rdb.Close() })
			ctx := context.Background()
			if usedBefore {
				// Every node client exists before Attach.
				if err := rdb.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
					return n.Ping(ctx).Err()
				}); err != nil {
					t.Fatal(err)
				}
			}
			c := attachTo(t, rdb, ps, Options{Rand: seeded(7)})
			for _, key := range []string{l1Key, splitKey} {
				t.Run(key, func(t *testing.T) {
					if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
						t.Fatal(err)
					}
					if v := rdb.Get(ctx, key).Val(); v != "1" { // L1 or a copy holds 1
						t.Fatalf("GET %s = %q; want 1", key, v)
					}
					for i := 2; i <= 4; i++ {
						if err := incrInWatch(ctx, rdb, key); err != nil {
							t.Fatalf("Watch %d: %v", i, err)
						}
						if v := rdb.Get(ctx, key).Val(); v != string(rune('0'+i)) {
							t.Fatalf("GET %s right after Watch %d set it to %d = %q; want %d (the app's own write)", key, i, i, v, i)
						}
					}
				})
			}
			// App code writing through a node client directly drops the L1 value too.
			node, err := rdb.MasterForKey(ctx, l1Key)
			if err != nil {
				t.Fatal(err)
			}
			if err := node.Set(ctx, l1Key, "9", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v := rdb.Get(ctx, l1Key).Val(); v != "9" {
				t.Errorf("GET %s after SET 9 on its node's client = %q; want 9", l1Key, v)
			}
			// The ClusterClient's own transaction passes the plan hook and the node hook:
			// it is counted once.
			if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, splitKey, "5", 0)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if v := rdb.Get(ctx, splitKey).Val(); v != "5" {
				t.Errorf("GET %s after a TxPipelined SET 5 = %q; want 5", splitKey, v)
			}
			st := c.Stats().Copies
			if st.Unmirrored != 4 {
				t.Errorf("Unmirrored = %d; want 4 (the 3 Watch writes and the TxPipelined write of %s, each counted once)", st.Unmirrored, splitKey)
			}
			if st.Mirrors != 1 {
				t.Errorf("Mirrors = %d; want 1 (the plain SET of %s, mirrored once)", st.Mirrors, splitKey)
			}
			c.nodes.mu.Lock()
			hooked := c.nodes.hooked
			c.nodes.mu.Unlock()
			if hooked != 3 {
				t.Errorf("node clients hooked: %d; want 3 (one hook per node)", hooked)
			}
		})
	}
}
