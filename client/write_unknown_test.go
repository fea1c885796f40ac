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
// must read the key from the original from then on, not serve the old value from a copy.
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
	if err := <-busy; err != nil {
		t.Fatalf("busy script: %v", err)
	}
	// The premise: Redis ran the SET after the script, the copies kept the old value.
	waitFor(t, func() bool { return plain.Get(ctx, key).Val() == "2" })
	for _, n := range names {
		if v := plain.Get(ctx, n).Val(); v != "1" {
			t.Fatalf("copy %s = %q; want 1 (not mirrored: the SET's outcome was unknown)", n, v)
		}
	}
	for i := range 20 {
		if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "2" {
			t.Fatalf("GET %d after the timed-out SET: %q, %v; want 2 from the original, not a copy's old value", i, v, err)
		}
	}
	if st := c.Stats().Copies; st.MirrorErrors != 1 {
		t.Errorf("copy stats %+v; want 1 mirror error (the timed-out SET)", st)
	}
	plain.Del(ctx, append([]string{key}, names...)...)
}
