package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// staleKeys attaches a client to a fresh redis-server under a plan with prefix+":l1" in
// L1 and prefix+":split" split into 2 copies, and returns it with a plain client. Each
// key is then set to 1 and read through the SDK (L1 and the copies hold 1), and set to 5
// by the plain client, another process without the SDK.
func staleKeys(t *testing.T, prefix string) (rdb, plain redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t)
	im := standalone(srv.Addr())
	ps := startPlanServer(t)
	ps.publish(l1Entry(prefix+":l1", 10*time.Second, time.Minute), copiesEntry(prefix+":split", copyNames(prefix+":split", 2), time.Minute))
	rdb, _ = attach(t, im, ps, Options{Rand: seeded(1)})
	plain = im.new()
	t.Cleanup(func() { plain.Close() })
	ctx := context.Background()
	for _, key := range []string{prefix + ":l1", prefix + ":split"} {
		if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v := rdb.Get(ctx, key).Val(); v != "1" {
			t.Fatalf("GET %s = %q; want 1", key, v)
		}
		if err := plain.Set(ctx, key, "5", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return rdb, plain
}

// TestWatchReadsOriginal: inside rdb.Watch the app reads a key to compute what EXEC
// writes; WATCH guards the original only, so that read must come from the original,
// not from L1 or a copy. Otherwise a value another process wrote before WATCH is lost:
// the read returns the older value and EXEC succeeds.
func TestWatchReadsOriginal(t *testing.T) {
	rdb, plain := staleKeys(t, "w")
	ctx := context.Background()
	for _, key := range []string{"w:l1", "w:split"} {
		t.Run(key, func(t *testing.T) {
			if err := incrInWatch(ctx, rdb, key); err != nil {
				t.Fatalf("Watch: %v", err)
			}
			if v := plain.Get(ctx, key).Val(); v != "6" {
				t.Errorf("%s after WATCH, GET, MULTI SET n+1, EXEC = %q; want 6 (the read inside WATCH must see 5)", key, v)
			}
		})
	}
}

// TestConnMultiExec: on a dedicated connection (Client.Conn), commands between MULTI
// and EXEC are queued by Redis and answered by EXEC. A GET of an L1 key there must be
// queued, not answered from L1; a read of a split key must read the original, not a
// copy; and a write of a split key is applied at EXEC, so it cannot be mirrored when it
// is queued: this client must read the key from the original afterwards.
func TestConnMultiExec(t *testing.T) {
	rdb, _ := staleKeys(t, "m")
	ctx := context.Background()
	for _, key := range []string{"m:l1", "m:split"} {
		t.Run(key, func(t *testing.T) {
			conn := rdb.(*redis.Client).Conn()
			defer conn.Close()
			multi := func(queue func()) []any {
				t.Helper()
				if err := conn.Do(ctx, "multi").Err(); err != nil {
					t.Fatal(err)
				}
				queue()
				got, err := conn.Do(ctx, "exec").Slice()
				if err != nil {
					t.Fatalf("EXEC: %v", err)
				}
				return got
			}
			if got := multi(func() { conn.Get(ctx, key) }); len(got) != 1 || got[0] != "5" {
				t.Errorf("EXEC of MULTI, GET %s = %q; want [5] (the GET queued, on the original)", key, got)
			}
			if got := multi(func() { conn.Set(ctx, key, "7", 0) }); len(got) != 1 || got[0] != "OK" {
				t.Errorf("EXEC of MULTI, SET %s 7 = %q; want [OK]", key, got)
			}
			for i := range 5 {
				if v := rdb.Get(ctx, key).Val(); v != "7" {
					t.Fatalf("GET %d through the SDK after EXEC = %q; want 7", i, v)
				}
			}
		})
	}
}

// TestSplitWriteHonorsContext: writes of a split key wait for each other (the stripe
// lock orders them with the copying of their result), but a write whose context ends
// while it waits must return then, as go-redis would with ContextTimeoutEnabled, not
// when the write ahead of it is done.
func TestSplitWriteHonorsContext(t *testing.T) {
	srv := redistest.Start(t)
	im := impl{"standalone", []string{srv.Addr()}, func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	}}
	ps := startPlanServer(t)
	key := "ctx:split"
	ps.publish(copiesEntry(key, copyNames(key, 2), time.Minute))
	rdb, _ := attach(t, im, ps, Options{})
	ctx := context.Background()
	if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The server holds writes for 1s: the first SET holds the key's stripe that long.
	if _, err := redistest.Command(srv.Addr(), "", "CLIENT", "PAUSE", "1000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- rdb.Set(ctx, key, "2", 0).Err() }()
	time.Sleep(100 * time.Millisecond) // the first SET is waiting on the server
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := rdb.Set(tctx, key, "3", 0).Err()
	var firstErr error
	select {
	case firstErr = <-first:
		t.Errorf("SET with a 100ms context returned (err %v) only after the first SET, held 1s by the server; want it to give up its wait first", err)
	default:
		firstErr = <-first
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("SET with a 100ms context, server paused for 1s: %v; want the context's deadline", err)
	}
	if firstErr != nil {
		t.Fatalf("first SET: %v", firstErr)
	}
}

// incrInWatch adds one to key in an optimistic transaction, as apps do: WATCH, GET, then
// SET in MULTI/EXEC.
func incrInWatch(ctx context.Context, rdb interface {
	Watch(context.Context, func(*redis.Tx) error, ...string) error
}, key string) error {
	return rdb.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, key).Int()
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, n+1, 0)
			return nil
		})
		return err
	}, key)
}
