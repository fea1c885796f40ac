package client

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// keysLike returns n keys prefix+i in the cache shard of key whose bit in shard.may is
// key's (same) or another (!same).
func keysLike(key, prefix string, n int, same bool) []string {
	h := xxhash.Sum64String(key)
	var out []string
	for i := 0; len(out) < n; i++ {
		k := prefix + strconv.Itoa(i)
		if xxhash.Sum64String(k)&(cacheShards-1) == h&(cacheShards-1) && (keyBit(k) == keyBit(key)) == same {
			out = append(out, k)
		}
	}
	return out
}

// cached reports whether c holds a value for key.
func cached(c *Cache, key string) bool { return c.shardOf(key).entry(key) != nil }

// TestCacheMayCollision: shard.may lets a write of a key the shard cannot hold skip the
// shard's locks, and a key whose bit collides with a cached key's neither drops that
// key's value nor clears its bit: the cached key's own write still drops it. may is
// cleared once the shard is empty, and retain rebuilds it from the keys it keeps.
func TestCacheMayCollision(t *testing.T) {
	c := newTestCache(t, CacheOptions{TTL: time.Hour})
	ctx := context.Background()
	a := "may:hot"
	b := keysLike(a, "may:b", 1, true)[0]  // a's shard and bit
	x := keysLike(a, "may:x", 1, false)[0] // a's shard, another bit
	s := c.shardOf(a)
	get := func(key string) {
		t.Helper()
		if _, err := c.Get(ctx, key, func(context.Context) ([]byte, error) { return []byte(key), nil }); err != nil {
			t.Fatal(err)
		}
	}

	if s.may.Load() != 0 {
		t.Fatalf("may of an empty shard = %#x; want 0", s.may.Load())
	}
	get(a)
	get(b)
	if s.may.Load() != keyBit(a) {
		t.Fatalf("may = %#x after caching a and b; want a's (and b's) bit %#x", s.may.Load(), keyBit(a))
	}
	c.Invalidate(b) // takes the locks (a's bit), finds b
	if cached(c, b) || !cached(c, a) {
		t.Fatalf("after a write of b: b cached %v, a cached %v; want false, true", cached(c, b), cached(c, a))
	}
	c.Invalidate(b) // again, nothing of b left: a stays
	if !cached(c, a) || s.may.Load()&keyBit(a) == 0 {
		t.Fatalf("a write of b, whose bit is a's, dropped a (%v) or its bit (may %#x)", !cached(c, a), s.may.Load())
	}
	c.Invalidate(a)
	if cached(c, a) {
		t.Fatal("a write of a left its value cached")
	}
	if s.may.Load() != 0 {
		t.Errorf("may = %#x once the shard is empty; want 0", s.may.Load())
	}
	if st := c.Stats(); st.Invalidations != 2 {
		t.Errorf("Invalidations = %d; want 2 (b, then a)", st.Invalidations)
	}

	// retain keeps a, drops x: may is a's bit alone, and a's write still drops a.
	get(a)
	get(x)
	c.retain(func(key string) bool { return key == a })
	if cached(c, x) || s.may.Load() != keyBit(a) {
		t.Fatalf("after retain: x cached %v, may %#x; want false, %#x", cached(c, x), s.may.Load(), keyBit(a))
	}
	c.Invalidate(x) // x's bit is clear now: skipped, a stays
	if !cached(c, a) {
		t.Fatal("a write of x dropped a")
	}
	c.Invalidate(a)
	if cached(c, a) {
		t.Fatal("a write of a left its value cached after retain")
	}
}

// TestCacheWriteRacingLoad: a load that read the value before a write, and stores it
// after the write's second invalidation, is not cached, though the write's first
// invalidation came before the load began (and skipped the shard, which held nothing).
// With churn, may is rebuilt twice while the load runs (the shard's last entry dropped,
// a new plan): the load's flight keeps its bit.
func TestCacheWriteRacingLoad(t *testing.T) {
	for _, churn := range []bool{false, true} {
		t.Run("churn="+strconv.FormatBool(churn), func(t *testing.T) { testCacheWriteRacingLoad(t, churn) })
	}
}

func testCacheWriteRacingLoad(t *testing.T, churn bool) {
	c := newTestCache(t, CacheOptions{TTL: time.Hour})
	ctx := context.Background()
	a := "race:hot"
	x := keysLike(a, "race:x", 1, false)[0]
	s := c.shardOf(a)
	var mu sync.Mutex // guards backend
	backend := "old"
	read, resume := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(resume) })
	defer release() // before Cleanup's Close, which waits for the load, when the test fails
	slow := func(context.Context) ([]byte, error) {
		mu.Lock()
		v := backend
		mu.Unlock()
		close(read)
		<-resume
		return []byte(v), nil
	}

	c.Invalidate(a) // the write's first invalidation: nothing to drop, nothing loading
	got := make(chan string, 1)
	go func() {
		v, err := c.Get(ctx, a, slow)
		if err != nil {
			t.Error(err)
		}
		got <- string(v)
	}()
	<-read // the load has read "old"
	if churn {
		c.Get(ctx, x, func(context.Context) ([]byte, error) { return []byte("x"), nil })
		c.Invalidate(x) // the shard's only entry goes: may is rebuilt
		c.retain(func(string) bool { return true })
	}
	if s.may.Load()&keyBit(a) == 0 {
		t.Fatalf("may = %#x while a's load runs; want a's bit %#x set", s.may.Load(), keyBit(a))
	}
	mu.Lock()
	backend = "new" // the write
	mu.Unlock()
	c.Invalidate(a) // the write's second invalidation
	release()
	if v := <-got; v != "old" { // its read began before the write
		t.Errorf("the racing Get returned %q; want old", v)
	}
	waitFor(t, func() bool { return !inFlight(c, a) })
	if cached(c, a) {
		t.Fatalf("the value read before the write is cached: %q", c.shardOf(a).entry(a).val.Load().data)
	}
	v, err := c.Get(ctx, a, func(context.Context) ([]byte, error) { return []byte("new"), nil })
	if err != nil || string(v) != "new" {
		t.Errorf("Get after the write = %q, %v; want new", v, err)
	}
}

