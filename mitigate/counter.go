package mitigate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sharded counters: the writer side (IncrCounter), the exact reader (ReadCounter) and the
// fold that moves a sub-counter's value back into the key (Executor). docs/plan.md,
// section Executors, states the protocol and argues why it is exact.
//
// Besides the sub-counters the planner names, the protocol keeps three kinds of keys, each
// behind a hash tag "{hk:t<n>}" chosen so that the key lands in the slot it must share
// with another key (slotTag):
//
//	{hk:t<n>}stash:<sub>      a fold in progress: hash {id, value}; same slot as <sub>
//	{hk:t<n>}done:<id>:<key>  the fold <id> was added to <key>; same slot as <key>; expires
//	{hk:t<n>}gen:<key>        counts the folds added to <key>, from a random start; same
//	                          slot as <key>; expires
//	{hk:t<n>}subs:<key>       the sub-counters that may hold part of <key>'s value: a set,
//	                          added to by writers before they increment a sub-counter,
//	                          removed from by the executor once it has folded one for good;
//	                          same slot as <key>
//
// None of them starts with "{hk:sub" or "{hk:copy", so ParseName never mistakes them for
// a name that Names made, whatever the original key is.

// FoldMemory is how long the marker of an applied fold, and the fold count of a key, stay in
// Redis. A fold whose stash was left behind by a crash must be completed (Recover) within
// this time, or its value could be added twice. A fold count that expires starts again
// from a random value, never from where a reader may have seen it (see foldApply).
const FoldMemory = 24 * time.Hour

// maxReadTries bounds ReadCounter's retries when folds keep landing during its reads.
const maxReadTries = 32

// slotTags[s] is the smallest n such that "hk:t<n>" hashes to slot s. Built on first use
// (about 170,000 CRC16 computations, a few milliseconds) and only read afterwards.
var slotTags = sync.OnceValue(func() *[SlotCount]uint32 {
	var t [SlotCount]uint32
	var filled [SlotCount]bool
	left := SlotCount
	buf := make([]byte, 0, 16)
	for n := uint32(0); left > 0; n++ {
		buf = strconv.AppendUint(append(buf[:0], "hk:t"...), uint64(n), 10)
		if s := SlotBytes(buf); !filled[s] {
			filled[s], t[s] = true, n
			left--
		}
	}
	return &t
})

// slotTag returns "{hk:t<n>}", a hash tag that hashes to slot.
func slotTag(slot int) string {
	return "{hk:t" + strconv.FormatUint(uint64(slotTags()[slot]), 10) + "}"
}

// stashName is where a fold of sub keeps the value it moves, in sub's slot.
func stashName(sub string) string { return slotTag(Slot(sub)) + "stash:" + sub }

// doneName marks fold id as added to key, in key's slot.
func doneName(key, id string) string { return slotTag(Slot(key)) + "done:" + id + ":" + key }

// genName counts the folds added to key, in key's slot.
func genName(key string) string { return slotTag(Slot(key)) + "gen:" + key }

// listName lists the sub-counters that may hold part of key's value, in key's slot.
func listName(key string) string { return slotTag(Slot(key)) + "subs:" + key }

// SubCounterList returns the name of the set, in key's slot, that lists the sub-counters
// which may hold part of the counter key's value (ListSubCounter): for operators and
// tests; readers use ReadListedCounter.
func SubCounterList(key string) string { return listName(key) }

// listKey returns the key a list of sub-counters belongs to, and false for another name.
func listKey(name string) (string, bool) { return ofTagged(name, "}subs:", listName) }

// stashSub returns the sub-counter a stash belongs to, and false for another name.
func stashSub(name string) (string, bool) { return ofTagged(name, "}stash:", stashName) }

// ofTagged returns what name, a protocol key "{hk:t<n>}<kind>:<of>", was made for by
// nameOf, and false for a name nameOf did not make.
func ofTagged(name, kind string, nameOf func(string) string) (string, bool) {
	if !strings.HasPrefix(name, "{hk:t") {
		return "", false
	}
	_, of, ok := strings.Cut(name, kind)
	if !ok || nameOf(of) != name {
		return "", false
	}
	return of, true
}

