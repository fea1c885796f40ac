package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
)

// CacheOptions configures a Cache: the L1 that Attach keeps for the plan's keys, or one
// made with NewCache for app code. The zero value works: up to 100,000 entries and
// 64 MiB, a 1s TTL for Get (the hook uses the plan's TTL), a hard TTL of twice the TTL,
// ±10 % jitter, early refresh with β = 1, 2s load timeout, at most 64 concurrent loads.
// Attach makes two caches with these options, the L1 and Get's, each bounded by
// MaxEntries and MaxBytes on its own (see Options.Cache).
type CacheOptions struct {
	// MaxEntries bounds the number of cached values; default 100,000. Allowed: 0 (the
	// default) or 16 to 16,777,216.
	MaxEntries int
	// MaxBytes bounds the cached keys and values plus 208 bytes of bookkeeping per entry;
	// default 64 MiB. A value larger than MaxBytes/16 is returned but not cached.
	// Allowed: 0 (the default) or 64 KiB to 64 GiB.
	MaxBytes int64
	// TTL is how long Get keeps a value fresh (the soft TTL); default 1s. The hook's L1
	// uses the TTL of each key's plan entry instead. Allowed: 0 (the default) or 1ms to 1h.
	TTL time.Duration
	// HardFactor sets the hard TTL to HardFactor × TTL: between the soft and the hard TTL
	// a stale value is served while one background refresh runs (and while refreshes fail:
	// stale-if-error); past it, never. Default 2. Allowed: 0 (the default) or 1 to 100.
	HardFactor float64
	// Jitter spreads each value's TTLs by a random fraction in ±Jitter, so values loaded
	// together do not expire together; default 0.1. A negative value turns it off.
	// Allowed: up to 0.5.
	Jitter float64
	// Beta is XFetch's β: larger refreshes earlier. Default 1; a negative value turns
	// early refresh off. Allowed: up to 100.
	Beta float64
	// LoadTimeout bounds each load; default 2s. The load's context ends after it, and
	// the callers waiting for the load stop waiting a tenth of it later (at least 10ms),
	// even when the load ignores its context: they get an error that names LoadTimeout
	// and wraps context.DeadlineExceeded, and so do the callers that miss the key while
	// that load runs on. Such a load, which cannot be stopped, goes on in the background and its
	// value is cached if it succeeds. The same holds for the L1's loads (reads of Redis,
	// whose I/O go-redis bounds by the context only with ContextTimeoutEnabled).
	// Allowed: 0 (the default) or 1ms to 1m.
	LoadTimeout time.Duration
	// MaxLoads caps the loads running at once in the process (a bulkhead): a cold start
	// cannot send more than this many requests to the backend. Callers over the cap wait
	// for a slot (as long as their context allows) or get the stale value they are
	// refreshing. Default 64. Allowed: 0 (the default) to 65,536.
	MaxLoads int
	// Now is the clock; default time.Now. Its readings must carry a monotonic part, or
	// never go backwards.
	Now func() time.Time
	// Rand returns uniformly distributed numbers for jitter and early refresh; it must be
	// safe for concurrent use. Default: math/rand/v2's Uint64. Tests pass a seeded one.
	Rand func() uint64
}

// Defaults of CacheOptions.
const (
	DefaultMaxEntries  = 100_000
	DefaultMaxBytes    = 64 << 20
	DefaultTTL         = time.Second
	DefaultHardFactor  = 2
	DefaultJitter      = 0.1
	DefaultBeta        = 1
	DefaultLoadTimeout = 2 * time.Second
	DefaultMaxLoads    = 64
)

