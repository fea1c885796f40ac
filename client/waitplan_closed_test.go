package client

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestWaitPlanAfterClose: a client closed before any plan came gives WaitPlan nothing to
// wait for. It must say so at once, not block until its context ends (forever, with
// context.Background()); one that had a plan still answers nil.
func TestWaitPlanAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0") // an agent that accepts and never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := Attach(rdb, Options{Agent: "http://" + ln.Addr().String(), NoReports: true})
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
