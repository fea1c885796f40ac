package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// RedisStore is a Store in Redis, shared by every agent of a fleet. Events live in one
// hash, "{PREFIX}:events" (field: id, value: the event's JSON), and a counter
// "{PREFIX}:version" is incremented by every change; both names carry the same hash tag
// so that they share a cluster slot and each change is one atomic script.
type RedisStore struct {
	rdb     redis.UniversalClient
	events  string // the hash's name
	version string // the counter's name

	rndMu sync.Mutex // guards rnd, which need not be safe for concurrent reads
	rnd   io.Reader
}

// RedisOptions configure a RedisStore. The zero value works.
type RedisOptions struct {
	// Prefix names the keys: "{Prefix}:events" and "{Prefix}:version". Default:
	// "hotkeyd:registry". It may not contain '{' or '}'.
	Prefix string
	// Rand is read for generated ids. Default: crypto/rand.Reader.
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
		rnd:     cmp.Or[io.Reader](o.Rand, rand.Reader),
	}, nil
}

// Keys returns the names of the hash and the counter.
func (s *RedisStore) Keys() (events, version string) { return s.events, s.version }

// The scripts keep each change and its version bump one atomic step.
var (
	// createScript: HSETNX and bump; -1 when the id is taken.
	createScript = redis.NewScript(`if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then return redis.call('INCR', KEYS[2]) end return -1`)
	// putScript: HSET and bump; returns 1 when the field is new.
	putScript = redis.NewScript(`local n = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) redis.call('INCR', KEYS[2]) return n`)
	// deleteScript: HDEL and bump; -1 when there was nothing to delete.
	deleteScript = redis.NewScript(`if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then return redis.call('INCR', KEYS[2]) end return -1`)
)

// decodeStored reads an event stored under id.
func decodeStored(id, data string) (Event, error) {
	e, err := DecodeEvent([]byte(data))
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
	out := make([]Event, 0, len(all))
	for id, data := range all {
		e, err := decodeStored(id, data)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Event) int { return cmp.Compare(a.ID, b.ID) })
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
		n, err := createScript.Run(ctx, s.rdb, []string{s.events, s.version}, e.ID, data).Int64()
		if err != nil {
			return Event{}, fmt.Errorf("registry: redis: creating event %q: %w", e.ID, err)
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
	n, err := putScript.Run(ctx, s.rdb, []string{s.events, s.version}, e.ID, data).Int64()
	if err != nil {
		return Event{}, false, fmt.Errorf("registry: redis: storing event %q: %w", e.ID, err)
	}
	return e, n == 1, nil
}

// Delete implements Store.
func (s *RedisStore) Delete(ctx context.Context, id string) error {
	n, err := deleteScript.Run(ctx, s.rdb, []string{s.events, s.version}, id).Int64()
	if err != nil {
		return fmt.Errorf("registry: redis: deleting event %q: %w", id, err)
	}
	if n < 0 {
		return fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
	}
	return nil
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