// TestCacheWriteRacingLoadStress: writes race loads of a key while entries of other
// keys of its shard come and go (emptying the shard, new plans), which rebuilds may
// meanwhile; once all is quiet, the value cached, if any, is the last one written.
func TestCacheWriteRacingLoadStress(t *testing.T) {
	c := newTestCache(t, CacheOptions{TTL: time.Hour, Beta: -1})
	ctx := context.Background()
	key := "stress:hot"
	others := append(keysLike(key, "stress:o", 2, false), keysLike(key, "stress:c", 1, true)...)
	var mu sync.Mutex // guards version, the backend's value
	version := 0
	load := func(context.Context) ([]byte, error) {
		mu.Lock()
		v := version
		mu.Unlock()
		runtime.Gosched() // between reading and storing: where a write overtakes the load
		return []byte(strconv.Itoa(v)), nil
	}
	other := func(context.Context) ([]byte, error) { return []byte("o"), nil }
	for round := range 300 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			untilStop(&wg, stop, func(int) bool {
				if _, err := c.Get(ctx, key, load); err != nil {
					t.Error(err)
					return false
				}
				return true
			})
		}
		untilStop(&wg, stop, func(i int) bool {
			o := others[i%len(others)]
			c.Get(ctx, o, other)
			c.Invalidate(o)
			if i%4 == 0 {
				c.retain(func(string) bool { return true })
			}
			return true
		})
		for range 5 { // writes: invalidate, write, invalidate, as the hook does
			c.Invalidate(key)
			mu.Lock()
			version++
			mu.Unlock()
			c.Invalidate(key)
			runtime.Gosched()
		}
		close(stop)
		wg.Wait()
		waitFor(t, func() bool { return !inFlight(c, key) })
		if e := c.shardOf(key).entry(key); e != nil {
			mu.Lock()
			want := strconv.Itoa(version)
			mu.Unlock()
			if v := e.val.Load(); v != nil && v.data != want {
				t.Fatalf("round %d: %q cached after the write of %s", round, v.data, want)
			}
		}
	}
}

// TestL1WriteRacingLoad: through the hooks and a real Redis, SETs of an L1 key race GETs
// that load it, while writes of keys whose bits collide with it (or not) and an L1 key
// of the same shard coming and going churn the shard; once all is quiet, the L1 holds
// nothing of the key or Redis's value.
func TestL1WriteRacingLoad(t *testing.T) {
	srv := redistest.Start(t)
	hot := "l1race:hot"
	near := keysLike(hot, "l1race:near", 1, false)[0] // another L1 key of hot's shard
	same := keysLike(hot, "l1race:same", 1, true)[0]  // hot's bit, not in the plan
	ps := startPlanServer(t)
	ps.publish(l1Entry(hot, time.Hour, time.Hour), l1Entry(near, time.Hour, time.Hour))
	rdb, c := attach(t, standalone(srv.Addr()), ps, Options{})
	waitVersion(t, c, 2)
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { plain.Close() })
	ctx := context.Background()
	for round := range 30 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			untilStop(&wg, stop, func(int) bool {
				if err := rdb.Get(ctx, hot).Err(); err != nil && err != redis.Nil {
					t.Error(err)
					return false
				}
				return true
			})
		}
		untilStop(&wg, stop, func(i int) bool {
			rdb.Get(ctx, near)
			rdb.Set(ctx, near, i, 0) // near's value goes: the shard may empty
			rdb.Set(ctx, same, i, 0) // hot's bit: the slow path, finding nothing
			return true
		})
		for i := range 10 {
			if err := rdb.Set(ctx, hot, strconv.Itoa(round*10+i), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		wg.Wait()
		waitFor(t, func() bool { return !inFlight(c.l1, hot) })
		want, err := plain.Get(ctx, hot).Result()
		if err != nil {
			t.Fatal(err)
		}
		if e := c.l1.shardOf(hot).entry(hot); e != nil {
			if v := e.val.Load(); v != nil && v.data != want {
				t.Fatalf("round %d: the L1 holds %q; Redis has %q", round, v.data, want)
			}
		}
	}
	if st := c.Stats().L1; st.Loads < 30 || st.Invalidations < 30 {
		t.Errorf("L1 stats %+v: too few loads or invalidations for the writes to have raced them", st)
	}
}

// untilStop runs step(0), step(1), … in a goroutine of wg until stop is closed or step
// returns false.
func untilStop(wg *sync.WaitGroup, stop <-chan struct{}, step func(i int) bool) {
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if !step(i) {
				return
			}
		}
	})
}
