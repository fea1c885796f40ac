package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestMirrorRestoresWhenRedisLosesData: Redis loses the registry (FLUSHALL stands for a
// restart without persistence or a failover to an empty replica). The next read, through
// Version or List, finds the version counter gone and writes the copy back: the events
// are there again, in Redis and in the answer, never an empty list. The copy is kept in
// the agent's file, where a restarted agent finds it.
func TestMirrorRestoresWhenRedisLosesData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "registry.json")
	file, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	m := NewMirror(ctx, fleetRedis(t, srv.Addr()), file, MirrorOptions{})
	if _, err := m.Create(ctx, testEvent("match")); err != nil {
		t.Fatal(err)
	}
	if evs, err := m.List(ctx); err != nil || len(evs) != 1 {
		t.Fatalf("List = %v, %v; want [match]", ids(evs), err)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"match"`) {
		t.Errorf("the agent's file after a List:\n%s\nwant the copy of the registry, with match", data)
	}

	if _, err := redistest.Command(srv.Addr(), "", "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	v, err := m.Version(ctx)
	if err != nil || v == 0 {
		t.Errorf("Version after Redis lost its data = %d, %v; want the registry restored, with a version", v, err)
	}
	if _, err := redistest.Command(srv.Addr(), "", "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	evs, err := m.List(ctx)
	if err != nil || !slices.Equal(ids(evs), []string{"match"}) {
		t.Errorf("List after Redis lost its data = %v, %v; want [match]", ids(evs), err)
	}
	if evs, _ := fleetRedis(t, srv.Addr()).List(ctx); !slices.Equal(ids(evs), []string{"match"}) {
		t.Errorf("Redis after the restore holds %v; want [match]", ids(evs))
	}

	// A write that comes first does not hide the loss: it restores, then writes.
	if _, err := redistest.Command(srv.Addr(), "", "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, testEvent("sale")); err != nil {
		t.Fatal(err)
	}
	if evs, _ := m.List(ctx); !slices.Equal(ids(evs), []string{"match", "sale"}) {
		t.Errorf("after a loss and a Create: %v; want [match sale]", ids(evs))
	}
	// Deleted stays deleted: the copy follows Redis.
	if err := m.Delete(ctx, "match"); err != nil {
		t.Fatal(err)
	}
	m.List(ctx)
	if _, err := redistest.Command(srv.Addr(), "", "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if evs, _ := m.List(ctx); !slices.Equal(ids(evs), []string{"sale"}) {
		t.Errorf("after a Delete and a loss: %v; want [sale]", ids(evs))
	}
}

// TestMirrorRestoreRacingAgents: several agents find the registry gone at once; it is
// restored once (one version bump, no event twice), whatever their copies.
func TestMirrorRestoreRacingAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	first := NewMirror(ctx, fleetRedis(t, srv.Addr()), NewMemory(MemoryOptions{}), MirrorOptions{})
	for i := range 20 {
		if _, err := first.Create(ctx, testEvent(fmt.Sprintf("ev%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var agents []*Mirror
	for range 8 {
		a := NewMirror(ctx, fleetRedis(t, srv.Addr()), NewMemory(MemoryOptions{}), MirrorOptions{})
		if evs, err := a.List(ctx); err != nil || len(evs) != 20 {
			t.Fatalf("List = %d events, %v; want 20", len(evs), err)
		}
		agents = append(agents, a)
	}
	if _, err := redistest.Command(srv.Addr(), "", "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(agents))
	versions := make([]uint64, len(agents))
	for i, a := range agents {
		wg.Go(func() {
			var evs []Event
			evs, errs[i] = a.List(ctx)
			if errs[i] == nil && len(evs) != 20 {
				errs[i] = fmt.Errorf("%d events", len(evs))
			}
			versions[i], _ = a.Version(ctx)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("agent %d: %v; want the 20 events", i, err)
		}
	}
	for _, v := range versions {
		if v != versions[0] {
			t.Errorf("versions after racing restores %v; want one restore, one version", versions)
			break
		}
	}
	n, _ := redistest.Command(srv.Addr(), "", "HLEN", "{hotkeyd:registry}:events")
	if n != "20" {
		t.Errorf("HLEN after racing restores = %s; want 20", n)
	}
}

// TestFileStoreLock: a second store on the same document (a second agent) fails to open,
// naming the file, the holder and what to do, instead of losing the first one's writes;
// once the first is closed, it opens.
func TestFileStoreLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	a, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, testEvent("from-a")); err != nil {
		t.Fatal(err)
	}
	b, err := OpenFile(path, FileOptions{})
	if err == nil {
		b.Create(ctx, testEvent("from-b"))
		data, _ := os.ReadFile(path)
		t.Fatalf("a second store opened the file the first holds; the file now:\n%s", data)
	}
	for _, want := range []string{path, "pid", strconv.Itoa(os.Getpid()), "registry.file", "redis.addrs"} {
		if want == "pid" {
			want = "process"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second OpenFile: %v; want it to name %q", err, want)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err = OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatalf("OpenFile after the first store closed: %v", err)
	}
	defer b.Close()
	if evs, _ := b.List(ctx); !slices.Equal(ids(evs), []string{"from-a"}) {
		t.Errorf("events %v; want [from-a]", ids(evs))
	}
}

// TestFileStoreKeepsUnreadableEvents: one bad event in the file (end before start, an
// unknown zone, a field of a newer version) does not stop the store: it serves the
// others, names the bad ones and the file, and writes them back untouched at each
// change, until a Put or Delete of their id.
func TestFileStoreKeepsUnreadableEvents(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	good := `{"id":"good","patterns":["k"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00"}`
	backwards := `{"id":"x","patterns":["k"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T18:30:00+01:00"}`
	zone := `{"id":"z","patterns":["k"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00","recurrence":"daily","zone":"Mars/Olympus"}`
	newer := `{"id":"n","patterns":["k"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00","priority":3}`
	doc := `{"version":7,"events":[` + good + "," + backwards + "," + zone + "," + newer + `]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatalf("OpenFile with one good and three bad events: %v; want the good one served", err)
	}
	defer s.Close()
	evs, err := s.List(ctx)
	if !slices.Equal(ids(evs), []string{"good"}) || !errors.Is(err, ErrUnreadable) {
		t.Fatalf("List = %v, %v; want [good] and ErrUnreadable", ids(evs), err)
	}
	for _, want := range []string{path, `"x"`, "end", `"z"`, "Mars/Olympus", `"n"`, "priority"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("List error %q; want it to name %s", err, want)
		}
	}
	if _, err := s.Create(ctx, testEvent("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, testEvent("x")); !errors.Is(err, ErrExists) {
		t.Errorf("Create(x), x unreadable in the file: %v; want ErrExists", err)
	}
	data, _ := os.ReadFile(path)
	for _, raw := range []string{backwards, zone, newer} {
		if !strings.Contains(compact(string(data)), raw) {
			t.Errorf("file after a Create:\n%s\nwant the unreadable event kept untouched: %s", data, raw)
		}
	}
	// Fixed with Put, removed with Delete.
	if _, created, err := s.Put(ctx, testEvent("x")); err != nil || created {
		t.Errorf("Put(x) over the unreadable x: created %v, %v; want it replaced", created, err)
	}
	if err := s.Delete(ctx, "z"); err != nil {
		t.Errorf("Delete(z), unreadable: %v", err)
	}
	s.Close()
	s, err = OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err = s.List(ctx)
	if !slices.Equal(ids(evs), []string{"good", "new", "x"}) || err == nil || strings.Contains(err.Error(), `"z"`) || !strings.Contains(err.Error(), `"n"`) {
		t.Errorf("after reopening: %v, %v; want [good new x] and n still unreadable", ids(evs), err)
	}

	// A file that is not a registry document at all still stops the start.
	bad := filepath.Join(t.TempDir(), "registry.json")
	os.WriteFile(bad, []byte(`{"version":1,"events":[`+good), 0o600)
	if _, err := OpenFile(bad, FileOptions{}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("OpenFile(cut document) = %v; want an error naming %s", err, bad)
	}
}

// compact removes the whitespace that indenting adds outside strings (the test's
// documents have none inside theirs).
func compact(s string) string {
	return strings.NewReplacer("\n", "", " ", "").Replace(s)
}

// TestStoresHoldAtMostMaxEvents: every writable store refuses the event past MaxEvents
// with ErrFull, naming the limit; replacing an event is still allowed.
func TestStoresHoldAtMostMaxEvents(t *testing.T) {
	ctx := context.Background()
	stores := map[string]func(t *testing.T) Store{
		"memory": func(*testing.T) Store { return NewMemory(MemoryOptions{}) },
		"file": func(t *testing.T) Store {
			s, err := OpenFile(filepath.Join(t.TempDir(), "registry.json"), FileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	if !testing.Short() {
		srv := redistest.Start(t)
		stores["redis"] = func(t *testing.T) Store { return fleetRedis(t, srv.Addr()) }
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			if fs, ok := s.(*FileStore); ok {
				// Filled without a write per event: the limit is what is tested.
				for i := range MaxEvents {
					e := testEvent(fmt.Sprintf("ev%04d", i))
					fs.mem.events[e.ID] = e
				}
			} else {
				for i := range MaxEvents {
					if _, err := s.Create(ctx, testEvent(fmt.Sprintf("ev%04d", i))); err != nil {
						t.Fatalf("Create #%d: %v", i, err)
					}
				}
			}
			_, err := s.Create(ctx, testEvent("one-too-many"))
			if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), strconv.Itoa(MaxEvents)) {
				t.Errorf("Create past %d events: %v; want ErrFull naming the limit", MaxEvents, err)
			}
			if _, _, err := s.Put(ctx, testEvent("one-too-many")); !errors.Is(err, ErrFull) {
				t.Errorf("Put of a new id past %d events: %v; want ErrFull", MaxEvents, err)
			}
			if _, _, err := s.Put(ctx, testEvent("ev0001")); err != nil {
				t.Errorf("Put replacing an event at the limit: %v", err)
			}
		})
	}
}