// CacheStats counts what a Cache did since it was made.
type CacheStats struct {
	// Hits are reads answered with a fresh value, Stale those answered with a value past
	// its soft TTL (within its hard TTL), Misses those that had to wait for a load.
	Hits, Stale, Misses uint64
	// Loads are calls of the load function (reads of Redis, for the L1); Shared are
	// misses that waited for another caller's load instead of loading themselves.
	Loads, Shared uint64
	// LoadErrors are loads that failed (the error went to every waiter; nothing cached).
	LoadErrors uint64
	// Refreshes are background refreshes started, after the soft TTL or early;
	// EarlyRefreshes those that XFetch started before the soft TTL.
	Refreshes, EarlyRefreshes uint64
	// Evictions are entries dropped to stay within MaxEntries and MaxBytes;
	// Invalidations entries dropped because the key was written or Invalidate was called.
	Evictions, Invalidations uint64
	// BulkheadWaits are loads that had to wait for a slot under MaxLoads.
	BulkheadWaits uint64
	// Entries and Bytes are the cache's current size.
	Entries, Bytes int64
}

// Cache is a bounded in-process cache with stampede protection: one load per key at a
// time (single-flight), probabilistic early refresh (XFetch), soft and hard expiry with
// stale-while-revalidate and stale-if-error, jittered TTLs, and a cap on concurrent loads.
// It is safe for concurrent use. Close waits for background refreshes.
type Cache struct {
	shards      [cacheShards]shard
	maxEntries  int   // per shard
	maxBytes    int64 // per shard
	ttl         time.Duration
	hardFactor  float64
	jitter      float64
	beta        float64
	loadTimeout time.Duration
	sem         chan struct{} // bulkhead: one token per running load
	now         func() time.Time
	rand        func() uint64
	epoch       time.Time

	base   context.Context // cancelled by Close: ends loads
	cancel context.CancelFunc
	cmu    sync.RWMutex   // guards the setting of closed against wg.Add: none after Close's Wait began
	wg     sync.WaitGroup // load goroutines started before Close
	closed atomic.Bool

	size       atomic.Int64 // entries across shards, read by the hook's fast path
	hits       atomic.Uint64
	stale      atomic.Uint64
	misses     atomic.Uint64
	loads      atomic.Uint64
	shared     atomic.Uint64
	loadErrors atomic.Uint64
	refreshes  atomic.Uint64
	early      atomic.Uint64
	evictions  atomic.Uint64
	invals     atomic.Uint64
	semWaits   atomic.Uint64
}

// cacheShards is the number of shards, a power of two.
const cacheShards = 16

// entryOverhead is what an entry costs beyond its key and value, for MaxBytes: the entry,
// its value's header, its map slot and ring slot, and size-class rounding, measured by
// TestCacheEntryOverheadCovers (at most 187 bytes for a 14-byte key and a 100-byte
// value, from 3,000 to 70,000 entries), with a margin.
const entryOverhead = 208

type shard struct {
	mu    sync.RWMutex      // guards m, ring, hand and bytes
	m     map[string]*entry // the cached keys
	ring  []*entry          // CLOCK order for eviction; entry.idx is its position
	hand  int
	bytes int64
	gen   atomic.Uint64 // bumped (under mu) by retain when it drops entries of the shard

	fmu     sync.Mutex         // guards flights; may be held while taking mu, never the reverse
	flights map[string]*flight // loads in progress, by key

	// may has the bit (keyBit) of every key in m or in flights, and maybe of others: a
	// write of a key whose bit is clear has nothing to invalidate here, and does not
	// take fmu (an L1 of a few hot keys would otherwise lock a shard twice per write of
	// every key). A load sets its key's bit under fmu when it joins flights, before it
	// reads the backend, and store sets it again under mu for the entry it adds. Bits
	// are cleared only by rebuildMay, under fmu and mu, which keeps those of the keys
	// in m and flights then.
	//
	// Why a write cannot leave cached a value read before it: the load that read it set
	// its key's bit (joinSeen, under fmu) before reading the backend, so before Redis
	// applied the write, so before the invalidation that follows the write loads may
	// (sync/atomic is sequentially consistent). The bit stays set while the key is in
	// flights or m, since rebuildMay runs under fmu and mu, and a load stores its value
	// (under mu) before it leaves flights (under fmu): a rebuild sees the key in one of
	// them, or in neither, and then the flight was dropped by an invalidation (f.dropped:
	// store caches nothing), failed or was kept out by retain (gen), or its value was
	// removed already: nothing is left to drop. So the invalidation after the write sees
	// the bit whenever there is something to drop, and goes on as it did without may.
	may atomic.Uint64
	_   [32]byte // keep neighbouring shards' locks off one cache line
}

