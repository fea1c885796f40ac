package client

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestCounterBatchedSurvivesLongRestart: go-redis's defaults (MaxRetries 3, five dial
// attempts per connection, each after a 100ms pause) make a flush to a Redis that refuses
// connections end with context.DeadlineExceeded after the flush's 2s, not with a dial
// error. Such a flush sent nothing, yet it used to count towards MaxFlushTries, and a
// restart longer than three flush timeouts dropped every pending increment. A sum whose
// last flush failed is now probed first (EXISTS of its target, alone): a probe that does
// not reach Redis sends nothing and counts nothing. Redis is stopped before the Adds, so
// no INCRBY is in flight when it goes and the restarted (empty) Redis must end with
// exactly the sum of the Adds.
func TestCounterBatchedSurvivesLongRestart(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	ps := startPlanServer(t)
	const key = "restart:n"
	ps.publish(batchedEntry(key, 20*time.Millisecond, time.Hour))
	rdb := redis.NewClient(&redis.Options{Addr: addr}) // go-redis's default retries
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{})
	ctx := context.Background()
	counter := c.Counter()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	want := 0
	outage := 8 * time.Second // > MaxFlushTries × the 2s flush timeout
	for end := time.Now().Add(outage); time.Now().Before(end); {
		for range 100 {
			if err := counter.Add(ctx, key, 3); err != nil {
				t.Fatalf("batched Add = %v; want nil", err)
			}
			want += 3
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := counter.Stats(); st.DroppedAdds != 0 {
		t.Fatalf("stats %+v after an %v outage; want nothing dropped", st, outage)
	}
	redistest.StartAt(t, addr)
	// The backoff may have reached MaxFlushBackoff, plus one flush timeout.
	deadline := time.Now().Add(MaxFlushBackoff + 5*time.Second)
	for rdb.Get(ctx, key).Val() != strconv.Itoa(want) && counter.Stats().DroppedAdds == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	st := counter.Stats()
	if v := rdb.Get(ctx, key).Val(); v != strconv.Itoa(want) || st.Dropped != 0 || st.DroppedAdds != 0 {
		t.Errorf("%s = %q after Redis came back, stats %+v; want %d, nothing dropped", key, v, st, want)
	}
	if st.FlushErrors == 0 {
		t.Errorf("stats %+v; want failed flushes while Redis was away", st)
	}
}
