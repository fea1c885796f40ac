package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// MaxFlushTries is how many flushes in a row a batched sum may fail before it is given up
// (logged at Error and counted in CounterStats.Dropped). Only two failures count: Redis
// refused the INCRBY, or its outcome is unknown. A flush that could not
// reach Redis (no connection could be made, or Redis answered that it cannot serve
// writes now: LOADING, BUSY, CLUSTERDOWN, TRYAGAIN, MASTERDOWN, READONLY) applied
// nothing: its sum is kept and retried with a backoff from the flush interval doubling
// to MaxFlushBackoff, until Redis is back or Close.
const MaxFlushTries = 3

// MaxFlushBackoff bounds the wait between flushes of a sum while Redis is unreachable.
const MaxFlushBackoff = 10 * time.Second

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
	// Flushes that could not reach Redis count in FlushErrors but not towards
	// MaxFlushTries (see there).
	// Each drop is also logged at Error with the key and the sum.
	Dropped     int64
	DroppedAdds uint64
}

// Counter adds to and reads integer counters (INCRBY keys) following the plan. Unlike
// the hook, it changes what an increment returns, which is why it is an API of its own:
//
//   - no entry for the key (or the agent away, or the lease run out): Add is INCRBY key;
//   - an enforced sharded_counter entry: Add is INCRBY of one of the entry's sub-counters,
//     picked with Options.Rand, after listing it where every reader finds it
//     (mitigate.ListSubCounter, one more round trip, once per sub-counter per
//     mitigate.ListRenewal; if the listing fails, Add takes the plain path);
//   - Get is mitigate.ReadListedCounter: the key and its list of sub-counters in one round
//     trip, and, when some are listed, the exact sum of the key, the sub-counters and the
//     folds in flight (mitigate.ReadCounter). Sub-counters stay listed until the agent
//     has folded them back and nobody writes them any more, so Get is exact whether or
//     not this process holds a plan, the agent is away, or the entry ended. With an L1
//     entry for the key and no sharded_counter entry, Get is GET key instead, which the
//     L1 may answer (up to its TTL);
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
// after MaxFlushTries refusals (or unknown outcomes) in a row the sum is dropped, logged
// at Error and counted in Stats (Dropped). While Redis cannot be reached (a restart, a
// failover) the sum is kept, however long that lasts, and retried with a backoff up to
// MaxFlushBackoff. Close flushes every pending sum once more and reports what it could
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
// Adds after Close take the plain path. A Counter is safe for concurrent use.
type Counter struct {
	c *Client

	stripes [16]counterStripe // pending sums, by xxhash of the key

	// flushMu is held for writing while a flush moves sums from the stripes to Redis
	// and back on failure, and for reading by Get while it reads Redis and the sums, so
	// Get sees each sum in exactly one place.
	flushMu sync.RWMutex

	listMu sync.Mutex           // guards listed
	listed map[string]time.Time // sub-counter → until when Add may increment it without listing it again (Client clock)

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
	tries int           // failed flushes so far that count towards MaxFlushTries
	waits int           // flushes in a row that could not reach Redis (backoff)
}