type entry struct {
	key  string
	val  atomic.Pointer[value]
	ref  atomic.Bool // CLOCK's reference bit, set by reads
	idx  int         // position in shard.ring; guarded by shard.mu
	size int64       // guarded by shard.mu
}

// value is one loaded value and its lifetime, in durations since the cache's epoch.
type value struct {
	data   string
	absent bool          // the key did not exist (redis.Nil): cached like a value
	soft   time.Duration // fresh until here
	hard   time.Duration // served stale until here, never after
	delta  time.Duration // how long the load took (XFetch's δ)
	early  time.Duration // XFetch runs only within this much of soft: a tenth of the TTL
}

// flight is a load in progress that callers of the same key wait for.
type flight struct {
	done    chan struct{}   // closed when val and err are set
	giveUp  <-chan struct{} // closed when the waiters stop waiting (waitTimeout); nil for ended
	val     *value
	err     error
	dropped atomic.Bool // set (under the shard's fmu) by an invalidation of the key: do not cache
}

// errLoadExited is the error of a load whose function ended its goroutine without
// returning (runtime.Goexit), which no recover can catch.
var errLoadExited = errors.New("client: the load did not return (runtime.Goexit)")

// ended is the done channel of a flight that has already ended.
var ended = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// entry returns key's entry, nil when it has none.
func (s *shard) entry(key string) *entry {
	s.mu.RLock()
	e := s.m[key]
	s.mu.RUnlock()
	return e
}

// fresh returns key's cached value if it is fresh at now (the cache's clock), else nil.
func (s *shard) fresh(key string, now time.Duration) *value {
	e := s.entry(key)
	if e == nil {
		return nil
	}
	if v := e.val.Load(); v != nil && now < v.soft {
		return v
	}
	return nil
}

// NewCache validates opts and returns an empty cache.
func NewCache(opts CacheOptions) (*Cache, error) {
	return newCache(opts, nil)
}

