package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestCacheLoadGoexit: a load that ends its goroutine without returning (runtime.Goexit,
// as t.FailNow or a log-and-exit helper does) must not leave its key loading for ever:
// its waiters get an error at once, the next Get of the key loads again, and its slot in
// the bulkhead is given back.
func TestCacheLoadGoexit(t *testing.T) {
	c := newTestCache(t, CacheOptions{MaxLoads: 1})
	get := func(key string, load func(context.Context) ([]byte, error)) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Get(ctx, key, load)
	}
	_, err := get("k", func(context.Context) ([]byte, error) { runtime.Goexit(); return nil, nil })
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with a load that calls runtime.Goexit: err %v; want the load's failure at once, not the caller's deadline", err)
	}
	ok := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	if v, err := get("k", ok); err != nil || string(v) != "v" {
		t.Fatalf("next Get of the key: %q, %v; want v (the key must not stay loading)", v, err)
	}
	if v, err := get("other", ok); err != nil || string(v) != "v" {
		t.Fatalf("Get of another key with MaxLoads 1: %q, %v; want v (the bulkhead slot must be given back)", v, err)
	}
	if st := c.Stats(); st.LoadErrors != 1 {
		t.Errorf("LoadErrors %d; want 1", st.LoadErrors)
	}
}

// sameShard returns a key other than key that falls in key's shard of c.
func sameShard(t *testing.T, c *Cache, key string) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprint("other:", i); c.shardOf(k) == c.shardOf(key) {
			return k
		}
	}
	t.Fatal("no key in the same shard")
	return ""
}

// TestCacheInvalidateOtherKeyKeepsLoad: invalidating one key must not throw away a load
// of another key that happens to share its shard; only a load of the invalidated key is
// not cached. (Otherwise, with writes to other cached keys, a hot key's loads are
// dropped and every read of it misses.)
func TestCacheInvalidateOtherKeyKeepsLoad(t *testing.T) {
	c := newTestCache(t, CacheOptions{TTL: time.Minute})
	ctx := context.Background()
	other := sameShard(t, c, "hot")
	if _, err := c.Get(ctx, other, func(context.Context) ([]byte, error) { return []byte("o"), nil }); err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	load := func(context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			close(started)
			<-release
		}
		return []byte("v"), nil
	}
	done := make(chan error)
	go func() { _, err := c.Get(ctx, "hot", load); done <- err }()
	<-started
	c.Invalidate(other) // a write of another key while hot's load runs
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "hot", load); err != nil || string(v) != "v" {
		t.Fatalf("Get: %q, %v; want v", v, err)
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("loads of hot %d; want 1: invalidating %q dropped hot's load", n, other)
	}
}

// TestCacheRefreshAfterRefreshEnds: a reader that found a stale value and lost the CPU
// while another reader's refresh ran to its end must not start a second refresh: the
// value it would refresh has already been replaced. The steps are run in that order by
// hand, as in TestCacheMissAfterLoadEnds.
func TestCacheRefreshAfterRefreshEnds(t *testing.T) {
	clock := newFakeClock()
	c := newTestCache(t, CacheOptions{Now: clock.Now, Jitter: -1, Beta: -1, TTL: time.Second})
	ctx := context.Background()
	var loads atomic.Int32
	load := func(context.Context) (string, bool, error) {
		return fmt.Sprint("v", loads.Add(1)), false, nil
	}
	if _, err := c.get(ctx, "k", time.Second, load); err != nil {
		t.Fatal(err)
	}
	clock.Add(1500 * time.Millisecond)
	s, e, v, state := c.lookup("k", c.now()) // the late reader looks first
	if state != foundStale {
		t.Fatalf("lookup past the soft TTL: state %d; want foundStale", state)
	}
	if _, err := c.get(ctx, "k", time.Second, load); err != nil { // another starts a refresh
		t.Fatal(err)
	}
	waitFor(t, func() bool { return loads.Load() == 2 && !inFlight(c, "k") })
	got, err := c.resolve(ctx, s, e, v, state, "k", time.Second, load)
	if err != nil || got == nil || got.data != "v1" {
		t.Fatalf("late stale read: %+v, %v; want v1", got, err)
	}
	waitFor(t, func() bool { return !inFlight(c, "k") })
	if n, st := loads.Load(), c.Stats(); n != 2 || st.Refreshes != 1 {
		t.Errorf("loads %d, refreshes %d; want 2 and 1: the late reader refreshed a value already refreshed", n, st.Refreshes)
	}
}

// TestCacheMaxEntriesExact: MaxEntries bounds the entries of the whole cache, also when
// it is not a multiple of the number of shards.
func TestCacheMaxEntriesExact(t *testing.T) {
	for _, max := range []int{16, 17, 31, 100} {
		c := newTestCache(t, CacheOptions{MaxEntries: max, TTL: time.Minute})
		for i := range 2000 {
			if _, err := c.Get(context.Background(), fmt.Sprint("key:", i), func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
				t.Fatal(err)
			}
		}
		if st := c.Stats(); st.Entries > int64(max) {
			t.Errorf("MaxEntries %d: %d entries after 2000 keys; want at most %d", max, st.Entries, max)
		}
	}
}