func newCounter(c *Client) *Counter {
	k := &Counter{c: c, listed: make(map[string]time.Time),
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
		if sub := k.target(ctx, key, s, now); sub != key {
			k.sharded.Add(1)
			return c.rdb.IncrBy(ctx, sub, n).Err()
		}
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

// Get returns the value of the counter key (see Counter): the exact sum of the key and
// of the sub-counters listed for it, whatever plan this process holds, plus the sums of
// batched Adds not yet acknowledged by Redis.
func (k *Counter) Get(ctx context.Context, key string) (int64, error) {
	k.flushMu.RLock()
	defer k.flushMu.RUnlock()
	v, err := k.read(ctx, key)
	if err != nil {
		return 0, err
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

// read returns key's value in Redis. With an L1 entry for the key and no sharded_counter
// entry it is a GET, which the plan hook may answer from the L1; else the key and its
// listed sub-counters (mitigate.ReadListedCounter), sent as the client's own commands,
// which the hooks leave alone (the plan hook would take its script for a write of the
// key), and sampled as one read of the key.
func (k *Counter) read(ctx context.Context, key string) (int64, error) {
	c := k.c
	now := c.now()
	ix := c.follower.cur.Load()
	if _, sharded := ix.leased(key, mitigate.ShardedCounter, now); !sharded && ix.lookup(key).l1(now) > 0 {
		s, err := c.rdb.Get(ctx, key).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return 0, nil
		case err != nil:
			return 0, err
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("client: counter %q: value %q is not an integer", key, s)
		}
		return v, nil
	}
	v, err := mitigate.ReadListedCounter(internal(ctx), c.rdb, key)
	c.reporter.sample(key, sampler.OpRead)
	return v, err
}

// overflows reports whether a + b wraps around an int64.
func overflows(a, b int64) bool {
	s := a + b
	return (b > 0 && s < a) || (b < 0 && s > a)
}

// target picks the sub-counter of e an increment of key goes to, listed where readers
// find it (mitigate.ListSubCounter) unless this process listed it within
// mitigate.ListRenewal and under a lease that has not run out since. It returns key
// when the listing fails: an increment of the key itself is never lost to a reader.
func (k *Counter) target(ctx context.Context, key string, e leasedEntry, now time.Time) string {
	c := k.c
	sub := e.SubCounters[c.pick(len(e.SubCounters))].Name
	k.listMu.Lock()
	fresh := now.Before(k.listed[sub])
	k.listMu.Unlock()
	if fresh {
		return sub
	}
	if err := mitigate.ListSubCounter(internal(ctx), c.rdb, key, sub); err != nil {
		c.log.Debug("hotkeyd: listing a sub-counter failed; incrementing the key itself", "key", key, "sub", sub, "err", err)
		return key
	}
	// Bound by the lease too: once it has run out, the executor may take sub off the
	// list after its grace period, and a later entry with the same sub-counters must
	// list it again.
	until := now.Add(mitigate.ListRenewal)
	if e.until.Before(until) {
		until = e.until
	}
	k.listMu.Lock()
	k.listed[sub] = until
	k.listMu.Unlock()
	return sub
}

// onPlan runs when a new plan arrives: it forgets the listings of sub-counters the plan
// does not use any more, so that an entry using them again lists them again.
func (k *Counter) onPlan(ix *planIndex) {
	used := make(map[string]bool)
	for _, kp := range ix.keys {
		for _, e := range kp.others {
			if e.Kind == mitigate.ShardedCounter {
				for _, n := range e.SubCounters {
					used[n.Name] = true
				}
			}
		}
	}
	k.listMu.Lock()
	maps.DeleteFunc(k.listed, func(sub string, _ time.Time) bool { return !used[sub] })
	k.listMu.Unlock()
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
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	for i := range items {
		if e, ok := ix.leased(items[i].key, mitigate.ShardedCounter, cnow); ok {
			items[i].target = k.target(ctx, items[i].key, e, cnow)
		}
	}
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
		away := unreachable(err)
		if !away && !errors.As(err, &rerr) {
			k.uncertain.Add(1)
		}
		wait := it.b.every
		if away { // nothing was applied: wait for Redis, however long
			it.b.waits++
			wait = flushBackoff(it.b.every, it.b.waits)
		} else {
			it.b.tries++
			it.b.waits = 0
		}
		if all || it.b.tries >= MaxFlushTries {
			k.drop(it, err)
			continue
		}
		due, ok := k.putBack(it.key, it.b, now, wait)
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
// is due again (after wait, or when the newer sum is due, whichever is later); false when
// the merged sum would overflow an int64.
func (k *Counter) putBack(key string, b *batch, now time.Time, wait time.Duration) (time.Time, bool) {
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
		cur.waits = max(cur.waits, b.waits)
		if due := now.Add(wait); due.After(cur.due) {
			cur.due = due
		}
		return cur.due, true
	}
	b.due = now.Add(wait)
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

// unreachable reports a flush error that applied nothing and says that Redis cannot take
// writes now rather than that it refuses this one: no connection (dial error, pool
// timeout), or a server loading its data, busy with a script, or between primaries.
func unreachable(err error) bool {
	return isDialError(err) || errors.Is(err, redis.ErrPoolTimeout) ||
		redis.IsLoadingError(err) || redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		redis.IsMasterDownError(err) || redis.IsReadOnlyError(err) ||
		strings.HasPrefix(err.Error(), "BUSY ")
}

// flushBackoff is the wait before the next flush of a sum whose last waits flushes could
// not reach Redis: every doubling, at most MaxFlushBackoff (or every, when larger).
func flushBackoff(every time.Duration, waits int) time.Duration {
	d := every
	for range min(waits-1, 30) {
		if d >= MaxFlushBackoff {
			break
		}
		d *= 2
	}
	return max(min(d, MaxFlushBackoff), every)
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
