package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// MaxFlushTries is how many flushes in a row a batched sum may fail before it is given up
// (logged at Error and counted in CounterStats.Dropped).
const MaxFlushTries = 3

// counterGrace is how long after the lease of a sharded_counter entry ends, and after
// the client heard that it ended, Get keeps reading its sub-counters whatever it finds in
// them: the executor's default GracePeriod (one lease), during which stale writers may
// still add to them (docs/plan.md, "What readers and writers must do").
const counterGrace = mitigate.DefaultLease

// CounterStats counts what a Counter did.
type CounterStats struct {
	// Plain, Sharded and Batched count the Add calls by the path they took: INCRBY of
	// the key, INCRBY of a random sub-counter, a local sum.
	Plain, Sharded, Batched uint64
	// Flushes counts batched sums sent to Redis and acknowledged (one INCRBY each).
	Flushes uint64
	// FlushErrors counts batched sums whose flush failed; each was kept for the next
	// flush. Uncertain counts those among them whose outcome is unknown (a timeout or a
	// broken connection once the command may have been sent): they are sent again, so
	// their sum may have been counted twice, as with go-redis's own retries.
	FlushErrors, Uncertain uint64
	// Dropped is the sum of the increments given up after MaxFlushTries failed flushes
	// in a row (or a failed flush at Close); DroppedAdds is how many Add calls made it.
	// Each drop is also logged at Error with the key and the sum.
	Dropped     int64
	DroppedAdds uint64
}

// Counter adds to and reads integer counters (INCRBY keys) following the plan. Unlike
// the hook, it changes what an increment returns, which is why it is an API of its own:
//
//   - no entry for the key (or the agent away, or the lease run out): Add is INCRBY key
//     and Get is GET key (absent is 0);
//   - an enforced sharded_counter entry: Add is INCRBY of one of the entry's sub-counters,
//     picked with Options.Rand, and Get is mitigate.ReadCounter: the key plus every
//     sub-counter plus the folds in flight, exact. Once the client has held an entry, Get
//     keeps reading its sub-counters after the entry's lease ran out, until all three
//     hold: a plan without the entry came from the agent, one lease
//     (mitigate.DefaultLease) has passed since then and since the entry's lease ended
//     (writers that had not heard of the end still add to the sub-counters meanwhile),
//     and a read found the sub-counter empty (the agent folded it back). Only the agent
//     folds: while it is away the increments stay in the sub-counters, and a Get of the
//     key alone would miss them;
//   - an enforced batched_counter entry: Add adds n to a sum kept in the process and
//     returns nil at once, without calling Redis; a background goroutine sends one INCRBY
//     per key per FlushInterval (counted from the first Add after the previous flush),
//     all keys due at once in one pipeline. Get returns Redis's value plus the sums not
//     yet acknowledged by Redis (it waits for a flush in flight, one round trip, so a sum
//     is never counted in both places nor in neither). An Add that would make the sum
//     overflow an int64 takes the plain path instead, so Redis refuses it as INCRBY does;
//   - both entries: Add sums locally, and the flush goes to a random sub-counter.
//
// The path is chosen per call, from the plan the client holds, so a plan change affects
// the next Add; a flush takes the sharded_counter entry held when it runs.
//
// Errors: on the plain and sharded paths Add returns Redis's error, and the increment
// may or may not have been made (as with INCRBY). On the batched path Add never fails: a
// failed flush keeps the sum, which the next flush retries, merged with newer additions;
// after MaxFlushTries failures in a row the sum is dropped, logged at Error and counted in
// Stats (Dropped). Close flushes every pending sum once more and reports what it could
// not flush. A flush is a plain INCRBY, so one whose outcome is unknown (a read timeout,
// a broken connection: Redis may have applied it, or may still apply it) and is sent
// again — by the next flush (counted in Stats as Uncertain) or by go-redis's own retries
// of a timed-out pipeline (Options.MaxRetries, which the Counter cannot see) — adds its
// sum twice when the first send was applied.
//
// Loss bound: sums live only in the process until flushed, so a crash loses at most the
// increments added in the last FlushInterval before it (plus those held back by failing
// flushes). Close (Client.Close) flushes everything pending before it returns.
//
// A Get of a key the plan also caches in L1 may be answered from the L1 (up to its TTL).
// Adds after Close take the plain path. A Counter is safe for concurrent use.
type Counter struct {
	c *Client

	stripes [16]counterStripe // pending sums, by xxhash of the key

	// flushMu is held for writing while a flush moves sums from the stripes to Redis
	// and back on failure, and for reading by Get while it reads Redis and the sums, so
	// Get sees each sum in exactly one place.
	flushMu sync.RWMutex

	recentMu sync.Mutex                      // guards recent
	recent   map[string]map[string]recentSub // key → sub-counter name → until when Get must read it

	closed    atomic.Bool   // set by Close before it drains the stripes; read under a stripe's lock by Add
	kick      chan struct{} // holds at most one wake-up for the flusher: a new sum is pending
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the flusher has returned
	lifeMu    sync.Mutex    // guards started
	started   bool          // the flusher was started, or Close has begun and none may start
	closeOnce sync.Once
	closeErr  error

	plain, sharded, batched, flushes, flushErrors, uncertain, droppedAdds atomic.Uint64
	dropped                                                               atomic.Int64
}

