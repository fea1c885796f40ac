package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// Errors a Store returns; match them with errors.Is. Content errors wrap ErrInvalid.
var (
	// ErrNotFound: no event has the id (answer 404).
	ErrNotFound = errors.New("no such event")
	// ErrExists: Create was given an id already in use (answer 409).
	ErrExists = errors.New("an event with this id exists")
	// ErrReadOnly: the event comes from a read-only source, such as the config file
	// (answer 409 or 403).
	ErrReadOnly = errors.New("event is read-only")
	// ErrUnreadable: List found stored events it cannot read (written by hand, or by
	// another version of hotkeyd). It returns the readable ones with this error, which
	// names every unreadable event: one bad event does not hide the others.
	ErrUnreadable = errors.New("unreadable stored events")
	// ErrFull: a new event would pass MaxEvents (answer 400).
	ErrFull = errors.New("the registry is full")
)

// MaxEvents is the most events a writable store holds: Create, and Put of a new id,
// fail with ErrFull beyond it. The registry is written by people, ahead of what they
// expect; a thousand events is more than a year of daily matches, sales and posts, and
// bounds the work each change costs (a file store rewrites and syncs its whole document,
// every agent lists them all and rebuilds its index) and the size of GET /v1/registry.
// Stores opened with more (written by hand) keep them all.
const MaxEvents = 1000

// roomFor returns ErrFull when a store holding n events may not take another.
func roomFor(n int) error {
	if n < MaxEvents {
		return nil
	}
	return fmt.Errorf("registry: %d events stored, at most %d allowed: %w; delete events that are over (DELETE /v1/registry/{id}) before adding more", n, MaxEvents, ErrFull)
}

// Store holds events by id. Every implementation validates what it is given, returns
// copies (callers may modify what they get), lists events sorted by id, and is safe for
// concurrent use. The HTTP API maps onto it one to one.
type Store interface {
	// List returns every event, sorted by id. When some stored events cannot be read
	// (written by hand, or by another version), it returns the others together with an
	// error wrapping ErrUnreadable that names each unreadable one.
	List(ctx context.Context) ([]Event, error)
	// Get returns the event with the id, or ErrNotFound.
	Get(ctx context.Context, id string) (Event, error)
	// Create stores a new event: it assigns an id when e.ID is empty, fails with
	// ErrExists when the id is taken, and returns the stored event.
	Create(ctx context.Context, e Event) (Event, error)
	// Put stores e under e.ID (required), replacing any event with that id; created
	// says whether none existed.
	Put(ctx context.Context, e Event) (stored Event, created bool, err error)
	// Delete removes the event with the id, or fails with ErrNotFound.
	Delete(ctx context.Context, id string) error
	// Version changes whenever the set of events changes (it may change without one).
	// Poll it to know when to List again and rebuild the Index.
	Version(ctx context.Context) (uint64, error)
}

