package mitigate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claims: several executors on one Redis (one agent per app pod, all on the same
// cluster). Copy names are a pure function of key, n and topology, so executors that
// split the same key use the same names, and an executor must not delete a copy that
// another, live executor uses. Claims are kept per copy, in the copy's own slot: the
// claim key of copy name N is claimKey(N), a sorted set whose members are the ids of the
// executors that use N and whose scores are their claims' expiries (unix ms). Each
// executor renews its claims every half GracePeriod and at once when its copies change
// (renewClaim, pipelined), removes them (ZREM) from the names it stops using and at
// Close, and deletes a copy only through deleteUnclaimed: one script on the copy's node
// that checks the claims and deletes in one step. Every claim step touches only the
// names of the executor at hand, so its cost does not grow with the number of executors,
// and it is spread over the copies' primaries. docs/plan.md, section Copies, has the
// whole story.

// claimPrefix starts every claim key. It holds no '{', so a claim key hashes on its
// copy's hash tag; it does not start with '{', so no scan for "{hk:*" and no ParseName
// takes it for a copy.
const claimPrefix = "hk:claim"

// claimKey returns the claim key of copy name: a sorted set in name's slot (member: an
// executor's id; score: when its claim expires, unix ms).
func claimKey(name string) string { return claimPrefix + name }

// SweepKey is taken (SET NX with an expiry of RescanPeriod) by the executor that runs the
// periodic scan for leftovers, so that a fleet of agents on one cluster scans once
// per RescanPeriod between them, not once each: every scan reads every key of every
// primary.
const SweepKey = "{hotkeyd}sweep"

// RecoverKey is the fleet's lock on the scans at start, taken for one GracePeriod by
// Recover's scan and by the rescan one grace period later before they scan: while
// another executor holds it (it scanned within the last grace period), the scan is
// skipped, so that agents starting together (a rolling deploy, a scale-up) scan every
// primary about once per grace period between them, not twice each. What a skipped scan
// would have found is found by a later one that holds the lock: the holder's rescan,
// this executor's own rescan (the holder's lock has expired by then), another agent's
// scan at start, or the fleet's periodic scan (SweepKey), which looks for every kind.
// The holder's own rescan takes it again (takeRecover), so an executor's rescan is never
// skipped for its own Recover's lock.
const RecoverKey = "{hotkeyd}recover"

// takeRecoverLock (on RecoverKey's node). KEYS: RecoverKey. ARGV: executor id, grace
// period (ms). When another executor holds the lock it returns that executor's id;
// else (free, or held by this executor) it sets the lock to this executor for one
// grace period and returns 1.
var takeRecoverLock = newScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`)

// takeRecover takes the fleet's lock on the scans at start (RecoverKey) for one grace
// period. It returns the id of the executor that holds it ("" when this one took it, or
// holds it already): a scan at start then skips.
func (e *Executor) takeRecover(ctx context.Context) (holder string, err error) {
	v, err := takeRecoverLock.run(ctx, e.rdb, []string{RecoverKey}, e.id, e.grace.Milliseconds()).Result()
	if err != nil {
		return "", fmt.Errorf("mitigate: take %s: %w", RecoverKey, err)
	}
	switch v := v.(type) {
	case int64:
		return "", nil
	case string:
		return v, nil
	}
	return "", fmt.Errorf("mitigate: take %s: reply %v (%T); want an id or 1", RecoverKey, v, v)
}

// takeSweep reports whether this executor may run the periodic scan now: no other
// executor has run it within the last RescanPeriod.
func (e *Executor) takeSweep(ctx context.Context) (bool, error) {
	err := e.rdb.Do(ctx, "SET", SweepKey, e.id, "NX", "PX", e.rescanEvery.Milliseconds()).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	}
	return false, fmt.Errorf("mitigate: SET %s NX: %w", SweepKey, err)
}

// renewClaim (on the copy's node). KEYS: a claim key. ARGV: executor id, expiry (unix
// ms), now (unix ms), grace period (ms). It drops the expired claims (those of executors
// that crashed: without it they would stay as long as any executor renews), sets the
// executor's claim, then makes the claim key expire one grace period after its last claim
// does, so that the claim key of a copy nobody uses any more goes by itself. The key's
// expiry is relative (PEXPIRE, last expiry − now + grace, never less than two grace
// periods since the executor's own claim runs that long): it follows the executor's
// clock, not the server's.
var renewClaim = newScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local ttl = tonumber(last[2]) - tonumber(ARGV[3]) + tonumber(ARGV[4])
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', ttl))
return 1`)

