package mitigate

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Copies of a read-hot key. The executor writes them from the original with DUMP and
// RESTORE, so type, value and TTL are kept whatever the type (string, hash, list, set,
// zset, stream…), and refreshes them every RefreshPeriod. docs/plan.md, section Executors,
// states the staleness bound.
//
// Cost: DUMP serialises the whole value on the original's node and RESTORE deserialises
// it on each copy's node, both blocking their node for a time proportional to the value's
// size (for a value of tens of megabytes, milliseconds to tens of milliseconds per copy,
// every RefreshPeriod). Copies suit hot keys of modest size; for a large value, raise
// RefreshPeriod or rely on L1.

// dumpOriginal (on the original's node). KEYS: the original. Reply: {-2} when it does not
// exist, else {pttl, payload}: the value and its remaining time read in one step, so the
// copy's TTL belongs to the value copied.
var dumpOriginal = newScript(`
local t = redis.call('PTTL', KEYS[1])
if t == -2 then return {-2} end
return {t, redis.call('DUMP', KEYS[1])}`)

// digestKey (on any node). KEYS: a key. Reply: the SHA-1 (hex) of its DUMP, "" when it
// does not exist.
var digestKey = newScript(`
local d = redis.call('DUMP', KEYS[1])
if not d then return '' end
return redis.sha1hex(d)`)

// writeCopy (on a copy's node). KEYS: the copy; ARGV: the digest (digestKey) the copy
// had before the original was dumped, the TTL, the payload ("" to delete the copy).
// Writes the copy only when it still has that digest: else a client wrote it meanwhile
// (an SDK client writes the original, then every copy), with a value at least as new as
// the one dumped, which must stay. Reply: 1 written, 0 left alone.
var writeCopy = newScript(`
local d = redis.call('DUMP', KEYS[1])
if (d and redis.sha1hex(d) or '') ~= ARGV[1] then return 0 end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1])
  return d and 1 or 0
end
redis.call('RESTORE', KEYS[1], ARGV[2], ARGV[3], 'REPLACE')
return 1`)

// copyTries bounds how often writeCopies starts again because the original changed
// while it wrote the copies.
const copyTries = 3

// copyResult says what writing the copies of one key did.
type copyResult struct {
	written int // copies restored from the original
	deleted int // copies deleted because the original is gone
	kept    int // copies left alone: a client wrote them after they were read (writes made since the round began)
	raced   int // tries started again because the original changed while the copies were written
}

// writeCopies copies key's value, type and TTL to every name in copies; when key does not
// exist it deletes them instead, since a copy must never outlive its original. A copy that
// fails (its node down) does not stop the others; the errors are returned, joined.
//
// It never puts back a value older than one a client wrote to a copy meanwhile. An SDK
// client writes the original and then each copy; a DUMP taken before such a write and
// restored after it would serve the old value until the next round, against the SDK's
// read-your-writes. So, per try:
//
//  1. each copy's digest is read (digestKey on its node);
//  2. the original is dumped;
//  3. each copy is written only if its digest is still the one read in 1 (writeCopy, one
//     step on its node): a copy written between 1 and 3 holds a write whose original
//     write came after 1, so a value at least as new as the dump, or newer;
//  4. the original's digest is read again: when it differs from the dump, a write landed
//     between 2 and 4 whose copies step 3 may have overwritten if it put the very value
//     read in 1 back (A, B, A within milliseconds), and the try starts again.
//
// After copyTries tries that all raced (a key written more than once per try, every
// try) the copies keep the last try's values: as before, up to a round old.
//
// Cost per key and round, against 1 + N round trips before (a DUMP, N RESTOREs): 2 + 2N
// (N digests, the DUMP, N conditional writes, a digest of the original), and three DUMPs
// serialised per copy's value (digest and conditional write on its node, the original's
// dump and digest) instead of one on the original and a RESTORE per copy. For values of
// a few kilobytes this is microseconds of Redis time per round; for large values it
// roughly triples what copies cost Redis (see the note above).
func writeCopies(ctx context.Context, rdb Redis, key string, copies []string) (copyResult, error) {
	var res copyResult
	for try := 1; ; try++ {
		again, err := writeCopiesOnce(ctx, rdb, key, copies, &res)
		if err != nil || !again || try == copyTries {
			return res, err
		}
		res.raced++
	}
}

// writeCopiesOnce is one try of writeCopies; it reports whether the original changed
// while the copies were written.
func writeCopiesOnce(ctx context.Context, rdb Redis, key string, copies []string, res *copyResult) (bool, error) {
	var errs []error
	before := make([]string, len(copies))
	ok := make([]bool, len(copies))
	for i, c := range copies {
		d, err := digestKey.run(ctx, rdb, []string{c}).Text()
		if err != nil {
			errs = append(errs, fmt.Errorf("copies of %q: read %s: %w", key, c, err))
			continue
		}
		before[i], ok[i] = d, true
	}
	reply, err := dumpOriginal.run(ctx, rdb, []string{key}).Slice()
	if err != nil {
		return false, fmt.Errorf("copies of %q: DUMP: %w", key, err)
	}
	pttl, isInt := reply[0].(int64)
	if !isInt || (pttl != -2 && len(reply) != 2) {
		return false, fmt.Errorf("copies of %q: DUMP: reply %v; want {pttl, payload} or {-2}", key, reply)
	}
	ttl, payload := "0", "" // PTTL -1: no expiry
	if pttl >= 0 {
		ttl = strconv.FormatInt(max(pttl, 1), 10) // RESTORE reads 0 as "no expiry"
	}
	if pttl != -2 {
		payload = str(reply[1])
	}
	for i, c := range copies {
		if !ok[i] {
			continue
		}
		n, err := writeCopy.run(ctx, rdb, []string{c}, before[i], ttl, payload).Int()
		switch {
		case err != nil && payload == "":
			errs = append(errs, fmt.Errorf("copies of %q (original gone): DEL %s: %w", key, c, err))
		case err != nil:
			errs = append(errs, fmt.Errorf("copies of %q: RESTORE %s: %w", key, c, err))
		case n == 0 && before[i] == "" && payload == "":
			// absent, and the original too: nothing to do
		case n == 0:
			res.kept++
		case payload == "":
			res.deleted++
		default:
			res.written++
		}
	}
	after, err := digestKey.run(ctx, rdb, []string{key}).Text()
	if err != nil {
		return false, errors.Join(append(errs, fmt.Errorf("copies of %q: read the original again: %w", key, err))...)
	}
	if payload == "" {
		return after != "", errors.Join(errs...)
	}
	h := sha1.Sum([]byte(payload))
	return after != hex.EncodeToString(h[:]), errors.Join(errs...)
}
