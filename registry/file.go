package registry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// FileStore is a Store kept in one JSON document on disk, {"version":N,"events":[…]},
// rewritten whole and atomically on every change: the new document goes to a temporary
// file in the same directory (with the old one's permissions; 0600 for a new document),
// which is synced, renamed over the old one, and the directory synced. A crash at any
// point leaves either the old document or the new one, never a mix.
//
// The store owns the file while it runs: it holds an exclusive lock (flock) on a sibling
// file, the document's name with ".lock" added, from OpenFile to Close, so that a second
// store on the same document (another agent) fails to open instead of losing the first
// one's writes. The kernel releases the lock when the process ends, however it ends.
// Edits made by hand are not seen until the file is opened again, and are lost at its
// next write.
//
// An event of the document that cannot be read (written by hand, or by another version
// of hotkeyd) does not stop the others: List returns the readable ones with an error
// (ErrUnreadable) naming each bad one, and the bad ones are written back untouched at
// every change until a Put or Delete of their id replaces or removes them.
type FileStore struct {
	path string

	// afterTemp, when set (by tests), runs after the temporary file is written and
	// synced and before it is renamed.
	afterTemp func(tmp string)

	mu     sync.Mutex // serializes changes, so that each is written whole before the next starts; guards lock and closed
	lock   *os.File   // the lock file, holding the flock until Close; nil when none could be taken
	closed bool       // Close was called: changes fail
	mem    *Memory    // the events as last written; its own mutex guards its maps, and bad, for readers
	bad    []badEvent // the events of the document that cannot be read, in its order; replaced, never changed in place
}

// badEvent is an event of the document that cannot be read, kept as it is in the file.
type badEvent struct {
	raw json.RawMessage
	id  string // its "id", when one can be read
	err string // what is wrong, naming the event
}

// FileOptions configure a FileStore. The zero value works.
type FileOptions struct {
	// Rand is read for generated ids. Default: crypto/rand.Reader.
	Rand io.Reader
}

// fileDoc is the document on disk.
type fileDoc struct {
	Version uint64            `json:"version"`
	Events  []json.RawMessage `json:"events"`
}

// tempPattern names temporary files: the document's name, ".tmp-" and a random suffix
// (os.CreateTemp replaces the '*').
func tempPattern(path string) string { return filepath.Base(path) + ".tmp-*" }

// OpenFile opens the store kept at path and takes its lock (see FileStore); Close releases
// it. A missing file is an empty store (the file is created at the first change). A file
// that is not a registry document at all (not JSON, not {"version":N,"events":[…]}, more
// data after it) is an error naming the file and where it goes wrong: nothing in it can
// be trusted, and rewriting it would lose it. An event in it that cannot be read is not:
// see FileStore. Temporary files left by a crash are removed.
func OpenFile(path string, o FileOptions) (*FileStore, error) {
	s := &FileStore{path: path, mem: NewMemory(MemoryOptions(o))}
	lock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	// Not filepath.Glob: the document's name may hold glob characters ("[prod]"). Only
	// with the lock held: another store's temporary file is its write in progress.
	dir, prefix := filepath.Dir(path), filepath.Base(path)+".tmp-"
	if ents, err := os.ReadDir(dir); err == nil {
		for _, ent := range ents {
			if strings.HasPrefix(ent.Name(), prefix) && ent.Type().IsRegular() {
				_ = os.Remove(filepath.Join(dir, ent.Name()))
			}
		}
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		ok = true
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		ok = true
		return s, nil
	}
	var doc fileDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("registry: %s: want {\"version\":N,\"events\":[…]}: %s", path, docError(err, len(data)))
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("registry: %s: data after the document, which ends at byte %d: want one {\"version\":N,\"events\":[…]}", path, end)
	}
	from := 0 // where the next event's raw text is looked for, so that errors name bytes in the file
	for i, raw := range doc.Events {
		at := from + bytes.Index(data[from:], raw)
		from = at + len(raw)
		err := checkText(data, at, from)
		var e Event
		if err == nil {
			e, err = decodeEvent(raw, 0)
		}
		if err == nil && e.ID == "" {
			err = invalid("", "id", "required in a stored event")
		}
		if _, dup := s.mem.events[e.ID]; err == nil && dup {
			err = invalid(e.ID, "id", "%q is used by two events", e.ID)
		}
		if err != nil {
			b := badEvent{raw: raw, id: rawID(raw)}
			b.err = fmt.Sprintf("events[%d]: %v", i, err)
			if b.id != "" && !strings.Contains(err.Error(), strconv.Quote(b.id)) {
				b.err = fmt.Sprintf("events[%d] (id %q): %v", i, b.id, err)
			}
			s.bad = append(s.bad, b)
			continue
		}
		s.mem.events[e.ID] = e
	}
	s.mem.version = doc.Version
	ok = true
	return s, nil
}