// liveOtherClaim is the Lua both claim checks start with. KEYS[1]: a claim key. ARGV[1]:
// executor id; ARGV[2]: now (unix ms). It drops the expired claims and returns the id of
// another executor whose claim is live, if there is one.
const liveOtherClaim = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, 1)) do
  if id ~= ARGV[1] then return id end
end
`

// deleteIfUnclaimed (on the copy's node). KEYS: a copy's claim key, the copy. ARGV:
// executor id, now (unix ms). If another executor's claim is live it returns that
// executor's id and deletes nothing; else it deletes the copy and returns how many keys
// it deleted. Checking and deleting in one script leaves no window for a claim to arrive
// in between.
var deleteIfUnclaimed = newScript(liveOtherClaim + `return redis.call('DEL', KEYS[2])`)

// deleteUnclaimed deletes copy name unless another live executor claims it. It returns
// the id of such an executor ("" when none, and the copy was deleted) and how many keys it
// deleted. On an error nothing was deleted (fail safe).
func (e *Executor) deleteUnclaimed(ctx context.Context, name string) (owner string, n int, err error) {
	v, err := deleteIfUnclaimed.run(ctx, e.rdb, []string{claimKey(name), name}, e.id, e.now().UnixMilli()).Result()
	if err != nil {
		_, i, _, _ := ParseName(name)
		return "", 0, fmt.Errorf("mitigate: claims of copy %d: check and delete: %w", i, err)
	}
	switch v := v.(type) {
	case int64:
		return "", int(v), nil
	case string:
		return v, 0, nil
	}
	return "", 0, fmt.Errorf("mitigate: claims: check and delete: reply %v (%T); want an id or a count", v, v)
}

// otherClaim (on the name's node). KEYS: a claim key. ARGV: executor id, now (unix ms).
// It returns the id of another executor whose claim is live, or nil.
var otherClaim = newScript(liveOtherClaim + `return false`)

// claimedBy returns the id of another executor whose claim on name is live, or "" when
// there is none.
func (e *Executor) claimedBy(ctx context.Context, name string) (string, error) {
	id, err := otherClaim.run(ctx, e.rdb, []string{claimKey(name)}, e.id, e.now().UnixMilli()).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		_, i, key, _ := ParseName(name)
		return "", fmt.Errorf("mitigate: claims of sub-counter %d of %q: %w", i, key, err)
	}
	return id, nil
}

// activeNames returns the copy and sub-counter names this executor's plan uses, sorted.
// Sub-counters are claimed so that another executor's scan leaves them on their key's
// list (see keptSub); copies, so that it does not delete them.
func (e *Executor) activeNames() []string {
	var names []string
	for _, ns := range e.copies {
		names = append(names, ns...)
	}
	for _, ns := range e.subs {
		names = append(names, ns...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// putClaim renews this executor's claim on every copy name it actively uses, valid for
// one GracePeriod, and removes it from the names it claimed before and uses no more: one
// command per name, pipelined. A failure is counted and logged, and the claims written
// again at the next round.
func (e *Executor) putClaim(ctx context.Context) error {
	now := e.now()
	want := e.activeNames()
	var gone []string
	for _, n := range slices.Sorted(maps.Keys(e.claimed)) {
		if !slices.Contains(want, n) {
			gone = append(gone, n)
		}
	}
	cmds := make([][]any, 0, len(want)+len(gone))
	ms := func(v int64) string { return strconv.FormatInt(v, 10) }
	exp, at, grace := ms(now.Add(e.grace).UnixMilli()), ms(now.UnixMilli()), ms(e.grace.Milliseconds())
	for _, n := range want {
		cmds = append(cmds, renewClaim.args([]string{claimKey(n)}, e.id, exp, at, grace))
	}
	for _, n := range gone {
		cmds = append(cmds, []any{"ZREM", claimKey(n), e.id})
	}
	errs := doAll(ctx, e.rdb, cmds)
	for i, n := range want {
		e.claimed[n] = true // it may hold a claim, even when the command failed
		errs[i] = retryScript(ctx, e.rdb, renewClaim, cmds[i], errs[i])
	}
	for i, n := range gone {
		if errs[len(want)+i] == nil {
			delete(e.claimed, n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		e.claimDirty = true
		e.did(Copies, "", ActionError, 1, "writing this executor's claims failed; retried at the next round",
			slog.String("error", err.Error()))
		return fmt.Errorf("mitigate: claims: %w", err)
	}
	e.claimDirty = false
	e.claimNext = now.Add(e.grace / 2)
	return nil
}

// dropClaim removes this executor's claims (Close). A failure is logged; the claims then
// protect the copies until they expire (one GracePeriod), and the periodic scan of
// another executor, or the next scan at start that holds RecoverKey, deletes them after
// that.
func (e *Executor) dropClaim(ctx context.Context) {
	names := slices.Sorted(maps.Keys(e.claimed))
	cmds := make([][]any, len(names))
	for i, n := range names {
		cmds[i] = []any{"ZREM", claimKey(n), e.id}
	}
	errs := doAll(ctx, e.rdb, cmds)
	for i, n := range names {
		if errs[i] == nil {
			delete(e.claimed, n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		e.did(Copies, "", ActionError, 1, "removing this executor's claims at stop failed; they expire within the grace period",
			slog.String("error", err.Error()))
	}
}

// pipeliner is how the executor sends many commands in one go; *redis.Client and
// *redis.ClusterClient have it (a cluster's pipeline is split by node). A client without
// it gets the commands one at a time.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// doAll sends every command in cmds, pipelined when rdb can, and returns the error of
// each (nil for those that succeeded).
func doAll(ctx context.Context, rdb Redis, cmds [][]any) []error {
	errs := make([]error, len(cmds))
	if len(cmds) == 0 {
		return errs
	}
	pl, ok := rdb.(pipeliner)
	if !ok {
		for i, c := range cmds {
			errs[i] = rdb.Do(ctx, c...).Err()
		}
		return errs
	}
	p := pl.Pipeline()
	sent := make([]*redis.Cmd, len(cmds))
	for i, c := range cmds {
		sent[i] = p.Do(ctx, c...)
	}
	_, _ = p.Exec(ctx) // each command's error is read below
	for i, c := range sent {
		errs[i] = c.Err()
	}
	return errs
}

// retryScript runs s again with EVAL when the pipelined EVALSHA args failed because the
// node did not have s cached, and returns the error that is left.
func retryScript(ctx context.Context, rdb Redis, s script, args []any, err error) error {
	if err == nil || !isNoScript(err) {
		return err
	}
	b := slices.Clone(args)
	b[0], b[1] = "EVAL", s.src
	return rdb.Do(ctx, b...).Err()
}

// keptSub counts and logs a sub-counter another live executor claims, which this one
// found in a scan or drained: it is not drained (nor taken off its key's list) by this
// executor, whose plan does not use it; the claiming executor folds it when its entry
// ends.
func (e *Executor) keptSub(key, sub, owner, reason string) {
	e.did(ShardedCounter, key, ActionCounterKeptClaimed, 1, reason+"; not drained: claimed by another executor",
		slog.String("sub_counter", sub), slog.String("executor", owner))
}

// kept counts and logs a copy left alone because another executor claims it.
// The name is not logged, only its index: it holds the key verbatim, and the agent
// hides keys (attribute "key") when asked to.
func (e *Executor) kept(key, name, owner, reason string) {
	_, i, _, _ := ParseName(name)
	e.did(Copies, key, ActionCopyKeptClaimed, 1, reason+"; not deleted: claimed by another executor",
		slog.Int("copy", i), slog.String("executor", owner))
}

// nextSweep returns when the periodic scan after one at now is due: RescanPeriod later,
// plus up to a quarter of it (jitter from the executor's id, so that many executors
// started together do not scan together).
func (e *Executor) nextSweep(now time.Time) time.Time {
	j := time.Duration(0)
	if q := int64(e.rescanEvery / 4); q > 0 {
		j = time.Duration(e.rng.Int64N(q))
	}
	return now.Add(e.rescanEvery + j)
}
