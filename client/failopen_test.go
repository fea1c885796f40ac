package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// closedTCP returns a loopback address where nothing listens.
func closedTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// plainWorks runs app commands through rdb and checks they behave as plain Redis, each
// answered well within the agent's timeouts.
func plainWorks(t *testing.T, rdb redis.UniversalClient, addr string, key string) {
	t.Helper()
	ctx := context.Background()
	for i := range 20 {
		start := time.Now()
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		before := redisGets(t, addr)
		if v, err := rdb.Get(ctx, key).Result(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("GET: %q, %v; want %d", v, err, i)
		}
		if got := redisGets(t, addr) - before; got != 1 {
			t.Fatalf("GET cost %d Redis reads; want 1 (plain Redis)", got)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("a command took %v: it waited for the agent", d)
		}
	}
}

// TestFailOpenNoAgent: with nothing listening at the agent's address, Attach succeeds
// and every command behaves as plain Redis; the follower counts its failures.
func TestFailOpenNoAgent(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, err := Attach(rdb, Options{Agent: "http://" + closedTCP(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plainWorks(t, rdb, srv.Addr(), "fo:none")
	waitFor(t, func() bool { return c.Stats().Plan.Errors > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitPlan(ctx); err == nil {
		t.Error("WaitPlan with no agent: nil; want an error when ctx ends")
	}
}

// TestFailOpenAgentErrors: an agent answering 500s, or garbage, or a plan that does not
// validate: the client keeps the plan it has and commands keep working.
func TestFailOpenAgentErrors(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"500", http.StatusInternalServerError, `{"error":"boom"}`},
		{"garbage", http.StatusOK, `{"version": "not a number"`},
		{"invalid plan", http.StatusOK, `{"version":9,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[{"key":"k","kind":"teleport","mode":"enforce"}]}`},
		{"trailing data", http.StatusOK, `{"version":9,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[]} {}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "fo:" + strings.ReplaceAll(tc.name, " ", "-")
			ps := startPlanServer(t)
			ps.fail(tc.status, []byte(tc.body))
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			c, err := Attach(rdb, Options{Agent: ps.URL(), NoReports: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			waitFor(t, func() bool { return c.Stats().Plan.Errors > 0 })
			plainWorks(t, rdb, srv.Addr(), key)
			if st := c.Stats().Plan; st.Version != 0 {
				t.Errorf("plan version %d; want none taken", st.Version)
			}
		})
	}
}

// TestFailOpenKeepsPlan: a plan taken before the agent starts failing stays in force
// until its lease runs out, then the key is plain Redis.
func TestFailOpenKeepsPlan(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	// A lease long enough that a loaded machine cannot run it out before the reads below.
	ps.publish(l1Entry("fo:kept", 10*time.Second, 3*time.Second))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{})
	ctx := context.Background()
	taken := time.Now()
	ps.fail(http.StatusInternalServerError, nil) // the waiting long-poll too gets a 500
	rdb.Set(ctx, "fo:kept", "v", 0)
	before := redisGets(t, srv.Addr())
	for range 10 {
		rdb.Get(ctx, "fo:kept")
	}
	if got := redisGets(t, srv.Addr()) - before; got != 1 {
		t.Fatalf("agent failing, lease running: %d Redis GETs for 10 reads; want 1 (plan kept)", got)
	}
	time.Sleep(time.Until(taken.Add(3100 * time.Millisecond)))
	if c.Stats().Plan.Errors == 0 {
		t.Error("no fetch error counted")
	}
	plainWorks(t, rdb, srv.Addr(), "fo:kept")
}

// TestFollowerLongPoll: a new plan reaches the client within milliseconds of being
// published, through the long-poll; unchanged answers (304) keep the plan.
func TestFollowerLongPoll(t *testing.T) {
	ps := startPlanServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: closedTCP(t)})
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{PlanWait: time.Second})
	for v := uint64(2); v <= 4; v++ {
		start := time.Now()
		ps.publish(l1Entry(fmt.Sprint("k", v), time.Second, time.Minute))
		waitVersion(t, c, v)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("version %d arrived after %v; want within milliseconds", v, d)
		}
	}
	time.Sleep(1200 * time.Millisecond) // one wait passes: a 304
	st := c.Stats().Plan
	if st.Version != 4 || st.Errors != 0 || st.Fetches < 5 || st.Updates != 4 {
		t.Errorf("plan stats %+v; want version 4, ≥ 5 fetches (one a 304), 4 updates, no errors", st)
	}
	if p, ok := c.Plan(); !ok || p.Version != 4 || len(p.Entries) != 1 {
		t.Errorf("Plan() = %+v, %v; want version 4 with one entry", p, ok)
	}
}

// TestFollowerAgentRestart: an agent that restarts counts plan versions from 1 again and
// may reach the version the client holds with a different plan. Whether it was killed
// (the long-poll fails) or stopped (the long-poll gets a 304 on a connection it closes),
// the client must take the new agent's plan, not wait past its version.
func TestFollowerAgentRestart(t *testing.T) {
	srv := redistest.Start(t)
	for _, crash := range []bool{true, false} {
		t.Run(map[bool]string{true: "killed", false: "stopped"}[crash], func(t *testing.T) {
			ps := startPlanServer(t)
			ps.publish(l1Entry("fo:old", 10*time.Second, time.Minute))
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			c, err := Attach(rdb, Options{Agent: ps.URL(), NoReports: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			waitVersion(t, c, 2)
			waitFor(t, func() bool { return ps.waitingPolls() == 1 }) // for 30s (PlanWait)

			ps.restart(crash, l1Entry("fo:new", 10*time.Second, time.Minute))
			ctx := context.Background()
			rdb.Set(ctx, "fo:new", "v", 0)
			for i := 0; ; i++ {
				p, ok := c.Plan()
				if ok && len(p.Entries) == 1 && p.Entries[0].Key == "fo:new" {
					break
				}
				if i == 500 {
					t.Fatalf("5s after the restart the client holds version %d generated %v with %d entries (%+v); want the new agent's plan, generated %v, with fo:new",
						p.Version, p.Generated, len(p.Entries), c.Stats().Plan, planNow.Add(time.Second))
				}
				time.Sleep(10 * time.Millisecond)
			}
			before := redisGets(t, srv.Addr())
			for range 10 {
				rdb.Get(ctx, "fo:new")
			}
			if got := redisGets(t, srv.Addr()) - before; got != 1 {
				t.Errorf("after the restart, 10 reads of the new plan's L1 key cost %d Redis GETs; want 1", got)
			}
		})
	}
}

func TestAttachErrors(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: closedTCP(t)})
	defer rdb.Close()
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Agent: "127.0.0.1:9736"}, "Agent"},
		{Options{Agent: "ftp://x"}, "Agent"},
		// without a port the plan would come from port 80 and samples go to 9736
		{Options{Agent: "http://127.0.0.1"}, "port"},
		{Options{Agent: "http://127.0.0.1:99999"}, "port"},
		{Options{PlanWait: time.Hour}, "PlanWait"},
		{Options{Cache: CacheOptions{MaxEntries: 1}}, "MaxEntries"},
		{Options{SampleEvery: -1}, "SampleEvery"},
	} {
		c, err := Attach(rdb, tc.opts)
		if err == nil {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Attach(%+v): %v; want an error naming %s", tc.opts, err, tc.want)
		}
	}
	if _, err := Attach(nil, Options{}); err == nil {
		t.Error("Attach(nil): nil error")
	}
}

// TestFailOpenAgentNotResolving: an agent whose host name does not resolve (its DNS name
// not there yet, or gone) is an agent that is away, not an invalid option: Attach
// succeeds, with reports on, and every command behaves as plain Redis.
func TestFailOpenAgentNotResolving(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, err := Attach(rdb, Options{Agent: "http://hotkeyd-agent.invalid:9736", SampleEvery: 1})
	if err != nil {
		t.Fatalf("Attach with an agent whose name does not resolve: %v; want it to fail open", err)
	}
	defer c.Close()
	plainWorks(t, rdb, srv.Addr(), "fo:dns")
	waitFor(t, func() bool { st := c.Stats(); return st.Plan.Errors > 0 && st.Reports.Dropped > 0 })
}