// newCache is NewCache with a bulkhead shared with another cache (nil: its own).
func newCache(o CacheOptions, sem chan struct{}) (*Cache, error) {
	switch {
	case o.MaxEntries != 0 && (o.MaxEntries < 16 || o.MaxEntries > 1<<24):
		return nil, fmt.Errorf("client: Cache.MaxEntries %d: must be 0 (%d) or 16 to 16777216", o.MaxEntries, DefaultMaxEntries)
	case o.MaxBytes != 0 && (o.MaxBytes < 64<<10 || o.MaxBytes > 64<<30):
		return nil, fmt.Errorf("client: Cache.MaxBytes %d: must be 0 (64 MiB) or 64 KiB to 64 GiB", o.MaxBytes)
	case o.TTL != 0 && (o.TTL < time.Millisecond || o.TTL > time.Hour):
		return nil, fmt.Errorf("client: Cache.TTL %v: must be 0 (1s) or 1ms to 1h", o.TTL)
	case o.HardFactor != 0 && !(o.HardFactor >= 1 && o.HardFactor <= 100):
		return nil, fmt.Errorf("client: Cache.HardFactor %v: must be 0 (2) or 1 to 100", o.HardFactor)
	case o.Jitter > 0.5 || math.IsNaN(o.Jitter):
		return nil, fmt.Errorf("client: Cache.Jitter %v: must be at most 0.5 (0 means 0.1, negative none)", o.Jitter)
	case o.Beta > 100 || math.IsNaN(o.Beta):
		return nil, fmt.Errorf("client: Cache.Beta %v: must be at most 100 (0 means 1, negative turns early refresh off)", o.Beta)
	case o.LoadTimeout != 0 && (o.LoadTimeout < time.Millisecond || o.LoadTimeout > time.Minute):
		return nil, fmt.Errorf("client: Cache.LoadTimeout %v: must be 0 (2s) or 1ms to 1m", o.LoadTimeout)
	case o.MaxLoads < 0 || o.MaxLoads > 65536:
		return nil, fmt.Errorf("client: Cache.MaxLoads %d: must be 0 (64) to 65536", o.MaxLoads)
	}
	c := &Cache{
		maxEntries:  cmp0(o.MaxEntries, DefaultMaxEntries) / cacheShards, // rounded down: the sum stays within MaxEntries
		maxBytes:    cmp0(o.MaxBytes, DefaultMaxBytes) / cacheShards,
		ttl:         cmp0(o.TTL, DefaultTTL),
		hardFactor:  cmp0(o.HardFactor, DefaultHardFactor),
		jitter:      cmp0(o.Jitter, DefaultJitter),
		beta:        cmp0(o.Beta, DefaultBeta),
		loadTimeout: cmp0(o.LoadTimeout, DefaultLoadTimeout),
		sem:         sem,
		now:         o.Now,
		rand:        o.Rand,
	}
	if c.sem == nil {
		c.sem = make(chan struct{}, cmp0(o.MaxLoads, DefaultMaxLoads))
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.rand == nil {
		c.rand = rand.Uint64
	}
	c.epoch = c.now()
	c.base, c.cancel = context.WithCancel(context.Background())
	for i := range c.shards {
		c.shards[i].m = make(map[string]*entry)
		c.shards[i].flights = make(map[string]*flight)
	}
	return c, nil
}

// cmp0 returns v, or def when v is the zero value.
func cmp0[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Get returns the value cached for key, or calls load to get it, with the Cache's TTL.
// Concurrent misses of one key share one call of load (its error too: errors are not
// cached, the next Get retries). A value past its soft TTL is returned while one
// background refresh runs; one past its hard TTL never is. load runs with a context that
// carries ctx's values but not its cancellation, bounded by LoadTimeout, so that one
// caller giving up does not fail the others; Get itself returns when ctx ends, or at
// LoadTimeout with an error when the load has not returned by then (see
// CacheOptions.LoadTimeout). A load that returns redis.Nil is cached as an absent value
// and Get returns redis.Nil. The returned slice is the caller's own copy. load must not
// be nil.
func (c *Cache) Get(ctx context.Context, key string, load func(context.Context) ([]byte, error)) ([]byte, error) {
	if load == nil {
		return nil, fmt.Errorf("client: Get %q: load is nil; pass the function that reads the value from the backend", key)
	}
	v, err := c.get(ctx, key, c.ttl, func(ctx context.Context) (string, bool, error) {
		b, err := load(ctx)
		if errors.Is(err, redis.Nil) {
			return "", true, nil
		}
		return string(b), false, err
	})
	if err != nil {
		return nil, err
	}
	if v.absent {
		return nil, redis.Nil
	}
	return []byte(v.data), nil
}

// Invalidate drops key's value at once; a load in progress for it is not cached, and the
// next Get loads again.
func (c *Cache) Invalidate(key string) { c.invalidate(key) }

// Stats returns the cache's counts so far.
func (c *Cache) Stats() CacheStats {
	var bytes int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		bytes += s.bytes
		s.mu.RUnlock()
	}
	return CacheStats{
		Hits: c.hits.Load(), Stale: c.stale.Load(), Misses: c.misses.Load(),
		Loads: c.loads.Load(), Shared: c.shared.Load(), LoadErrors: c.loadErrors.Load(),
		Refreshes: c.refreshes.Load(), EarlyRefreshes: c.early.Load(),
		Evictions: c.evictions.Load(), Invalidations: c.invals.Load(),
		BulkheadWaits: c.semWaits.Load(),
		Entries:       c.size.Load(), Bytes: bytes,
	}
}

// Close ends loads in progress (their callers get an error) and waits for them. Get
// still works after Close, without caching and without background refreshes; a load it
// starts then is not waited for and ends with its load function (within LoadTimeout).
func (c *Cache) Close() error {
	c.cmu.Lock()
	c.closed.Store(true)
	c.cmu.Unlock()
	c.cancel()
	c.wg.Wait()
	return nil
}

// loader loads a key's value: its data, or absent when the key does not exist.
type loader func(ctx context.Context) (data string, absent bool, err error)

func (c *Cache) shardOf(key string) *shard {
	return &c.shards[xxhash.Sum64String(key)&(cacheShards-1)]
}

// keyBit is key's bit in shard.may: its hash's top six bits pick one of 64, bits that
// shardOf does not use, so the keys of one shard spread over all of them.
func keyBit(key string) uint64 { return 1 << (xxhash.Sum64String(key) >> 58) }

// rebuildMay sets s.may to the bits of the keys s holds or loads now, clearing those of
// the keys gone. s.fmu and s.mu must be held: no key can be added meanwhile.
func (s *shard) rebuildMay() {
	var bits uint64
	for _, e := range s.ring {
		bits |= keyBit(e.key)
	}
	for key := range s.flights {
		bits |= keyBit(key)
	}
	s.may.Store(bits)
}

// tidy rebuilds s.may once s is empty, so that a shard whose keys are all gone costs
// writes nothing again. s.fmu and s.mu must not be held.
func (s *shard) tidy() {
	s.fmu.Lock()
	s.mu.Lock()
	if len(s.ring) == 0 {
		s.rebuildMay()
	}
	s.mu.Unlock()
	s.fmu.Unlock()
}

// since is the cache's clock: time since its epoch.
func (c *Cache) since() time.Duration { return c.now().Sub(c.epoch) }

// uniform returns a number in (0, 1].
func (c *Cache) uniform() float64 {
	return (float64(c.rand()>>11) + 1) / (1 << 53)
}

// xfetch is XFetch's test (Vattani, Chierichetti, Lowenstein: "Optimal Probabilistic
// Cache Stampede Prevention", VLDB 2015): refresh when now − δ·β·ln(u) ≥ expiry, with u
// uniform in (0, 1]. At time-to-expiry t it fires with probability exp(−t/(δβ)).
func xfetch(now, expiry, delta time.Duration, beta, u float64) bool {
	return float64(now)-float64(delta)*beta*math.Log(u) >= float64(expiry)
}

// lookup states: what a read found.
const (
	found      = iota // a fresh value
	foundEarly        // a fresh value, and XFetch asks for an early refresh
	foundStale        // a value past its soft TTL, within its hard TTL: refresh it
	notFound          // nothing usable: load
)

// lookup finds key's value at time now (c.now()) and says what to do about it; it never
// loads. The hook calls it first so that a hit costs no closure.
func (c *Cache) lookup(key string, at time.Time) (*shard, *entry, *value, int) {
	s := c.shardOf(key)
	e := s.entry(key)
	if e == nil {
		return s, nil, nil, notFound
	}
	v := e.val.Load()
	if v == nil {
		return s, e, nil, notFound
	}
	now := at.Sub(c.epoch)
	switch {
	case now < v.soft:
		if !e.ref.Load() {
			e.ref.Store(true)
		}
		// XFetch treats every read as a trial, so at a million reads/s a key would be
		// refreshed about δ·ln(rate·δ) early — with a slow load, right after each load.
		// Departing from the paper, the draw is made only in the last tenth of the TTL,
		// which bounds the cost at one extra load per key per TTL/0.9. And −ln(u) < 37
		// for the u that uniform returns, so no draw can fire further than 37·δβ out.
		if c.beta > 0 && v.soft-now < v.early && float64(v.soft-now) < 37*float64(v.delta)*c.beta &&
			xfetch(now, v.soft, v.delta, c.beta, c.uniform()) {
			return s, e, v, foundEarly
		}
		c.hits.Add(1)
		return s, e, v, found
	case now < v.hard:
		return s, e, v, foundStale
	}
	return s, e, nil, notFound
}

// get is Get for a given TTL and loader; the hook's L1 uses it with the plan's TTL.
func (c *Cache) get(ctx context.Context, key string, ttl time.Duration, load loader) (*value, error) {
	s, e, v, state := c.lookup(key, c.now())
	return c.resolve(ctx, s, e, v, state, key, ttl, load)
}

// resolve acts on what lookup found: a fresh value is returned, an early or stale one is
// returned while a background refresh starts, and a miss waits for a (shared) load.
func (c *Cache) resolve(ctx context.Context, s *shard, e *entry, v *value, state int, key string, ttl time.Duration, load loader) (*value, error) {
	switch state {
	case found:
		return v, nil
	case foundEarly:
		c.hits.Add(1)
		c.refresh(ctx, s, e, v, ttl, load, true)
		return v, nil
	case foundStale:
		c.stale.Add(1)
		c.refresh(ctx, s, e, v, ttl, load, false)
		return v, nil
	}
	c.misses.Add(1)
	f, leader := c.join(ctx, s, key, ttl, load, true)
	if !leader {
		c.shared.Add(1)
	}
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.giveUp:
		select {
		case <-f.done: // the load has returned: giveUp ends right after
			return f.val, f.err
		default:
		}
		// The load ignores its context. It goes on in its goroutine, which nothing can
		// stop, and its value is cached if it succeeds.
		return nil, fmt.Errorf("client: loading %q: the load has not returned within LoadTimeout (%v); "+
			"it goes on in the background and its value is cached if it succeeds: %w", key, c.loadTimeout, context.DeadlineExceeded)
	}
}