// counterStripe holds the pending sums of the keys that hash to it.
type counterStripe struct {
	mu      sync.Mutex // guards pending
	pending map[string]*batch
	_       [48]byte
}

// batch is a key's pending sum.
type batch struct {
	sum   int64
	adds  uint64        // Add calls in sum
	due   time.Time     // when it is flushed (time package clock)
	every time.Duration // the entry's FlushInterval when the sum started
	tries int           // failed flushes so far
}

// recentSub is a sub-counter of a sharded_counter entry the client held. Get reads it
// until the client has heard from the agent that the entry ended (a plan without it),
// until has passed (Client clock), and a read then found it empty. Only the agent folds
// sub-counters back into their key, so a lease that runs out because the agent is away
// is not enough: the increments in the sub-counter stay there until an agent folds them.
type recentSub struct {
	node  mitigate.Node
	until time.Time // one lease after the entry's lease, and after the end was heard
	ended bool      // a plan without the entry (or without this sub-counter) came
}

func newCounter(c *Client) *Counter {
	k := &Counter{c: c, recent: make(map[string]map[string]recentSub),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range k.stripes {
		k.stripes[i].pending = make(map[string]*batch)
	}
	return k
}

// Counter returns the client's Counter: the API for counters the plan may shard or batch.
func (c *Client) Counter() *Counter { return c.counter }

func (k *Counter) stripe(key string) *counterStripe {
	return &k.stripes[xxhash.Sum64String(key)&uint64(len(k.stripes)-1)]
}

// Add adds n to the counter key, following the plan (see Counter).
func (k *Counter) Add(ctx context.Context, key string, n int64) error {
	c := k.c
	now := c.now()
	ix := c.follower.cur.Load()
	if b, ok := ix.leased(key, mitigate.BatchedCounter, now); ok && !k.closed.Load() {
		if k.addPending(key, n, time.Duration(b.FlushInterval)) {
			k.batched.Add(1)
			return nil
		}
	}
	if s, ok := ix.leased(key, mitigate.ShardedCounter, now); ok {
		i := c.pick(len(s.SubCounters))
		k.sharded.Add(1)
		return mitigate.IncrCounter(ctx, c.rdb, key, s.SubCounters[i:i+1], n)
	}
	k.plain.Add(1)
	return c.rdb.IncrBy(ctx, key, n).Err()
}

// addPending adds n to key's pending sum; false when the Counter is closed.
func (k *Counter) addPending(key string, n int64, every time.Duration) bool {
	s := k.stripe(key)
	s.mu.Lock()
	if k.closed.Load() {
		s.mu.Unlock()
		return false
	}
	b := s.pending[key]
	if b != nil && overflows(b.sum, n) {
		// The sum would wrap around: the plain path lets Redis refuse (or take) n.
		s.mu.Unlock()
		return false
	}
	fresh := b == nil
	if fresh {
		b = &batch{due: time.Now().Add(every), every: every}
		s.pending[key] = b
	}
	b.sum += n
	b.adds++
	s.mu.Unlock()
	if fresh {
		k.lifeMu.Lock()
		if !k.started {
			k.started = true
			go k.flusher()
		}
		k.lifeMu.Unlock()
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// Get returns the value of the counter key, following the plan (see Counter): with a
// sharded_counter entry held now or before (until its sub-counters are found folded
// after the entry ended), the exact sum of the key and its sub-counters; plus the sums
// of batched Adds not yet acknowledged by Redis.
func (k *Counter) Get(ctx context.Context, key string) (int64, error) {
	c := k.c
	k.flushMu.RLock()
	defer k.flushMu.RUnlock()
	// The plan is read under flushMu, after any flush that moved a sum Get must see, so
	// the sub-counter that flush chose is among these.
	now := c.now()
	subs, done := k.readSubs(key, now)
	var v int64
	if len(subs) > 0 {
		var empty []bool
		var err error
		if v, empty, err = mitigate.ReadCounterEmpty(ctx, c.rdb, key, subs); err != nil {
			return 0, err
		}
		k.forget(key, subs, empty, done, now)
	} else {
		s, err := c.rdb.Get(ctx, key).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return 0, err
		default:
			if v, err = strconv.ParseInt(s, 10, 64); err != nil {
				return 0, fmt.Errorf("client: counter %q: value %q is not an integer", key, s)
			}
		}
	}
	st := k.stripe(key)
	st.mu.Lock()
	var pending int64
	if b := st.pending[key]; b != nil {
		pending = b.sum
	}
	st.mu.Unlock()
	if overflows(v, pending) {
		return 0, fmt.Errorf("client: counter %q: %d in Redis plus %d pending overflows an int64", key, v, pending)
	}
	return v + pending, nil
}

// overflows reports whether a + b wraps around an int64.
func overflows(a, b int64) bool {
	s := a + b
	return (b > 0 && s < a) || (b < 0 && s > a)
}

// readSubs returns the sub-counters Get must read for key: those of the entry held now
// and those of every entry held before that it has not forgotten. done says which of them
// Get may forget if it finds them empty: their entry ended, and one lease has passed.
func (k *Counter) readSubs(key string, now time.Time) (subs []mitigate.Node, done []bool) {
	if e, ok := k.c.follower.cur.Load().leased(key, mitigate.ShardedCounter, now); ok {
		subs = append(subs, e.SubCounters...)
		done = make([]bool, len(subs))
	}
	k.recentMu.Lock()
	defer k.recentMu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(k.recent[key])) {
		r := k.recent[key][name]
		if !slices.ContainsFunc(subs, func(n mitigate.Node) bool { return n.Name == name }) {
			subs = append(subs, r.node)
			done = append(done, r.ended && now.After(r.until))
		}
	}
	return subs, done
}

// forget drops the sub-counters of key that Get found empty when it could forget them:
// nobody writes them any more, so their value is in the key for good. A sub-counter that
// a plan made live again meanwhile (or whose end was heard again later) is kept.
func (k *Counter) forget(key string, subs []mitigate.Node, empty, done []bool, now time.Time) {
	if !slices.Contains(done, true) {
		return
	}
	k.recentMu.Lock()
	defer k.recentMu.Unlock()
	m := k.recent[key]
	for i, s := range subs {
		if r, ok := m[s.Name]; ok && done[i] && empty[i] && r.ended && now.After(r.until) {
			delete(m, s.Name)
		}
	}
	if len(m) == 0 {
		delete(k.recent, key)
	}
}

// onPlan runs when a new plan arrives: it notes the sub-counters of each sharded_counter
// entry, for Get to read (see recentSub), and marks those the plan no longer lists as
// ended, to be read for one more lease at least.
func (k *Counter) onPlan(ix *planIndex) {
	now := k.c.now()
	k.recentMu.Lock()
	defer k.recentMu.Unlock()
	for key, subs := range k.recent {
		var listed []mitigate.Node
		if kp := ix.keys[key]; kp != nil {
			for _, e := range kp.others {
				if e.Kind == mitigate.ShardedCounter {
					listed = e.SubCounters
				}
			}
		}
		for name, r := range subs {
			if !r.ended && !slices.ContainsFunc(listed, func(n mitigate.Node) bool { return n.Name == name }) {
				r.ended, r.until = true, later(r.until, now.Add(counterGrace))
				subs[name] = r
			}
		}
	}
	for key, kp := range ix.keys {
		for _, e := range kp.others {
			if e.Kind != mitigate.ShardedCounter {
				continue
			}
			m := k.recent[key]
			if m == nil {
				m = make(map[string]recentSub)
				k.recent[key] = m
			}
			for _, n := range e.SubCounters {
				m[n.Name] = recentSub{node: n, until: later(m[n.Name].until, e.until.Add(counterGrace))}
			}
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// flusher sends the pending sums when they are due, until Close.
func (k *Counter) flusher() {
	defer close(k.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := k.flush(false)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		t.Reset(wait)
		select {
		case <-k.stop:
			return
		case <-k.kick:
		case <-t.C:
		}
	}
}

// flushItem is one key's sum taken out of its stripe for a flush.
type flushItem struct {
	key    string
	b      *batch
	target string // the key or a sub-counter
	cmd    *redis.IntCmd
}

// flush sends the sums that are due (all of them when all is set) in one pipeline, puts
// back those that failed, and returns the earliest due time of the sums left (zero when
// none).
func (k *Counter) flush(all bool) (next time.Time) {
	c := k.c
	k.flushMu.Lock()
	defer k.flushMu.Unlock()
	now := time.Now()
	var items []flushItem
	for i := range k.stripes {
		s := &k.stripes[i]
		s.mu.Lock()
		for key, b := range s.pending {
			if all || !now.Before(b.due) {
				items = append(items, flushItem{key: key, b: b, target: key})
				delete(s.pending, key)
			} else if next.IsZero() || b.due.Before(next) {
				next = b.due
			}
		}
		s.mu.Unlock()
	}
	if len(items) == 0 {
		return next
	}
	cnow := c.now()
	ix := c.follower.cur.Load()
	for i := range items {
		if e, ok := ix.leased(items[i].key, mitigate.ShardedCounter, cnow); ok {
			items[i].target = e.SubCounters[c.pick(len(e.SubCounters))].Name
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range items {
			items[i].cmd = p.IncrBy(ctx, items[i].target, items[i].b.sum)
		}
		return nil
	})
	for _, it := range items {
		err := it.cmd.Err()
		if err == nil {
			k.flushes.Add(1)
			continue
		}
		k.flushErrors.Add(1)
		var rerr redis.Error
		if !errors.As(err, &rerr) && !isDialError(err) {
			k.uncertain.Add(1)
		}
		it.b.tries++
		if all || it.b.tries >= MaxFlushTries {
			k.drop(it, err)
			continue
		}
		due, ok := k.putBack(it.key, it.b, now)
		if !ok {
			k.drop(it, err)
			continue
		}
		if next.IsZero() || due.Before(next) {
			next = due
		}
		c.log.Warn("hotkeyd: flushing a batched counter failed; retrying at the next flush",
			"key", it.key, "target", it.target, "sum", it.b.sum, "tries", it.b.tries, "err", err)
	}
	return next
}

// putBack merges a sum whose flush failed into the key's pending sum and returns when it
// is due again; false when the merged sum would overflow an int64.
func (k *Counter) putBack(key string, b *batch, now time.Time) (time.Time, bool) {
	s := k.stripe(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.pending[key]; cur != nil {
		if overflows(cur.sum, b.sum) {
			return time.Time{}, false
		}
		cur.sum += b.sum
		cur.adds += b.adds
		cur.tries = max(cur.tries, b.tries)
		return cur.due, true
	}
	b.due = now.Add(b.every)
	s.pending[key] = b
	return b.due, true
}

// drop gives up a sum: logged and counted, never silent.
func (k *Counter) drop(it flushItem, err error) {
	k.dropped.Add(it.b.sum)
	k.droppedAdds.Add(it.b.adds)
	k.c.log.Error("hotkeyd: gave up a batched counter's increments after failed flushes",
		"key", it.key, "target", it.target, "sum", it.b.sum, "adds", it.b.adds, "tries", it.b.tries, "err", err)
}

// isDialError reports an error from connecting, before any command was sent.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// Stats returns the Counter's counts so far.
func (k *Counter) Stats() CounterStats {
	return CounterStats{
		Plain: k.plain.Load(), Sharded: k.sharded.Load(), Batched: k.batched.Load(),
		Flushes: k.flushes.Load(), FlushErrors: k.flushErrors.Load(), Uncertain: k.uncertain.Load(),
		Dropped: k.dropped.Load(), DroppedAdds: k.droppedAdds.Load(),
	}
}

// close stops the flusher and flushes every pending sum once; Client.Close calls it. The
// error says how much was dropped.
func (k *Counter) close() error {
	k.closeOnce.Do(func() {
		k.closed.Store(true)
		k.lifeMu.Lock()
		running := k.started
		k.started = true
		k.lifeMu.Unlock()
		close(k.stop)
		if running {
			<-k.done
		}
		before, adds := k.dropped.Load(), k.droppedAdds.Load()
		k.flush(true)
		if n := k.droppedAdds.Load() - adds; n > 0 {
			k.closeErr = fmt.Errorf("client: Close: could not flush %d batched counter increments (sum %d); see the log",
				n, k.dropped.Load()-before)
		}
	})
	return k.closeErr
}
