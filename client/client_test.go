package client

import (
	"context"
	"errors"
	"fmt"
	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// impl is one kind of go-redis client the shared suite runs against.
type impl struct {
	name  string
	addrs []string
	new   func() redis.UniversalClient
}

// impls starts a standalone redis-server and a 3-primary Redis Cluster.
func impls(t *testing.T) []impl {
	t.Helper()
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t, 3)
	return []impl{
		standalone(srv.Addr()),
		{"cluster", cl.Addrs(), func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		}},
	}
}

// standalone is the impl of go-redis Clients of the redis-server at addr.
func standalone(addr string) impl {
	return impl{"standalone", []string{addr}, func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: addr})
	}}
}

// attach connects a new go-redis client of im to a Client that follows ps, and waits
// for its first plan. Both are closed when the test ends.
func attach(t *testing.T, im impl, ps *planServer, o Options) (redis.UniversalClient, *Client) {
	t.Helper()
	rdb := im.new()
	t.Cleanup(func() { rdb.Close() })
	return rdb, attachTo(t, rdb, ps, o)
}

// attachTo attaches a Client that follows ps (NoReports) to rdb and waits 5 s at most
// for its first plan. The Client is closed when the test ends; rdb is the caller's.
func attachTo(t *testing.T, rdb redis.UniversalClient, ps *planServer, o Options) *Client {
	t.Helper()
	o.Agent = ps.URL()
	o.NoReports = true
	c, err := Attach(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitPlan(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitVersion waits until c holds plan version v.
func waitVersion(t *testing.T, c *Client, v uint64) {
	t.Helper()
	waitFor(t, func() bool { return c.Stats().Plan.Version == v })
}

// suiteTest is one test of a suite, run against every implementation.
type suiteTest struct {
	name string
	run  func(t *testing.T, im impl)
}

// runSuite runs every test against a standalone client and a cluster client.
func runSuite(t *testing.T, tests []suiteTest) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, im) })
			}
		})
	}
}

// TestSuite runs the same tests against a standalone client and a cluster client.
func TestSuite(t *testing.T) {
	runSuite(t, []suiteTest{
		{"L1Hits", testL1Hits},
		{"Stampede", testStampede},
		{"FailedLoadNotCached", testFailedLoadNotCached},
		{"InvalidateOnWrite", testInvalidateOnWrite},
		{"LeaseExpiry", testLeaseExpiry},
		{"CopiesReadWrite", testCopiesReadWrite},
		{"Unmirrored", testUnmirrored},
		{"WriteOutcomeUnknown", testWriteOutcomeUnknown},
		{"PlainCommands", testPlainCommands},
		{"CloseLeaksNothing", testCloseLeaksNothing},
	})
}

