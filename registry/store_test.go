package registry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// testStore is the suite every Store implementation passes.
func testStore(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	t.Run("empty", func(t *testing.T) {
		s := open(t)
		evs, err := s.List(ctx)
		if err != nil || len(evs) != 0 {
			t.Fatalf("List = %v, %v; want nothing", evs, err)
		}
		if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(nope) error %v; want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(nope) error %v; want ErrNotFound", err)
		}
	})
	t.Run("create get list delete", func(t *testing.T) {
		s := open(t)
		v0, err := s.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, a := testEvent("b"), testEvent("a")
		for _, e := range []Event{b, a} {
			got, err := s.Create(ctx, e)
			if err != nil {
				t.Fatalf("Create(%s): %v", e.ID, err)
			}
			if !sameEvent(got, e) {
				t.Errorf("Create returned %+v; want %+v", got, e)
			}
		}
		if _, err := s.Create(ctx, testEvent("a")); !errors.Is(err, ErrExists) {
			t.Errorf("Create of a taken id: error %v; want ErrExists", err)
		}
		v1, _ := s.Version(ctx)
		if v1 == v0 {
			t.Errorf("Version stayed %d after creates; want a change", v1)
		}
		evs, err := s.List(ctx)
		if err != nil || len(evs) != 2 || evs[0].ID != "a" || evs[1].ID != "b" {
			t.Fatalf("List = %v, %v; want a and b, in id order", ids(evs), err)
		}
		got, err := s.Get(ctx, "a")
		if err != nil || !sameEvent(got, a) {
			t.Errorf("Get(a) = %+v, %v; want %+v", got, err, a)
		}
		if err := s.Delete(ctx, "a"); err != nil {
			t.Fatalf("Delete(a): %v", err)
		}
		if _, err := s.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after Delete: error %v; want ErrNotFound", err)
		}
		if v2, _ := s.Version(ctx); v2 == v1 {
			t.Errorf("Version stayed %d after a delete; want a change", v2)
		}
	})
	t.Run("put", func(t *testing.T) {
		s := open(t)
		e := testEvent("p")
		_, created, err := s.Put(ctx, e)
		if err != nil || !created {
			t.Fatalf("Put(new) = created %v, %v; want created", created, err)
		}
		e.ExpectedReadRate = 99
		e.Patterns = []string{"other:*"}
		_, created, err = s.Put(ctx, e)
		if err != nil || created {
			t.Fatalf("Put(existing) = created %v, %v; want replaced", created, err)
		}
		got, _ := s.Get(ctx, "p")
		if !sameEvent(got, e) {
			t.Errorf("after Put: %+v; want %+v", got, e)
		}
		noID := testEvent("")
		if _, _, err := s.Put(ctx, noID); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put without id: error %v; want ErrInvalid", err)
		}
	})
	t.Run("generated id", func(t *testing.T) {
		s := open(t)
		e := testEvent("")
		e.Name = "Flash Sale: noon!"
		got, err := s.Create(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if !validID(got.ID) || !strings.HasPrefix(got.ID, "flash-sale-noon-") {
			t.Errorf("generated id %q; want flash-sale-noon-XXXXXXXX", got.ID)
		}
		if _, err := s.Get(ctx, got.ID); err != nil {
			t.Errorf("Get(generated id): %v", err)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		s := open(t)
		e := testEvent("bad")
		e.End = e.Start.Add(-time.Minute)
		if _, err := s.Create(ctx, e); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "end") {
			t.Errorf("Create(end before start) error %v; want ErrInvalid naming end", err)
		}
		if _, _, err := s.Put(ctx, e); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(end before start) error %v; want ErrInvalid", err)
		}
		if evs, _ := s.List(ctx); len(evs) != 0 {
			t.Errorf("invalid events were stored: %v", ids(evs))
		}
	})
	t.Run("copies", func(t *testing.T) {
		s := open(t)
		e := testEvent("c")
		if _, err := s.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
		e.Patterns[0] = "changed-by-caller"
		got, _ := s.Get(ctx, "c")
		got.Patterns[0] = "changed-again"
		again, _ := s.Get(ctx, "c")
		if again.Patterns[0] != "score:match42" {
			t.Errorf("stored pattern %q; want the caller's later edits not to reach the store", again.Patterns[0])
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 8 {
			wg.Go(func() {
				for j := range 5 {
					e := testEvent(fmt.Sprintf("w%d-%d", i, j))
					if _, err := s.Create(ctx, e); err != nil {
						errs <- err
					}
					if _, err := s.List(ctx); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if evs, _ := s.List(ctx); len(evs) != 40 {
			t.Errorf("after 40 concurrent creates: %d events; want 40", len(evs))
		}
	})
}

func ids(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// sameEvent compares events through their JSON, so equal instants in the same zone
// offset and equal slices count as equal.
func sameEvent(a, b Event) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestMemoryStore(t *testing.T) {
	testStore(t, func(*testing.T) Store { return NewMemory(MemoryOptions{}) })
}

func TestFileStore(t *testing.T) {
	testStore(t, func(t *testing.T) Store {
		s, err := OpenFile(filepath.Join(t.TempDir(), "registry.json"), FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestRedisStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	n := 0
	testStore(t, func(t *testing.T) Store {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { rdb.Close() })
		n++ // a fresh prefix per subtest: one server serves them all
		s, err := NewRedis(rdb, RedisOptions{Prefix: fmt.Sprintf("test%d:registry", n)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestMergedStore(t *testing.T) {
	testStore(t, func(*testing.T) Store {
		st, err := NewStatic(nil)
		if err != nil {
			t.Fatal(err)
		}
		return Merge(st, NewMemory(MemoryOptions{}))
	})
}

func TestStaticAndMerged(t *testing.T) {
	ctx := context.Background()
	cfg := testEvent("from-config")
	cfg.Mitigations = nil
	st, err := NewStatic([]Event{cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get(ctx, "from-config"); len(got.Mitigations) != 1 || got.Mitigations[0] != "auto" {
		t.Errorf("static event without mitigations has %q; want [auto]", got.Mitigations)
	}
	if _, err := st.Create(ctx, testEvent("x")); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Static.Create error %v; want ErrReadOnly", err)
	}
	if _, err := NewStatic([]Event{cfg, cfg}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewStatic with a duplicate id: error %v; want ErrInvalid", err)
	}
	if _, err := NewStatic([]Event{testEvent("")}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewStatic without an id: error %v; want ErrInvalid", err)
	}

	rw := NewMemory(MemoryOptions{})
	m := Merge(st, rw)
	if _, err := m.Create(ctx, testEvent("from-config")); !errors.Is(err, ErrExists) {
		t.Errorf("Create over a static id: error %v; want ErrExists", err)
	}
	if _, _, err := m.Put(ctx, testEvent("from-config")); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Put over a static id: error %v; want ErrReadOnly", err)
	}
	if err := m.Delete(ctx, "from-config"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Delete of a static id: error %v; want ErrReadOnly", err)
	}
	if _, err := m.Create(ctx, testEvent("api")); err != nil {
		t.Fatal(err)
	}
	evs, _ := m.List(ctx)
	if got := ids(evs); !slices.Equal(got, []string{"api", "from-config"}) {
		t.Errorf("merged List = %v; want [api from-config]", got)
	}
}

func TestSeed(t *testing.T) {
	ctx := context.Background()
	src, dst := NewMemory(MemoryOptions{}), NewMemory(MemoryOptions{})
	for _, id := range []string{"a", "b", "c"} {
		if _, err := src.Create(ctx, testEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	mine := testEvent("b")
	mine.Note = "edited in the fleet"
	if _, err := dst.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	n, err := Seed(ctx, dst, src)
	if err != nil || n != 2 {
		t.Fatalf("Seed = %d, %v; want 2 copied", n, err)
	}
	if got, _ := dst.Get(ctx, "b"); got.Note != "edited in the fleet" {
		t.Errorf("Seed replaced b; want the destination's event kept")
	}
	if n, _ := Seed(ctx, dst, src); n != 0 {
		t.Errorf("second Seed copied %d; want 0", n)
	}
}

func TestFileStoreReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := testEvent("kept")
	e.Recurrence, e.Zone = "daily", "Europe/Madrid"
	if _, err := s.Create(ctx, e); err != nil {
		t.Fatal(err)
	}
	v, _ := s.Version(ctx)
	s.Close()
	s2, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get(ctx, "kept")
	if err != nil || !sameEvent(got, e) {
		t.Errorf("after reopening: %+v, %v; want %+v", got, err, e)
	}
	if v2, _ := s2.Version(ctx); v2 != v {
		t.Errorf("version after reopening %d; want %d", v2, v)
	}

	// An invalid event is an error naming what is wrong, not an empty registry.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"version":1,"events":[{"id":"x","patterns":["*"],"start":"2026-03-01T19:30:00Z","end":"2026-03-01T20:30:00Z"}]}`), 0o600)
	bs, err := OpenFile(bad, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	if _, err := bs.List(ctx); !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), "events[0]") || !strings.Contains(err.Error(), "allow_broad") {
		t.Errorf("List of a file with an invalid event: %v; want ErrUnreadable naming events[0] and allow_broad", err)
	}
}

// crashEnv makes TestFileStoreCrashChild run: it holds the store's path.
const crashEnv = "HOTKEYD_REGISTRY_CRASH_PATH"

// TestFileStoreCrashChild is the child of TestFileStoreCrash: it opens the store, starts a
// write, and once the temporary file is written and synced, says so and waits to be
// killed before the rename.
func TestFileStoreCrashChild(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("run by TestFileStoreCrash")
	}
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	s.afterTemp = func(tmp string) {
		fmt.Println("TEMP-WRITTEN", tmp)
		os.Stdout.Sync()
		select {} // killed here, between write and rename
	}
	s.Create(context.Background(), testEvent("never-committed"))
	fmt.Println("returned")
	os.Exit(3)
}

// TestFileStoreCrash kills a process between writing the new document and renaming it
// over the old one; the file must still hold the old document, and reopening must give
// the old events and remove the temporary file.
func TestFileStoreCrash(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, testEvent("old")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	s.Close() // the child takes the lock, and is killed holding it: the kernel releases it

	cmd := exec.Command(os.Args[0], "-test.run=^TestFileStoreCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var tmp string
	for sc.Scan() {
		if f, ok := strings.CutPrefix(sc.Text(), "TEMP-WRITTEN "); ok {
			tmp = f
			break
		}
	}
	if tmp == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child never reported its temporary file")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	if data, err := os.ReadFile(tmp); err != nil || !bytes.Contains(data, []byte("never-committed")) {
		t.Errorf("temporary file %s: %v; want it to hold the new document the child was writing", tmp, err)
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(after, before) {
		t.Fatalf("document after the crash:\n%s\nwant the old one:\n%s", after, before)
	}
	s2, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatalf("reopening after the crash: %v", err)
	}
	evs, _ := s2.List(ctx)
	if got := ids(evs); !slices.Equal(got, []string{"old"}) {
		t.Errorf("events after the crash %v; want [old]", got)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temporary file %s still there after reopening (%v); want it removed", tmp, err)
	}
}

func TestNewID(t *testing.T) {
	cases := []struct{ name, prefix string }{
		{"Match 42", "match-42-"},
		{"", "ev-"},
		{"¡Olé!", "ol-"},
		{"---", "ev-"},
		{strings.Repeat("x", 100), strings.Repeat("x", 40) + "-"},
	}
	for _, c := range cases {
		id, err := NewID(c.name, bytes.NewReader([]byte{1, 2, 3, 4}))
		if err != nil {
			t.Fatal(err)
		}
		if id != c.prefix+"01020304" || !validID(id) {
			t.Errorf("NewID(%q) = %q; want %q01020304", c.name, id, c.prefix)
		}
	}
}

// TestRedisStoreConcurrentGeneratedIDs: concurrent Creates that generate ids read the
// store's Rand one at a time, as Memory's and FileStore's do; a Rand such as a seeded
// *math/rand.Rand is not safe for concurrent reads (run with -race).
func TestRedisStoreConcurrentGeneratedIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s, err := NewRedis(rdb, RedisOptions{Rand: mrand.New(mrand.NewSource(1))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				e := testEvent("")
				if _, err := s.Create(ctx, e); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	evs, err := s.List(ctx)
	if err != nil || len(evs) != 80 {
		t.Fatalf("List: %d events, %v; want 80", len(evs), err)
	}
}

// TestFileStoreKeepsMode: rewriting the document keeps the permissions the operator gave
// it; the temporary file's 0600 must not replace them at the first API change.
func TestFileStoreKeepsMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.json")
	if err := os.WriteFile(path, []byte(`{"version":0,"events":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(context.Background(), testEvent("a")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o644 {
		t.Errorf("mode after a change %v; want -rw-r--r-- (kept from the file)", got)
	}
}
