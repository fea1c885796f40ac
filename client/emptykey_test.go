package client

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestL1EmptyKey: the empty key is a key Redis accepts, and one an app can make hot (an
// id left blank). A plan with an L1 for it is followed, and so is the rest of the plan:
// the client used to refuse such a plan whole, and cache nothing at all.
func TestL1EmptyKey(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	ps.publish(l1Entry("", 10*time.Second, time.Minute), l1Entry("other", 10*time.Second, time.Minute))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{})
	ctx := context.Background()
	for _, key := range []string{"", "other"} {
		if err := rdb.Set(ctx, key, "v:"+key, 0).Err(); err != nil {
			t.Fatal(err)
		}
		before := redisGets(t, srv.Addr())
		for i := range 50 {
			if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "v:"+key {
				t.Fatalf("GET %q #%d: %q, %v; want v:%s", key, i, v, err, key)
			}
		}
		if got := redisGets(t, srv.Addr()) - before; got != 1 {
			t.Errorf("key %q: Redis GETs %d for 50 reads with L1; want 1", key, got)
		}
	}
	if st := c.Stats().L1; st.Hits != 98 {
		t.Errorf("L1 stats %+v; want 98 hits", st)
	}
}
