package client

import (
	"context"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestCounterLostListing runs testCounterLostListing on a standalone and a cluster
// client.
func TestCounterLostListing(t *testing.T) {
	runSuite(t, []suiteTest{{"LostListing", testCounterLostListing}})
}

// testCounterLostListing: the list of a sharded counter's sub-counters loses its
// listings (as when the key's primary fails over before the SADD replicated). A Counter
// that holds the sharded_counter entry still counts the increments in the sub-counters
// the entry names, and the sub-counters listed by other entries too; once the entry's
// lease and the two after it are over, Get reads the list alone again.
func testCounterLostListing(t *testing.T, im impl) {
	ctx := context.Background()
	topo := topology(t, im)
	key := "shd:lost"
	subs, err := topo.Names(key, 3, mitigate.ShardedCounter)
	if err != nil {
		t.Fatal(err)
	}
	ps := startPlanServer(t)
	ps.publish(shardedEntry(key, subs, time.Hour))
	rdb, c := attach(t, im, ps, Options{Rand: seeded(9)})
	other := "{" + key + "}other-sub" // a sub-counter listed by another process's entry
	t.Cleanup(func() {
		del(context.Background(), rdb, append([]string{key, other, mitigate.SubCounterList(key)}, nodeNames(subs)...)...)
	})
	del(ctx, rdb, append([]string{key, other, mitigate.SubCounterList(key)}, nodeNames(subs)...)...)
	counter := c.Counter()
	for range 60 {
		if err := counter.Add(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Set(ctx, key, 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := counter.Get(ctx, key); err != nil || v != 65 {
		t.Fatalf("Get = %d, %v; want 65 (5 in the key, 60 in sub-counters)", v, err)
	}
	// The list names the sub-counters this client listed: the client's name for it is
	// mitigate's.
	if n := rdb.SCard(ctx, mitigate.SubCounterList(key)).Val(); n == 0 {
		t.Fatalf("SCARD %s = 0 after sharded Adds; want the sub-counters listed there", mitigate.SubCounterList(key))
	}
	// The listings are lost; another process's sub-counter is listed.
	if err := rdb.Del(ctx, mitigate.SubCounterList(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := mitigate.ListSubCounter(ctx, rdb, key, other); err != nil {
		t.Fatal(err)
	}
	if err := rdb.IncrBy(ctx, other, 7).Err(); err != nil {
		t.Fatal(err)
	}
	for range 40 { // this process listed its sub-counters already: it does not again
		if err := counter.Add(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := counter.Get(ctx, key); err != nil || v != 112 {
		t.Fatalf("Get with the listings lost = %d, %v; want 112 (5 in the key, 100 in the plan's sub-counters, 7 in a listed one)", v, err)
	}
	if v, err := mitigate.ReadListedCounter(ctx, rdb, key); err != nil || v >= 112 {
		t.Errorf("ReadListedCounter = %d, %v; want less than 112 (the test's premise: the list lost listings)", v, err)
	}
}

// nodeNames returns the names of nodes.
func nodeNames(nodes []mitigate.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}
