package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/registry"
	"github.com/redis/go-redis/v9"
)

// fleetAgent returns a test agent whose registry is the Redis store at addr, as every
// agent of a fleet with redis.addrs has.
func fleetAgent(t *testing.T, addr string) (*Agent, *clock, http.Handler, *registry.RedisStore) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	rs, err := registry.NewRedis(rdb, registry.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, c, h := newTestAgent(t, Options{Events: rs})
	return a, c, h, rs
}

// indexed returns the ids of the events the agent arms from: those of its index.
func indexed(a *Agent, ids ...string) []string {
	var got []string
	for _, id := range ids {
		if _, ok := a.index.Load().Event(id); ok {
			got = append(got, id)
		}
	}
	return got
}

func fleetEvent(id string) string {
	start := t0.Add(time.Hour)
	return fmt.Sprintf(`{"id":%q,"patterns":["score:%s"],"start":%q,"end":%q,"lead":"10m","expected_read_rate":50000}`,
		id, id, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
}

// postFleetEvents registers a fleetEvent for each id through h, each answered 201.
func postFleetEvents(t *testing.T, h http.Handler, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if w := do(t, h, "POST", "/v1/registry", fleetEvent(id)); w.Code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s; want 201", id, w.Code, w.Body)
		}
	}
}

// Two agents share one Redis: what A creates B arms at its next registry check (at most a
// second later), what A deletes B stops arming; after Redis restarts empty (no RDB, no
// AOF) and A registers other events, B arms those, not the ones Redis lost, even when
// the new set took as many changes as the old one.
func TestFleetAgentsFollowRedisRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	_, _, ha, _ := fleetAgent(t, srv.Addr())
	b, cb, _, _ := fleetAgent(t, srv.Addr())
	all := []string{"a", "b", "c", "d", "gone"}
	step := func() { cb.add(time.Second); b.evaluate() }

	postFleetEvents(t, ha, "a", "b", "gone")
	if w := do(t, ha, "DELETE", "/v1/registry/gone", ""); w.Code != http.StatusOK {
		t.Fatalf("DELETE gone on agent A: %d %s", w.Code, w.Body)
	}
	step()
	if got := indexed(b, all...); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("agent B arms %v; want [a b]", got)
	}

	srv.Stop()
	step() // B checks while Redis is down: it keeps what it had
	if got := indexed(b, all...); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("agent B with Redis down arms %v; want [a b] kept", got)
	}
	redistest.StartAt(t, srv.Addr())
	// Four changes, as before the restart, without B checking in between.
	postFleetEvents(t, ha, "c", "d", "x")
	if w := do(t, ha, "DELETE", "/v1/registry/x", ""); w.Code != http.StatusOK {
		t.Fatalf("DELETE x on agent A: %d %s", w.Code, w.Body)
	}
	step()
	if got := indexed(b, all...); !slices.Equal(got, []string{"c", "d"}) {
		t.Errorf("agent B after the Redis restart arms %v; want [c d], what Redis holds", got)
	}
}

// One event in Redis that the agent cannot read must not disarm the others: the agent
// arms every readable event, GET /v1/registry lists them and names the bad one, and
// once the bad one is fixed the agent arms it too.
func TestFleetAgentArmsReadableEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	a, c, h, rs := fleetAgent(t, srv.Addr())
	postFleetEvents(t, h, "a", "c")
	hash, _ := rs.Keys()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	bad := strings.Replace(fleetEvent("b"), `"lead"`, `"tags":["new"],"lead"`, 1)
	if err := rdb.HSet(ctx, hash, "b", bad).Err(); err != nil {
		t.Fatal(err)
	}
	a.evaluate()
	if got := indexed(a, "a", "b", "c"); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("agent arms %v with one unreadable event in Redis; want [a c]", got)
	}
	w := do(t, h, "GET", "/v1/registry", "")
	list := decode[struct {
		Events     []registry.Event `json:"events"`
		Unreadable string           `json:"unreadable"`
	}](t, w)
	var got []string
	for _, e := range list.Events {
		got = append(got, e.ID)
	}
	if w.Code != http.StatusOK || !slices.Equal(got, []string{"a", "c"}) || !strings.Contains(list.Unreadable, `"b"`) {
		t.Errorf("GET /v1/registry: %d, events %v, unreadable %q; want 200, [a c] and the error naming \"b\"", w.Code, got, list.Unreadable)
	}
	// The operator fixes it through the API.
	if w := do(t, h, "PUT", "/v1/registry/b", fleetEvent("b")); w.Code != http.StatusOK {
		t.Fatalf("PUT b over the unreadable one: %d %s; want 200", w.Code, w.Body)
	}
	c.add(time.Second)
	a.evaluate()
	if got := indexed(a, "a", "b", "c"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("agent arms %v after the fix; want [a b c]", got)
	}
}

// An event at the limits docs/registry.md documents (256 patterns of 1024 bytes, a note
// of 4096 bytes) is accepted by POST, and the agent's file store reads it back after a
// restart.
func TestRegistryPostAtDocumentedLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.json")
	fs, err := registry.OpenFile(path, registry.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, h := newTestAgent(t, Options{Events: fs})
	var e registry.Event
	if err := json.Unmarshal([]byte(fleetEvent("big")), &e); err != nil {
		t.Fatal(err)
	}
	e.Patterns = nil
	for i := range registry.MaxPatterns {
		p := fmt.Sprintf("sale:<%d>:", i)
		e.Patterns = append(e.Patterns, p+strings.Repeat("&", 1024-len(p)))
	}
	e.Note = strings.Repeat("<>&", registry.MaxNoteLen/3)
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as curl would send it: < > & unescaped
	if err := enc.Encode(e); err != nil {
		t.Fatal(err)
	}
	body := b.String()
	if w := do(t, h, "POST", "/v1/registry", body); w.Code != http.StatusCreated {
		t.Fatalf("POST of a %d-byte event within the documented limits: %d %.200s; want 201", len(body), w.Code, w.Body)
	}
	fs.Close() // the agent stops
	again, err := registry.OpenFile(path, registry.FileOptions{})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer again.Close()
	if got, err := again.Get(context.Background(), "big"); err != nil || len(got.Patterns) != registry.MaxPatterns {
		t.Errorf("after a restart, Get(big) has %d patterns, %v; want %d", len(got.Patterns), err, registry.MaxPatterns)
	}
}