// waitTimeout is how long the callers of a load wait for it: LoadTimeout, and a tenth
// more (at least 10ms) for a load that honours its context to return its own error.
func (c *Cache) waitTimeout() time.Duration {
	return c.loadTimeout + max(c.loadTimeout/10, 10*time.Millisecond)
}

// refresh starts one background load of e's key to replace seen, unless one is running
// (the key's flight is the only record of that: it is gone before the load's error is
// counted, so whoever sees the count can start the next refresh) or seen has been
// replaced already; readers keep getting the value they have meanwhile (and after a
// failed refresh, until its hard TTL).
func (c *Cache) refresh(ctx context.Context, s *shard, e *entry, seen *value, ttl time.Duration, load loader, early bool) {
	if c.closed.Load() {
		return
	}
	if _, leader := c.joinSeen(ctx, s, e.key, seen, ttl, load, false); !leader {
		return
	}
	c.refreshes.Add(1)
	if early {
		c.early.Add(1)
	}
}

// join returns the key's load in progress, or starts one; leader reports whether this
// call started it. miss: see joinSeen.
func (c *Cache) join(ctx context.Context, s *shard, key string, ttl time.Duration, load loader, miss bool) (f *flight, leader bool) {
	return c.joinSeen(ctx, s, key, nil, ttl, load, miss)
}

