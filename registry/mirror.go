package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Mirror is a Store that hands every call to a RedisStore shared by a fleet, and keeps
// a copy of the events it last read there in a local store: the agent's file, or memory.
// When it finds the registry gone from Redis (its version counter missing, which no
// change produces: every change sets it to at least the writer's clock) it writes its
// copy back before answering, so that Redis losing its data (a restart without
// persistence, a failover to an empty replica, FLUSHALL) loses no event and no agent
// disarms. Agents that find it gone at the same moment restore it once: a restore is one
// atomic script that writes only while the counter is missing, and sets it; ids present
// in Redis are kept.
//
// It is safe for concurrent use; it says what its mutexes guard.
type Mirror struct {
	shared *RedisStore
	local  Copy
	log    *slog.Logger

	restoreMu sync.Mutex // serializes restores

	mu     sync.Mutex // guards last and copied
	last   []Event    // the events last read from Redis; at start, the local store's
	copied uint64     // the version of Redis last written to local; 0 before the first
}

// Copy is the local store that a Mirror keeps its copy in: FileStore and Memory.
type Copy interface {
	List(ctx context.Context) ([]Event, error)
	// Replace makes events the store's events.
	Replace(ctx context.Context, events []Event) error
}

// MirrorOptions configure a Mirror. The zero value works.
type MirrorOptions struct {
	// Logger receives a warning at each restore, and the failures to keep the copy.
	// Default: none.
	Logger *slog.Logger
	// Where names the local copy in the log ("registry.file /var/lib/…"). Default:
	// "the local copy".
	Where string
}

// NewMirror returns a Mirror of shared, starting from the events of local as its copy.
func NewMirror(ctx context.Context, shared *RedisStore, local Copy, o MirrorOptions) *Mirror {
	m := &Mirror{shared: shared, local: local, log: o.Logger}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	where := o.Where
	if where == "" {
		where = "the local copy"
	}
	m.log = m.log.With("copy", where)
	m.last, _ = local.List(ctx) // the readable ones, when some are not
	return m
}

// Shared returns the RedisStore.
func (m *Mirror) Shared() *RedisStore { return m.shared }

// Version implements Store. When the registry is gone from Redis, it restores it first.
func (m *Mirror) Version(ctx context.Context) (uint64, error) {
	v, err := m.shared.Version(ctx)
	if err != nil || v != 0 {
		return v, err
	}
	if err := m.restore(ctx); err != nil {
		return 0, err
	}
	return m.shared.Version(ctx)
}

// List implements Store. The events and the version are read together; a read that
// finds the registry gone from Redis restores it and reads again, so that it never
// answers with an empty registry that Redis lost. The copy is replaced by what it read
// whenever the version changed.
func (m *Mirror) List(ctx context.Context) ([]Event, error) {
	events, v, err := m.shared.snapshot(ctx)
	if err != nil && !errors.Is(err, ErrUnreadable) {
		return nil, err
	}
	if v == 0 && m.hasCopy() {
		if rerr := m.restore(ctx); rerr != nil {
			return nil, rerr
		}
		if events, v, err = m.shared.snapshot(ctx); err != nil && !errors.Is(err, ErrUnreadable) {
			return nil, err
		}
	}
	if v != 0 {
		m.keep(ctx, events, v)
	}
	return events, err
}

// hasCopy reports whether the copy holds events.
func (m *Mirror) hasCopy() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.last) > 0
}

// keep makes events, read at version v, the copy, and writes them to the local store
// when v is not the version last written there.
func (m *Mirror) keep(ctx context.Context, events []Event, v uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = events
	if v == m.copied {
		return
	}
	if err := m.local.Replace(ctx, events); err != nil {
		m.log.Error("registry: keeping this agent's copy of the registry in Redis; it is used to restore the registry if Redis loses it", "err", err)
		return
	}
	m.copied = v
}

// restore writes the copy back into Redis if the registry is gone from there, and logs
// a warning saying so.
func (m *Mirror) restore(ctx context.Context) error {
	m.restoreMu.Lock()
	defer m.restoreMu.Unlock()
	m.mu.Lock()
	last := m.last
	m.mu.Unlock()
	if len(last) == 0 {
		return nil
	}
	events, _ := m.shared.Keys()
	n, restored, err := m.shared.restore(ctx, last)
	if err != nil {
		err = fmt.Errorf("registry: the registry is gone from Redis (%s is missing) and restoring this agent's %d events failed: %w", m.shared.version, len(last), err)
		m.log.Error("registry: Redis lost the registry", "err", err)
		return err
	}
	if restored {
		m.log.Warn("registry: Redis lost the registry (its version counter is missing: a restart without persistence, a failover to an empty replica, a FLUSHALL); restored this agent's copy",
			"events", len(last), "stored", n, "hash", events)
	}
	return nil
}

// Get implements Store.
func (m *Mirror) Get(ctx context.Context, id string) (Event, error) {
	if _, err := m.Version(ctx); err != nil {
		return Event{}, err
	}
	return m.shared.Get(ctx, id)
}

// Create implements Store. The registry is restored first when it is gone from Redis:
// a change made into an empty Redis would set the version and hide the loss.
func (m *Mirror) Create(ctx context.Context, e Event) (Event, error) {
	if _, err := m.Version(ctx); err != nil {
		return Event{}, err
	}
	return m.shared.Create(ctx, e)
}

// Put implements Store, restoring first as Create does.
func (m *Mirror) Put(ctx context.Context, e Event) (Event, bool, error) {
	if _, err := m.Version(ctx); err != nil {
		return Event{}, false, err
	}
	return m.shared.Put(ctx, e)
}

// Delete implements Store, restoring first as Create does.
func (m *Mirror) Delete(ctx context.Context, id string) error {
	if _, err := m.Version(ctx); err != nil {
		return err
	}
	return m.shared.Delete(ctx, id)
}

// seed implements seeder: Seed into a Mirror seeds Redis.
func (m *Mirror) seed(ctx context.Context, e Event) (bool, error) { return m.shared.seed(ctx, e) }
