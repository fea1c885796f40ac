package mitigate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claims: several executors on one Redis (one agent per app pod, all on the same
// cluster). Copy names are a pure function of key, n and topology, so executors that
// split the same key use the same names, and an executor must not delete a copy that
// another, live executor uses. Each executor writes the copy names it actively uses into
// one hash, ClaimsKey (field: its id; value: an expiry and the names), renews it every
// half GracePeriod and at once when its copies change, and removes it at Close. Before it
// deletes a copy (an entry's end, a retire round, a scan, Close) it reads the hash, at
// most once per step, and leaves alone every name a live claim of another executor
// lists. If the hash cannot be read it deletes nothing that needs it (fail safe) and
// tries again at the next round. docs/plan.md, section Copies, has the whole story.

// ClaimsKey is the Redis hash of claims: field = executor id, value = claim (see
// encodeClaim). It is one key, in one slot, whatever the number of executors.
const ClaimsKey = "{hotkeyd}claims"

// SweepKey is taken (SET NX with an expiry of RescanPeriod) by the executor that runs the
// periodic scan for unclaimed copies, so that a fleet of agents on one cluster scans once
// per RescanPeriod between them, not once each: every scan reads every key of every
// primary.
const SweepKey = "{hotkeyd}sweep"

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

// claimVersion is the format of the names in a claim's value.
const claimVersion = 1

// encodeClaim encodes a claim: "<expiry unix ms> <version> " then, per name,
// "<byte length>:<name>" (names hold keys verbatim, any bytes).
func encodeClaim(expiry time.Time, names []string) string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(expiry.UnixMilli(), 10))
	b.WriteString(" " + strconv.Itoa(claimVersion) + " ")
	for _, n := range names {
		b.WriteString(strconv.Itoa(len(n)))
		b.WriteByte(':')
		b.WriteString(n)
	}
	return b.String()
}

// decodeClaim reads a claim's expiry (unix ms) and, if the format is one this executor
// knows, its names. errNoExpiry when even the expiry cannot be read.
func decodeClaim(v string) (expiry int64, names []string, err error) {
	exp, rest, ok := strings.Cut(v, " ")
	if expiry, err = strconv.ParseInt(exp, 10, 64); err != nil || !ok {
		return 0, nil, errNoExpiry
	}
	ver, payload, ok := strings.Cut(rest, " ")
	if ver != strconv.Itoa(claimVersion) || !ok {
		return expiry, nil, fmt.Errorf("claim format %q: this executor reads version %d", ver, claimVersion)
	}
	for payload != "" {
		ls, tail, ok := strings.Cut(payload, ":")
		l, err := strconv.Atoi(ls)
		if !ok || err != nil || l < 0 || l > len(tail) {
			return expiry, nil, fmt.Errorf("claim names: bad length at %.20q", payload)
		}
		names = append(names, tail[:l])
		payload = tail[l:]
	}
	return expiry, names, nil
}

var errNoExpiry = errors.New("claim: no expiry")

// pruneClaims (on ClaimsKey's node). ARGV: field, value, field, value…: each field is
// deleted only if it still holds that value, so a claim renewed since it was read as
// expired stays. Reply: the fields deleted.
var pruneClaims = newScript(`
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i+1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    out[#out+1] = ARGV[i]
  end
end
return out`)

// claimView is the claims read for one step (an Apply, a round, a Recover, a Close).
type claimView struct {
	owner map[string]string // copy name → id of a live claim of another executor listing it
	err   error             // the claims could not be read: delete nothing that needs them
}

// claims returns the live claims of other executors, reading the hash once per step
// (e.view is reset by every step). Reading prunes expired claims and takes over the names
// of those it pruned: they are retired, so the copies of a crashed executor go once its
// claim has run out. A failure is counted and logged once per step.
func (e *Executor) claims(ctx context.Context) (map[string]string, error) {
	if e.view == nil {
		owner, err := e.readClaims(ctx)
		e.view = &claimView{owner: owner, err: err}
		if err != nil {
			e.did(Copies, "", ActionError, 1, "claims unreadable: no copy deleted until they can be read",
				slog.String("error", err.Error()))
		}
	}
	return e.view.owner, e.view.err
}

