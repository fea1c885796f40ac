package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/config"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/registry"
	"github.com/redis/go-redis/v9"
)

// TestEventStoreRedisLaterWritesInFlight: an API write that lands in the agent's own
// store while it moves to Redis (after the seed read that store, before the switch)
// must reach Redis too: the API answered it with success.
func TestEventStoreRedisLaterWritesInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	var cfg config.Config
	cfg.Redis.Addrs = []string{addr}
	store, closeStore, err := writableStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("writableStore: %v", err)
	}
	defer closeStore()
	sw, ok := store.(*registry.Switch)
	if !ok {
		t.Fatalf("writableStore returned %T; want a *registry.Switch (Redis away)", store)
	}
	event := func(id string) registry.Event {
		e, err := registry.DecodeEvent([]byte(`{"id":"` + id + `","patterns":["sale:` + id + `"],"start":"2026-12-01T12:00:00Z","end":"2026-12-01T13:00:00Z"}`))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var created []string
	for i := range 300 { // a seed long enough for writes to land during it
		id := fmt.Sprintf("early%d", i)
		if _, err := sw.Create(ctx, event(id)); err != nil {
			t.Fatal(err)
		}
		created = append(created, id)
	}
	redistest.StartAt(t, addr)
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		if _, moved := sw.Current().(*registry.Mirror); moved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("15s after Redis came up, the agent has not moved to it")
		}
		id := fmt.Sprintf("w%d", i)
		if _, err := sw.Create(ctx, event(id)); err == nil {
			created = append(created, id)
		}
		time.Sleep(time.Millisecond)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	fleet, err := registry.NewRedis(rdb, registry.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, id := range created {
		if _, err := fleet.Get(ctx, id); err != nil {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d events created with success are not in Redis after the move: %v", len(lost), len(created), lost)
	}
}
