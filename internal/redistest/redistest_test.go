package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

func TestStart(t *testing.T) {
	s := redistest.Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q; want 127.0.0.1:port", s.Addr())
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING: got %q, %v; want PONG", got, err)
	}
	// Persistence is off.
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil || cfg["save"] != "" {
		t.Fatalf("CONFIG GET save: got %q, %v; want \"\"", cfg["save"], err)
	}
	cfg, err = c.ConfigGet(ctx, "appendonly").Result()
	if err != nil || cfg["appendonly"] != "no" {
		t.Fatalf("CONFIG GET appendonly: got %q, %v; want \"no\"", cfg["appendonly"], err)
	}
}

func TestStartTwiceDifferentPorts(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two servers on one address %s", a.Addr())
	}
}

func TestStartPassword(t *testing.T) {
	s := redistest.Start(t, redistest.Options{Password: "s3cret"})
	ctx := context.Background()

	bad := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without AUTH: got err %v; want NOAUTH", err)
	}
	good := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.Password()})
	defer good.Close()
	if err := good.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with AUTH: got %v; want nil", err)
	}
	if got, err := redistest.Command(s.Addr(), "s3cret", "ECHO", "hi"); err != nil || got != "hi" {
		t.Fatalf("Command ECHO: got %q, %v; want hi", got, err)
	}
}

func TestStop(t *testing.T) {
	s := redistest.Start(t)
	s.Stop()
	if _, err := redistest.Command(s.Addr(), "", "PING"); err == nil {
		t.Fatalf("PING after Stop: got nil error; want a refused connection")
	}
	s.Stop() // a second call does nothing
}

func TestStartCluster(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("primaries=%d", n), func(t *testing.T) {
			c := redistest.StartCluster(t, n)
			if got := len(c.Addrs()); got != n {
				t.Fatalf("len(Addrs()) = %d; want %d", got, n)
			}
			ctx := context.Background()
			for _, addr := range c.Addrs() {
				info, err := redistest.Command(addr, "", "CLUSTER", "INFO")
				if err != nil || !strings.Contains(info, "cluster_state:ok") {
					t.Fatalf("%s CLUSTER INFO: got %q, %v; want cluster_state:ok", addr, info, err)
				}
			}
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
			defer cc.Close()
			shards, err := cc.ClusterShards(ctx).Result()
			if err != nil {
				t.Fatalf("CLUSTER SHARDS: %v", err)
			}
			covered := make([]bool, 16384)
			owners := map[string]bool{}
			for _, sh := range shards {
				for _, s := range sh.Slots {
					for i := s.Start; i <= s.End; i++ {
						if covered[i] {
							t.Fatalf("slot %d covered twice", i)
						}
						covered[i] = true
					}
				}
				for _, node := range sh.Nodes {
					if node.Role == "master" && len(sh.Slots) > 0 {
						// A lone node may not know its own IP; the port is unique here.
						owners[fmt.Sprintf("127.0.0.1:%d", node.Port)] = true
					}
				}
			}
			for i, ok := range covered {
				if !ok {
					t.Fatalf("slot %d not covered; want all 16384", i)
				}
			}
			if len(owners) != n {
				t.Fatalf("slots owned by %d primaries %v; want %d", len(owners), owners, n)
			}
			for _, addr := range c.Addrs() {
				if !owners[addr] {
					t.Fatalf("primary %s owns no slots; owners %v", addr, owners)
				}
			}
			// Keys in different slots work through a cluster client.
			for _, k := range []string{"a", "b", "c", "{x}1", "{x}2"} {
				if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
					t.Fatalf("SET %s: %v", k, err)
				}
				if got, err := cc.Get(ctx, k).Result(); err != nil || got != k {
					t.Fatalf("GET %s: got %q, %v; want %q", k, got, err, k)
				}
			}
		})
	}
}

func TestStartClusterBadSize(t *testing.T) {
	// StartCluster fails the test it is given; run it against a recorder.
	r := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		redistest.StartCluster(r, 0)
	}()
	if !strings.Contains(r.msg, "primaries 0") {
		t.Fatalf("StartCluster(0) failed with %q; want a message naming primaries 0", r.msg)
	}
}

func TestRunBenchmark(t *testing.T) {
	s := redistest.Start(t)
	out := redistest.RunBenchmark(t, s.Addr(), "-n", "2000", "-c", "4", "-t", "set,get", "--csv")
	rps, err := redistest.ParseBenchmarkCSV(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"SET", "GET"} {
		if rps[name] <= 0 {
			t.Fatalf("rps[%q] = %v; want > 0 (output %q)", name, rps[name], out)
		}
	}
}

// recorder is a testing.TB whose Fatalf records the message and stops the goroutine's
// current call by panicking, which the caller recovers.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = strings.TrimSpace(fmt.Sprintf(format, args...))
	panic(r)
}
