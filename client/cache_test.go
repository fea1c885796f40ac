package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newTestCache(t *testing.T, o CacheOptions) *Cache {
	t.Helper()
	c, err := NewCache(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestXFetchProbability checks the early-refresh rule against its law: at time-to-expiry
// t the refresh fires with probability exp(−t/(δβ)). The draws come from a seeded
// source, so the measured frequencies are the same on every run.
func TestXFetchProbability(t *testing.T) {
	const draws = 200_000
	delta := 10 * time.Millisecond
	for _, beta := range []float64{0.5, 1, 2} {
		c := newTestCache(t, CacheOptions{Rand: seeded(42), Beta: beta})
		for _, k := range []float64{0, 0.25, 1, 2, 4} {
			ttx := time.Duration(k * float64(delta)) // time to expiry
			expiry := time.Hour
			now := expiry - ttx
			fired := 0
			for range draws {
				if xfetch(now, expiry, delta, c.beta, c.uniform()) {
					fired++
				}
			}
			got := float64(fired) / draws
			want := math.Exp(-float64(ttx) / (float64(delta) * beta))
			// 5 standard deviations of a binomial proportion, at least 0.002.
			tol := max(5*math.Sqrt(want*(1-want)/draws), 0.002)
			if math.Abs(got-want) > tol {
				t.Errorf("β %v, time to expiry %v (δ %v): refresh frequency %.4f; want exp(−t/(δβ)) = %.4f ± %.4f", beta, ttx, delta, got, want, tol)
			}
		}
	}
}

// TestXFetchInCache checks that the cache refreshes early, in the background, while
// readers keep getting the valid value, and that β < 0 turns early refresh off.
func TestXFetchInCache(t *testing.T) {
	for _, tc := range []struct {
		beta      float64
		wantEarly bool
	}{{1, true}, {-1, false}} {
		t.Run(fmt.Sprint("beta=", tc.beta), func(t *testing.T) {
			clock := newFakeClock()
			c := newTestCache(t, CacheOptions{Now: clock.Now, Rand: seeded(1), Beta: tc.beta, Jitter: -1, TTL: time.Second})
			var loads atomic.Int32
			gate := make(chan struct{}, 1)
			load := func(context.Context) ([]byte, error) {
				n := loads.Add(1)
				if n > 1 {
					<-gate // the refresh waits: readers must not
				}
				clock.Add(100 * time.Millisecond) // δ = 100ms
				return []byte(fmt.Sprint("v", n)), nil
			}
			ctx := context.Background()
			if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "v1" {
				t.Fatalf("first Get: %q, %v; want v1", v, err)
			}
			// The value is fresh until 1s after the load started; 10ms before that,
			// exp(−10/100) ≈ 0.9 per read: a few reads start a refresh.
			clock.Add(890 * time.Millisecond)
			for i := range 50 {
				if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "v1" {
					t.Fatalf("read %d: %q, %v; want v1 (no reader waits for the refresh)", i, v, err)
				}
			}
			st := c.Stats()
			if got := st.EarlyRefreshes > 0; got != tc.wantEarly {
				t.Fatalf("early refreshes %d; want >0: %v", st.EarlyRefreshes, tc.wantEarly)
			}
			if st.EarlyRefreshes > 1 {
				t.Errorf("early refreshes %d; want 1 (single-flight)", st.EarlyRefreshes)
			}
			gate <- struct{}{}
			c.Close() // waits for the refresh
			if tc.wantEarly && loads.Load() != 2 {
				t.Errorf("loads %d; want 2", loads.Load())
			}
		})
	}
}

// TestCacheSingleFlight: 50 concurrent misses of one key share one load; a failed load
// is shared by its waiters and not cached, and the next Get retries.
func TestCacheSingleFlight(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	var loads atomic.Int32
	release := make(chan struct{})
	fail := true
	load := func(context.Context) ([]byte, error) {
		loads.Add(1)
		<-release
		if fail {
			return nil, errors.New("database down")
		}
		return []byte("v"), nil
	}
	run := func() []error {
		base := c.Stats().Misses
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for i := range errs {
			wg.Go(func() { _, errs[i] = c.Get(context.Background(), "k", load) })
		}
		// Wait until all 50 have joined the flight before letting it finish.
		deadline := time.Now().Add(5 * time.Second)
		for c.Stats().Misses < base+50 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		release <- struct{}{}
		wg.Wait()
		return errs
	}
	errs := run()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "database down") {
			t.Fatalf("caller %d: err %v; want the shared load's error", i, err)
		}
	}
	if got := loads.Load(); got != 1 {
		t.Fatalf("loads %d after 50 concurrent misses; want 1", got)
	}
	fail = false // the failed value was not cached: the next round loads again
	errs = run()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d after recovery: %v", i, err)
		}
	}
	if got := loads.Load(); got != 2 {
		t.Fatalf("loads %d; want 2 (one failed, one retried)", got)
	}
	if st := c.Stats(); st.Shared != 98 || st.LoadErrors != 1 {
		t.Errorf("stats %+v; want Shared 98, LoadErrors 1", st)
	}
}

