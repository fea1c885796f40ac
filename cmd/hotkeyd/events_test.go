package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/config"
	"github.com/hotkeyd/hotkeyd/internal/agenttest"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/registry"
	"github.com/redis/go-redis/v9"
)

// staticConfig loads a config file with one event in registry.events and the writable
// registry in a fresh file.
func staticConfig(t *testing.T) config.Config {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "hotkeyd.yaml")
	yaml := `
registry:
  file: ` + filepath.Join(dir, "registry.json") + `
  events:
    - id: final
      name: the final
      patterns: ["score:match42"]
      start: "2026-12-01T19:30:00+01:00"
      end: "2026-12-01T21:30:00+01:00"
      lead: 10m
      expected_read_rate: 200000
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.LoadOptions{File: file, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	return cfg
}

func TestEventStoreStaticEvents(t *testing.T) {
	ctx := context.Background()
	store, closeStore, err := eventStore(ctx, staticConfig(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("eventStore: %v", err)
	}
	defer closeStore()

	events, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 {
		t.Fatalf("List: got %d events (%+v); want 1", len(events), events)
	}
	e := events[0]
	start := time.Date(2026, 12, 1, 18, 30, 0, 0, time.UTC)
	if e.ID != "final" || e.Name != "the final" || len(e.Patterns) != 1 || e.Patterns[0] != "score:match42" ||
		!e.Start.Equal(start) || !e.End.Equal(start.Add(2*time.Hour)) ||
		time.Duration(e.Lead) != 10*time.Minute || e.ExpectedReadRate != 200000 {
		t.Errorf("List: got %+v; want the event of the config file", e)
	}
	if auto, _ := e.Kinds(); !auto {
		t.Errorf("mitigations: got %q; want auto", e.Mitigations)
	}

	if err := store.Delete(ctx, "final"); !errors.Is(err, registry.ErrReadOnly) {
		t.Errorf("Delete(final): got %v; want ErrReadOnly", err)
	}
	e.Note = "changed"
	if _, _, err := store.Put(ctx, e); !errors.Is(err, registry.ErrReadOnly) {
		t.Errorf("Put(final): got %v; want ErrReadOnly", err)
	}
	if _, err := store.Create(ctx, e); !errors.Is(err, registry.ErrExists) {
		t.Errorf("Create(final): got %v; want ErrExists", err)
	}

	// The writable store behind it still takes events.
	other := e
	other.ID, other.Note = "semi", ""
	if _, err := store.Create(ctx, other); err != nil {
		t.Fatalf("Create(semi): %v", err)
	}
	if err := store.Delete(ctx, "semi"); err != nil {
		t.Errorf("Delete(semi): got %v; want nil", err)
	}
	if got, err := store.Get(ctx, "final"); err != nil || got.Note != "" {
		t.Errorf("Get(final): got %+v, %v; want the unchanged event", got, err)
	}
}

// TestEventStoreStaticOverHTTP checks what an operator sees: the API lists the config
// file's event and answers 409 to DELETE and PUT of it.
func TestEventStoreStaticOverHTTP(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	store, closeStore, err := eventStore(context.Background(), staticConfig(t), log)
	if err != nil {
		t.Fatalf("eventStore: %v", err)
	}
	defer closeStore()
	a := agenttest.Run(t, agent.Options{Events: store})
	ctx := context.Background()
	url := "http://" + a.HTTPAddr().String() + "/v1/registry/final"

	do := func(method, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := do(http.MethodGet, ""); got != http.StatusOK {
		t.Errorf("GET: got %d; want 200", got)
	}
	if got := do(http.MethodDelete, ""); got != http.StatusConflict {
		t.Errorf("DELETE: got %d; want 409", got)
	}
	put := `{"patterns": ["score:match43"], "start": "2026-12-01T19:30:00Z", "end": "2026-12-01T21:30:00Z"}`
	if got := do(http.MethodPut, put); got != http.StatusConflict {
		t.Errorf("PUT: got %d; want 409", got)
	}
	if got := do(http.MethodGet, ""); got != http.StatusOK {
		t.Errorf("GET after DELETE: got %d; want 200", got)
	}
}

// TestEventStoreRedisLater: Redis does not answer when the agent starts, so the agent
// keeps events in its file; once Redis answers, the agent moves to it, seeding it with
// the file's events (those created while Redis was away included), and sees the events
// the rest of the fleet keeps there. Before, it stayed on its file until restarted.
func TestEventStoreRedisLater(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	cfg := staticConfig(t)
	cfg.Redis.Addrs = []string{addr}
	store, closeStore, err := writableStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("writableStore: %v", err)
	}
	defer closeStore()
	mine, err := registry.DecodeEvent([]byte(`{"id":"local","patterns":["sale:1"],"start":"2026-12-01T12:00:00Z","end":"2026-12-01T13:00:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(ctx, mine); err != nil {
		t.Fatalf("Create while Redis is away: %v", err)
	}
	v0, _ := store.Version(ctx)

	srv := redistest.StartAt(t, addr)
	fleet, err := registry.NewRedis(redis.NewClient(&redis.Options{Addr: srv.Addr()}), registry.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs := mine
	theirs.ID, theirs.Patterns = "fleet", []string{"sale:2"}
	if _, err := fleet.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		events, _ := store.List(ctx)
		v, _ := store.Version(ctx)
		if len(events) == 2 && v != v0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after Redis came up, the agent lists %+v (version %d, was %d); want local and fleet", events, v, v0)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := fleet.Get(ctx, "local"); err != nil {
		t.Errorf("the event created while Redis was away is not in Redis: %v", err)
	}
}
