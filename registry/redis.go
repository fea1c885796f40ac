package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore is a Store in Redis, shared by every agent of a fleet. Events live in one
// hash, "{PREFIX}:events" (field: id, value: the event's JSON), and a counter
// "{PREFIX}:version" goes up with every change; the hash "{PREFIX}:deleted" remembers the
// ids deleted since (and not created again), so that Seed does not bring them back. The
// names carry the same hash tag so that they share a cluster slot and each change is one
// atomic script.
//
// The version never comes back to a value it had for another set of events, even when
// Redis loses its data (a restart without persistence, a failover to a replica that
// lagged) and the counter starts again: each change sets it to at least the writer's
// clock in microseconds since 1970, and it goes up by a random step (1 to 2^20), so that
// two changes made from the same version (one of them lost with a replica that lagged)
// are unlikely (2^-20) to get the same one even when the writer's clock is behind it.
type RedisStore struct {
	rdb     redis.UniversalClient
	events  string           // the hash's name
	version string           // the counter's name
	deleted string           // the hash of deleted ids
	now     func() time.Time // the clock of version floors: time.Now

	rndMu sync.Mutex // guards rnd, which need not be safe for concurrent reads
	rnd   io.Reader
}

// RedisOptions configure a RedisStore. The zero value works.
type RedisOptions struct {
	// Prefix names the keys: "{Prefix}:events" and "{Prefix}:version". Default:
	// "hotkeyd:registry". It may not contain '{' or '}'.
	Prefix string
	// Rand is read for generated ids and the version's random steps. Default:
	// crypto/rand.Reader.
	Rand io.Reader
}

// DefaultRedisPrefix is the default RedisOptions.Prefix.
const DefaultRedisPrefix = "hotkeyd:registry"

// NewRedis returns a store using rdb (a client, a cluster client or a ring).
func NewRedis(rdb redis.UniversalClient, o RedisOptions) (*RedisStore, error) {
	if rdb == nil {
		return nil, errors.New("registry: redis store: nil client")
	}
	p := cmp.Or(o.Prefix, DefaultRedisPrefix)
	if strings.ContainsAny(p, "{}") {
		return nil, fmt.Errorf("registry: redis prefix %q: must not contain '{' or '}' (it becomes a hash tag)", p)
	}
	return &RedisStore{
		rdb:     rdb,
		events:  "{" + p + "}:events",
		version: "{" + p + "}:version",
		deleted: "{" + p + "}:deleted",
		now:     time.Now,
		rnd:     cmp.Or[io.Reader](o.Rand, rand.Reader),
	}, nil
}

// Keys returns the names of the hash and the counter.
func (s *RedisStore) Keys() (events, version string) { return s.events, s.version }

// The scripts keep each change and its version bump one atomic step. KEYS: the events
// hash, the version counter, the deleted hash; ARGV[1] the id, then the event's JSON when
// there is one, then the writer's clock in microseconds, the version's floor, and last
// the version's random step.
const bumpLua = `local function bump(floor, step)
  local v = redis.call('INCRBY', KEYS[2], step)
  if tonumber(floor) > v then
    redis.call('SET', KEYS[2], floor)
    return tonumber(floor)
  end
  return v
end
`

var (
	// createScript: HSETNX, forget a deletion, bump; -1 when the id is taken, -3 when the
	// hash holds ARGV[5] (MaxEvents) events.
	createScript = redis.NewScript(bumpLua + `if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return -1 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then return -3 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[1])
return bump(ARGV[3], ARGV[4])`)
	// seedScript: like createScript, but -2 when the id was deleted.
	seedScript = redis.NewScript(bumpLua + `if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return -2 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return -1 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then return -3 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return bump(ARGV[3], ARGV[4])`)
	// putScript: HSET, forget a deletion, bump; returns 1 when the field is new, -3 when
	// it is new and the hash holds ARGV[5] events.
	putScript = redis.NewScript(bumpLua + `if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then return -3 end
local n = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[1])
bump(ARGV[3], ARGV[4])
return n`)
	// deleteScript: HDEL, remember the deletion, bump; -1 when there was nothing to delete.
	deleteScript = redis.NewScript(bumpLua + `if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end
redis.call('HSET', KEYS[3], ARGV[1], '1')
return bump(ARGV[2], ARGV[3])`)
	// restoreScript: only when the version counter is missing (Redis lost the registry),
	// HSETNX each id ARGV[3], ARGV[5], … with its JSON ARGV[4], ARGV[6], … unless it was
	// deleted, and bump (floor ARGV[1], step ARGV[2]); returns how many it stored, or -1
	// when the counter exists (another agent restored first, or nothing was lost).
	restoreScript = redis.NewScript(bumpLua + `if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
local n = 0
for i = 3, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 and redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i+1]) == 1 then n = n + 1 end
end
bump(ARGV[1], ARGV[2])
return n`)
)