// Scripts of the fold and of the reader. Each touches keys of one slot only.
var (
	// foldMove (step a, on the sub-counter's node). KEYS: sub, stash; ARGV: a fresh
	// fold id. When a stash is there (an earlier fold did not finish), it returns it,
	// setting its id again unchanged (a write, which a WAIT after it covers); else it
	// moves the sub-counter's value into a new stash under the fresh id, deleting the
	// sub-counter; the stash expires when the sub-counter would have (an EXPIRE of the
	// counter reaches its sub-counters: see ExpireSubCounters). Reply: {} when there is
	// nothing to fold, else {id, value, expiry}: the stash's expiry in Unix ms on this
	// node's clock, -1 for none (PTTL and TIME, not PEXPIRETIME: Redis < 7 has none).
	foldMove = newScript(`
local function expiry(k)
  local ttl = redis.call('PTTL', k)
  if ttl < 0 then return -1 end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
end
local id = redis.call('HGET', KEYS[2], 'id')
if id then
  redis.call('HSET', KEYS[2], 'id', id) -- a write, so a WAIT after it covers the stash
  return {id, redis.call('HGET', KEYS[2], 'value'), expiry(KEYS[2])}
end
local v = redis.call('GET', KEYS[1])
if not v then return {} end
local at = expiry(KEYS[1])
redis.call('DEL', KEYS[1])
if v == '0' then return {} end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'value', v)
if at > 0 then redis.call('PEXPIREAT', KEYS[2], at) end
return {ARGV[1], v, at}`)

	// foldApply (step b, on the key's node). KEYS: key, gen, done; ARGV: value, memory in
	// ms, a random start for gen, and the stash's expiry (Unix ms, -1 or absent for
	// none). Adds value to the key unless the fold's marker says it was added already;
	// sets the marker and counts the fold in gen in the same step. A value whose expiry
	// has passed (on this node's clock) is not added: it expired with its sub-counter. A
	// key the fold creates gets the expiry, so a counter whose value expires with its
	// sub-counters is not made to live forever by a fold; a key that exists keeps its
	// own TTL, as with an INCRBY. Reply: 1 applied (or expired), 0 already (the marker's
	// expiry is then set again: a write that a WAIT after it covers).
	//
	// gen expires FoldMemory after the last fold. Were it to start again at 1, a reader
	// that saw gen = 1 just before it expired, and a fold landing right after, would see
	// gen = 1 again and accept a read that counts the fold twice. A start drawn from 60
	// random bits makes that repetition as unlikely as two fold ids alike; gen stays an
	// integer, as an INCR of an older executor expects.
	foldApply = newScript(`
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[2]) -- a write, so a WAIT after it covers the fold
  return 0
end
local at = tonumber(ARGV[4] or '-1') or -1
local t = redis.call('TIME')
if at <= 0 or at > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
  local fresh = redis.call('EXISTS', KEYS[1]) == 0
  redis.call('INCRBY', KEYS[1], ARGV[1])
  if fresh and at > 0 then redis.call('PEXPIREAT', KEYS[1], at) end
end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SET', KEYS[2], ARGV[3]) end
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
return 1`)

	// foldDrop (step c, on the sub-counter's node). KEYS: stash; ARGV: id. Deletes the
	// stash if it still holds fold id. Reply: 1 deleted, 0 not.
	foldDrop = newScript(`
if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

	// readSub (reader, on a sub-counter's node). KEYS: sub, stash. Reply: {value, stash
	// id, stash value}, "" for what is absent.
	readSub = newScript(`
local s = redis.call('HMGET', KEYS[2], 'id', 'value')
return {redis.call('GET', KEYS[1]) or '', s[1] or '', s[2] or ''}`)

	// clearSub (ClearSubCounters, on a sub-counter's node). KEYS: sub, stash. Deletes
	// both. Reply: {the stash's fold id or "", how many of the two existed}.
	clearSub = newScript(`
local id = redis.call('HGET', KEYS[2], 'id') or ''
return {id, redis.call('DEL', KEYS[1], KEYS[2])}`)

	// clearMark (ClearSubCounters, on the key's node). KEYS: gen, done markers…; ARGV:
	// memory in ms, a random start for gen. Marks each fold as added, so that its step
	// b, if still to come, adds nothing, and counts one fold in gen, so that a read
	// spanning the reset starts again.
	clearMark = newScript(`
for i = 2, #KEYS do redis.call('SET', KEYS[i], '1', 'PX', ARGV[1]) end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SET', KEYS[1], ARGV[2]) end
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1`)

	// listSub (ListSubCounter, on the key's node). KEYS: the list; ARGV: the
	// sub-counter. Adds it, and writes even when it was listed already (removed and
	// added again, one step for replicas too), so that a WAIT after it covers the listing
	// also when another writer's SADD of it is not replicated yet.
	listSub = newScript(`
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then
  redis.call('SREM', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[1], ARGV[1])
end
return 1`)

	// readListed (reader, on the key's node). KEYS: key, its list of sub-counters. Reply:
	// {value or "", the sub-counters listed}.
	readListed = newScript(`
return {redis.call('GET', KEYS[1]) or '', redis.call('SMEMBERS', KEYS[2])}`)

	// readBase (reader, on the key's node). KEYS: key, gen, done markers…. Reply: {value,
	// gen, exists(done 1), …}, "" for what is absent.
	readBase = newScript(`
local out = {redis.call('GET', KEYS[1]) or '', redis.call('GET', KEYS[2]) or ''}
for i = 3, #KEYS do out[#out + 1] = redis.call('EXISTS', KEYS[i]) end
return out`)
)

// IncrCounter adds n to the logical counter key: to a sub-counter picked at random when
// subs is not empty (the key is sharded), else to key itself. It picks with math/rand/v2's
// global source; IncrCounterRand takes a source of its own.
func IncrCounter(ctx context.Context, rdb Redis, key string, subs []Node, n int64) error {
	return IncrCounterRand(ctx, rdb, nil, key, subs, n)
}

// IncrCounterRand is IncrCounter picking the sub-counter with r (math/rand/v2's global
// source when r is nil). A *mrand.Rand is not safe for concurrent use: give each goroutine
// its own, or pass nil.
func IncrCounterRand(ctx context.Context, rdb Redis, r *mrand.Rand, key string, subs []Node, n int64) error {
	target := key
	if len(subs) > 0 {
		var i int
		if r != nil {
			i = r.IntN(len(subs))
		} else {
			i = mrand.IntN(len(subs))
		}
		target = subs[i].Name
	}
	if err := rdb.Do(ctx, "INCRBY", target, n).Err(); err != nil {
		return fmt.Errorf("mitigate: counter %q: INCRBY %s: %w", key, target, err)
	}
	return nil
}

// ListSubCounter adds sub to key's list of sub-counters, where every reader finds it
// (ReadListedCounter). A writer lists a sub-counter before it first increments it, and
// again at least every ListRenewal while it goes on incrementing it; the executor takes
// it off the list once it has folded it and no writer has written it for its grace
// period (docs/plan.md, "What readers and writers must do").
//
// A listing is made as durable as a fold's steps: ListSubCounter waits (WAIT, up to
// ReplicaWait) until every replica of the key's primary has it, so that a failover right
// after it does not lose the listing while the sub-counter, on another primary, keeps
// the increments made under it, which readers would then not see. When a replica does
// not acknowledge in time (or the replicas cannot be checked: the slot just moved) it
// returns an error wrapping ErrNotReplicated: the listing is in place on the primary, but
// the caller must not rely on it yet — increment the key itself, as for any failed
// listing, and list again at the next increment. A Redis user without ROLE or CLUSTER
// REPLICAS (@admin) lists without waiting, as a fold's steps do.
//
// Cost: two more round trips to the key's primary (CLUSTER MYID, CLUSTER REPLICAS) and
// the WAIT, about a replication round trip; a writer lists each sub-counter once per
// ListRenewal.
func ListSubCounter(ctx context.Context, rdb Redis, key, sub string) error {
	cmd, unsure := runReplicated(ctx, rdb, listSub, []string{listName(key)}, sub)
	if err := cmd.Err(); err != nil {
		return fmt.Errorf("mitigate: counter %q: list sub-counter %s: %w", key, sub, err)
	}
	if unsure != nil {
		return fmt.Errorf("mitigate: counter %q: list sub-counter %s: %w: %w", key, sub, ErrNotReplicated, unsure)
	}
	return nil
}

// ErrNotReplicated is wrapped by the error of a listing that the key's primary made but
// its replicas did not acknowledge in time (ListSubCounter).
var ErrNotReplicated = errors.New("not known to be on every replica")

// ListRenewal is how long a writer may go on incrementing a sub-counter after it listed
// it (ListSubCounter) before it lists it again: half the executor's default grace period,
// so a listing is always renewed before the executor can have taken it off the list.
const ListRenewal = DefaultLease / 2

// ReadListedCounter returns the exact value of the logical counter key, reading the
// sub-counters its writers listed (ListSubCounter) and those in known: one round trip to
// the key's node when there are none, ReadCounter's cost otherwise. Unlike ReadCounter it
// needs no plan: any process may call it, at any time. A process that holds the plan
// passes the sub-counters its entries named as known, so that a listing lost on the key's
// node (a failover before it replicated) cannot hide their increments from it.
func ReadListedCounter(ctx context.Context, rdb Redis, key string, known ...Node) (int64, error) {
	reply, err := readListed.run(ctx, rdb, []string{key, listName(key)}).Slice()
	if err != nil {
		return 0, fmt.Errorf("mitigate: read counter %q: %w", key, err)
	}
	var listed []any
	ok := len(reply) == 2
	if ok {
		listed, ok = reply[1].([]any)
	}
	if !ok {
		return 0, fmt.Errorf("mitigate: read counter %q: got %v from the key's node; want its value and its list", key, reply)
	}
	if len(listed) == 0 && len(known) == 0 {
		v, err := parseCount(reply[0])
		if err != nil {
			return 0, fmt.Errorf("mitigate: read counter %q: %w", key, err)
		}
		return v, nil
	}
	subs := slices.Clip(known)
	for _, m := range listed {
		name := str(m)
		if !slices.ContainsFunc(known, func(n Node) bool { return n.Name == name }) {
			subs = append(subs, Node{Name: name, Slot: Slot(name)})
		}
	}
	return ReadCounter(ctx, rdb, key, subs)
}

// ClearSubCounters is the first half of deleting the logical counter key: it deletes
// every sub-counter listed for key and the stash of every fold in flight, and marks
// those folds as added to key, so that a fold between its steps a and b adds nothing
// once key is deleted; the caller then deletes key itself. It leaves the list alone:
// writers go on incrementing the sub-counters they listed, and readers must keep
// finding them. Increments acknowledged before it was called are gone once key is
// deleted; those made meanwhile may or may not be (on a cluster the sub-counters live
// on other nodes, so this is no atomic step). It returns how many sub-counters and
// stashes it deleted.
func ClearSubCounters(ctx context.Context, rdb Redis, key string) (int, error) {
	subs, err := rdb.Do(ctx, "SMEMBERS", listName(key)).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("mitigate: clear counter %q: list of sub-counters: %w", key, err)
	}
	if len(subs) == 0 {
		return 0, nil
	}
	type cleared struct {
		id  string
		n   int64
		err error
	}
	out := make([]cleared, len(subs))
	var wg sync.WaitGroup
	for i, sub := range subs {
		wg.Go(func() {
			reply, err := clearSub.run(ctx, rdb, []string{sub, stashName(sub)}).Slice()
			if err == nil && len(reply) != 2 {
				err = fmt.Errorf("got %d values; want 2", len(reply))
			}
			if err != nil {
				out[i].err = fmt.Errorf("mitigate: clear counter %q: sub-counter %s: %w", key, sub, err)
				return
			}
			out[i].id = str(reply[0])
			out[i].n, _ = reply[1].(int64)
		})
	}
	wg.Wait()
	keys := []string{genName(key)}
	n := 0
	for _, c := range out {
		if c.err != nil {
			return n, c.err
		}
		n += int(c.n)
		if c.id != "" {
			keys = append(keys, doneName(key, c.id))
		}
	}
	id, err := newFoldID()
	if err != nil {
		return n, err
	}
	memory := strconv.FormatInt(FoldMemory.Milliseconds(), 10)
	if err := clearMark.run(ctx, rdb, keys, memory, genStart(id)).Err(); err != nil {
		return n, fmt.Errorf("mitigate: clear counter %q: mark folds: %w", key, err)
	}
	return n, nil
}

// ExpireSubCounters applies a command that sets or removes the TTL of the logical
// counter key — args is the app's EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT or PERSIST with
// its options, key at args[1] — to every sub-counter listed for key and to the stash of
// its fold in flight, so that the value they hold expires with key (a fold carries what
// is left of the TTL into key: see foldMove). It returns how many of them the command
// applied to. The caller sends args to key itself.
func ExpireSubCounters(ctx context.Context, rdb Redis, key string, args []any) (int, error) {
	if len(args) < 2 {
		return 0, fmt.Errorf("mitigate: expire counter %q: %d arguments; want the command and the key at least", key, len(args))
	}
	subs, err := rdb.Do(ctx, "SMEMBERS", listName(key)).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("mitigate: expire counter %q: list of sub-counters: %w", key, err)
	}
	names := make([]string, 0, 2*len(subs))
	for _, sub := range subs {
		names = append(names, sub, stashName(sub))
	}
	applied := make([]int64, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			a := slices.Clone(args)
			a[1] = name
			applied[i], errs[i] = rdb.Do(ctx, a...).Int64()
		})
	}
	wg.Wait()
	n := 0
	for i, err := range errs {
		if err != nil {
			return n, fmt.Errorf("mitigate: expire counter %q: %s: %w", key, names[i], err)
		}
		n += int(applied[i])
	}
	return n, nil
}

// unlistSubCounter takes sub off key's list of sub-counters.
func unlistSubCounter(ctx context.Context, rdb Redis, key, sub string) error {
	if err := rdb.Do(ctx, "SREM", listName(key), sub).Err(); err != nil {
		return fmt.Errorf("mitigate: counter %q: take sub-counter %s off its list: %w", key, sub, err)
	}
	return nil
}

// ReadCounter returns the exact value of the logical counter key whose sub-counters are
// subs: the key plus every sub-counter plus every fold in flight not yet added to the key.
// Pass every sub-counter the key may have had recently (an entry that ended less than the
// executor's grace period ago included); with no subs it reads the key alone.
//
// It costs two round trips to the key's node and one to each sub-counter's node (in
// parallel), and starts again when a fold was added to the key during the read (at most 32
// tries). A value that is not an integer is an error. docs/plan.md argues why the result
// counts every increment that completed before ReadCounter was called, and none that
// started after it returned, exactly once.
func ReadCounter(ctx context.Context, rdb Redis, key string, subs []Node) (int64, error) {
	gen := genName(key)
	for try := 0; try < maxReadTries; try++ {
		// 1. The fold count before the sub-counters are read.
		g0, err := rdb.Do(ctx, "GET", gen).Text()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("mitigate: read counter %q: GET %s: %w", key, gen, err)
		}
		// 2. Each sub-counter with its stash, atomically per sub-counter.
		parts := make([]subRead, len(subs))
		var wg sync.WaitGroup
		for i, s := range subs {
			wg.Go(func() { parts[i] = readOneSub(ctx, rdb, s.Name) })
		}
		wg.Wait()
		// 3. The key, the fold count again, and which stashes were added.
		keys := []string{key, gen}
		for _, p := range parts {
			if p.err != nil {
				return 0, fmt.Errorf("mitigate: read counter %q: %w", key, p.err)
			}
			if p.stashID != "" {
				keys = append(keys, doneName(key, p.stashID))
			}
		}
		reply, err := readBase.run(ctx, rdb, keys).Slice()
		if err != nil {
			return 0, fmt.Errorf("mitigate: read counter %q: %w", key, err)
		}
		if len(reply) != len(keys) {
			return 0, fmt.Errorf("mitigate: read counter %q: got %d values from the key's node; want %d", key, len(reply), len(keys))
		}
		if str(reply[1]) != g0 {
			continue // a fold was added meanwhile: its value may have been counted in a sub-counter too
		}
		total, err := parseCount(reply[0])
		if err != nil {
			return 0, fmt.Errorf("mitigate: read counter %q: key: %w", key, err)
		}
		j := 2
		for _, p := range parts {
			total += p.value
			if p.stashID != "" {
				if applied, _ := reply[j].(int64); applied == 0 {
					total += p.stashValue
				}
				j++
			}
		}
		return total, nil
	}
	return 0, fmt.Errorf("mitigate: read counter %q: folds landed during each of %d reads; try again", key, maxReadTries)
}

// subRead is what a reader saw of one sub-counter.
type subRead struct {
	value      int64
	stashID    string
	stashValue int64
	err        error
}

func readOneSub(ctx context.Context, rdb Redis, sub string) subRead {
	reply, err := readSub.run(ctx, rdb, []string{sub, stashName(sub)}).Slice()
	if err != nil {
		return subRead{err: fmt.Errorf("sub-counter %s: %w", sub, err)}
	}
	if len(reply) != 3 {
		return subRead{err: fmt.Errorf("sub-counter %s: got %d values; want 3", sub, len(reply))}
	}
	var r subRead
	if r.value, err = parseCount(reply[0]); err != nil {
		return subRead{err: fmt.Errorf("sub-counter %s: %w", sub, err)}
	}
	r.stashID = str(reply[1])
	if r.stashID != "" {
		if r.stashValue, err = parseCount(reply[2]); err != nil {
			return subRead{err: fmt.Errorf("stash of sub-counter %s: %w", sub, err)}
		}
	}
	return r
}

// parseCount reads a counter's value; "" (absent) is 0.
func parseCount(v any) (int64, error) {
	s := str(v)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("value %q is not an integer", s)
	}
	return n, nil
}

// foldResult says what one fold of a sub-counter did.
type foldResult struct {
	moved     int64 // value moved into the key by new folds
	recovered int64 // value of stashes left by earlier folds, now completed
	folds     int   // new folds made
	recovers  int   // earlier folds completed
}

// nonZero reports whether the fold found anything to move.
func (r foldResult) nonZero() bool { return r.folds > 0 || r.recovers > 0 }

// foldSub moves the value of sub-counter sub into key: steps a, b, c of the protocol,
// repeated while a stash left by an earlier fold is found first (at most 4 rounds).
func foldSub(ctx context.Context, rdb Redis, key, sub string) (foldResult, error) {
	var res foldResult
	stash := stashName(sub)
	memory := strconv.FormatInt(FoldMemory.Milliseconds(), 10)
	for round := 0; round < 4; round++ {
		id, err := newFoldID()
		if err != nil {
			return res, err
		}
		// a. Move the sub-counter into a stash, or find the stash of an unfinished fold.
		cmd, unsure := runReplicated(ctx, rdb, foldMove, []string{sub, stash}, id)
		reply, err := cmd.Slice()
		if err != nil {
			return res, fmt.Errorf("fold %s: move to stash: %w", sub, err)
		}
		if len(reply) == 0 {
			return res, nil
		}
		if len(reply) != 3 {
			return res, fmt.Errorf("fold %s: move to stash: got %d values; want 3", sub, len(reply))
		}
		gotID, value := str(reply[0]), str(reply[1])
		at, _ := reply[2].(int64)
		n, err := parseCount(value)
		if err != nil {
			return res, fmt.Errorf("fold %s: stash %s: %w", sub, stash, err)
		}
		// Not b before a is on every replica of sub's primary: a failover that lost a
		// would bring sub's value back, and b would count it a second time.
		if unsure != nil {
			return res, fmt.Errorf("fold %s: move to stash: %w", sub, unsure)
		}
		// b. Add it to the key, once per fold id.
		cmd, unsure = runReplicated(ctx, rdb, foldApply, []string{key, genName(key), doneName(key, gotID)}, value, memory, genStart(id), at)
		if err := cmd.Err(); err != nil {
			return res, fmt.Errorf("fold %s into %s: %w", sub, key, err)
		}
		// Not c before b is on every replica of key's primary: a failover that lost b
		// (and its marker with it) then finds the stash still there, which readers count
		// again and the next fold applies again, instead of losing its value.
		if unsure != nil {
			return res, fmt.Errorf("fold %s into %s: %w", sub, key, unsure)
		}
		// c. Drop the stash.
		if err := foldDrop.run(ctx, rdb, []string{stash}, gotID).Err(); err != nil {
			return res, fmt.Errorf("fold %s: drop stash %s: %w", sub, stash, err)
		}
		if gotID != id {
			res.recovers++
			res.recovered += n
			continue // the sub-counter itself may hold more
		}
		res.folds++
		res.moved += n
		return res, nil
	}
	return res, fmt.Errorf("fold %s: still finding stashes after 4 rounds", sub)
}

// genStart returns where a key's fold count starts when it does not exist: 60 bits of the
// fresh fold id (random, never reused), so a count that expired never starts again where
// a reader saw it.
func genStart(id string) string {
	n, _ := strconv.ParseUint(id[:15], 16, 64) // newFoldID's hex digits
	return strconv.FormatUint(n, 10)
}

// newFoldID returns 128 random bits in hex: fold ids must never repeat, across agents and
// restarts, so they come from crypto/rand rather than a seeded source.
func newFoldID() (string, error) { return randomHex(16, "fold id") }

// randomHex returns n random bytes (crypto/rand) in hex; what names what they are for,
// in the error.
func randomHex(n int, what string) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return hex.EncodeToString(b), nil
}

// ReplicaWait bounds how long a fold waits (WAIT) for the replicas of a primary to have a
// step of it before it takes the next; a step they do not have by then is taken again at
// the executor's next round.
const ReplicaWait = 200 * time.Millisecond

// runReplicated runs s on one connection to the primary of keys[0]'s slot, then waits up
// to ReplicaWait until every replica of that primary has what s wrote (WAIT on that
// connection; every script it runs writes, so WAIT covers what an earlier run wrote too,
// except when it replies with an empty list, which means it found nothing and wrote
// nothing: no wait then).
// The second result is an error when that is not known: a replica did not acknowledge in
// time, or s could not run on one connection (a slot table that is out of date, a client
// that is neither a *redis.Client nor a *redis.ClusterClient, which then runs s as usual
// and reports nil: the caller cannot do better).
//
// Redis replicates asynchronously: a failover may lose the last writes a primary
// acknowledged. A fold moves a sub-counter's whole value, written long ago and replicated
// since, in one write: without the wait a failover in the next milliseconds would lose (or
// count twice) all of it, not just the last increments.
func runReplicated(ctx context.Context, rdb Redis, s script, keys []string, args ...any) (*redis.Cmd, error) {
	var node *redis.Client
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		c, err := r.MasterForKey(ctx, keys[0])
		if err != nil {
			return s.run(ctx, rdb, keys, args...), fmt.Errorf("primary of %s not known: %w", keys[0], err)
		}
		node = c
	case *redis.Client:
		node = r
	default:
		return s.run(ctx, rdb, keys, args...), nil
	}
	conn := node.Conn()
	defer conn.Close()
	cmd := s.run(ctx, conn, keys, args...)
	if _, moved := ParseRedirect(cmd.Err()); moved {
		// The client's slot table is out of date: let it follow the redirect (and learn
		// the new owner), and take the step again next time to wait for its replicas.
		return s.run(ctx, rdb, keys, args...), errors.New("slot moved: replicas not checked")
	}
	if cmd.Err() != nil {
		return cmd, nil
	}
	if r, ok := cmd.Val().([]any); ok && len(r) == 0 {
		// An empty list is foldMove's "nothing to fold": it wrote nothing to wait for
		// (every round folds each draining sub-counter, mostly empty).
		return cmd, nil
	}
	n, err := replicaCount(ctx, conn)
	if err != nil && strings.Contains(err.Error(), "NOPERM") {
		// A Redis user without ROLE or CLUSTER REPLICAS (@admin), which nothing else the
		// executor does needs: the replicas are unknown, and the fold goes on without
		// waiting, as before it waited (docs/plan.md, Failover).
		return cmd, nil
	}
	if err != nil || n == 0 {
		return cmd, err
	}
	acked, err := conn.Do(ctx, "WAIT", n, ReplicaWait.Milliseconds()).Int()
	switch {
	case err != nil:
		return cmd, fmt.Errorf("WAIT: %w", err)
	case acked < n:
		return cmd, fmt.Errorf("%d of %d replicas acknowledged within %v", acked, n, ReplicaWait)
	}
	return cmd, nil
}

// replicaCount returns how many replicas the primary at the end of conn has that a
// failover could promote: in a cluster, those CLUSTER REPLICAS lists and does not flag as
// failed (connected or not: one that lost its link is the one a failover would lose data
// to); else the replicas connected now (ROLE).
func replicaCount(ctx context.Context, conn *redis.Conn) (int, error) {
	id, err := conn.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		if !isClusterDisabled(err) {
			return 0, fmt.Errorf("CLUSTER MYID: %w", err)
		}
		role, err := conn.Do(ctx, "ROLE").Slice()
		switch {
		case err != nil:
			return 0, fmt.Errorf("ROLE: %w", err)
		case len(role) < 3:
			return 0, fmt.Errorf("ROLE: %v; want a primary's [master offset replicas]", role)
		}
		replicas, _ := role[2].([]any)
		return len(replicas), nil
	}
	lines, err := conn.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("CLUSTER REPLICAS: %w", err)
	}
	n := 0
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 2 && !slices.Contains(strings.Split(f[2], ","), "fail") {
			n++
		}
	}
	return n, nil
}
