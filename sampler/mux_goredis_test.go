package sampler_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestMuxGoRedisDefaultShared: go-redis v9 with its default options opens with HELLO 3,
// CLIENT SETINFO and CLIENT MAINT_NOTIFICATIONS (maintenance notifications, "auto"
// mode). The tap shares such a client: on a shared connection MAINT_NOTIFICATIONS
// changes nothing a client sees (a Redis without it answers an error, which go-redis
// takes in auto mode; the pushes of one that has it answer no command, and the shared
// connections skip them), so pinning it would give every go-redis client a connection
// of its own.
func TestMuxGoRedisDefaultShared(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("multiplexing is Linux only")
	}
	srv := redistest.Start(t)
	p := muxProxy(t, srv, sharedMode, 0)
	ctx := context.Background()
	gc := redis.NewClient(&redis.Options{Addr: p.Addr().String(), PoolSize: 1})
	defer gc.Close()
	if err := gc.Set(ctx, "gr:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := gc.Get(ctx, "gr:k").Result(); err != nil || got != "v" {
		t.Fatalf("GET: %q, %v; want v", got, err)
	}
	if got, err := gc.HGetAll(ctx, "gr:none").Result(); err != nil || len(got) != 0 {
		t.Fatalf("HGETALL of a missing key: %v, %v; want an empty map (RESP3)", got, err)
	}
	st := p.Stats()
	if st.SharedClients != 1 || st.OwnClients != 0 {
		t.Errorf("stats %+v; want the go-redis client shared, not on a connection of its own", st)
	}
	for reason, n := range st.Pins {
		if n != 0 {
			t.Errorf("pins %s: %d; want 0", reason, n)
		}
	}
}