// joinSeen is join for a read that found the value seen (nil for a miss). A miss that
// finds no load in progress looks in the cache once more first: it may have looked before
// the last load stored its value and come here after that load ended, and then it shares
// that load's value instead of loading again. A refresh (not a miss) looks too: when the
// key's value is no longer seen, a load ended since has replaced it, and no refresh is
// started (f is nil).
func (c *Cache) joinSeen(ctx context.Context, s *shard, key string, seen *value, ttl time.Duration, load loader, miss bool) (f *flight, leader bool) {
	s.fmu.Lock()
	if f := s.flights[key]; f != nil {
		s.fmu.Unlock()
		return f, false
	}
	// A load stores its value before it leaves flights (both in its goroutine, the
	// second under fmu), so the value is visible here once the flight is gone.
	if miss {
		if v := s.fresh(key, c.since()); v != nil {
			s.fmu.Unlock()
			return &flight{done: ended, val: v}, false
		}
	} else if e := s.entry(key); e != nil && e.val.Load() != seen {
		s.fmu.Unlock()
		return nil, false
	}
	wctx, endWait := context.WithTimeout(context.Background(), c.waitTimeout())
	f = &flight{done: make(chan struct{}), giveUp: wctx.Done()}
	s.may.Or(keyBit(key)) // before the load reads the value: see may
	s.flights[key] = f
	gen := s.gen.Load() // a retain after this point keeps the result out; an invalidation sets f.dropped
	s.fmu.Unlock()

	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.loadTimeout)
	stop := func() bool { return false }
	// A load started after Close is neither ended nor waited for by it (Get still works,
	// and a WaitGroup must not be added to while Wait may be returning); it ends within
	// LoadTimeout.
	c.cmu.RLock()
	tracked := !c.closed.Load()
	if tracked {
		stop = context.AfterFunc(c.base, cancel) // Close ends the load
		c.wg.Add(1)
	}
	c.cmu.RUnlock()
	go func() {
		defer endWait() // after close(f.done): waiters that see both take the result
		if tracked {
			defer c.wg.Done()
		}
		defer cancel()
		defer stop()
		// Deferred, so that the waiters are released and the key loads again even when
		// load ends this goroutine without returning (runtime.Goexit).
		f.err = errLoadExited
		defer func() {
			s.fmu.Lock()
			if s.flights[key] == f { // not forgotten by an invalidation
				delete(s.flights, key)
			}
			s.fmu.Unlock()
			if f.err != nil {
				// Counted once the flight is gone, so that whoever sees the count can start
				// the next load.
				c.loadErrors.Add(1)
			}
			close(f.done)
		}()
		f.val, f.err = c.load(lctx, s, f, key, gen, ttl, load)
	}()
	return f, true
}

