package client

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestCounterBatchedWriteOrder runs testCounterBatchedWriteOrder on a standalone and a
// cluster client.
func TestCounterBatchedWriteOrder(t *testing.T) {
	runSuite(t, []suiteTest{{"WriteOrder", testCounterBatchedWriteOrder}})
}

// testCounterBatchedWriteOrder: the app's own order holds between batched Adds and its
// writes of the same key through its go-redis client. The flush interval is a minute,
// so only the plan hook's flush before the write can bring the Adds to Redis in time: a
// DEL, an EXPIRE, an INCR, a write in a pipeline and one in a WATCH transaction each see
// the Adds made before them; a write of another key flushes nothing; a sum Redis refuses
// is dropped (as the plain INCRBY would have failed) and the write goes on.
func testCounterBatchedWriteOrder(t *testing.T, im impl) {
	ctx := context.Background()
	keys := []string{"ord:del", "ord:expire", "ord:incr", "ord:pipe", "ord:tx", "ord:idle", "ord:hash"}
	ps := startPlanServer(t)
	var entries []mitigate.Entry
	for _, k := range keys {
		entries = append(entries, batchedEntry(k, time.Minute, time.Hour))
	}
	ps.publish(entries...)
	rdb, c := attach(t, im, ps, Options{})
	del(ctx, rdb, append(keys, "ord:other")...)
	counter := c.Counter()
	adds := func(key string, n int) {
		t.Helper()
		for range n {
			if err := counter.Add(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
		}
	}

	// DEL: a reset the app believes made must hold.
	adds("ord:del", 100)
	if n, err := rdb.Del(ctx, "ord:del").Result(); err != nil || n != 1 {
		t.Errorf("DEL ord:del after 100 Adds = %d, %v; want 1 (the Adds reached Redis first)", n, err)
	}
	if v, err := counter.Get(ctx, "ord:del"); err != nil || v != 0 {
		t.Errorf("Get(ord:del) after DEL = %d, %v; want 0", v, err)
	}

	// EXPIRE: the key exists, and gets its TTL.
	adds("ord:expire", 10)
	if ok, err := rdb.Expire(ctx, "ord:expire", time.Minute).Result(); err != nil || !ok {
		t.Errorf("EXPIRE ord:expire after 10 Adds = %v, %v; want true", ok, err)
	}
	if d := rdb.PTTL(ctx, "ord:expire").Val(); d <= 0 {
		t.Errorf("PTTL ord:expire = %v; want the minute EXPIRE set", d)
	}

	// INCR through the app's client counts the Adds before it.
	adds("ord:incr", 5)
	if n, err := rdb.Incr(ctx, "ord:incr").Result(); err != nil || n != 6 {
		t.Errorf("INCR ord:incr after 5 Adds = %d, %v; want 6", n, err)
	}

	// A pipeline: flushed before it is sent.
	adds("ord:pipe", 5)
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "ord:pipe", "1", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A WATCH transaction: WATCH flushes, so the transaction reads the Adds and its
	// EXEC is not failed by a flush landing in between.
	adds("ord:tx", 5)
	if err := rdb.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, "ord:tx").Int()
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "ord:tx", v*10, 0)
			return nil
		})
		return err
	}, "ord:tx"); err != nil {
		t.Errorf("WATCH transaction on ord:tx: %v", err)
	}

	// A write of another key flushes nothing.
	adds("ord:idle", 5)
	before := counter.Stats().WriteFlushes
	rdb.Set(ctx, "ord:other", "x", 0)
	if st := counter.Stats(); st.WriteFlushes != before || rdb.Exists(ctx, "ord:idle").Val() != 0 {
		t.Errorf("a SET of another key flushed (stats %+v); want ord:idle still pending", st)
	}

	// A sum Redis refuses is dropped, and the write goes on.
	rdb.HSet(ctx, "ord:hash", "f", "v")
	adds("ord:hash", 3)
	if n, err := rdb.Del(ctx, "ord:hash").Result(); err != nil || n != 1 {
		t.Errorf("DEL ord:hash = %d, %v; want 1", n, err)
	}
	if st := counter.Stats(); st.Dropped != 3 {
		t.Errorf("stats %+v; want the refused sum of 3 dropped", st)
	}

	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for key, want := range map[string]string{"ord:del": "", "ord:expire": "10", "ord:incr": "6",
		"ord:pipe": "1", "ord:tx": "50", "ord:idle": "5", "ord:hash": ""} {
		if v := rdb.Get(ctx, key).Val(); v != want {
			t.Errorf("%s after Close = %q; want %q", key, v, want)
		}
	}
	if st := counter.Stats(); st.WriteFlushes < 5 {
		t.Errorf("stats %+v; want at least 5 flushes before writes", st)
	}
	del(ctx, rdb, append(keys, "ord:other")...)
}
