package nodeload_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/nodeload"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// TestPollerSeesTheHotPrimary: on a real 3-primary cluster, one key read 20,000 times
// shows as its primary's load — commands per second and CPU far above the other two — in
// the rates and in the exported counters; a primary that dies is forgotten at the next
// poll, with an error naming it.
func TestPollerSeesTheHotPrimary(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	conn := mitigate.NewNodeClients(nil)
	t.Cleanup(func() { conn.Close() })
	var mu sync.Mutex
	failed := map[string]error{}
	p, err := nodeload.New(nodeload.Options{
		Primaries: cl.Addrs,
		Conn:      conn,
		OnError:   func(addr string, err error) { mu.Lock(); failed[addr] = err; mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Poll(ctx)
	if l := p.Loads(); len(l) != 0 {
		t.Fatalf("loads after one reading: %v; want none (a rate needs two)", l)
	}

	const key, reads = "score:match42", 20000
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	owner := ""
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		if err := c.Get(ctx, key).Err(); err == redis.Nil {
			owner = addr // answered, not MOVED: this primary owns the slot
		}
		c.Close()
	}
	if owner == "" {
		t.Fatal("no primary owns", key)
	}
	pipe := rdb.Pipeline()
	for range reads {
		pipe.Get(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	p.Poll(ctx)
	loads := p.Loads()
	if len(loads) != 3 {
		t.Fatalf("loads %v; want the 3 primaries", loads)
	}
	for addr, l := range loads {
		if addr == owner {
			continue
		}
		if hot := loads[owner]; hot.CommandsPerSecond < 10*l.CommandsPerSecond || hot.NetOutputBytesPerSecond < 10*l.NetOutputBytesPerSecond {
			t.Errorf("owner %s: %+v; other %s: %+v; want the owner's commands and output far above", owner, hot, addr, l)
		}
	}
	if l := loads[owner]; l.CommandsPerSecond*l.Span.Seconds() < reads || l.CPU <= 0 {
		t.Errorf("owner %s: %+v; want at least %d commands over the span, and some CPU", owner, l, reads)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(nodeload.NewCollector(func() *nodeload.Poller { return p }))
	if n := testutil.CollectAndCount(reg, "hotkeyd_redis_commands_total"); n != 3 {
		t.Errorf("hotkeyd_redis_commands_total: %d series; want 3", n)
	}
	if probs, err := testutil.CollectAndLint(nodeload.NewCollector(func() *nodeload.Poller { return p })); err != nil || len(probs) != 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
	out, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range out {
		if mf.GetName() != "hotkeyd_redis_commands_total" {
			continue
		}
		for _, m := range mf.Metric {
			if m.Label[0].GetValue() == owner && m.Counter.GetValue() >= reads {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no hotkeyd_redis_commands_total{primary=%q} ≥ %d", owner, reads)
	}

	var dead *redistest.Server
	for _, n := range cl.Nodes() {
		if n.Addr() != owner {
			dead = n
			break
		}
	}
	dead.Kill()
	p.Poll(ctx)
	if _, ok := p.Loads()[dead.Addr()]; ok {
		t.Errorf("loads still hold %s after it died", dead.Addr())
	}
	if n := testutil.CollectAndCount(reg, "hotkeyd_redis_commands_total"); n != 2 {
		t.Errorf("hotkeyd_redis_commands_total after a primary died: %d series; want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if err := failed[dead.Addr()]; err == nil || !strings.Contains(err.Error(), "INFO") {
		t.Errorf("error for the dead primary %s: %v; want one naming INFO", dead.Addr(), err)
	}
}