// load runs load within the bulkhead and caches its value unless f was dropped by an
// invalidation of the key or retain dropped entries of the shard since gen.
func (c *Cache) load(ctx context.Context, s *shard, f *flight, key string, gen uint64, ttl time.Duration, load loader) (*value, error) {
	select {
	case c.sem <- struct{}{}:
	default:
		c.semWaits.Add(1)
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("client: waiting for a load slot (MaxLoads %d): %w", cap(c.sem), ctx.Err())
		}
	}
	released := false
	defer func() { // the slot goes back even when load does not return (runtime.Goexit)
		if !released {
			<-c.sem
		}
	}()
	c.loads.Add(1)
	start := c.since()
	data, absent, err := callLoad(ctx, load)
	end := c.since()
	released = true
	<-c.sem
	if err != nil {
		return nil, err
	}
	// The TTLs count from the start of the load, so a value is never older than them.
	d := float64(ttl)
	if c.jitter > 0 {
		d *= 1 + c.jitter*(2*c.uniform()-1)
	}
	v := &value{data: data, absent: absent, delta: max(end-start, 0), early: time.Duration(d / 10),
		soft: start + time.Duration(d), hard: start + time.Duration(d*c.hardFactor)}
	if !c.closed.Load() {
		c.store(s, f, key, gen, v)
	}
	return v, nil
}

// callLoad calls load, turning a panic into an error: load runs in the cache's goroutine,
// where a panic would end the process whatever recover its caller has.
func callLoad(ctx context.Context, load loader) (data string, absent bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("client: the load panicked: %v", r)
		}
	}()
	return load(ctx)
}

// store caches v, the result of f, for key unless an invalidation of the key dropped f
// or retain dropped entries of the shard since gen, then evicts entries until the shard
// is within its bounds. A value too large to cache replaces the key's older value by
// nothing.
func (c *Cache) store(s *shard, f *flight, key string, gen uint64, v *value) {
	if c.storeLocked(s, f, key, gen, v) {
		s.tidy()
	}
}

