package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
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
//
// go-redis does not always say that no connection could be made (a refused connection
// whose dial retries outlast the flush's timeout ends as context.DeadlineExceeded), so
// a sum whose last flush failed, for any reason, is not sent again blind: the node that
// owns its target is asked first (EXISTS target, alone in its round trip), and when that
// gets no answer from Redis nothing was sent, and the failure counts as unreachable.
// Only a failure after an answered probe counts towards MaxFlushTries, besides the
// first failure of a sum (which had no probe). A flush of a sum that never failed is
// one INCRBY, as before.
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
	// WriteFlushes counts the flushes the plan hook made before a command of the app's
	// client that writes a key with a pending sum (see Counter).
	WriteFlushes uint64
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
//     not this process holds a plan, the agent is away, or the entry ended. While this
//     client holds a sharded_counter entry for the key, or held one within the two
//     leases after it ended, Get reads the sub-counters those entries named besides the
//     listed ones (in the same round trips, and ReadCounter's even when none is listed),
//     so a listing lost on the key's node (a failover before its SADD replicated) cannot
//     hide the increments this process knows of. What remains: a process that never
//     held the entry, or whose two leases after it are over, depends on the list, and
//     misses the increments of a sub-counter whose listing was lost until the agent
//     folds it into the key (or a writer lists it again, at most mitigate.ListRenewal
//     later). With an L1 entry for the key and no sharded_counter entry, now or in the
//     last two leases, Get is GET key instead, which the L1 may answer (up to its TTL);
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
// Writes of the key through the app's own client (the one Attach hooked) keep the
// process's order:
//
//   - batched: a command that writes a key with a sum pending or in flight (DEL, SET,
//     EXPIRE, INCR, RENAME…: every write in the command table, and WATCH, so that a
//     transaction reads the Adds before it) first flushes that key's sum, in the
//     command's context, waiting for a flush in flight; a pipeline or transaction
//     flushes the keys of all its writes before it is sent. If that flush fails and the
//     sum is kept, the command is not sent and fails with an error wrapping the flush's
//     (sent, it would overtake the sum); a sum Redis refuses (the key is not an
//     integer) is dropped, as a plain INCRBY would have failed, and the command goes on.
//     A key written that way after every Add is in effect not batched. While no sum is
//     pending, this costs one atomic load per command. Not covered: writes through
//     another client or process, Lua scripts (EVAL's keys are taken for written, but a
//     script may name keys it is not given), and go-redis's own retries of a command
//     that timed out;
//   - sharded: a DEL or UNLINK of the key first deletes its listed sub-counters and the
//     stashes of folds in flight, marking those folds as added so they add nothing
//     after the DEL (mitigate.ClearSubCounters); an EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT
//     or PERSIST is first applied to each sub-counter and stash too
//     (mitigate.ExpireSubCounters), and a fold into a key that does not exist gives it
//     the TTL its sub-counter had (a value whose TTL passed is not folded). If the
//     sub-counters cannot be reached, the command is not sent and fails. Increments
//     acknowledged before the command are reset or expire with it; those made
//     meanwhile may or may not be (on a cluster the sub-counters live on other nodes:
//     no atomic step). The reply is the key's own (DEL of a key whose whole value was
//     in sub-counters replies 0). This holds for keys with a sharded_counter entry in
//     this client's plan within the last two leases, for single commands outside
//     MULTI; not for pipelines, transactions, scripts, a ClusterClient's node clients,
//     other processes, or other whole-key writes (SET, GETSET, GETDEL, RENAME, COPY,
//     RESTORE, which see or replace the key's part only): reset a sharded counter with
//     DEL, not SET key 0.
//
// Errors: on the plain and sharded paths Add returns Redis's error, and the increment
// may or may not have been made (as with INCRBY). On the batched path Add never fails: a
// failed flush keeps the sum, which the next flush retries, merged with newer additions;
// after MaxFlushTries refusals (or unknown outcomes) in a row the sum is dropped, logged
// at Error and counted in Stats (Dropped). While Redis cannot be reached (a restart, a
// failover) the sum is kept, however long that lasts, and retried with a backoff up to
// MaxFlushBackoff. Close flushes every pending sum once more and reports what it could
// not flush; with Redis hung it waits for the flush in progress, then its own, each as
// long as go-redis lets a command wait (ReadTimeout and WriteTimeout, times MaxRetries
// + 1; the context's deadline only with ContextTimeoutEnabled). A flush is a plain
// INCRBY, so one whose outcome is unknown (a read timeout, a broken connection: Redis
// may have applied it, or may still apply it) and is sent again — by the next flush
// (counted in Stats as Uncertain) or by go-redis's own retries of a timed-out pipeline
// (Options.MaxRetries, which the Counter cannot see) — adds its sum twice when the
// first send was applied.
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

	listMu     sync.Mutex           // guards listed and listFailed
	listed     map[string]time.Time // sub-counter → until when Add may increment it without listing it again (Client clock)
	listFailed map[string]time.Time // key → until when Add increments the key itself without trying to list (listRetry)

	shardedMu sync.Mutex // guards shardedKeys
	// shardedKeys: the keys with a sharded_counter entry in this client's plan
	// recently: until the end of its lease plus two leases (long enough for the
	// executor to fold and forget the sub-counters), a DEL or EXPIRE of the key through
	// the app's client reaches its sub-counters too, and Get reads the sub-counters the
	// entries named besides those listed.
	shardedKeys map[string]*shardedKey
	nsharded    atomic.Int64 // len(shardedKeys): the plan hook's check, one load while 0

	closed    atomic.Bool   // set by Close before it drains the stripes; read under a stripe's lock by Add
	kick      chan struct{} // holds at most one wake-up for the flusher: a new sum is pending
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the flusher has returned
	lifeMu    sync.Mutex    // guards started
	started   bool          // the flusher was started, or Close has begun and none may start
	closeOnce sync.Once
	closeErr  error

	// owed counts the keys with a sum pending or in a flush in flight: the plan hook
	// looks at it before anything else, so that it costs one load while it is 0.
	owed atomic.Int64
	// owing counts the same per bucket of keys (owingOf), so that a write of a key that
	// owes nothing (a bucket at 0) is told so without locking its stripe while other
	// keys owe. Changed with owed, by owe: raised under the stripe's lock with the sum
	// made pending, before Add returns, so a write that follows an Add sees it; lowered
	// only after the sum has left pending and inflight, so it is 0 only for buckets
	// whose keys owe nothing.
	owing [256]atomic.Int32

	plain, sharded, batched, flushes, flushErrors, uncertain, droppedAdds, writeFlushes atomic.Uint64
	dropped                                                                             atomic.Int64
}