// testL1Hits: with an L1 entry, 200 GETs of the key cost Redis one read, and all return
// the value.
func testL1Hits(t *testing.T, im impl) {
	ps := startPlanServer(t)
	ps.publish(l1Entry("l1:hot", 10*time.Second, time.Minute))
	reg := prometheus.NewRegistry()
	rdb, c := attach(t, im, ps, Options{Registry: reg})
	ctx := context.Background()
	if err := rdb.Set(ctx, "l1:hot", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := redisGets(t, im.addrs...)
	for i := range 200 {
		if v, err := rdb.Get(ctx, "l1:hot").Result(); err != nil || v != "v" {
			t.Fatalf("GET %d: %q, %v; want v", i, v, err)
		}
	}
	if got := redisGets(t, im.addrs...) - before; got != 1 {
		t.Errorf("Redis GETs %d for 200 reads with L1; want 1", got)
	}
	if st := c.Stats().L1; st.Hits != 199 || st.Misses != 1 || st.Loads != 1 {
		t.Errorf("L1 stats %+v; want 199 hits, 1 miss, 1 load", st)
	}
	if got := testutil.ToFloat64(newCollectorView(reg, "hotkeyd_client_cache_hits_total", "l1")); got != 199 {
		t.Errorf("hotkeyd_client_cache_hits_total{cache=l1} %v; want 199", got)
	}
	// A key the plan does not name is not cached.
	rdb.Set(ctx, "l1:cold", "c", 0)
	before = redisGets(t, im.addrs...)
	for range 10 {
		rdb.Get(ctx, "l1:cold")
	}
	if got := redisGets(t, im.addrs...) - before; got != 10 {
		t.Errorf("Redis GETs %d for 10 reads of a key without L1; want 10", got)
	}
}

// newCollectorView gathers one series from reg, for testutil.ToFloat64.
func newCollectorView(reg *prometheus.Registry, name, cache string) prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == cache {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "x", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
				}
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// testStampede: 50 concurrent misses of an L1 key cost Redis one read.
func testStampede(t *testing.T, im impl) {
	ps := startPlanServer(t)
	ps.publish(l1Entry("l1:stampede", 10*time.Second, time.Minute))
	rdb, c := attach(t, im, ps, Options{})
	ctx := context.Background()
	if err := rdb.Set(ctx, "l1:stampede", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := redisGets(t, im.addrs...)
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, 50)
	for i := range errs {
		wg.Go(func() {
			<-start
			v, err := rdb.Get(ctx, "l1:stampede").Result()
			if err == nil && v != "v" {
				err = fmt.Errorf("got %q; want v", v)
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := redisGets(t, im.addrs...) - before; got != 1 {
		t.Errorf("Redis GETs %d for 50 concurrent misses; want 1", got)
	}
	st := c.Stats().L1
	t.Logf("50 concurrent GETs: %d misses (%d shared one load), %d hits", st.Misses, st.Shared, st.Hits)
}

// testFailedLoadNotCached: a read Redis refuses (WRONGTYPE) is an error for the caller,
// not cached: each read tries Redis again.
func testFailedLoadNotCached(t *testing.T, im impl) {
	ps := startPlanServer(t)
	ps.publish(l1Entry("l1:hash", 10*time.Second, time.Minute))
	rdb, c := attach(t, im, ps, Options{})
	ctx := context.Background()
	rdb.HSet(ctx, "l1:hash", "f", "v")
	before := redisGets(t, im.addrs...)
	for range 3 {
		if err := rdb.Get(ctx, "l1:hash").Err(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("GET of a hash: %v; want WRONGTYPE", err)
		}
	}
	if got := redisGets(t, im.addrs...) - before; got != 3 {
		t.Errorf("Redis GETs %d for 3 failing reads; want 3 (errors are not cached)", got)
	}
	if st := c.Stats().L1; st.LoadErrors != 3 || st.Entries != 0 {
		t.Errorf("L1 stats %+v; want 3 load errors, no entry", st)
	}
}

// testInvalidateOnWrite: a write through the client drops the L1 value at once.
func testInvalidateOnWrite(t *testing.T, im impl) {
	ps := startPlanServer(t)
	ps.publish(l1Entry("{i}l1:inv", 10*time.Second, time.Minute))
	rdb, c := attach(t, im, ps, Options{})
	ctx := context.Background()
	get := func() string {
		v, err := rdb.Get(ctx, "{i}l1:inv").Result()
		if err == redis.Nil {
			return "<nil>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	steps := []struct {
		write func() error
		want  string
	}{
		{func() error { return rdb.Set(ctx, "{i}l1:inv", "1", 0).Err() }, "1"},
		{func() error { return rdb.Set(ctx, "{i}l1:inv", "2", 0).Err() }, "2"},
		{func() error { return rdb.Incr(ctx, "{i}l1:inv").Err() }, "3"},
		{func() error { return rdb.Append(ctx, "{i}l1:inv", "x").Err() }, "3x"},
		{func() error { return rdb.Del(ctx, "{i}l1:inv", "{i}other").Err() }, "<nil>"},
		{func() error { return rdb.Do(ctx, "set", "{i}l1:inv", "do").Err() }, "do"},
		{func() error { // a command that writes the key from another
			if err := rdb.Set(ctx, "{i}src", "copied", 0).Err(); err != nil {
				return err
			}
			return rdb.Do(ctx, "copy", "{i}src", "{i}l1:inv", "replace").Err()
		}, "copied"},
		{func() error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "{i}l1:inv", "piped", 0); return nil })
			return err
		}, "piped"},
	}
	for i, s := range steps {
		get() // cache the current value
		get()
		if err := s.write(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := get(); got != s.want {
			t.Fatalf("step %d: GET after the write returned %q; want %q", i, got, s.want)
		}
	}
	if st := c.Stats().L1; st.Invalidations == 0 || st.Hits == 0 {
		t.Errorf("L1 stats %+v; want hits and invalidations", st)
	}
}

// testLeaseExpiry: when an entry's lease runs out (no renewal), the key is read from
// Redis again; a new plan brings it back. The clock is the test's.
func testLeaseExpiry(t *testing.T, im impl) {
	clock := newFakeClock()
	ps := startPlanServer(t)
	ps.publish(l1Entry("l1:lease", time.Second, 30*time.Second))
	rdb, c := attach(t, im, ps, Options{Now: clock.Now})
	ctx := context.Background()
	rdb.Set(ctx, "l1:lease", "v", 0)
	reads := func(n int) int {
		before := redisGets(t, im.addrs...)
		for range n {
			if v, err := rdb.Get(ctx, "l1:lease").Result(); err != nil || v != "v" {
				t.Fatalf("GET: %q, %v", v, err)
			}
		}
		return redisGets(t, im.addrs...) - before
	}
	if got := reads(20); got != 1 {
		t.Fatalf("within the lease: %d Redis GETs for 20 reads; want 1", got)
	}
	clock.Add(30 * time.Second)
	if got := reads(20); got != 20 {
		t.Fatalf("after the lease: %d Redis GETs for 20 reads; want 20 (plain Redis)", got)
	}
	if st := c.Stats().Plan; st.Entries != 0 {
		t.Errorf("plan stats %+v; want no live entry", st)
	}
	ps.publish(l1Entry("l1:lease", time.Second, 30*time.Second))
	waitVersion(t, c, 3)
	if got := reads(20); got != 1 {
		t.Fatalf("after a renewal: %d Redis GETs for 20 reads; want 1", got)
	}
}

// testCopiesReadWrite: reads of a split key go to its copies; writes reach the original
// and every copy, whatever the command.
func testCopiesReadWrite(t *testing.T, im impl) {
	ps := startPlanServer(t)
	key := "cp:score"
	names := copyNames(key, 3)
	ps.publish(copiesEntry(key, names, time.Minute))
	rdb, c := attach(t, im, ps, Options{Rand: seeded(3)})
	ctx := context.Background()
	plain := im.new()
	defer plain.Close()
	check := func(step string, want string) {
		t.Helper()
		for _, n := range append([]string{key}, names...) {
			v, err := plain.Get(ctx, n).Result()
			if err == redis.Nil {
				v = "<nil>"
			} else if err != nil {
				t.Fatalf("%s: GET %s: %v", step, n, err)
			}
			if v != want {
				t.Fatalf("%s: %s holds %q; want %q", step, n, v, want)
			}
		}
		for range 10 {
			v, err := rdb.Get(ctx, key).Result()
			if err == redis.Nil {
				v = "<nil>"
			}
			if v != want {
				t.Fatalf("%s: GET through the SDK returned %q; want %q", step, v, want)
			}
		}
	}
	steps := []struct {
		name  string
		write func() error
		want  string
	}{
		{"SET", func() error { return rdb.Set(ctx, key, "10", 0).Err() }, "10"},
		{"INCR", func() error { return rdb.Incr(ctx, key).Err() }, "11"},
		{"INCRBY", func() error { return rdb.IncrBy(ctx, key, 5).Err() }, "16"},
		{"APPEND", func() error { return rdb.Append(ctx, key, "a").Err() }, "16a"},
		{"SET EX", func() error { return rdb.Set(ctx, key, "ex", time.Minute).Err() }, "ex"},
		{"pipeline SET", func() error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, key, "piped", 0); return nil })
			return err
		}, "piped"},
		{"DEL", func() error { return rdb.Del(ctx, key).Err() }, "<nil>"},
		{"SETNX", func() error { return rdb.SetNX(ctx, key, "nx", 0).Err() }, "nx"},
	}
	for _, s := range steps {
		if err := s.write(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name, s.want)
	}
	// The TTL is copied too.
	for _, n := range names {
		if ttl := plain.PTTL(ctx, n).Val(); ttl > 0 {
			t.Errorf("copy %s has TTL %v; want none, like the original", n, ttl)
		}
	}
	rdb.Expire(ctx, key, time.Hour)
	for _, n := range names {
		if ttl := plain.TTL(ctx, n).Val(); ttl < 59*time.Minute {
			t.Errorf("after EXPIRE: copy %s TTL %v; want about 1h", n, ttl)
		}
	}
	st := c.Stats().Copies
	if st.Reads == 0 || st.Mirrors != uint64(len(steps))+1 || st.MirrorErrors != 0 {
		t.Errorf("copy stats %+v; want reads, %d mirrors, no errors", st, len(steps)+1)
	}
	// A hash: HGET reads a copy.
	rdb.Del(ctx, key)
	rdb.HSet(ctx, key, "f", "hv")
	for _, n := range names {
		if v := plain.HGet(ctx, n, "f").Val(); v != "hv" {
			t.Errorf("copy %s field f = %q; want hv", n, v)
		}
	}
	if v := rdb.HGet(ctx, key, "f").Val(); v != "hv" {
		t.Errorf("HGET through the SDK: %q; want hv", v)
	}
	rdb.Del(ctx, key)
}