// rawID returns the "id" of an event that cannot be read, when it has one that can.
func rawID(raw json.RawMessage) string {
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &v) != nil || !validID(v.ID) {
		return ""
	}
	return v.ID
}

// Close releases the store's lock on the file: another store (another agent) may then
// open it. The store must not be changed after Close. Calling it again does nothing.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.lock == nil {
		return nil
	}
	err := unlockFile(s.lock)
	s.lock = nil
	return err
}

// docError says where an encoding/json error in a document of size bytes is: at which
// byte, and in which field when it is in one.
func docError(err error, size int) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Sprintf("got a JSON %s at byte %d", typ.Value, typ.Offset)
	case errors.As(err, &typ):
		want := map[string]string{"version": "a whole number, 0 or more", "events": "an array of events"}[typ.Field]
		return fmt.Sprintf("field %s: got a JSON %s at byte %d; want %s", typ.Field, typ.Value, typ.Offset, cmp.Or(want, typ.Type.String()))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("the document is cut short at byte %d", size)
	}
	return err.Error() // json: unknown field "…"
}

// Path returns the document's path.
func (s *FileStore) Path() string { return s.path }

// List implements Store. When the document holds events that cannot be read, it returns
// the others with an error wrapping ErrUnreadable that names the file and each bad one.
func (s *FileStore) List(context.Context) ([]Event, error) {
	s.mem.mu.Lock()
	out, bad := sortedEvents(s.mem.events), s.bad
	s.mem.mu.Unlock()
	if len(bad) == 0 {
		return out, nil
	}
	msgs := make([]string, len(bad))
	for i, b := range bad {
		msgs[i] = b.err
	}
	return out, fmt.Errorf("registry: %s: %w (%d; fix or delete them, with PUT or DELETE /v1/registry/{id}, or by hand while no agent runs on the file): %s",
		s.path, ErrUnreadable, len(bad), strings.Join(msgs, "; "))
}

// Get implements Store. An event of the document that cannot be read is an error saying why.
func (s *FileStore) Get(ctx context.Context, id string) (Event, error) {
	e, err := s.mem.Get(ctx, id)
	if !errors.Is(err, ErrNotFound) {
		return e, err
	}
	s.mem.mu.Lock()
	bad := s.bad
	s.mem.mu.Unlock()
	for _, b := range bad {
		if b.id == id {
			return Event{}, fmt.Errorf("registry: %s: %s: %w", s.path, b.err, ErrUnreadable)
		}
	}
	return Event{}, err
}

// Version implements Store. It is kept in the document, so it survives restarts.
func (s *FileStore) Version(ctx context.Context) (uint64, error) { return s.mem.Version(ctx) }

// badID reports whether id names an event of the document that cannot be read. s.mu must
// be held.
func (s *FileStore) badID(id string) bool {
	for _, b := range s.bad {
		if b.id == id {
			return true
		}
	}
	return false
}