// storeLocked is store under s.mu; it reports whether it left the shard empty.
func (c *Cache) storeLocked(s *shard, f *flight, key string, gen uint64, v *value) (emptied bool) {
	size := int64(len(key)+len(v.data)) + entryOverhead
	s.mu.Lock()
	defer s.mu.Unlock()
	// invalidate sets f.dropped before it takes mu to remove the key's entry: either this
	// sees the flag, or the invalidation, coming after, removes what this stores.
	if f.dropped.Load() || s.gen.Load() != gen {
		return false
	}
	if size > c.maxBytes {
		// Too large to cache: the older value goes too, or reads would keep getting it
		// (until its hard TTL) after Redis answered with this one.
		if e := s.m[key]; e != nil {
			c.remove(s, e)
			c.evictions.Add(1)
		}
		return len(s.ring) == 0
	}
	if e := s.m[key]; e != nil {
		s.bytes += size - e.size
		e.size = size
		e.val.Store(v)
	} else {
		s.may.Or(keyBit(key)) // set by the load already; kept true for every entry in m
		e := &entry{key: key, size: size, idx: len(s.ring)}
		e.val.Store(v)
		s.m[key] = e
		s.ring = append(s.ring, e)
		s.bytes += size
		c.size.Add(1)
	}
	for len(s.ring) > c.maxEntries || s.bytes > c.maxBytes {
		c.evictOne(s)
	}
	return len(s.ring) == 0
}

// evictOne removes one entry with CLOCK (second chance): the hand clears reference bits
// until it finds an entry not read since its last pass. s.mu must be held.
func (c *Cache) evictOne(s *shard) {
	for range 2*len(s.ring) + 1 {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		e := s.ring[s.hand]
		if e.ref.Load() {
			e.ref.Store(false)
			s.hand++
			continue
		}
		c.remove(s, e)
		c.evictions.Add(1)
		return
	}
}

// remove takes e out of its shard. s.mu must be held.
func (c *Cache) remove(s *shard, e *entry) {
	last := len(s.ring) - 1
	s.ring[e.idx] = s.ring[last]
	s.ring[e.idx].idx = e.idx
	s.ring[last] = nil
	s.ring = s.ring[:last]
	delete(s.m, e.key)
	s.bytes -= e.size
	c.size.Add(-1)
}

// invalidate drops key's value and forgets its load in progress, whose result is then
// not cached; callers already waiting for it still get it (their read began before the
// invalidation finished).
func (c *Cache) invalidate(key string) {
	h := xxhash.Sum64String(key)
	s := &c.shards[h&(cacheShards-1)]
	if s.may.Load()&(1<<(h>>58)) == 0 { // keyBit(key), hashed once
		return // neither held nor loading: see shard.may
	}
	s.fmu.Lock()
	f := s.flights[key]
	if f != nil {
		f.dropped.Store(true) // its value, read before the write, is not cached
		delete(s.flights, key)
	}
	// Looked up after the flights, under fmu: a load stores its value before it leaves
	// flights, so one that ended a moment ago has its value found here.
	e := s.entry(key)
	s.fmu.Unlock()
	if e == nil && f == nil {
		return
	}
	s.mu.Lock()
	if e := s.m[key]; e != nil {
		c.remove(s, e)
		c.invals.Add(1)
	}
	emptied := len(s.ring) == 0
	s.mu.Unlock()
	if emptied {
		s.tidy()
	}
}

// retain drops every entry whose key keep rejects, and rebuilds each shard's may: a new
// plan may have taken many keys off.
func (c *Cache) retain(keep func(key string) bool) {
	for i := range c.shards {
		s := &c.shards[i]
		s.fmu.Lock() // for rebuildMay
		s.mu.Lock()
		var drop []*entry
		for _, e := range s.ring {
			if !keep(e.key) {
				drop = append(drop, e)
			}
		}
		if len(drop) > 0 {
			s.gen.Add(1) // loads in progress for these keys are not cached either
		}
		for _, e := range drop {
			c.remove(s, e)
		}
		s.rebuildMay()
		s.mu.Unlock()
		s.fmu.Unlock()
	}
}