// copyNames returns n copy names of key in the agent's format, on different slots.
func copyNames(key string, n int) []string {
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("{hk:copy%d:%d}%s", i, 40900+i*7, key))
	}
	return names
}

// testUnmirrored: a multi-key write touching a split key goes to the original only; the
// client reads the key from the original until a repair has copied the original to the
// copies, then from the copies again, with no new plan.
func testUnmirrored(t *testing.T, im impl) {
	ps := startPlanServer(t)
	key := "{u}cp:multi" // the hash tag keeps the MSET below in one slot
	names := copyNames(key, 2)
	ps.publish(copiesEntry(key, names, time.Minute))
	rdb, c := attach(t, im, ps, Options{})
	ctx := context.Background()
	rdb.Set(ctx, key, "1", 0) // original and copies hold 1
	if err := rdb.MSet(ctx, key, "2", "{u}other", "x").Err(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if v := rdb.Get(ctx, key).Val(); v != "2" {
			t.Fatalf("GET after an unmirrored write returned %q; want 2 (from the original)", v)
		}
	}
	waitFor(t, func() bool { return c.Stats().Copies.Repairs == 1 })
	plain := im.new()
	defer plain.Close()
	for _, name := range names {
		if v := plain.Get(ctx, name).Val(); v != "2" {
			t.Fatalf("copy %s after the repair holds %q; want 2", name, v)
		}
	}
	before := c.Stats().Copies.Reads
	for range 10 {
		if v := rdb.Get(ctx, key).Val(); v != "2" {
			t.Fatalf("GET after the repair returned %q; want 2", v)
		}
	}
	if st := c.Stats().Copies; st.Unmirrored != 1 || st.Reads-before != 10 {
		t.Errorf("copy stats %+v, %d copy reads after the repair; want 1 unmirrored, 10 copy reads", st, st.Reads-before)
	}
	rdb.Del(ctx, key, "{u}other")
}