// Create implements Store.
func (s *FileStore) Create(_ context.Context, e Event) (Event, error) {
	e, err := prepare(e, false)
	if err != nil {
		return Event{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.ID != "" && s.badID(e.ID) {
		return Event{}, fmt.Errorf("registry: event %q (unreadable, in %s): %w", e.ID, s.path, ErrExists)
	}
	err = s.change(func(m *Memory) error {
		if _, taken := m.events[e.ID]; !taken {
			if err := roomFor(len(m.events) + len(s.bad)); err != nil {
				return err
			}
		}
		return m.createLocked(&e)
	})
	if err != nil {
		return Event{}, err
	}
	return clone(e), nil
}

// Put implements Store. It replaces an event of the document that cannot be read, too.
func (s *FileStore) Put(_ context.Context, e Event) (Event, bool, error) {
	e, err := prepare(e, true)
	if err != nil {
		return Event{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	created := false
	err = s.change(func(m *Memory) error {
		_, existed := m.events[e.ID]
		created = !existed && !s.badID(e.ID)
		if created {
			if err := roomFor(len(m.events) + len(s.bad)); err != nil {
				return err
			}
		}
		m.events[e.ID] = e
		m.version++
		return nil
	}, e.ID)
	if err != nil {
		return Event{}, false, err
	}
	return clone(e), created, nil
}

// Delete implements Store. It removes an event of the document that cannot be read, too.
func (s *FileStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.change(func(m *Memory) error {
		if _, ok := m.events[id]; !ok && !s.badID(id) {
			return fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
		}
		delete(m.events, id)
		m.version++
		return nil
	}, id)
}

// Replace makes events the store's events, in one write, and raises its version: an
// agent keeps in its file its copy of a registry shared through Redis (see Mirror).
// Events of the document that cannot be read are kept, unless an event of the same id
// replaces them.
func (s *FileStore) Replace(_ context.Context, events []Event) error {
	m := make(map[string]Event, len(events))
	for _, e := range events {
		e, err := prepare(e, true)
		if err != nil {
			return err
		}
		m[e.ID] = e
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.change(func(next *Memory) error {
		next.events = m
		next.version++
		return nil
	}, ids...)
}

// change applies fn to a copy of the state, writes the result, and only then makes it
// the state: when the write fails, nothing changed. The events of the document that
// cannot be read and whose id is among drop go. s.mu must be held.
func (s *FileStore) change(fn func(*Memory) error, drop ...string) error {
	if s.closed {
		return fmt.Errorf("registry: %s: the store is closed (the agent is stopping)", s.path)
	}
	s.mem.mu.Lock()
	next := &Memory{rnd: s.mem.rnd, events: make(map[string]Event, len(s.mem.events)+1), version: s.mem.version}
	for id, e := range s.mem.events {
		next.events[id] = e
	}
	s.mem.mu.Unlock()
	if err := fn(next); err != nil {
		return err
	}
	bad := s.bad
	if len(drop) > 0 && len(bad) > 0 {
		bad = slices.DeleteFunc(slices.Clone(bad), func(b badEvent) bool { return b.id != "" && slices.Contains(drop, b.id) })
	}
	if err := s.write(next, bad); err != nil {
		return err
	}
	s.mem.mu.Lock()
	s.mem.events, s.mem.version, s.bad = next.events, next.version, bad
	s.mem.mu.Unlock()
	return nil
}

// write replaces the document atomically with m's events, then the events that cannot
// be read (bad), as they were.
func (s *FileStore) write(m *Memory, bad []badEvent) error {
	doc := struct {
		Version uint64            `json:"version"`
		Events  []json.RawMessage `json:"events"`
	}{m.version, make([]json.RawMessage, 0, len(m.events)+len(bad))}
	for _, e := range sortedEvents(m.events) {
		data, err := encodeEvent(e)
		if err != nil {
			return err
		}
		doc.Events = append(doc.Events, json.RawMessage(data))
	}
	for _, b := range bad {
		doc.Events = append(doc.Events, b.raw)
	}
	var buf bytes.Buffer
	enc := jsonEncoder(&buf) // keys and notes keep their < > &, as the Redis store does
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("registry: encoding %s: %w", s.path, err)
	}
	data := buf.Bytes()
	dir := filepath.Dir(s.path)
	f, err := os.CreateTemp(dir, tempPattern(s.path))
	if err != nil {
		return fmt.Errorf("registry: writing %s: %w", s.path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600: keep the mode the document already has.
	if fi, err := os.Stat(s.path); err == nil {
		if err := f.Chmod(fi.Mode().Perm()); err != nil {
			return fmt.Errorf("registry: writing %s: %w", tmp, err)
		}
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("registry: writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("registry: syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("registry: closing %s: %w", tmp, err)
	}
	if s.afterTemp != nil {
		s.afterTemp(tmp)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("registry: replacing %s: %w", s.path, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil && !strings.Contains(err.Error(), "invalid argument") {
			return fmt.Errorf("registry: syncing directory %s: %w", dir, err)
		}
	}
	return nil
}