// keys returns the scripts' KEYS.
func (s *RedisStore) keys() []string { return []string{s.events, s.version, s.deleted} }

// floor returns the version floor: the clock in microseconds, as a decimal string.
func (s *RedisStore) floor() string { return strconv.FormatInt(s.now().UnixMicro(), 10) }

// step returns the version's random step, 1 to 2^20, read from the store's Rand (1 when
// it fails).
func (s *RedisStore) step() int64 {
	var b [4]byte
	s.rndMu.Lock()
	_, err := io.ReadFull(s.rnd, b[:])
	s.rndMu.Unlock()
	if err != nil {
		return 1
	}
	return int64(binary.LittleEndian.Uint32(b[:])&(1<<20-1)) + 1
}

// decodeStored reads an event stored under id.
func decodeStored(id, data string) (Event, error) {
	e, err := decodeEvent([]byte(data), 0)
	if err == nil && e.ID != id {
		err = invalid(id, "id", "stored under %q but says %q", id, e.ID)
	}
	if err != nil {
		return Event{}, fmt.Errorf("registry: redis: stored event %q: %w", id, err)
	}
	return e, nil
}

// List implements Store.
func (s *RedisStore) List(ctx context.Context) ([]Event, error) {
	all, err := s.rdb.HGetAll(ctx, s.events).Result()
	if err != nil {
		return nil, fmt.Errorf("registry: redis: HGETALL %s: %w", s.events, err)
	}
	return s.decodeAll(all)
}

// decodeAll reads the events of the hash's fields (id → JSON), sorted by id; those it
// cannot read are named in an error wrapping ErrUnreadable.
func (s *RedisStore) decodeAll(all map[string]string) ([]Event, error) {
	out := make([]Event, 0, len(all))
	var bad []string
	for id, data := range all {
		e, err := decodeStored(id, data)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Event) int { return cmp.Compare(a.ID, b.ID) })
	if len(bad) > 0 {
		slices.Sort(bad)
		return out, fmt.Errorf("registry: redis: %w (%d in %s; fix or delete them, with PUT or DELETE /v1/registry/{id}): %s",
			ErrUnreadable, len(bad), s.events, strings.Join(bad, "; "))
	}
	return out, nil
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, id string) (Event, error) {
	data, err := s.rdb.HGet(ctx, s.events, id).Result()
	if errors.Is(err, redis.Nil) {
		return Event{}, fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("registry: redis: HGET %s %s: %w", s.events, id, err)
	}
	return decodeStored(id, data)
}

// Create implements Store.
func (s *RedisStore) Create(ctx context.Context, e Event) (Event, error) {
	e, err := prepare(e, false)
	if err != nil {
		return Event{}, err
	}
	gen := e.ID == ""
	for range 16 {
		if gen {
			s.rndMu.Lock()
			e.ID, err = NewID(e.Name, s.rnd)
			s.rndMu.Unlock()
			if err != nil {
				return Event{}, err
			}
		}
		data, err := encodeEvent(e)
		if err != nil {
			return Event{}, err
		}
		n, err := createScript.Run(ctx, s.rdb, s.keys(), e.ID, data, s.floor(), s.step(), MaxEvents).Int64()
		if err != nil {
			return Event{}, fmt.Errorf("registry: redis: creating event %q: %w", e.ID, err)
		}
		if n == -3 {
			return Event{}, s.full(ctx)
		}
		if n >= 0 {
			return e, nil
		}
		if !gen {
			return Event{}, fmt.Errorf("registry: event %q: %w", e.ID, ErrExists)
		}
	}
	return Event{}, errors.New("registry: generating an event id: 16 collisions in a row; is the random source constant?")
}