// prepare validates e for storing; with needID, an empty id is an error.
func prepare(e Event, needID bool) (Event, error) {
	if needID && e.ID == "" {
		return Event{}, invalid("", "id", "required: 1 to %d characters of a-z, 0-9, '.', '_' and '-'", MaxIDLen)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return clone(e), nil
}

// clone copies an event's slices so that the copy shares nothing with e.
func clone(e Event) Event {
	e.Patterns = slices.Clone(e.Patterns)
	e.Mitigations = slices.Clone(e.Mitigations)
	return e
}

// NewID returns a fresh event id: the name reduced to [a-z0-9-] (at most 40 characters),
// a dash and 8 hex digits read from rnd; "ev-" and the digits when the name leaves
// nothing. rnd is usually crypto/rand.Reader.
func NewID(name string, rnd io.Reader) (string, error) {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if b.Len() >= 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case b.Len() > 0 && !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	slug := strings.TrimRight(b.String(), "-")
	if slug == "" {
		slug = "ev"
	}
	var buf [4]byte
	if _, err := io.ReadFull(rnd, buf[:]); err != nil {
		return "", fmt.Errorf("registry: generating an event id: %w", err)
	}
	return slug + "-" + hex.EncodeToString(buf[:]), nil
}

// Memory is a Store in memory: for tests, the demo, and the core of FileStore.
type Memory struct {
	rnd io.Reader

	mu      sync.Mutex // guards events and version
	events  map[string]Event
	version uint64
}

// MemoryOptions configure a Memory store. The zero value works.
type MemoryOptions struct {
	// Rand is read for generated ids. Default: crypto/rand.Reader.
	Rand io.Reader
}

// NewMemory returns an empty store.
func NewMemory(o MemoryOptions) *Memory {
	return &Memory{rnd: cmp.Or[io.Reader](o.Rand, rand.Reader), events: make(map[string]Event)}
}

// List implements Store.
func (m *Memory) List(context.Context) ([]Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedEvents(m.events), nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.events[id]
	if !ok {
		return Event{}, fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
	}
	return clone(e), nil
}

// Create implements Store.
func (m *Memory) Create(_ context.Context, e Event) (Event, error) {
	e, err := prepare(e, false)
	if err != nil {
		return Event{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.createLocked(&e); err != nil {
		return Event{}, err
	}
	return clone(e), nil
}

// createLocked assigns an id if needed and adds e. m.mu must be held.
func (m *Memory) createLocked(e *Event) error {
	if e.ID == "" {
		id, err := uniqueID(e.Name, m.rnd, func(id string) bool { _, ok := m.events[id]; return ok })
		if err != nil {
			return err
		}
		e.ID = id
	} else if _, ok := m.events[e.ID]; ok {
		return fmt.Errorf("registry: event %q: %w", e.ID, ErrExists)
	}
	if err := roomFor(len(m.events)); err != nil {
		return err
	}
	m.events[e.ID] = *e
	m.version++
	return nil
}

// uniqueID generates ids until taken says one is free.
func uniqueID(name string, rnd io.Reader, taken func(string) bool) (string, error) {
	for range 16 {
		id, err := NewID(name, rnd)
		if err != nil {
			return "", err
		}
		if !taken(id) {
			return id, nil
		}
	}
	return "", errors.New("registry: generating an event id: 16 collisions in a row; is the random source constant?")
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, e Event) (Event, bool, error) {
	e, err := prepare(e, true)
	if err != nil {
		return Event{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, existed := m.events[e.ID]
	if !existed {
		if err := roomFor(len(m.events)); err != nil {
			return Event{}, false, err
		}
	}
	m.events[e.ID] = e
	m.version++
	return clone(e), !existed, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.events[id]; !ok {
		return fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
	}
	delete(m.events, id)
	m.version++
	return nil
}

// Replace makes events the store's events and raises its version: see Mirror.
func (m *Memory) Replace(_ context.Context, events []Event) error {
	next := make(map[string]Event, len(events))
	for _, e := range events {
		e, err := prepare(e, true)
		if err != nil {
			return err
		}
		next[e.ID] = e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = next
	m.version++
	return nil
}

// Version implements Store.
func (m *Memory) Version(context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// sortedEvents returns copies of the events sorted by id.
func sortedEvents(events map[string]Event) []Event {
	out := make([]Event, 0, len(events))
	for _, e := range events {
		out = append(out, clone(e))
	}
	slices.SortFunc(out, func(a, b Event) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Static is a read-only Store of fixed events, such as those of the config file. Its
// version is always 0.
type Static struct {
	events map[string]Event
}

// NewStatic validates the events (each needs an id; ids must be unique) and returns a
// read-only store of them.
func NewStatic(events []Event) (*Static, error) {
	s := &Static{events: make(map[string]Event, len(events))}
	for i, e := range events {
		if e.ID == "" {
			return nil, fmt.Errorf("registry: static event %d: %w", i, invalid("", "id", "required for events from the config file"))
		}
		if len(e.Mitigations) == 0 {
			e.Mitigations = []string{MitigationAuto}
		}
		e, err := prepare(e, true)
		if err != nil {
			return nil, fmt.Errorf("registry: static event %d: %w", i, err)
		}
		if _, dup := s.events[e.ID]; dup {
			return nil, fmt.Errorf("registry: static event %d: %w", i, invalid(e.ID, "id", "%q is used by two events", e.ID))
		}
		s.events[e.ID] = e
	}
	return s, nil
}

// List implements Store.
func (s *Static) List(context.Context) ([]Event, error) { return sortedEvents(s.events), nil }

// Get implements Store.
func (s *Static) Get(_ context.Context, id string) (Event, error) {
	e, ok := s.events[id]
	if !ok {
		return Event{}, fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
	}
	return clone(e), nil
}

// Create implements Store: it always fails with ErrReadOnly.
func (s *Static) Create(_ context.Context, e Event) (Event, error) {
	return Event{}, fmt.Errorf("registry: static events: %w", ErrReadOnly)
}

// Put implements Store: it always fails with ErrReadOnly.
func (s *Static) Put(_ context.Context, e Event) (Event, bool, error) {
	return Event{}, false, fmt.Errorf("registry: event %q: %w", e.ID, ErrReadOnly)
}

// Delete implements Store: it always fails with ErrReadOnly.
func (s *Static) Delete(_ context.Context, id string) error {
	return fmt.Errorf("registry: event %q: %w", id, ErrReadOnly)
}

// Version implements Store.
func (*Static) Version(context.Context) (uint64, error) { return 0, nil }

// Merged is a Store that shows the events of a read-only store (static, such as the
// config file's) together with those of a writable one. A static id shadows the same id
// in the writable store; static events cannot be changed (ErrReadOnly) and their ids
// cannot be created. It is safe for concurrent use when both stores are.
type Merged struct {
	static, rw Store
}

// Merge returns the merged view of a read-only store and a writable one.
func Merge(static, rw Store) *Merged { return &Merged{static: static, rw: rw} }

// Writable returns the writable store.
func (m *Merged) Writable() Store { return m.rw }

// List implements Store.
func (m *Merged) List(ctx context.Context) ([]Event, error) {
	st, err := m.static.List(ctx)
	if err != nil {
		return nil, err
	}
	rw, rwErr := m.rw.List(ctx)
	if rwErr != nil && !errors.Is(rwErr, ErrUnreadable) {
		return nil, rwErr
	}
	out := slices.Clone(st)
	for _, e := range rw {
		if _, found := slices.BinarySearchFunc(st, e.ID, func(a Event, id string) int { return cmp.Compare(a.ID, id) }); !found {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Event) int { return cmp.Compare(a.ID, b.ID) })
	return out, rwErr
}

// Get implements Store.
func (m *Merged) Get(ctx context.Context, id string) (Event, error) {
	e, err := m.static.Get(ctx, id)
	if !errors.Is(err, ErrNotFound) {
		return e, err
	}
	return m.rw.Get(ctx, id)
}

// isStatic reports whether id names a static event.
func (m *Merged) isStatic(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	_, err := m.static.Get(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, err
}

// Create implements Store.
func (m *Merged) Create(ctx context.Context, e Event) (Event, error) {
	if st, err := m.isStatic(ctx, e.ID); err != nil || st {
		if err == nil {
			err = fmt.Errorf("registry: event %q is in the config file: %w", e.ID, ErrExists)
		}
		return Event{}, err
	}
	return m.rw.Create(ctx, e)
}

// Put implements Store.
func (m *Merged) Put(ctx context.Context, e Event) (Event, bool, error) {
	if st, err := m.isStatic(ctx, e.ID); err != nil || st {
		if err == nil {
			err = fmt.Errorf("registry: event %q is in the config file: %w", e.ID, ErrReadOnly)
		}
		return Event{}, false, err
	}
	return m.rw.Put(ctx, e)
}

// Delete implements Store.
func (m *Merged) Delete(ctx context.Context, id string) error {
	if st, err := m.isStatic(ctx, id); err != nil || st {
		if err == nil {
			err = fmt.Errorf("registry: event %q is in the config file: %w", id, ErrReadOnly)
		}
		return err
	}
	return m.rw.Delete(ctx, id)
}

// Version implements Store: the sum of both versions.
func (m *Merged) Version(ctx context.Context) (uint64, error) {
	a, err := m.static.Version(ctx)
	if err != nil {
		return 0, err
	}
	b, err := m.rw.Version(ctx)
	return a + b, err
}

// seeder is a Store that remembers deleted ids, so that Seed does not bring them back.
type seeder interface {
	// seed stores e unless its id is taken or was deleted, and says whether it did.
	seed(ctx context.Context, e Event) (bool, error)
}

// Seed copies into dst every event of src whose id dst does not have yet, and returns
// how many it copied. Events already in dst win: seeding twice, or from several agents
// at once, is harmless. A RedisStore also skips the ids deleted from it (and not created
// again), so that an agent's restart does not bring back an event the fleet deleted. Use
// it to fill a shared Redis store from the file store. When src has events it cannot
// read, Seed copies the others and returns the error (ErrUnreadable).
func Seed(ctx context.Context, dst, src Store) (int, error) {
	events, err := src.List(ctx)
	if err != nil && !errors.Is(err, ErrUnreadable) {
		return 0, fmt.Errorf("registry: seed: listing the source: %w", err)
	}
	listErr := err
	sd, _ := dst.(seeder)
	n := 0
	for _, e := range events {
		var err error
		if sd != nil {
			var ok bool
			if ok, err = sd.seed(ctx, e); ok {
				n++
			}
		} else if _, err = dst.Create(ctx, e); err == nil {
			n++
		}
		switch {
		case err == nil, errors.Is(err, ErrExists):
		default:
			return n, fmt.Errorf("registry: seed: event %q: %w", e.ID, err)
		}
	}
	if listErr != nil {
		return n, fmt.Errorf("registry: seed: listing the source: %w", listErr)
	}
	return n, nil
}
