package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestWaitPlanSaysWhy: an app that calls WaitPlan at start-up with a timeout and gets
// an error must learn from it why no plan came — the agent is not listening, or it
// answers an error (whose message the agent writes as {"error":"…"}) — not only that
// the deadline passed. The error still wraps ctx's.
func TestWaitPlanSaysWhy(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	ps.fail(http.StatusServiceUnavailable, []byte(`{"error":"planner not ready"}`))
	for _, tc := range []struct {
		name, agent string
		want        []string
	}{
		{"not listening", "http://" + closedTCP(t), []string{"connection refused"}},
		{"answers an error", ps.URL(), []string{"503", "planner not ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			c, err := Attach(rdb, Options{Agent: tc.agent, NoReports: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			err = c.WaitPlan(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitPlan = %v; want an error wrapping context.DeadlineExceeded", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("WaitPlan = %q; want it to say %q", err, w)
				}
			}
			if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err != nil {
				t.Errorf("SET without a plan: %v", err)
			}
		})
	}
}

// TestWaitPlanAfterClose: a client closed before any plan came gives WaitPlan nothing to
// wait for. It must say so at once, not block until its context ends (forever, with
// context.Background()); one that had a plan still answers nil.
func TestWaitPlanAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c, err := Attach(rdb, Options{Agent: "http://" + closedTCP(t), NoReports: true}) // no plan will come
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- c.WaitPlan(context.Background()) }()
	select {
	case err := <-got:
		if err == nil || !strings.Contains(err.Error(), "closed before a plan came") {
			t.Errorf("WaitPlan after Close = %v; want an error saying the client was closed first", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitPlan after Close still waiting after 30 s; want it to return at once")
	}

	ps := startPlanServer(t)
	ps.publish(l1Entry("k", time.Second, time.Minute))
	c = attachTo(t, rdb, ps, Options{})
	c.Close()
	if err := c.WaitPlan(context.Background()); err != nil {
		t.Errorf("WaitPlan after Close of a client that had a plan = %v; want nil", err)
	}
}