func (e *Executor) readClaims(ctx context.Context) (map[string]string, error) {
	fields, err := hashFields(e.rdb.Do(ctx, "HGETALL", ClaimsKey))
	if err != nil {
		return nil, fmt.Errorf("mitigate: claims: HGETALL %s: %w", ClaimsKey, err)
	}
	now := e.now().UnixMilli()
	owner := make(map[string]string)
	var expired []any              // field, value pairs to prune
	adopt := map[string][]string{} // field → names, of expired claims
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(fields)) {
		if id == e.id {
			continue
		}
		exp, names, err := decodeClaim(fields[id])
		switch {
		case errors.Is(err, errNoExpiry) || (exp <= now):
			expired = append(expired, id, fields[id])
			adopt[id] = names
		case err != nil:
			// A live claim whose names this executor cannot read (a newer format): keep
			// everything until it expires.
			errs = append(errs, fmt.Errorf("mitigate: claims: executor %s: %w", id, err))
		default:
			for _, n := range names {
				owner[n] = id
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(expired) == 0 {
		return owner, nil
	}
	pruned, err := pruneClaims.run(ctx, e.rdb, []string{ClaimsKey}, expired...).StringSlice()
	if err != nil {
		// Not fatal: those claims are not live; the next reader prunes them.
		e.did(Copies, "", ActionError, 1, "pruning expired claims failed; retried at the next read",
			slog.String("error", err.Error()))
		return owner, nil
	}
	t := e.now()
	for _, id := range pruned {
		n := 0
		for _, name := range adopt[id] {
			kind, _, key, ok := ParseName(name)
			if !ok || kind != Copies || e.activeCopy(name) {
				continue
			}
			if _, ok := e.retiring[name]; !ok {
				e.retiring[name] = ended{key: key, quiet: t,
					why: "claimed only by executor " + id + ", whose claim expired (it crashed or lost Redis)"}
				n++
			}
		}
		e.log.LogAttrs(ctx, slog.LevelInfo, "expired claim pruned", slog.String("executor", id),
			slog.Int("copies", len(adopt[id])), slog.Int("retired", n))
	}
	return owner, nil
}

// hashFields reads an HGETALL reply, RESP2 (a flat list) or RESP3 (a map), with pairs.
func hashFields(cmd interface{ Result() (any, error) }) (map[string]string, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	m, err := pairs(v)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = str(v)
	}
	return out, nil
}

// activeCopy reports whether this executor's plan uses copy name.
func (e *Executor) activeCopy(name string) bool {
	for _, ns := range e.copies {
		if slices.Contains(ns, name) {
			return true
		}
	}
	return false
}

// putClaim writes this executor's claim — the copy names it actively uses, valid for one
// GracePeriod — or removes it when there are none. A failure is counted and logged, and
// the claim written again at the next round.
func (e *Executor) putClaim(ctx context.Context) error {
	now := e.now()
	var names []string
	for _, ns := range e.copies {
		names = append(names, ns...)
	}
	slices.Sort(names)
	var err error
	switch {
	case len(names) > 0:
		err = e.rdb.Do(ctx, "HSET", ClaimsKey, e.id, encodeClaim(now.Add(e.grace), names)).Err()
		if err == nil {
			e.claimHeld = true
		}
	case e.claimHeld:
		if err = e.rdb.Do(ctx, "HDEL", ClaimsKey, e.id).Err(); err == nil {
			e.claimHeld = false
		}
	}
	if err != nil {
		e.claimDirty = true
		e.did(Copies, "", ActionError, 1, "writing this executor's claim failed; retried at the next round",
			slog.String("error", err.Error()))
		return fmt.Errorf("mitigate: claims: %w", err)
	}
	e.claimDirty = false
	e.claimNext = now.Add(e.grace / 2)
	return nil
}

// dropClaim removes this executor's claim (Close). A failure is logged; the claim then
// protects the copies until it expires, and other executors delete them after that.
func (e *Executor) dropClaim(ctx context.Context) {
	if err := e.rdb.Do(ctx, "HDEL", ClaimsKey, e.id).Err(); err != nil {
		e.did(Copies, "", ActionError, 1, "removing this executor's claim at stop failed; it expires within the grace period",
			slog.String("error", err.Error()))
		return
	}
	e.claimHeld = false
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
