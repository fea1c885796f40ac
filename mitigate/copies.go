package mitigate

import (
	"context"
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

// copyResult says what writing the copies of one key did.
type copyResult struct {
	written int // copies restored from the original
	deleted int // copies deleted because the original is gone
}

// writeCopies copies key's value, type and TTL to every name in copies; when key does not
// exist it deletes them instead, since a copy must never outlive its original. A copy that
// fails (its node down) does not stop the others; the errors are returned, joined.
func writeCopies(ctx context.Context, rdb Redis, key string, copies []string) (copyResult, error) {
	var res copyResult
	reply, err := dumpOriginal.run(ctx, rdb, []string{key}).Slice()
	if err != nil {
		return res, fmt.Errorf("copies of %q: DUMP: %w", key, err)
	}
	pttl, ok := reply[0].(int64)
	if !ok || (pttl != -2 && len(reply) != 2) {
		return res, fmt.Errorf("copies of %q: DUMP: reply %v; want {pttl, payload} or {-2}", key, reply)
	}
	if pttl == -2 {
		n, err := deleteKeys(ctx, rdb, copies)
		res.deleted = n
		if err != nil {
			return res, fmt.Errorf("copies of %q (original gone): %w", key, err)
		}
		return res, nil
	}
	ttl := "0" // PTTL -1: no expiry
	if pttl >= 0 {
		ttl = strconv.FormatInt(max(pttl, 1), 10) // RESTORE reads 0 as "no expiry"
	}
	payload := str(reply[1])
	var errs []error
	for _, c := range copies {
		if err := rdb.Do(ctx, "RESTORE", c, ttl, payload, "REPLACE").Err(); err != nil {
			errs = append(errs, fmt.Errorf("copies of %q: RESTORE %s: %w", key, c, err))
			continue
		}
		res.written++
	}
	return res, errors.Join(errs...)
}

// deleteKeys deletes each name with its own DEL (the names live in different slots) and
// returns how many existed. A DEL that fails does not stop the others; the errors are
// returned, joined.
func deleteKeys(ctx context.Context, rdb Redis, names []string) (int, error) {
	n := 0
	var errs []error
	for _, name := range names {
		d, err := rdb.Do(ctx, "DEL", name).Int()
		if err != nil {
			errs = append(errs, fmt.Errorf("DEL %s: %w", name, err))
			continue
		}
		n += d
	}
	return n, errors.Join(errs...)
}
