package client

import (
	"context"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestCounterShardedKeyOps runs testCounterShardedKeyOps on a standalone and a cluster
// client.
func TestCounterShardedKeyOps(t *testing.T) {
	runSuite(t, []suiteTest{{"KeyOps", testCounterShardedKeyOps}})
}

// testCounterShardedKeyOps: a sharded counter's value lives in its sub-counters, so a
// DEL or EXPIRE of the key through the app's client must reach them too. A DEL resets
// the counter (Get 0); an EXPIRE makes the whole value expire; and the executor's fold
// of sub-counters carrying a TTL into a key that does not exist creates it with that
// TTL, not forever.
func testCounterShardedKeyOps(t *testing.T, im impl) {
	ctx := context.Background()
	topo := topology(t, im)
	keys := []string{"shd:del", "shd:expire", "shd:fold"}
	var entries []mitigate.Entry
	for _, k := range keys {
		subs, err := topo.Names(k, 3, mitigate.ShardedCounter)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, shardedEntry(k, subs, time.Hour))
	}
	ps := startPlanServer(t)
	ps.publish(entries...)
	rdb, c := attach(t, im, ps, Options{Rand: seeded(5)})
	del(ctx, rdb, keys...)
	counter := c.Counter()
	adds := func(key string, n int) {
		t.Helper()
		for range n {
			if err := counter.Add(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	get := func(key string) int64 {
		t.Helper()
		v, err := counter.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	adds("shd:del", 100)
	if v := get("shd:del"); v != 100 {
		t.Fatalf("Get(shd:del) = %d; want 100", v)
	}
	if err := rdb.Del(ctx, "shd:del").Err(); err != nil {
		t.Fatal(err)
	}
	if v := get("shd:del"); v != 0 {
		t.Errorf("Get(shd:del) after DEL = %d; want 0", v)
	}
	adds("shd:del", 7)
	if v := get("shd:del"); v != 7 {
		t.Errorf("Get(shd:del) after DEL and 7 Adds = %d; want 7", v)
	}

	adds("shd:expire", 110)
	if err := rdb.Expire(ctx, "shd:expire", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if v := get("shd:expire"); v != 0 {
		t.Errorf("Get(shd:expire) 1.5s after EXPIRE 1s = %d; want 0", v)
	}

	// The fold: sub-counters with a TTL, no key; the executor folds them at its Close.
	adds("shd:fold", 50)
	if err := rdb.Expire(ctx, "shd:fold", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	admin := im.new()
	defer admin.Close()
	exec, err := mitigate.NewExecutor(mitigate.ExecutorOptions{Redis: admin})
	if err != nil {
		t.Fatal(err)
	}
	p := mitigate.Plan{Version: 2, Generated: planNow, Primaries: 3, Entries: entries}
	if err := exec.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := exec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "shd:fold").Val(); v != "50" {
		t.Errorf("shd:fold after the fold = %q; want 50", v)
	}
	if d := rdb.PTTL(ctx, "shd:fold").Val(); d < 50*time.Minute {
		t.Errorf("PTTL shd:fold after the fold = %v; want about the hour its sub-counters carried", d)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	del(ctx, rdb, keys...)
}