// TestCacheMissAfterLoadEnds: a read that found nothing and then lost the CPU while
// another caller's load ran to its end shares that load's cached value; it does not load
// again. The steps are run in that order by hand, so the test does not depend on timing.
func TestCacheMissAfterLoadEnds(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	var loads atomic.Int32
	load := func(context.Context) (string, bool, error) {
		loads.Add(1)
		return "v", false, nil
	}
	ctx := context.Background()
	s, e, v, state := c.lookup("k", c.now()) // the late reader looks first
	if state != notFound {
		t.Fatalf("lookup of an empty cache: state %d; want notFound", state)
	}
	if _, err := c.get(ctx, "k", time.Minute, load); err != nil { // another loads and caches
		t.Fatal(err)
	}
	got, err := c.resolve(ctx, s, e, v, state, "k", time.Minute, load)
	if err != nil || got == nil || got.data != "v" {
		t.Fatalf("late miss: %+v, %v; want the cached v", got, err)
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("loads %d; want 1: the late miss loaded again", n)
	}
	if st := c.Stats(); st.Misses != 2 || st.Shared != 1 {
		t.Errorf("stats %+v; want Misses 2, Shared 1", st)
	}
}

// TestCacheInvalidateAsLoadEnds: an invalidation (a write through this client) that
// races a load's end must drop the load's value, stored or not: it was read before the
// write. The load stores its value while the invalidation waits for the flight lock,
// held here, and the two then meet there. (The order this cannot force, the load's end
// between an invalidation's look at the entries and its look at the flights, is why
// invalidate now makes both looks under the flight lock.)
func TestCacheInvalidateAsLoadEnds(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	s := c.shardOf("k")
	for i := range 20 {
		release := make(chan struct{})
		f, leader := c.join(context.Background(), s, "k", time.Minute, func(context.Context) (string, bool, error) {
			<-release
			return "before the write", false, nil
		}, true)
		if !leader {
			t.Fatalf("round %d: the load did not start", i)
		}
		s.fmu.Lock()
		invalidated := make(chan struct{})
		go func() { c.invalidate("k"); close(invalidated) }()
		time.Sleep(10 * time.Millisecond) // the invalidation gets as far as the flight lock
		close(release)
		waitFor(t, func() bool { return s.entry("k") != nil }) // the load stored its value
		s.fmu.Unlock()
		<-f.done
		<-invalidated
		if e := s.entry("k"); e != nil {
			t.Fatalf("round %d: %q still cached after the invalidation", i, e.val.Load().data)
		}
	}
}

