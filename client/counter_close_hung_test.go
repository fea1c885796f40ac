package client

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

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
