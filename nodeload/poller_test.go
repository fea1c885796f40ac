package nodeload_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
	var mu sync.Mutex // guards failed, failings and recovered
	failed := map[string]error{}
	failings, recovered := map[string]int{}, map[string]int{}
	listed := cl.Addrs() // what Primaries returns; the test drops one below
	var listedMu sync.Mutex
	p, err := nodeload.New(nodeload.Options{
		Primaries:   func() []string { listedMu.Lock(); defer listedMu.Unlock(); return slices.Clone(listed) },
		Conn:        conn,
		Timeout:     300 * time.Millisecond,
		OnFailing:   func(addr string, err error) { mu.Lock(); failed[addr] = err; failings[addr]++; mu.Unlock() },
		OnRecovered: func(addr string) { mu.Lock(); recovered[addr]++; mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Poll(ctx)
	for addr, st := range p.Nodes() {
		if st.HasLoad || st.Err != nil {
			t.Fatalf("%s after one reading: %+v; want no load (a rate needs two) and no error", addr, st)
		}
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
	loads := map[string]nodeload.Load{}
	for addr, st := range p.Nodes() {
		if st.HasLoad {
			loads[addr] = st.Load
		}
	}
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
	if l := loads[owner]; l.CommandsPerSecond*l.Span.Seconds() < reads || l.CPU <= 0 || l.CPU > l.ProcessCPU+1e-3 { // INFO gives each to the microsecond
		t.Errorf("owner %s: %+v; want at least %d commands over the span, and some CPU, the main thread's no more than the process's", owner, l, reads)
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

	if n := testutil.CollectAndCount(reg, "hotkeyd_redis_main_thread_cpu_seconds_total"); n != 3 {
		t.Errorf("hotkeyd_redis_main_thread_cpu_seconds_total: %d series; want 3 (Redis 7 gives the main thread's CPU)", n)
	}

	// A wedged primary (stopped, as by a long script) and a dead one stay listed, failing,
	// with no load and no counters, and hotkeyd_redis_info_up 0.
	var others []*redistest.Server
	for _, n := range cl.Nodes() {
		if n.Addr() != owner {
			others = append(others, n)
		}
	}
	wedged, dead := others[0], others[1]
	wedged.Pause(t)
	dead.Kill()
	p.Poll(ctx)
	nodes := p.Nodes()
	for _, n := range []*redistest.Server{wedged, dead} {
		st, ok := nodes[n.Addr()]
		if !ok || st.HasLoad || st.Err == nil || !strings.Contains(st.Err.Error(), "INFO") || st.Since.IsZero() {
			t.Errorf("%s down or wedged: %+v (listed %v); want it listed, failing since a time, with an error naming INFO and no load", n.Addr(), st, ok)
		}
	}
	if st := nodes[wedged.Addr()]; st.Err == nil || !strings.Contains(st.Err.Error(), "no answer within 300ms") {
		t.Errorf("wedged %s: error %v; want it to say there was no answer within the timeout", wedged.Addr(), st.Err)
	}
	if st := nodes[owner]; !st.HasLoad || st.Err != nil {
		t.Errorf("owner %s: %+v; want its load", owner, st)
	}
	if n := testutil.CollectAndCount(reg, "hotkeyd_redis_commands_total"); n != 1 {
		t.Errorf("hotkeyd_redis_commands_total with two primaries failing: %d series; want 1", n)
	}
	up := fmt.Sprintf(`
# HELP hotkeyd_redis_info_up 1 if a Redis primary answered the agent's last INFO reading in time, 0 if not (down, or wedged by a long script or command).
# TYPE hotkeyd_redis_info_up gauge
hotkeyd_redis_info_up{primary=%q} %v
hotkeyd_redis_info_up{primary=%q} %v
hotkeyd_redis_info_up{primary=%q} %v
`, sortedUp(map[string]int{owner: 1, wedged.Addr(): 0, dead.Addr(): 0})...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(up), "hotkeyd_redis_info_up"); err != nil {
		t.Error(err)
	}
	p.Poll(ctx) // failing again: no second OnFailing
	mu.Lock()
	if err := failed[dead.Addr()]; err == nil || !strings.Contains(err.Error(), "INFO") || failings[dead.Addr()] != 1 || failings[wedged.Addr()] != 1 {
		t.Errorf("OnFailing for the dead primary %s: %v, %d calls (wedged: %d); want one call each, naming INFO", dead.Addr(), err, failings[dead.Addr()], failings[wedged.Addr()])
	}
	mu.Unlock()
	// The dead one leaves the list (a failover) and is forgotten: were it listed again
	// and answering, it would not be "recovered".
	listedMu.Lock()
	listed = slices.DeleteFunc(listed, func(a string) bool { return a == dead.Addr() })
	listedMu.Unlock()
	p.Poll(ctx)
	if _, ok := p.Nodes()[dead.Addr()]; ok {
		t.Errorf("%s still known after it left the list", dead.Addr())
	}

	// Answering again, the wedged primary is up at once and has a load from its second
	// answer on.
	wedged.Resume(t)
	p.Poll(ctx)
	if st := p.Nodes()[wedged.Addr()]; st.Err != nil || st.HasLoad {
		t.Errorf("%s answering again: %+v; want no error, and no load before a second answer", wedged.Addr(), st)
	}
	p.Poll(ctx)
	if st := p.Nodes()[wedged.Addr()]; st.Err != nil || !st.HasLoad {
		t.Errorf("%s answering twice again: %+v; want its load", wedged.Addr(), st)
	}
	mu.Lock()
	defer mu.Unlock()
	if recovered[wedged.Addr()] != 1 || recovered[owner] != 0 {
		t.Errorf("OnRecovered calls %v; want one, for %s", recovered, wedged.Addr())
	}
}

// sortedUp returns the address, value pairs of up sorted by address, as the collector
// writes them.
func sortedUp(up map[string]int) []any {
	var out []any
	for _, a := range slices.Sorted(maps.Keys(up)) {
		out = append(out, a, up[a])
	}
	return out
}