// Put implements Store.
func (s *RedisStore) Put(ctx context.Context, e Event) (Event, bool, error) {
	e, err := prepare(e, true)
	if err != nil {
		return Event{}, false, err
	}
	data, err := encodeEvent(e)
	if err != nil {
		return Event{}, false, err
	}
	n, err := putScript.Run(ctx, s.rdb, s.keys(), e.ID, data, s.floor(), s.step(), MaxEvents).Int64()
	if err != nil {
		return Event{}, false, fmt.Errorf("registry: redis: storing event %q: %w", e.ID, err)
	}
	if n == -3 {
		return Event{}, false, s.full(ctx)
	}
	return e, n == 1, nil
}

// Delete implements Store.
func (s *RedisStore) Delete(ctx context.Context, id string) error {
	n, err := deleteScript.Run(ctx, s.rdb, s.keys(), id, s.floor(), s.step()).Int64()
	if err != nil {
		return fmt.Errorf("registry: redis: deleting event %q: %w", id, err)
	}
	if n < 0 {
		return fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
	}
	return nil
}

// seed implements seeder: it stores e unless its id is taken or was deleted, and says
// whether it did.
func (s *RedisStore) seed(ctx context.Context, e Event) (bool, error) {
	if e.ID == "" {
		return false, invalid("", "id", "required to seed an event")
	}
	e, err := prepare(e, true)
	if err != nil {
		return false, err
	}
	data, err := encodeEvent(e)
	if err != nil {
		return false, err
	}
	n, err := seedScript.Run(ctx, s.rdb, s.keys(), e.ID, data, s.floor(), s.step(), MaxEvents).Int64()
	if err != nil {
		return false, fmt.Errorf("registry: redis: seeding event %q: %w", e.ID, err)
	}
	if n == -3 {
		return false, fmt.Errorf("registry: redis: seeding event %q: %w", e.ID, s.full(ctx))
	}
	return n >= 0, nil
}

// full returns the error of a change refused because the hash holds MaxEvents events.
func (s *RedisStore) full(ctx context.Context) error {
	n, err := s.rdb.HLen(ctx, s.events).Result()
	if err != nil {
		n = MaxEvents
	}
	return roomFor(int(n))
}

// snapshot returns the events and the version read together (MULTI/EXEC), so that the
// events are those of the version. Like List, it returns the readable events with an
// error wrapping ErrUnreadable when some cannot be read.
func (s *RedisStore) snapshot(ctx context.Context) ([]Event, uint64, error) {
	var get *redis.StringCmd
	var all *redis.MapStringStringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, s.version)
		all = p.HGetAll(ctx, s.events)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("registry: redis: reading %s and %s: %w", s.version, s.events, err)
	}
	v, err := get.Uint64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("registry: redis: GET %s: %w", s.version, err)
	}
	events, err := s.decodeAll(all.Val())
	return events, v, err
}

// restore writes events back into Redis when its version counter is missing (see
// restoreScript), and returns how many it stored; restored is false when the counter
// exists, and nothing was written.
func (s *RedisStore) restore(ctx context.Context, events []Event) (n int, restored bool, err error) {
	args := make([]any, 0, 2+2*len(events))
	args = append(args, s.floor(), s.step())
	for _, e := range events {
		data, err := encodeEvent(e)
		if err != nil {
			return 0, false, err
		}
		args = append(args, e.ID, data)
	}
	r, err := restoreScript.Run(ctx, s.rdb, s.keys(), args...).Int64()
	if err != nil {
		return 0, false, fmt.Errorf("registry: redis: restoring %d events: %w", len(events), err)
	}
	if r < 0 {
		return 0, false, nil
	}
	return int(r), true, nil
}

// Version implements Store: the counter's value, 0 before the first change.
func (s *RedisStore) Version(ctx context.Context) (uint64, error) {
	v, err := s.rdb.Get(ctx, s.version).Uint64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("registry: redis: GET %s: %w", s.version, err)
	}
	return v, nil
}

// encodeEvent writes an event's JSON.
func encodeEvent(e Event) (string, error) {
	var b strings.Builder
	if err := jsonEncoder(&b).Encode(e); err != nil {
		return "", fmt.Errorf("registry: encoding event %q: %w", e.ID, err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