// TestCacheSoftHard walks a value through its life: fresh, stale while a refresh runs,
// stale-if-error within the hard TTL, and never past it.
func TestCacheSoftHard(t *testing.T) {
	clock := newFakeClock()
	c := newTestCache(t, CacheOptions{Now: clock.Now, Jitter: -1, Beta: -1, TTL: time.Second})
	ctx := context.Background()
	var fail atomic.Bool
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) {
		n := loads.Add(1)
		if fail.Load() {
			return nil, errors.New("down")
		}
		return []byte(fmt.Sprint("v", n)), nil
	}
	get := func() (string, error) { b, err := c.Get(ctx, "k", load); return string(b), err }
	if v, _ := get(); v != "v1" {
		t.Fatalf("got %q; want v1", v)
	}
	clock.Add(999 * time.Millisecond)
	if v, _ := get(); v != "v1" || loads.Load() != 1 {
		t.Fatalf("fresh: %q after %d loads; want v1 after 1", v, loads.Load())
	}
	// Past the soft TTL the refresh fails: the stale value keeps being served.
	fail.Store(true)
	clock.Add(2 * time.Millisecond)
	if v, err := get(); v != "v1" || err != nil {
		t.Fatalf("stale: %q, %v; want v1", v, err)
	}
	waitFor(t, func() bool { return loads.Load() == 2 && c.Stats().LoadErrors == 1 })
	clock.Add(990 * time.Millisecond) // 1.991s: still within the hard TTL of 2s
	if v, err := get(); v != "v1" || err != nil {
		t.Fatalf("stale-if-error: %q, %v; want v1", v, err)
	}
	waitFor(t, func() bool { return c.Stats().LoadErrors == 2 })
	clock.Add(10 * time.Millisecond) // past the hard TTL: never served
	if v, err := get(); err == nil {
		t.Fatalf("past the hard TTL: got %q; want the load's error", v)
	}
	fail.Store(false)
	if v, err := get(); err != nil || !strings.HasPrefix(v, "v") || v == "v1" {
		t.Fatalf("after recovery: %q, %v; want a new value", v, err)
	}
	if st := c.Stats(); st.Stale != 2 || st.Refreshes != 2 {
		t.Errorf("stats %+v; want Stale 2, Refreshes 2", st)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCacheJitter: soft TTLs spread over ±Jitter, never beyond.
func TestCacheJitter(t *testing.T) {
	c := newTestCache(t, CacheOptions{Rand: seeded(7), TTL: time.Second})
	lo, hi := time.Hour, time.Duration(0)
	for i := range 2000 {
		key := fmt.Sprint("k", i)
		if _, err := c.Get(context.Background(), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
		_, e, _, _ := c.lookup(key, c.now())
		v := e.val.Load()
		ttl := v.hard - v.soft // soft = start + ttl, hard = start + 2·ttl
		lo, hi = min(lo, ttl), max(hi, ttl)
	}
	if lo < 900*time.Millisecond || hi > 1100*time.Millisecond || hi-lo < 150*time.Millisecond {
		t.Errorf("TTLs from %v to %v; want spread over 900ms…1.1s", lo, hi)
	}
}

// TestCacheBounds: the cache stays within MaxEntries and MaxBytes, evicting.
func TestCacheBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  CacheOptions
		value int
		check func(CacheStats) bool
	}{
		{"entries", CacheOptions{MaxEntries: 64}, 10, func(s CacheStats) bool { return s.Entries <= 64 }},
		{"bytes", CacheOptions{MaxBytes: 64 << 10}, 1000, func(s CacheStats) bool { return s.Bytes <= 64<<10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t, tc.opts)
			val := []byte(strings.Repeat("x", tc.value))
			for i := range 5000 {
				if _, err := c.Get(context.Background(), fmt.Sprint("key:", i), func(context.Context) ([]byte, error) { return val, nil }); err != nil {
					t.Fatal(err)
				}
				if st := c.Stats(); !tc.check(st) {
					t.Fatalf("after %d keys: %+v; over the bound", i+1, st)
				}
			}
			if st := c.Stats(); st.Evictions == 0 || st.Entries == 0 {
				t.Errorf("stats %+v; want evictions and some entries", st)
			}
		})
	}
	// A value over MaxBytes/16 is returned but not cached.
	c := newTestCache(t, CacheOptions{MaxBytes: 64 << 10})
	big := make([]byte, 8<<10)
	if v, err := c.Get(context.Background(), "big", func(context.Context) ([]byte, error) { return big, nil }); err != nil || len(v) != len(big) {
		t.Fatalf("big value: %d bytes, %v", len(v), err)
	}
	if st := c.Stats(); st.Entries != 0 {
		t.Errorf("entries %d; want 0 (too big to cache)", st.Entries)
	}
}

// TestCacheInvalidateDuringLoad: a load in progress when its key is invalidated is not
// cached, and the next Get loads again.
func TestCacheInvalidateDuringLoad(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	started, release := make(chan struct{}), make(chan struct{})
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			close(started)
			<-release
			return []byte("old"), nil
		}
		return []byte("new"), nil
	}
	done := make(chan []byte)
	go func() { v, _ := c.Get(context.Background(), "k", load); done <- v }()
	<-started
	c.Invalidate("k")
	close(release)
	if v := <-done; string(v) != "old" {
		t.Fatalf("the caller whose read began first got %q; want old", v)
	}
	if v, _ := c.Get(context.Background(), "k", load); string(v) != "new" {
		t.Fatalf("after the invalidation got %q; want new", v)
	}
}

// TestCacheBulkhead: no more than MaxLoads loads run at once; a caller over the cap waits
// as long as its context allows; one with a stale value gets it without waiting.
func TestCacheBulkhead(t *testing.T) {
	c := newTestCache(t, CacheOptions{MaxLoads: 2})
	var running, peak atomic.Int32
	release := make(chan struct{})
	load := func(context.Context) ([]byte, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return []byte("v"), nil
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { c.Get(context.Background(), fmt.Sprint("k", i), load) })
	}
	waitFor(t, func() bool { return c.Stats().BulkheadWaits == 8 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := c.Get(ctx, "late", load)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a caller over the cap whose context ends: err %v; want context.DeadlineExceeded", err)
	}
	close(release)
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrent loads %d; want 2 (MaxLoads)", p)
	}

	// Stale-if-busy: with the bulkhead full, a stale value is served at once.
	clock := newFakeClock()
	c2 := newTestCache(t, CacheOptions{MaxLoads: 1, Now: clock.Now, Jitter: -1, Beta: -1})
	ok := func(context.Context) ([]byte, error) { return []byte("v1"), nil }
	c2.Get(context.Background(), "a", ok)
	block := make(chan struct{})
	go c2.Get(context.Background(), "b", func(context.Context) ([]byte, error) { <-block; return nil, nil })
	waitFor(t, func() bool { return c2.Stats().Loads == 2 })
	clock.Add(1500 * time.Millisecond)
	start := time.Now()
	v, err := c2.Get(context.Background(), "a", ok)
	if err != nil || string(v) != "v1" || time.Since(start) > time.Second {
		t.Errorf("stale read with the bulkhead full: %q, %v after %v; want v1 at once", v, err, time.Since(start))
	}
	close(block)
}

