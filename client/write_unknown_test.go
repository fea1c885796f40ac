package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// busyScript holds the Redis node that owns KEYS[1] for ARGV[1] milliseconds: a
// script runs alone, so every other command waits in its socket until it ends.
var busyScript = redis.NewScript(`
local t = redis.call('TIME')
local until_us = (t[1] * 1000000 + t[2]) + ARGV[1] * 1000
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us
return 1`)

// testWriteOutcomeUnknown: a write of a split key that times out may still happen
// (Redis runs it once it gets to it), and then the copies hold the old value. The client
// must not serve the old value from a copy once the original has answered the new one,
// and must read the copies again as soon as a repair has copied the original to them,
// without waiting for a new plan.
func testWriteOutcomeUnknown(t *testing.T, im impl) {
	ps := startPlanServer(t)
	key := "{w}cp:unknown"
	names := copyNames(key, 2)
	ps.publish(copiesEntry(key, names, time.Minute))
	var rdb redis.UniversalClient
	const timeout = 150 * time.Millisecond
	if im.name == "standalone" {
		rdb = redis.NewClient(&redis.Options{Addr: im.addrs[0], ReadTimeout: timeout, MaxRetries: -1})
	} else {
		// MaxRedirects -1: go-redis would otherwise send a timed-out command again.
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: im.addrs, ReadTimeout: timeout, MaxRetries: -1, MaxRedirects: -1})
	}
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{})
	version := c.Stats().Plan.Version
	ctx := context.Background()
	if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	plain := im.new()
	defer plain.Close()
	for _, n := range names {
		if v := plain.Get(ctx, n).Val(); v != "1" {
			t.Fatalf("copy %s = %q after SET 1; want 1", n, v)
		}
	}

	busy := make(chan error, 1)
	go func() { busy <- busyScript.Run(ctx, plain, []string{key}, 800).Err() }()
	time.Sleep(100 * time.Millisecond) // the script holds the node
	err := rdb.Set(ctx, key, "2", 0).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("SET during the busy script: %v; want a timeout (the test needs an unknown outcome)", err)
	}
	// Reads from now on: none may return 1 once one has returned 2 (monotonic), and
	// reads go back to the copies soon after the original answers again.
	reads := c.Stats().Copies.Reads
	var seen2 time.Time
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; ; n++ {
		v, err := rdb.Get(ctx, key).Result()
		switch {
		case err != nil:
			// The node is busy: a timed-out read, fine while the script runs.
		case v == "2":
			if seen2.IsZero() {
				seen2 = time.Now()
			}
		case v == "1" && !seen2.IsZero():
			t.Fatalf("GET %d returned 1 after an earlier GET returned 2: reads went back in time", n)
		case v != "1":
			t.Fatalf("GET %d: %q; want 1 or 2", n, v)
		}
		if !seen2.IsZero() && c.Stats().Copies.Reads > reads {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("copy reads did not resume within 5s of the timed-out SET (2 seen: %v, copy stats %+v, plan version %d)",
				!seen2.IsZero(), c.Stats().Copies, c.Stats().Plan.Version)
		}
		time.Sleep(time.Millisecond)
	}
	if err := <-busy; err != nil {
		t.Fatalf("busy script: %v", err)
	}
	// Back on the copies, which hold the write's result; no new plan was needed.
	for _, n := range names {
		if v := plain.Get(ctx, n).Val(); v != "2" {
			t.Errorf("copy %s = %q once copy reads resumed; want 2", n, v)
		}
	}
	before := c.Stats().Copies.Reads
	for i := range 20 {
		if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "2" {
			t.Fatalf("GET %d after the repair: %q, %v; want 2", i, v, err)
		}
	}
	st := c.Stats()
	if got := st.Copies.Reads - before; got != 20 {
		t.Errorf("copy reads after the repair %d of 20; want 20", got)
	}
	if st.Plan.Version != version {
		t.Errorf("plan version %d; want %d (the repair must not need a new plan)", st.Plan.Version, version)
	}
	if st.Copies.MirrorErrors != 1 {
		t.Errorf("copy stats %+v; want 1 mirror error (the timed-out SET)", st.Copies)
	}
	plain.Del(ctx, append([]string{key}, names...)...)
}