// shardedKey is what the Counter remembers of a key's recent sharded_counter entries.
type shardedKey struct {
	until time.Time       // Client clock: the end of the last entry's lease plus two leases
	subs  []mitigate.Node // every sub-counter those entries named; read-only once set
}

// counterStripe holds the pending sums of the keys that hash to it.
type counterStripe struct {
	mu       sync.Mutex // guards pending and inflight
	pending  map[string]*batch
	inflight map[string]struct{} // keys whose sum a flush has taken and not yet settled
	_        [40]byte
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
	k := &Counter{c: c, listed: make(map[string]time.Time), listFailed: make(map[string]time.Time), shardedKeys: make(map[string]*shardedKey),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range k.stripes {
		k.stripes[i].pending = make(map[string]*batch)
		k.stripes[i].inflight = make(map[string]struct{})
	}
	return k
}

// Counter returns the client's Counter: the API for counters the plan may shard or batch.
func (c *Client) Counter() *Counter { return c.counter }

func (k *Counter) stripe(key string) *counterStripe {
	return &k.stripes[xxhash.Sum64String(key)&uint64(len(k.stripes)-1)]
}

// owingOf returns key's bucket in owing: its hash's top eight bits, which stripe does
// not use.
func (k *Counter) owingOf(key string) *atomic.Int32 {
	return &k.owing[xxhash.Sum64String(key)>>56]
}

// owe adds d (1: a sum made pending, -1: a sum settled or merged into another) to owed
// and to key's bucket in owing.
func (k *Counter) owe(key string, d int32) {
	k.owingOf(key).Add(d)
	k.owed.Add(int64(d))
}

// Add adds n to the counter key, following the plan (see Counter). Each Add is sampled
// (1 in SampleEvery) as a write of key, whatever path it takes: a batched Add sends
// nothing to Redis, and a sharded one increments a sub-counter, which the agent must
// count as key, so that the key does not look cold while the app adds as before.
func (k *Counter) Add(ctx context.Context, key string, n int64) error {
	c := k.c
	now := c.now()
	ix := c.follower.cur.Load()
	if b, ok := ix.leased(key, mitigate.BatchedCounter, now); ok && !k.closed.Load() {
		if k.addPending(key, n, time.Duration(b.FlushInterval)) {
			k.batched.Add(1)
			c.reporter.sampleAdd(key)
			return nil
		}
	}
	if s, ok := ix.leased(key, mitigate.ShardedCounter, now); ok {
		if sub := k.target(ctx, key, s, now); sub != key {
			k.sharded.Add(1)
			c.reporter.sampleAdd(key)
			return c.rdb.IncrBy(counterWrite(ctx), sub, n).Err()
		}
	}
	k.plain.Add(1)
	return c.rdb.IncrBy(ctx, key, n).Err() // the hook samples it
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
		k.owe(key, 1)
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
// entry, now or recent, it is a GET, which the plan hook may answer from the L1; else
// the key and its listed sub-counters (mitigate.ReadListedCounter), with those of its
// recent sharded_counter entries too (readUnion), sent as the client's own commands,
// which the hooks leave alone (the plan hook would take its script for a write of the
// key), and sampled as one read of the key.
func (k *Counter) read(ctx context.Context, key string) (int64, error) {
	c := k.c
	now := c.now()
	ix := c.follower.cur.Load()
	// A GET of the key, which the L1 may answer, only while no sharded_counter entry of
	// the key is recent: the agent folds the sub-counters into the key after the entry
	// ends, and until then the key alone misses their increments.
	if _, sharded := ix.leased(key, mitigate.ShardedCounter, now); !sharded && !k.isSharded(key, now) && ix.lookup(key).l1(now) > 0 {
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
	// The sub-counters this process knows of are read too, listed or not: a listing lost
	// on the key's node (a failover before it replicated) hides none of their increments.
	subs, _ := k.recentSubs(key, now)
	v, err := mitigate.ReadListedCounter(internal(ctx), c.rdb, key, subs...)
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
	failed := now.Before(k.listFailed[key])
	k.listMu.Unlock()
	switch {
	case fresh:
		return sub
	case failed:
		return key
	}
	if err := mitigate.ListSubCounter(internal(ctx), c.rdb, key, sub); err != nil {
		c.log.Debug("hotkeyd: listing a sub-counter failed; incrementing the key itself", "key", key, "sub", sub, "err", err, "retry_in", listRetry)
		k.listMu.Lock()
		k.listFailed[key] = now.Add(listRetry)
		k.listMu.Unlock()
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

// listRetry is how long Adds of a key whose sub-counter listing failed increment the
// key itself before one tries to list again: a listing that waits for a lagging replica
// takes up to mitigate.ReplicaWait, which every Add would otherwise pay.
const listRetry = time.Second

// onPlan runs when a new plan arrives: it forgets the listings of sub-counters the plan
// does not use any more, so that an entry using them again lists them again.
func (k *Counter) onPlan(ix *planIndex) {
	used := make(map[string]bool)
	now := k.c.now()
	k.shardedMu.Lock()
	maps.DeleteFunc(k.shardedKeys, func(_ string, sk *shardedKey) bool { return !now.Before(sk.until) })
	for key, kp := range ix.keys {
		for _, e := range kp.others {
			if e.Kind != mitigate.ShardedCounter {
				continue
			}
			for _, n := range e.SubCounters {
				used[n.Name] = true
			}
			sk := k.shardedKeys[key]
			if sk == nil {
				sk = &shardedKey{}
				k.shardedKeys[key] = sk
			}
			if until := e.until.Add(2 * mitigate.DefaultLease); until.After(sk.until) {
				sk.until = until
			}
			// A new slice when it grows: Get reads the old one without the lock.
			var more []mitigate.Node
			for _, n := range e.SubCounters {
				if !slices.ContainsFunc(sk.subs, func(m mitigate.Node) bool { return m.Name == n.Name }) {
					more = append(more, n)
				}
			}
			if len(more) > 0 {
				sk.subs = append(slices.Clip(sk.subs), more...)
			}
		}
	}
	k.nsharded.Store(int64(len(k.shardedKeys)))
	k.shardedMu.Unlock()
	k.listMu.Lock()
	maps.DeleteFunc(k.listed, func(sub string, _ time.Time) bool { return !used[sub] })
	maps.DeleteFunc(k.listFailed, func(_ string, until time.Time) bool { return !now.Before(until) })
	k.listMu.Unlock()
}

// isSharded reports whether key had a sharded_counter entry recently (see shardedKeys).
func (k *Counter) isSharded(key string, now time.Time) bool {
	_, ok := k.recentSubs(key, now)
	return ok
}

// recentSubs returns the sub-counters of key's recent sharded_counter entries, and
// whether it had one (see shardedKeys).
func (k *Counter) recentSubs(key string, now time.Time) (subs []mitigate.Node, ok bool) {
	k.shardedMu.Lock()
	defer k.shardedMu.Unlock()
	sk := k.shardedKeys[key]
	if sk == nil || !now.Before(sk.until) {
		return nil, false
	}
	return sk.subs, true
}

// keyOp says what a command does to a whole key that the sub-counters of a sharded
// counter must follow.
type keyOp int

const (
	keyOpNone   keyOp = iota
	keyOpDelete       // DEL, UNLINK: every argument is a key
	keyOpExpire       // EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST: the key at args[1]
)

func keyOpOf(name string) keyOp {
	for _, n := range [...]string{"del", "unlink"} {
		if strings.EqualFold(name, n) {
			return keyOpDelete
		}
	}
	for _, n := range [...]string{"expire", "pexpire", "expireat", "pexpireat", "persist"} {
		if strings.EqualFold(name, n) {
			return keyOpExpire
		}
	}
	return keyOpNone
}

// beforeKeyOp makes a DEL (UNLINK) or a TTL change (EXPIRE family, PERSIST) of a
// sharded counter's key through the app's client reach the counter's sub-counters too,
// before the command is sent: mitigate.ClearSubCounters, mitigate.ExpireSubCounters.
// It does so for the keys that had a sharded_counter entry in this client's plan
// within two leases (shardedKeys). A non-nil error means the sub-counters could not be
// reached: the caller must not send cmd, which would do half of it.
func (k *Counter) beforeKeyOp(ctx context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	if len(args) < 2 {
		return nil
	}
	name, _ := args[0].(string)
	op := keyOpOf(name)
	if op == keyOpNone {
		return nil
	}
	c := k.c
	now := c.now()
	ictx := internal(ctx)
	if op == keyOpExpire {
		key := argString(args[1])
		if !k.isSharded(key, now) {
			return nil
		}
		if _, err := mitigate.ExpireSubCounters(ictx, c.rdb, key, args); err != nil {
			return fmt.Errorf("client: not sent: %w", err)
		}
		return nil
	}
	for _, a := range args[1:] {
		key := argString(a)
		if !k.isSharded(key, now) {
			continue
		}
		if _, err := mitigate.ClearSubCounters(ictx, c.rdb, key); err != nil {
			return fmt.Errorf("client: not sent: %w", err)
		}
	}
	return nil
}

// flusher sends the pending sums when they are due, until Close. Once Close has asked it
// to stop it sends nothing more, even when a kick or its timer is ready too (select
// would pick among them at random): Close's own flush tries every sum once more, and
// with Redis hung each flush lasts the Redis client's timeout.
func (k *Counter) flusher() {
	defer close(k.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		default:
		}
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
	target string        // the key or a sub-counter
	probe  *redis.IntCmd // EXISTS target, sent first when the sum's last flush failed
	cmd    *redis.IntCmd // INCRBY target sum; nil when the probe failed
}

// flushMode says who flushes: the flusher (due sums), Close (every sum, once), or the
// plan hook before a write of the keys (see beforeWrite).
type flushMode int

const (
	flushDue flushMode = iota
	flushAll
	flushWrite
)

// counterWriteKey marks the contexts of the Counter's own writes: flushes, which the plan
// hook must not hold back for the pending sums of their keys (the flush is what it would
// wait for), and increments of sub-counters. The reporter's hook does not sample them:
// Add samples each increment as a write of its key, whatever path it takes.
type counterWriteKey struct{}

func isCounterWrite(ctx context.Context) bool { return ctx.Value(counterWriteKey{}) != nil }

// counterWrite marks ctx as a context of the Counter's own writes.
func counterWrite(ctx context.Context) context.Context {
	return context.WithValue(ctx, counterWriteKey{}, true)
}

// flush sends the sums that are due (all of them when all is set) in one pipeline, puts
// back those that failed, and returns the earliest due time of the sums left (zero when
// none).
func (k *Counter) flush(all bool) (next time.Time) {
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
				s.inflight[key] = struct{}{}
			} else if next.IsZero() || b.due.Before(next) {
				next = b.due
			}
		}
		s.mu.Unlock()
	}
	if len(items) == 0 {
		return next
	}
	mode := flushDue
	if all {
		mode = flushAll
	}
	ctx, cancel := context.WithTimeout(counterWrite(context.Background()), k.c.timeout)
	defer cancel()
	if due, _ := k.send(ctx, items, mode, now); !due.IsZero() && (next.IsZero() || due.Before(next)) {
		next = due
	}
	return next
}

// owes reports whether key has a sum pending or in a flush in flight. Without a lock
// when no key of its bucket owes (see owing).
func (k *Counter) owes(key string) bool {
	if k.owingOf(key).Load() == 0 {
		return false
	}
	s := k.stripe(key)
	s.mu.Lock()
	_, pending := s.pending[key]
	_, inflight := s.inflight[key]
	s.mu.Unlock()
	return pending || inflight
}

// beforeWrite flushes the pending sums of the keys cmd writes, in ctx, so that Adds made
// before a write of their key through the app's client reach Redis before it (the plan
// hook calls it for every command while some sum is pending; with none it is not called).
// It waits for a flush in flight first. A non-nil error means a sum of those keys could
// not be flushed and is still pending: the caller must not send cmd, which would overtake
// it. A sum Redis refuses is dropped (logged, counted) and is no error: an INCRBY of the
// plain path would have failed the same way, before the write.
func (k *Counter) beforeWrite(ctx context.Context, cmds ...redis.Cmder) error {
	var keys []string
	for _, cmd := range cmds {
		var buf [1]string
		if w := k.c.parse(cmd, buf[:0]).w; w.write {
			keys = k.owedOf(keys, w.keys)
		}
	}
	return k.flushKeys(ctx, keys)
}

// beforeWriteOf is beforeWrite for one command, which the hook has classified as w.
func (k *Counter) beforeWriteOf(ctx context.Context, w write) error {
	if !w.write {
		return nil
	}
	return k.flushKeys(ctx, k.owedOf(nil, w.keys))
}

// owedOf appends to keys those of written that owe a sum and are not in keys yet.
func (k *Counter) owedOf(keys, written []string) []string {
	for _, key := range written {
		if k.owes(key) && !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	return keys
}

// flushKeys flushes the pending sums of keys, which owed a sum a moment ago, for
// beforeWrite.
func (k *Counter) flushKeys(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	k.flushMu.Lock()
	defer k.flushMu.Unlock()
	now := time.Now()
	var items []flushItem
	for _, key := range keys {
		s := k.stripe(key)
		s.mu.Lock()
		if b := s.pending[key]; b != nil {
			items = append(items, flushItem{key: key, b: b, target: key})
			delete(s.pending, key)
			s.inflight[key] = struct{}{}
		}
		s.mu.Unlock()
	}
	if len(items) == 0 {
		return nil // the flush we waited for took them
	}
	k.writeFlushes.Add(1)
	_, err := k.send(counterWrite(ctx), items, flushWrite, now)
	if err != nil {
		select { // the flusher's timer may be set for later than the sum kept
		case k.kick <- struct{}{}:
		default:
		}
		return fmt.Errorf("client: not sent: the pending batched increments of its keys could not be flushed before it (they are kept): %w", err)
	}
	return nil
}

// send sends items' sums, each to its target, under flushMu, and settles each: counted
// when acknowledged, else put back or dropped. A sum whose last flush failed is not sent
// again blind: its target's node is probed first (EXISTS target, routed as the INCRBY
// is, in a round trip of its own); a probe without an answer from Redis means nothing
// was sent, which counts as unreachable whatever the error (go-redis reports a refused
// connection as the context's deadline once its dial retries outlast it). A sum with no
// failed flush is sent at once, at no extra cost. It returns the earliest due time of
// the sums put back, and the error of the first one kept.
func (k *Counter) send(ctx context.Context, items []flushItem, mode flushMode, now time.Time) (next time.Time, kept error) {
	c := k.c
	cnow := c.now()
	ix := c.follower.cur.Load()
	for i := range items {
		if e, ok := ix.leased(items[i].key, mitigate.ShardedCounter, cnow); ok {
			items[i].target = k.target(ctx, items[i].key, e, cnow)
		}
	}
	probes := 0
	for i := range items {
		if items[i].b.tries > 0 || items[i].b.waits > 0 {
			probes++
		}
	}
	if probes > 0 {
		_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range items {
				if items[i].b.tries > 0 || items[i].b.waits > 0 {
					items[i].probe = p.Exists(ctx, items[i].target)
				}
			}
			return nil
		})
	}
	sending := len(items)
	for i := range items {
		if items[i].probe != nil && !answered(items[i].probe.Err()) {
			sending--
		}
	}
	if sending > 0 {
		_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range items {
				if items[i].probe == nil || answered(items[i].probe.Err()) {
					items[i].cmd = p.IncrBy(ctx, items[i].target, items[i].b.sum)
				}
			}
			return nil
		})
	}
	for _, it := range items {
		var err error
		if it.cmd == nil {
			err = it.probe.Err()
		} else {
			err = it.cmd.Err()
		}
		if err == nil {
			k.flushes.Add(1)
			k.settled(it.key)
			continue
		}
		k.flushErrors.Add(1)
		var rerr redis.Error
		away := it.cmd == nil || unreachable(err)
		refused := !away && errors.As(err, &rerr)
		if !away && !refused {
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
		if mode == flushAll || it.b.tries >= MaxFlushTries || (mode == flushWrite && refused) {
			k.drop(it, err)
			k.settled(it.key)
			continue
		}
		due, ok := k.putBack(it.key, it.b, now, wait)
		if !ok {
			k.drop(it, err)
			k.settled(it.key)
			continue
		}
		if kept == nil {
			kept = err
		}
		if next.IsZero() || due.Before(next) {
			next = due
		}
		c.log.Warn("hotkeyd: flushing a batched counter failed; retrying at the next flush",
			"key", it.key, "target", it.target, "sum", it.b.sum, "tries", it.b.tries, "err", err)
	}
	return next, kept
}

