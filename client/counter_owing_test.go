package client

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestCounterOwingFilter: a write of a key flushes its pending sum, found through its
// bucket in Counter.owing, while a write of another key of the same bucket (which then
// takes the locked check) flushes nothing; once the sum has settled every bucket is
// back at 0, so writes skip the locks again.
func TestCounterOwingFilter(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := "owing:a"
	var b string // a's bucket, another key
	for i := 0; b == ""; i++ {
		if k := "owing:b" + strconv.Itoa(i); xxhash.Sum64String(k)>>56 == xxhash.Sum64String(a)>>56 {
			b = k
		}
	}
	ps := startPlanServer(t)
	ps.publish(batchedEntry(a, time.Minute, time.Hour))
	rdb, c := attach(t, standalone(srv.Addr()), ps, Options{})
	waitVersion(t, c, 2)
	del(ctx, rdb, a, b)
	k := c.Counter()
	for range 3 {
		if err := k.Add(ctx, a, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := k.owingOf(a).Load(); n != 1 || k.owed.Load() != 1 {
		t.Fatalf("after Adds of a: a's bucket %d, owed %d; want 1, 1", n, k.owed.Load())
	}
	if err := rdb.Set(ctx, b, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if st := k.Stats(); st.WriteFlushes != 0 {
		t.Fatalf("a write of b, in a's bucket, flushed a: %+v", st)
	}
	if v, err := rdb.IncrBy(ctx, a, 10).Result(); err != nil || v != 13 {
		t.Fatalf("INCRBY a 10 after 3 Adds = %d, %v; want 13 (the Adds flushed first)", v, err)
	}
	if st := k.Stats(); st.WriteFlushes != 1 || st.Flushes != 1 {
		t.Errorf("stats %+v; want WriteFlushes 1, Flushes 1", st)
	}
	for i := range k.owing {
		if n := k.owing[i].Load(); n != 0 {
			t.Errorf("bucket %d = %d once nothing is owed; want 0", i, n)
		}
	}
	if k.owed.Load() != 0 {
		t.Errorf("owed = %d; want 0", k.owed.Load())
	}
}