// testPlainCommands: keys the plan does not name, pipelines and transactions behave as
// plain Redis with a plan in place.
func testPlainCommands(t *testing.T, im impl) {
	ps := startPlanServer(t)
	ps.publish(l1Entry("{p}l1", time.Second, time.Minute), copiesEntry("{p}split", copyNames("{p}split", 2), time.Minute))
	rdb, _ := attach(t, im, ps, Options{})
	ctx := context.Background()
	if err := rdb.Set(ctx, "{p}a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "{p}a").Val(); v != "1" {
		t.Errorf("GET {p}a = %q; want 1", v)
	}
	if v := rdb.MGet(ctx, "{p}a", "{p}l1").Val(); len(v) != 2 || v[0] != "1" || v[1] != nil {
		t.Errorf("MGET = %v; want [1 <nil>]", v)
	}
	cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "{p}a")
		p.Get(ctx, "{p}a")
		return nil
	})
	if err != nil || cmds[1].(*redis.StringCmd).Val() != "2" {
		t.Errorf("transaction: %v, %v; want INCR then GET 2", cmds, err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Error(err)
	}
	rdb.Del(ctx, "{p}a")
}

// testCloseLeaksNothing: Close stops every goroutine the client started, even with loads
// and a long-poll in flight.
func testCloseLeaksNothing(t *testing.T, im impl) {
	ps := startPlanServer(t)
	ps.publish(l1Entry("l1:leak", time.Second, time.Minute))
	rdb := im.new()
	defer rdb.Close()
	ctx := context.Background()
	c, base := attachCounted(t, rdb, Options{Agent: ps.URL(), Source: "leak"})
	for range 20 {
		rdb.Get(ctx, "l1:leak")
		c.Get(ctx, "aside", func(context.Context) ([]byte, error) { return []byte("v"), nil })
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	leaktest.Wait(t, base)
	// The hooks pass commands through after Close.
	if err := rdb.Set(ctx, "l1:leak", "after", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "l1:leak").Val(); v != "after" {
		t.Errorf("GET after Close = %q; want after", v)
	}
	rdb.Del(ctx, "l1:leak")
}
