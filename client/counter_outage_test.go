package client

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestCounterBatchedSurvivesRedisRestart: batched Adds never fail, so the app cannot
// retry them; a sum whose flushes fail because Redis is unreachable (it was not applied)
// must wait for Redis to come back, not be dropped after MaxFlushTries flush intervals.
// Here Redis is down for 3s (a restart, a failover: each flush then takes go-redis's
// dial retries, 5 × 100ms), and every increment must reach it once it is back.
func TestCounterBatchedSurvivesRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	ps := startPlanServer(t)
	ps.publish(batchedEntry("outage:n", 20*time.Millisecond, time.Minute))
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{})
	ctx := context.Background()
	counter := c.Counter()
	srv.Stop()
	for range 10 {
		if err := counter.Add(ctx, "outage:n", 1); err != nil {
			t.Fatalf("batched Add = %v; want nil", err)
		}
	}
	time.Sleep(3 * time.Second)
	redistest.StartAt(t, addr)
	waitFor(t, func() bool { return rdb.Get(ctx, "outage:n").Val() == "10" || counter.Stats().DroppedAdds > 0 })
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	st := counter.Stats()
	if v := rdb.Get(ctx, "outage:n").Val(); v != "10" || st.DroppedAdds != 0 {
		t.Errorf("outage:n = %q after Redis came back, stats %+v; want 10, nothing dropped", v, st)
	}
	if st.FlushErrors == 0 {
		t.Errorf("stats %+v; want failed flushes while Redis was away", st)
	}
}

// TestFlushBackoff: the wait between flushes of an unreachable Redis doubles from the
// flush interval to MaxFlushBackoff, and is never shorter than the interval.
func TestFlushBackoff(t *testing.T) {
	for _, tc := range []struct {
		every time.Duration
		waits int
		want  time.Duration
	}{
		{100 * time.Millisecond, 1, 100 * time.Millisecond},
		{100 * time.Millisecond, 2, 200 * time.Millisecond},
		{100 * time.Millisecond, 4, 800 * time.Millisecond},
		{100 * time.Millisecond, 8, MaxFlushBackoff},
		{100 * time.Millisecond, 1 << 20, MaxFlushBackoff},
		{time.Minute, 5, time.Minute},
	} {
		if got := flushBackoff(tc.every, tc.waits); got != tc.want {
			t.Errorf("flushBackoff(%v, %d) = %v; want %v", tc.every, tc.waits, got, tc.want)
		}
	}
}

// TestCounterCloseWhileRedisHangs: Close waits for a flush in progress and then tries
// every pending sum once more, and that is all. With Redis hung, each try lasts the
// Redis client's timeout, so a flusher that went on flushing after Close had asked it to
// stop made Close last one timeout more each time it did (15–20 s with go-redis's
// defaults). Here the flusher is mid-flush, with a newer Add waiting for it, when Close
// comes: at most two tries of the sum fail.
func TestCounterCloseWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	ps.publish(batchedEntry("hung:n", 10*time.Millisecond, time.Minute))
	ctx := context.Background()
	for round := range 6 {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 150 * time.Millisecond,
			WriteTimeout: 150 * time.Millisecond, MaxRetries: -1})
		c := attachTo(t, rdb, ps, Options{})
		counter := c.Counter()
		if err := counter.Add(ctx, "hung:n", 1); err != nil { // a connection, and the flusher, before the pause
			t.Fatal(err)
		}
		waitFor(t, func() bool { return counter.Stats().Flushes == 1 })
		srv.Pause(t)
		counter.Add(ctx, "hung:n", 1)
		waitFor(t, func() bool { return counter.inFlight() }) // the flush is sent, and hangs
		counter.Add(ctx, "hung:n", 1)                         // a new sum: it kicks the flusher
		before := counter.Stats().FlushErrors
		err := c.Close()
		tries := counter.Stats().FlushErrors - before
		srv.Resume(t)
		rdb.Close()
		if err == nil {
			t.Errorf("round %d: Close = nil with Redis hung; want it to say what it could not flush", round)
		}
		if tries > 2 {
			t.Fatalf("round %d: %d failed tries of the sum during Close; want at most 2 (the flush in progress, then Close's)", round, tries)
		}
	}
}

// inFlight reports whether a flush has taken a sum and not settled it yet.
func (k *Counter) inFlight() bool {
	for i := range k.stripes {
		s := &k.stripes[i]
		s.mu.Lock()
		n := len(s.inflight)
		s.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}
