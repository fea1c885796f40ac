package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCacheLeaderCancelled: the caller that started a load gives up (its context is
// cancelled) while others wait for the load: it gets its context's error, the load goes
// on with a context that is not cancelled, and the others get the value.
func TestCacheLeaderCancelled(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	started, release := make(chan struct{}), make(chan struct{})
	var loadErr error
	load := func(ctx context.Context) ([]byte, error) {
		close(started)
		<-release
		loadErr = ctx.Err()
		return []byte("v"), nil
	}
	lctx, cancel := context.WithCancel(context.Background())
	leader := make(chan error)
	go func() { _, err := c.Get(lctx, "k", load); leader <- err }()
	<-started
	var wg sync.WaitGroup
	vals := make([]string, 5)
	errs := make([]error, 5)
	for i := range vals {
		wg.Go(func() { v, err := c.Get(context.Background(), "k", load); vals[i], errs[i] = string(v), err })
	}
	waitFor(t, func() bool { return c.Stats().Shared == 5 })
	cancel()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: err %v; want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	if loadErr != nil {
		t.Errorf("the load's context ended with the leader's: %v; want it alive", loadErr)
	}
	for i := range vals {
		if errs[i] != nil || vals[i] != "v" {
			t.Errorf("follower %d: %q, %v; want v", i, vals[i], errs[i])
		}
	}
}

// TestCacheLoadFailuresFreeTheKey: a load that fails — with an error, a panic, or its
// LoadTimeout — fails every caller waiting for it, caches nothing, gives its bulkhead slot
// back and leaves the key free for the next load.
func TestCacheLoadFailuresFreeTheKey(t *testing.T) {
	release := make(chan struct{})
	for _, tc := range []struct {
		name string
		load func(context.Context) ([]byte, error)
		want string
	}{
		{"error", func(context.Context) ([]byte, error) { <-release; return nil, errors.New("db down") }, "db down"},
		{"panic", func(context.Context) ([]byte, error) { <-release; panic("load bug") }, "load bug"},
		{"timeout", func(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() }, "deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t, CacheOptions{MaxLoads: 1, LoadTimeout: time.Second})
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Go(func() { _, errs[i] = c.Get(context.Background(), "k", tc.load) })
			}
			waitFor(t, func() bool { return c.Stats().Misses == 4 }) // all wait for one load
			if tc.name != "timeout" {
				release <- struct{}{}
			}
			wg.Wait()
			for i, err := range errs {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("caller %d: err %v; want one naming %q", i, err, tc.want)
				}
			}
			if st := c.Stats(); st.Loads != 1 || st.Entries != 0 || st.LoadErrors != 1 {
				t.Errorf("stats %+v; want Loads 1, Entries 0, LoadErrors 1", st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for _, key := range []string{"k", "other"} { // the key is free, the slot back
				if v, err := c.Get(ctx, key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil || string(v) != "v" {
					t.Fatalf("Get %s after the failed load: %q, %v; want v", key, v, err)
				}
			}
		})
	}
}

// TestCacheHardBoundExact: a stale value is served (stale-if-error) up to the instant
// before its hard TTL, never at it.
func TestCacheHardBoundExact(t *testing.T) {
	clock := newFakeClock()
	c := newTestCache(t, CacheOptions{Now: clock.Now, Jitter: -1, Beta: -1, TTL: time.Second, HardFactor: 3})
	ctx := context.Background()
	var fail atomic.Bool
	load := func(context.Context) ([]byte, error) {
		if fail.Load() {
			return nil, errors.New("down")
		}
		return []byte("v1"), nil
	}
	c.Get(ctx, "k", load)
	fail.Store(true)
	clock.Add(3*time.Second - time.Nanosecond)
	if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "v1" {
		t.Fatalf("1ns before the hard TTL: %q, %v; want v1", v, err)
	}
	waitFor(t, func() bool { return !inFlight(c, "k") })
	clock.Add(time.Nanosecond)
	if v, err := c.Get(ctx, "k", load); err == nil {
		t.Fatalf("at the hard TTL: %q; want the load's error", v)
	}
}

// TestCacheCloseEndsRefresh: Close ends a background refresh in progress and waits for
// it; after Close a stale value is served without starting another.
func TestCacheCloseEndsRefresh(t *testing.T) {
	clock := newFakeClock()
	c, err := NewCache(CacheOptions{Now: clock.Now, Jitter: -1, Beta: -1, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var loads atomic.Int32
	ended := make(chan error, 1)
	load := func(lctx context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			return []byte("v1"), nil
		}
		<-lctx.Done()
		ended <- lctx.Err()
		return nil, lctx.Err()
	}
	c.Get(ctx, "k", load)
	clock.Add(1500 * time.Millisecond)
	if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "v1" {
		t.Fatalf("stale Get: %q, %v; want v1", v, err)
	}
	waitFor(t, func() bool { return loads.Load() == 2 })
	c.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("refresh ended with %v; want context.Canceled", err)
		}
	default:
		t.Fatal("Close returned before the refresh ended")
	}
	if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "v1" {
		t.Fatalf("stale Get after Close: %q, %v; want v1", v, err)
	}
	if n, st := loads.Load(), c.Stats(); n != 2 || st.Refreshes != 1 {
		t.Errorf("loads %d, refreshes %d after Close; want 2 and 1", n, st.Refreshes)
	}
}