// answered reports whether a probe's error (nil included) is an answer from Redis that
// says it can take writes: a Redis error other than unreachable's (an ACL refusing
// EXISTS, say) is one, so that such a refusal does not keep the sum forever.
func answered(err error) bool {
	var rerr redis.Error
	return err == nil || errors.As(err, &rerr) && !unreachable(err)
}

// settled ends the flight of key's sum: acknowledged or dropped.
func (k *Counter) settled(key string) {
	s := k.stripe(key)
	s.mu.Lock()
	delete(s.inflight, key)
	s.mu.Unlock()
	k.owe(key, -1)
}

// putBack merges a sum whose flush failed into the key's pending sum and returns when it
// is due again (after wait, or when the newer sum is due, whichever is later); false when
// the merged sum would overflow an int64 (the caller then drops it: see settled).
func (k *Counter) putBack(key string, b *batch, now time.Time, wait time.Duration) (time.Time, bool) {
	s := k.stripe(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.pending[key]; cur != nil {
		if overflows(cur.sum, b.sum) {
			return time.Time{}, false
		}
		// In the same step as the merge, so the hook never sees the key owe nothing.
		delete(s.inflight, key)
		k.owe(key, -1) // cur is counted already
		cur.sum += b.sum
		cur.adds += b.adds
		cur.tries = max(cur.tries, b.tries)
		cur.waits = max(cur.waits, b.waits)
		if due := now.Add(wait); due.After(cur.due) {
			cur.due = due
		}
		return cur.due, true
	}
	delete(s.inflight, key) // stays counted in owed, pending again
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
		Dropped: k.dropped.Load(), DroppedAdds: k.droppedAdds.Load(), WriteFlushes: k.writeFlushes.Load(),
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
