package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/config"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/registry"
)

// TestRegistrySurvivesRedisLoss: two agents on one Redis registry, an event created
// through the API; Redis loses its data (FLUSHALL: a restart without persistence, a
// failover to an empty replica). Each agent's next read finds the registry restored from
// its copy, never empty, and a warning says what happened.
func TestRegistrySurvivesRedisLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := redistest.Start(t)
	var logs [2]bytes.Buffer
	var stores [2]registry.Store
	for i := range stores {
		var cfg config.Config
		cfg.Redis.Addrs = []string{srv.Addr()}
		cfg.Registry.File = filepath.Join(t.TempDir(), "registry.json")
		s, closeStore, err := writableStore(ctx, cfg, slog.New(slog.NewTextHandler(&logs[i], nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		stores[i] = s
	}
	e, err := registry.DecodeEvent([]byte(`{"id":"match","patterns":["score:match"],"start":"2026-12-01T19:30:00Z","end":"2026-12-01T21:30:00Z","mitigations":["l1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stores[0].Create(ctx, e); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		if evs, err := s.List(ctx); err != nil || len(evs) != 1 {
			t.Fatalf("List before the loss = %d events, %v; want 1", len(evs), err)
		}
	}
	if _, err := redistest.Command(srv.Addr(), "", "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	for i, s := range stores {
		v, err := s.Version(ctx)
		evs, lerr := s.List(ctx)
		if err != nil || lerr != nil || v == 0 || !slices.Equal(eventIDs(evs), []string{"match"}) {
			t.Errorf("agent %d after Redis lost its data: version %d (%v), events %v (%v); want the registry restored: [match]", i, v, err, eventIDs(evs), lerr)
		}
	}
	all := logs[0].String() + logs[1].String()
	if strings.Count(all, "level=WARN msg=\"registry: Redis lost the registry") != 1 {
		t.Errorf("logs:\n%s\nwant one warning that Redis lost the registry and it was restored", all)
	}
}

func eventIDs(evs []registry.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// TestRegistryFileSharedRefused: a second agent on the registry file of a running one
// fails at start, naming registry.file, the holder and what to do; once the first stops,
// a new one starts.
func TestRegistryFileSharedRefused(t *testing.T) {
	ctx := context.Background()
	var cfg config.Config
	cfg.Registry.File = filepath.Join(t.TempDir(), "registry.json")
	log := slog.New(slog.DiscardHandler)
	_, closeFirst, err := writableStore(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	_, closeSecond, err := writableStore(ctx, cfg, log)
	if err == nil {
		closeSecond()
		closeFirst()
		t.Fatal("a second agent opened the registry file of a running one; want it refused")
	}
	for _, want := range []string{"registry.file", cfg.Registry.File, "process", "redis.addrs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second agent: %v; want it to name %q", err, want)
		}
	}
	closeFirst()
	_, closeThird, err := writableStore(ctx, cfg, log)
	if err != nil {
		t.Fatalf("after the first agent stopped: %v", err)
	}
	closeThird()
}

// TestStoreKindWhileRedisAway: while Redis has not answered since the start, the agent
// keeps its events in its file, and the log says so, not "redis".
func TestStoreKindWhileRedisAway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cfg config.Config
	cfg.Redis.Addrs = []string{freeAddr(t)}
	cfg.Registry.File = filepath.Join(t.TempDir(), "registry.json")
	s, closeStore, err := writableStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if got := storeKind(s); got != "file until Redis answers" {
		t.Errorf("storeKind with Redis away = %q; want %q", got, "file until Redis answers")
	}
}

// TestRegistryAddAllowBroad: `registry add --allow-broad` sends allow_broad, which a
// pattern with no literal character needs.
func TestRegistryAddAllowBroad(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"all"}`))
	}))
	defer srv.Close()
	_, _, err := runCmd(t, context.Background(), "registry", "add", "--addr", srv.URL, "--id", "all", "--pattern", "*", "--allow-broad",
		"--start", "2026-12-01T19:30:00Z", "--end", "2026-12-01T21:30:00Z")
	if err != nil || !strings.Contains(got, `"allow_broad":true`) {
		t.Errorf("registry add --allow-broad: %v, sent %s; want allow_broad true", err, got)
	}
}
