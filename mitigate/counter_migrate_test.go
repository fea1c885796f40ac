package mitigate

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestReadCounterDuringMigration: the slot of a sharded counter's key migrates key by
// key, as redis-cli --cluster reshard does it, slowly. While the key and its list of
// sub-counters sit on different nodes, the reader's script (which names both) gets
// TRYAGAIN; once both are on the target, ASK. A read must ride through that, not hand
// either to the app, and return the exact value.
func TestReadCounterDuringMigration(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	topo := newTopology(t, TopologyOptions{Seeds: c.Addrs()})
	const key = "ctr:migrating"
	subs, err := topo.Names(key, 2, ShardedCounter)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, key, 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i, s := range subs {
		if err := ListSubCounter(ctx, rdb, key, s.Name); err != nil {
			t.Fatal(err)
		}
		if err := IncrCounter(ctx, rdb, key, subs[i:i+1], 10); err != nil {
			t.Fatal(err)
		}
	}
	const want = 25
	from := topo.PrimaryOfKey(key)
	var to string
	for _, a := range c.Addrs() {
		if a != from {
			to = a
			break
		}
	}
	do := func(addr string, args ...string) {
		t.Helper()
		if _, err := redistest.Command(addr, "", args...); err != nil {
			t.Fatalf("%s %s: %v", addr, strings.Join(args, " "), err)
		}
	}
	id := ids(t, c)
	host, port, _ := net.SplitHostPort(to)
	slot := strconv.Itoa(Slot(key))
	migrate := func(k string) { do(from, "MIGRATE", host, port, k, "0", "5000") }
	do(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", id[from])
	do(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", id[to])
	finished := false
	finish := func() {
		if finished {
			return
		}
		finished = true
		for _, a := range append([]string{to, from}, c.Addrs()...) {
			do(a, "CLUSTER", "SETSLOT", slot, "NODE", id[to])
		}
	}
	t.Cleanup(finish)

	read := func(phase string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := ReadListedCounter(rctx, rdb, key)
		if err != nil || got != want {
			t.Errorf("%s: ReadListedCounter = %d, %v; want %d, nil", phase, got, err, want)
		}
	}
	// The key on the target, its list still on the source: TRYAGAIN until the list
	// follows, 1.5 s later; then ASK, and TRYAGAIN for the keys a read names that do not
	// exist (the fold count), until the migration ends 1 s after that. One read starts
	// in each phase.
	migrate(key)
	var wg sync.WaitGroup
	wg.Go(func() { read("started with the key migrated, its list not yet") })
	time.Sleep(1500 * time.Millisecond)
	migrate(listName(key))
	wg.Go(func() { read("started with the key and list migrated, the slot still migrating") })
	time.Sleep(time.Second)
	finish()
	wg.Wait()
	read("after the migration")
}

// TestListSubCounterReplicated: a listing is as durable as a fold's steps. Lost in a
// failover, it would hide the sub-counter's increments from every reader for up to
// ListRenewal. ListSubCounter returns once the key's replica has the listing, and fails
// when the replica does not acknowledge it in time (the caller then increments the key
// itself: client.Counter).
func TestListSubCounterReplicated(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	topo := newTopology(t, TopologyOptions{Seeds: c.Addrs()})
	const key = "ctr:listed"
	subs, err := topo.Names(key, 2, ShardedCounter)
	if err != nil {
		t.Fatal(err)
	}
	var home *redistest.Server
	for _, n := range c.Nodes() {
		if n.Addr() == topo.PrimaryOfKey(key) {
			home = n
		}
	}
	replica := c.AddReplica(t, home)
	// A replica that is up can still miss ReplicaWait on a loaded machine (the -race
	// suite beside other work): what must hold is that the listing succeeds once it
	// acknowledges in time, which it does within a few tries.
	for try := 1; ; try++ {
		err := ListSubCounter(ctx, rdb, key, subs[0].Name)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotReplicated) || try == 20 {
			t.Fatalf("ListSubCounter with its replica up, try %d: %v; want nil", try, err)
		}
	}
	replica.Pause(t)
	err = ListSubCounter(ctx, rdb, key, subs[1].Name)
	replica.Resume(t)
	if err == nil || !errors.Is(err, ErrNotReplicated) {
		t.Errorf("ListSubCounter with its replica paused: %v; want ErrNotReplicated", err)
	}
}