// TestCacheAbsent: redis.Nil from a load is cached as an absent value.
func TestCacheAbsent(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) { loads.Add(1); return nil, redis.Nil }
	for range 3 {
		if _, err := c.Get(context.Background(), "none", load); err != redis.Nil {
			t.Fatalf("err %v; want redis.Nil", err)
		}
	}
	if loads.Load() != 1 {
		t.Errorf("loads %d; want 1", loads.Load())
	}
}

func TestNewCacheErrors(t *testing.T) {
	for _, tc := range []struct {
		opts CacheOptions
		want string
	}{
		{CacheOptions{MaxEntries: 3}, "MaxEntries 3"},
		{CacheOptions{MaxBytes: 10}, "MaxBytes 10"},
		{CacheOptions{TTL: time.Microsecond}, "TTL 1µs"},
		{CacheOptions{HardFactor: 0.5}, "HardFactor 0.5"},
		{CacheOptions{Jitter: 0.9}, "Jitter 0.9"},
		{CacheOptions{Beta: 1000}, "Beta 1000"},
		{CacheOptions{LoadTimeout: time.Hour}, "LoadTimeout 1h0m0s"},
		{CacheOptions{MaxLoads: -1}, "MaxLoads -1"},
	} {
		_, err := NewCache(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewCache(%+v): %v; want an error naming %q", tc.opts, err, tc.want)
		}
	}
}

// TestCacheTooBigRefreshDropsOld: a refresh that loads a value too large to cache must
// not leave the older value in place, or reads keep getting it after Redis answered with
// the new one, up to the hard TTL, and every read starts another refresh.
func TestCacheTooBigRefreshDropsOld(t *testing.T) {
	clock := newFakeClock()
	c := newTestCache(t, CacheOptions{Now: clock.Now, Jitter: -1, Beta: -1, TTL: time.Second, MaxBytes: 64 << 10})
	ctx := context.Background()
	big := strings.Repeat("x", 8<<10) // over MaxBytes/16
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			return []byte("small"), nil
		}
		return []byte(big), nil
	}
	if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "small" {
		t.Fatalf("first Get: %q, %v; want small", v, err)
	}
	clock.Add(1100 * time.Millisecond) // past the soft TTL: stale, refresh in the background
	if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "small" {
		t.Fatalf("stale Get: %q, %v; want small while the refresh runs", v, err)
	}
	waitFor(t, func() bool { return loads.Load() == 2 && c.Stats().Refreshes == 1 && !inFlight(c, "k") })
	v, err := c.Get(ctx, "k", load)
	if err != nil || string(v) == "small" {
		t.Fatalf("Get after a refresh loaded the new value: %d bytes %q…, %v; want the new value, not the old one", len(v), v[:min(len(v), 8)], err)
	}
}

// inFlight reports whether a load of key is in progress in c.
func inFlight(c *Cache, key string) bool {
	s := c.shardOf(key)
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.flights[key] != nil
}

// TestCacheGetAfterClose: Get still works after Close (without caching): its load is not
// ended by the Close that came before it.
func TestCacheGetAfterClose(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	c.Close()
	load := func(ctx context.Context) ([]byte, error) {
		select { // a query that takes a moment, as a database's does
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return []byte("v"), nil
		}
	}
	if v, err := c.Get(context.Background(), "k", load); err != nil || string(v) != "v" {
		t.Fatalf("Get after Close: %q, %v; want v", v, err)
	}
	if st := c.Stats(); st.Entries != 0 {
		t.Errorf("entries %d after Close; want 0 (no caching)", st.Entries)
	}
}

// TestCacheLoadPanics: a load that panics runs in the cache's goroutine, where no
// recover of the app's (net/http's, for one) can catch it: it must come back to the
// caller, not crash the process, and the next Get must load again.
func TestCacheLoadPanics(t *testing.T) {
	c := newTestCache(t, CacheOptions{})
	v, err := c.Get(context.Background(), "k", func(context.Context) ([]byte, error) { panic("load bug") })
	if err == nil {
		t.Fatalf("Get with a panicking load: %q, nil; want an error", v)
	}
	t.Logf("Get with a panicking load: %v", err)
	if v, err := c.Get(context.Background(), "k", func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil || string(v) != "v" {
		t.Fatalf("Get after a panicking load: %q, %v; want v", v, err)
	}
}
