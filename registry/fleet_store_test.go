package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// fleetRedis returns a RedisStore on the redis-server at addr, as one agent of a fleet
// would open it, with a client that does not retry (the tests stop servers under it).
func fleetRedis(t *testing.T, addr string) *RedisStore {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s, err := NewRedis(rdb, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An event seeded from an agent's file and then deleted through the API (which writes to
// Redis only) must stay deleted when an agent restarts and seeds again: a rolling restart
// of the fleet must not bring back, and arm, events an operator removed.
func TestRedisSeedDoesNotResurrectDeleted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	file, err := OpenFile(filepath.Join(t.TempDir(), "registry.json"), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old-sale", "match"} {
		if _, err := file.Create(ctx, testEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	rs := fleetRedis(t, srv.Addr())
	if n, err := Seed(ctx, rs, file); err != nil || n != 2 {
		t.Fatalf("first Seed = %d, %v; want 2", n, err)
	}
	if err := rs.Delete(ctx, "old-sale"); err != nil {
		t.Fatal(err)
	}
	// The agent restarts: it opens its file again and seeds.
	rs2 := fleetRedis(t, srv.Addr())
	if _, err := Seed(ctx, rs2, file); err != nil {
		t.Fatal(err)
	}
	evs, err := rs2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(evs); !slices.Equal(got, []string{"match"}) {
		t.Errorf("after delete and a second Seed, Redis holds %v; want [match] (old-sale was deleted)", got)
	}
	// Deleting is not forever: the API can create the id again, and a PUT too.
	if _, err := rs2.Create(ctx, testEvent("old-sale")); err != nil {
		t.Errorf("Create of a deleted id: %v; want it stored", err)
	}
	if err := rs2.Delete(ctx, "old-sale"); err != nil {
		t.Fatal(err)
	}
	if _, created, err := rs2.Put(ctx, testEvent("old-sale")); err != nil || !created {
		t.Errorf("Put of a deleted id = created %v, %v; want created", created, err)
	}
}

// The version of a Redis store must not come back to a value an agent saw for another
// set of events: after a restart without persistence (or a failover to a replica that
// lagged), the counter starts again from 0, and an agent that read version 2 for {a, b}
// before the restart would take version 2 of {c, d} for the set it has and keep arming
// the lost events, never the new ones.
func TestRedisVersionNotReusedAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	s := fleetRedis(t, srv.Addr())
	for _, id := range []string{"a", "b"} {
		if _, err := s.Create(ctx, testEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	redistest.StartAt(t, srv.Addr()) // empty: no RDB, no AOF
	for _, id := range []string{"c", "d"} {
		if _, err := s.Create(ctx, testEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	after, err := s.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Errorf("version %d for {a b} before the restart and %d for {c d} after; want a version never seen before", before, after)
	}
}

// One event in Redis that this agent cannot read (written by hand with redis-cli, or by a
// newer hotkeyd with a field this one does not know) must not hide the others: List
// returns every readable event and an error naming the bad one.
func TestRedisListKeepsGoodEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	s := fleetRedis(t, srv.Addr())
	for _, id := range []string{"a", "c"} {
		if _, err := s.Create(ctx, testEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	hash, _ := s.Keys()
	bad := `{"id":"b","patterns":["x"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00","tags":["new"]}`
	if err := s.rdb.HSet(ctx, hash, "b", bad).Err(); err != nil {
		t.Fatal(err)
	}
	evs, err := s.List(ctx)
	if got := ids(evs); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("List with one unreadable event = %v; want [a c]", got)
	}
	if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "tags") {
		t.Errorf("List error %v; want ErrUnreadable naming event \"b\" and its field tags", err)
	}
	// The merged view (config events over Redis) keeps them too.
	st, _ := NewStatic(nil)
	evs, err = Merge(st, s).List(ctx)
	if got := ids(evs); !slices.Equal(got, []string{"a", "c"}) || !errors.Is(err, ErrUnreadable) {
		t.Errorf("Merged List = %v, %v; want [a c] and ErrUnreadable", got, err)
	}
}

// bigEvent is an event at the documented limits: 256 patterns of 1024 bytes, a note of
// 4096 bytes, with characters that JSON may escape (<, >, &, U+2028) and others.
func bigEvent(id string) Event {
	e := testEvent(id)
	e.Patterns = nil
	for i := range MaxPatterns {
		p := fmt.Sprintf("sale:<%d>:ключ:\u2028:", i)
		p += strings.Repeat("&", 1024-len(p))
		e.Patterns = append(e.Patterns, p)
	}
	e.Note = strings.Repeat("<&>", MaxNoteLen/3)
	e.Name = strings.Repeat("é", MaxNameLen/2)
	return e
}

// Every event a store accepts is read back by the store after a restart: here one at
// the documented limits, whose JSON grows when < > & are escaped.
func TestFileStoreReopensEventAtLimits(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := bigEvent("big")
	if err := e.Validate(); err != nil {
		t.Fatalf("the event at the limits is invalid: %v", err)
	}
	if _, err := s.Create(ctx, e); err != nil {
		t.Fatalf("Create of an event at the limits: %v", err)
	}
	if _, err := s.Create(ctx, testEvent("small")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatalf("reopening the file after storing an event at the limits: %v", err)
	}
	got, err := s2.Get(ctx, "big")
	if err != nil || !sameEvent(got, e) {
		t.Errorf("after reopening, Get(big) = %v; want the event as stored", err)
	}
}

// A document followed by more data (two documents pasted one after the other, an editor's
// leftovers) is refused with the file's name: opening it as its first document would
// drop the rest at the next write.
func TestFileStoreRefusesTrailingData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.json")
	one := `{"version":1,"events":[{"id":"a","patterns":["k"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00"}]}`
	two := `{"version":1,"events":[{"id":"b","patterns":["k"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00"}]}`
	if err := os.WriteFile(path, []byte(one+"\n"+two+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenFile(path, FileOptions{})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "after the document") {
		t.Errorf("OpenFile of a document followed by another: %v; want an error naming %s and the data after the document", err, path)
	}
}

// Temporary files a crash left are removed at the next open, whatever the document's
// name: here one with glob characters.
func TestFileStoreRemovesTempFilesOfAnyName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "registry[prod].json")
	stale := path + ".tmp-123456"
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "registryp.json.tmp-1") // another document's: kept
	if err := os.WriteFile(other, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(path, FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("%s left by a crash is still there after OpenFile; want it removed", filepath.Base(stale))
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("%s (not this document's) was removed: %v", filepath.Base(other), err)
	}
}

// What a store accepts it reads back after a restart: zones, recurrences across DST,
// far-off ends, fractional seconds, odd offsets, unicode and binary-ish patterns.
func TestStoresReopenWhatTheyAccept(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	docs := []string{
		`{"id":"madrid","patterns":["score:match42"],"start":"2026-03-27T19:30:00+01:00","end":"2026-03-27T21:30:00+01:00","lead":"30m","recurrence":"daily@19:30","zone":"Europe/Madrid"}`,
		`{"id":"ny-cron","patterns":["feed:*"],"start":"2026-03-08T03:30:00-04:00","end":"2026-03-08T04:00:00-04:00","recurrence":"cron:*/30 * * * *","zone":"America/New_York"}`,
		`{"id":"forever","patterns":["k"],"start":"2026-01-01T00:00:00.123456789+14:00","end":"9999-12-31T23:59:59Z"}`,
		`{"id":"odd-offset","patterns":["ключ:日本:*","a\u0000b","x\\*y","[^a]z"],"start":"2026-01-01T00:00:00-09:30","end":"2026-01-01T01:00:00-09:30","lead":"168h","note":"<script>&amp;\u2028"}`,
		`{"id":"weekly","patterns":["w"],"start":"2026-11-01T01:30:00-04:00","end":"2026-11-01T02:30:00-04:00","recurrence":"weekly","zone":"America/New_York","mitigations":["l1","batched_counter"]}`,
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "registry.json")
	fs, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs := fleetRedis(t, srv.Addr())
	var want []Event
	for _, d := range docs {
		e, err := DecodeEvent([]byte(d))
		if err != nil {
			t.Fatalf("DecodeEvent(%s): %v", d, err)
		}
		want = append(want, e)
		for _, s := range []Store{fs, rs} {
			if _, err := s.Create(ctx, e); err != nil {
				t.Fatalf("Create(%s) in %T: %v", e.ID, s, err)
			}
		}
	}
	fs.Close()
	fs2, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatalf("reopening the file: %v", err)
	}
	for _, s := range []Store{fs2, fleetRedis(t, srv.Addr())} {
		for _, e := range want {
			got, err := s.Get(ctx, e.ID)
			if err != nil || !sameEvent(got, e) || !got.Start.Equal(e.Start) {
				t.Errorf("%T after a restart: Get(%s) = %+v, %v; want %+v", s, e.ID, got, err, e)
			}
		}
		if evs, err := s.List(ctx); err != nil || len(evs) != len(want) {
			t.Errorf("%T after a restart: List = %d events, %v; want %d", s, len(evs), err, len(want))
		}
	}
}