// TestCacheAccounting drives a small cache with random loads, replacements (of growing
// and shrinking values, some too large to cache), invalidations, expiries and retains
// from several goroutines, then checks that its counts of entries and bytes are exactly
// what its shards hold, and within the bounds.
func TestCacheAccounting(t *testing.T) {
	clock := newFakeClock()
	c := newTestCache(t, CacheOptions{Now: clock.Now, MaxEntries: 64, MaxBytes: 64 << 10, TTL: 10 * time.Millisecond, Rand: seeded(3)})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 3000 {
				key := fmt.Sprint("k", r.IntN(200))
				switch op := r.IntN(20); {
				case op == 0:
					c.Invalidate(key)
				case op == 1:
					clock.Add(time.Duration(r.IntN(30)) * time.Millisecond)
				case op == 2 && g == 0:
					n := r.IntN(200)
					c.retain(func(k string) bool { return len(k)%2 == n%2 })
				default:
					size := r.IntN(600)
					if r.IntN(50) == 0 {
						size = 5000 // over MaxBytes/16
					}
					c.Get(context.Background(), key, func(context.Context) ([]byte, error) {
						return []byte(strings.Repeat("x", size)), nil
					})
				}
			}
		})
	}
	wg.Wait()
	c.Close()
	var entries, bytes int64
	for i := range c.shards {
		s := &c.shards[i]
		var sb int64
		for j, e := range s.ring {
			if e.idx != j || s.m[e.key] != e {
				t.Fatalf("shard %d: ring[%d] is %q at idx %d; the map and the ring disagree", i, j, e.key, e.idx)
			}
			if want := int64(len(e.key)+len(e.val.Load().data)) + entryOverhead; e.size != want {
				t.Errorf("shard %d: %q has size %d; want %d", i, e.key, e.size, want)
			}
			sb += e.size
		}
		if len(s.m) != len(s.ring) || s.bytes != sb {
			t.Errorf("shard %d: %d keys, %d in the ring, bytes %d; want bytes %d", i, len(s.m), len(s.ring), s.bytes, sb)
		}
		if sb > c.maxBytes || len(s.ring) > c.maxEntries {
			t.Errorf("shard %d: %d entries, %d bytes; over its bounds %d, %d", i, len(s.ring), sb, c.maxEntries, c.maxBytes)
		}
		entries += int64(len(s.ring))
		bytes += sb
	}
	if st := c.Stats(); st.Entries != entries || st.Bytes != bytes {
		t.Errorf("stats: %d entries, %d bytes; the shards hold %d, %d", st.Entries, st.Bytes, entries, bytes)
	}
}
