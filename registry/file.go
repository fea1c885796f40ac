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
	"strings"
	"sync"
)

// FileStore is a Store kept in one JSON document on disk, {"version":N,"events":[…]},
// rewritten whole and atomically on every change: the new document goes to a temporary
// file in the same directory (with the old one's permissions; 0600 for a new document),
// which is synced, renamed over the old one, and the directory synced. A crash at any
// point leaves either the old document or the new one, never a mix. The store owns the
// file while it runs: edits made by hand are not seen until it is opened again, and are
// lost at its next write.
type FileStore struct {
	path string

	// afterTemp, when set (by tests), runs after the temporary file is written and
	// synced and before it is renamed.
	afterTemp func(tmp string)

	mu  sync.Mutex // serializes changes, so that each is written whole before the next starts
	mem *Memory    // the events as last written; its own mutex guards its maps for readers
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

// OpenFile opens the store kept at path. A missing file is an empty store (the file is
// created at the first change); a file that does not hold a valid document is an error
// naming the event and field. Temporary files left by a crash are removed.
func OpenFile(path string, o FileOptions) (*FileStore, error) {
	s := &FileStore{path: path, mem: NewMemory(MemoryOptions(o))}
	// Not filepath.Glob: the document's name may hold glob characters ("[prod]").
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
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
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
		if err != nil {
			return nil, fmt.Errorf("registry: %s: events[%d]: %w", path, i, err)
		}
		if _, dup := s.mem.events[e.ID]; dup {
			return nil, fmt.Errorf("registry: %s: events[%d]: %w", path, i, invalid(e.ID, "id", "%q is used by two events", e.ID))
		}
		s.mem.events[e.ID] = e
	}
	s.mem.version = doc.Version
	return s, nil
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

// List implements Store.
func (s *FileStore) List(ctx context.Context) ([]Event, error) { return s.mem.List(ctx) }

// Get implements Store.
func (s *FileStore) Get(ctx context.Context, id string) (Event, error) { return s.mem.Get(ctx, id) }

// Version implements Store. It is kept in the document, so it survives restarts.
func (s *FileStore) Version(ctx context.Context) (uint64, error) { return s.mem.Version(ctx) }

// Create implements Store.
func (s *FileStore) Create(_ context.Context, e Event) (Event, error) {
	e, err := prepare(e, false)
	if err != nil {
		return Event{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err = s.change(func(m *Memory) error { return m.createLocked(&e) })
	if err != nil {
		return Event{}, err
	}
	return clone(e), nil
}

// Put implements Store.
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
		created = !existed
		m.events[e.ID] = e
		m.version++
		return nil
	})
	if err != nil {
		return Event{}, false, err
	}
	return clone(e), created, nil
}

// Delete implements Store.
func (s *FileStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.change(func(m *Memory) error {
		if _, ok := m.events[id]; !ok {
			return fmt.Errorf("registry: event %q: %w", id, ErrNotFound)
		}
		delete(m.events, id)
		m.version++
		return nil
	})
}

// change applies fn to a copy of the state, writes the result, and only then makes it
// the state: when the write fails, nothing changed. s.mu must be held.
func (s *FileStore) change(fn func(*Memory) error) error {
	s.mem.mu.Lock()
	next := &Memory{rnd: s.mem.rnd, events: make(map[string]Event, len(s.mem.events)+1), version: s.mem.version}
	for id, e := range s.mem.events {
		next.events[id] = e
	}
	s.mem.mu.Unlock()
	if err := fn(next); err != nil {
		return err
	}
	if err := s.write(next); err != nil {
		return err
	}
	s.mem.mu.Lock()
	s.mem.events, s.mem.version = next.events, next.version
	s.mem.mu.Unlock()
	return nil
}

// write replaces the document atomically with m's events.
func (s *FileStore) write(m *Memory) error {
	doc := struct {
		Version uint64  `json:"version"`
		Events  []Event `json:"events"`
	}{m.version, sortedEvents(m.events)}
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
