package client

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

func batchedEntry(key string, every, lease time.Duration) mitigate.Entry {
	return mitigate.Entry{Key: key, Kind: mitigate.BatchedCounter, Mode: mitigate.Enforce, Reason: "test",
		Since: planNow.Add(-time.Second), Expires: planNow.Add(lease), FlushInterval: mitigate.Duration(every)}
}

func shardedEntry(key string, subs []mitigate.Node, lease time.Duration) mitigate.Entry {
	return mitigate.Entry{Key: key, Kind: mitigate.ShardedCounter, Mode: mitigate.Enforce, Reason: "test",
		Since: planNow.Add(-time.Second), Expires: planNow.Add(lease), SubCounters: subs}
}

// topology returns the topology of im's Redis: a real one for a cluster.
func topology(t *testing.T, im impl) *mitigate.Topology {
	t.Helper()
	if im.name == "standalone" {
		return mitigate.StandaloneTopology(im.addrs[0])
	}
	topo, err := mitigate.NewTopology(context.Background(), mitigate.TopologyOptions{Seeds: im.addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	return topo
}

// leftovers returns the keys of the sharded-counter protocol left on any primary:
// sub-counters and stashes of folds.
func leftovers(t *testing.T, im impl) []string {
	t.Helper()
	return keysMatching(t, im, "{hk:sub*", "{hk:t*}stash:*")
}

// keysMatching returns the keys matching any of patterns on any primary.
func keysMatching(t *testing.T, im impl, patterns ...string) []string {
	t.Helper()
	var out []string
	ctx := context.Background()
	for _, a := range im.addrs {
		node := redis.NewClient(&redis.Options{Addr: a})
		for _, pat := range patterns {
			keys, err := node.Keys(ctx, pat).Result()
			if err != nil {
				t.Fatalf("KEYS %s on %s: %v", pat, a, err)
			}
			out = append(out, keys...)
		}
		node.Close()
	}
	return out
}

// TestCounterSuite runs the Counter's tests against a standalone and a cluster client.
func TestCounterSuite(t *testing.T) {
	runSuite(t, []suiteTest{
		{"ExactAcrossPlans", testCounterExactAcrossPlans},
		{"Batched", testCounterBatched},
		{"FlushErrors", testCounterFlushErrors},
		{"CloseLeaksNothing", testCounterCloseLeaksNothing},
		{"AgentAway", testCounterAgentAway},
	})
}

// testCounterExactAcrossPlans is the proof: 8 goroutines × 2,000 Adds of 1 while
// the served plan goes none → batched → sharded → batched+sharded → none → batched →
// sharded → none, a real executor applying each plan (folding the sub-counters back when
// sharding ends). Each switch is published when half of the increments allowed under the
// previous plan are done, so it lands while writers run, and the next share of
// increments is released only once the client holds the new plan, so every path is taken.
// Readers check throughout that Get is at least what was acknowledged before it and at
// most what was started before it returned. After Close and the executor's final fold
// the key holds exactly 16,000 and no sub-counter or stash is left.
func testCounterExactAcrossPlans(t *testing.T, im impl) {
	const (
		writers = 8
		per     = 2000
		total   = writers * per
		key     = "likes:post7"
	)
	ctx := context.Background()
	topo := topology(t, im)
	subs, err := topo.Names(key, 3, mitigate.ShardedCounter)
	if err != nil {
		t.Fatal(err)
	}
	admin := im.new()
	defer admin.Close()
	admin.Del(ctx, key)
	exec, err := mitigate.NewExecutor(mitigate.ExecutorOptions{Redis: admin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Close(context.Background()) })
	ps := startPlanServer(t)
	_, c := attach(t, im, ps, Options{Rand: seeded(11)})
	counter := c.Counter()

	every := 5 * time.Millisecond
	plans := [][]mitigate.Entry{
		nil,
		{batchedEntry(key, every, time.Minute)},
		{shardedEntry(key, subs, time.Minute)},
		{batchedEntry(key, every, time.Minute), shardedEntry(key, subs, time.Minute)},
		nil,
		{batchedEntry(key, every, time.Minute)},
		{shardedEntry(key, subs, time.Minute)},
		nil,
	}
	phases := len(plans)
	gates := make([]chan struct{}, phases)
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	close(gates[0])

	var started, acked atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for j := range per {
				<-gates[j*phases/per]
				started.Add(1)
				if err := counter.Add(ctx, key, 1); err != nil {
					t.Errorf("Add: %v", err)
					return
				}
				acked.Add(1)
			}
		})
	}
	stopReaders := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				lo := acked.Load()
				v, err := counter.Get(ctx, key)
				hi := started.Load()
				if err != nil {
					t.Errorf("Get: %v", err)
					return
				}
				reads.Add(1)
				if v < lo || v > hi {
					t.Errorf("Get = %d; want between %d (acknowledged before) and %d (started before it returned)", v, lo, hi)
				}
			}
		})
	}
	ps.mu.Lock()
	version := ps.plan.Version
	ps.mu.Unlock()
	for k := 1; k < phases; k++ {
		half := int64((2*k - 1) * total / (2 * phases))
		for acked.Load() < half {
			time.Sleep(50 * time.Microsecond)
		}
		ps.publish(plans[k]...)
		version++
		p := mitigate.Plan{Version: version, Generated: planNow, Primaries: 3, Entries: plans[k]}
		if err := exec.Apply(ctx, p); err != nil {
			t.Fatalf("executor Apply of plan %d: %v", k, err)
		}
		waitVersion(t, c, version)
		close(gates[k])
	}
	wg.Wait()
	close(stopReaders)
	readers.Wait()

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := exec.Refresh(ctx); err != nil { // folds what stale writers added after the end
		t.Fatal(err)
	}
	if err := exec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := admin.Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	st := counter.Stats()
	t.Logf("%d Adds (plain %d, sharded %d, batched %d), %d flushes, %d Gets; final %d", acked.Load(),
		st.Plain, st.Sharded, st.Batched, st.Flushes, reads.Load(), got)
	if got != total {
		t.Errorf("counter = %d after Close and the final fold; want %d", got, total)
	}
	if left := leftovers(t, im); len(left) > 0 {
		t.Errorf("keys left behind: %q; want none", left)
	}
	if st.Plain == 0 || st.Sharded == 0 || st.Batched == 0 || st.Flushes == 0 {
		t.Errorf("stats %+v; want every path taken", st)
	}
	if st.FlushErrors != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v; want no flush errors nor drops", st)
	}
	if reads.Load() < 10 {
		t.Errorf("only %d Gets during the run; want at least 10", reads.Load())
	}
	admin.Del(ctx, key)
}

// testCounterBatched: under a batched entry, Adds cost Redis nothing until the flush,
// which sends one INCRBY per key however many Adds there were; Get adds the pending sum
// to Redis's value; Close flushes what is pending.
func testCounterBatched(t *testing.T, im impl) {
	ctx := context.Background()
	ps := startPlanServer(t)
	ps.publish(batchedEntry("views:a", time.Minute, time.Minute), batchedEntry("views:b", 20*time.Millisecond, time.Minute))
	rdb, c := attach(t, im, ps, Options{})
	del(ctx, rdb, "views:a", "views:b", "views:plain")
	rdb.Set(ctx, "views:a", "100", 0)
	counter := c.Counter()
	before := incrbys(t, im.addrs...)
	for range 500 {
		counter.Add(ctx, "views:a", 2)
		counter.Add(ctx, "views:b", 1)
	}
	if err := counter.Add(ctx, "views:plain", 7); err != nil {
		t.Fatal(err)
	}
	if v, err := counter.Get(ctx, "views:a"); err != nil || v != 1100 {
		t.Errorf("Get(views:a) = %d, %v; want 1100 (100 in Redis + 1000 pending)", v, err)
	}
	if v := rdb.Get(ctx, "views:a").Val(); v != "100" {
		t.Errorf("views:a in Redis = %q before its flush; want 100", v)
	}
	waitFor(t, func() bool { return rdb.Get(ctx, "views:b").Val() == "500" })
	if v, err := counter.Get(ctx, "views:b"); err != nil || v != 500 {
		t.Errorf("Get(views:b) = %d, %v; want 500", v, err)
	}
	if v := rdb.Get(ctx, "views:plain").Val(); v != "7" {
		t.Errorf("views:plain = %q; want 7 (plain INCRBY)", v)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "views:a").Val(); v != "1100" {
		t.Errorf("views:a after Close = %q; want 1100", v)
	}
	// One INCRBY per flush (views:a once, at Close; views:b once per 20ms it had Adds)
	// and one for the plain Add.
	st := counter.Stats()
	if got := incrbys(t, im.addrs...) - before; got != int(st.Flushes)+1 || st.Flushes < 2 || st.Batched != 1000 {
		t.Errorf("Redis INCRBYs %d for 1,001 Adds, stats %+v; want one per flush plus one", got, st)
	}
	// After Close, Adds are plain.
	if err := counter.Add(ctx, "views:a", 1); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "views:a").Val(); v != "1101" {
		t.Errorf("views:a after an Add after Close = %q; want 1101", v)
	}
	del(ctx, rdb, "views:a", "views:b", "views:plain")
}

// del deletes keys one by one (they may be in different slots).
func del(ctx context.Context, rdb redis.UniversalClient, keys ...string) {
	for _, k := range keys {
		rdb.Del(ctx, k)
	}
}

// testCounterFlushErrors: a flush Redis refuses (the key holds a string that is not an
// integer) keeps the sum and retries it; after MaxFlushTries it is dropped, logged and
// counted — never lost silently. A sum that fails at Close is reported by Close.
func testCounterFlushErrors(t *testing.T, im impl) {
	ctx := context.Background()
	ps := startPlanServer(t)
	ps.publish(batchedEntry("bad:a", 5*time.Millisecond, time.Minute), batchedEntry("bad:b", time.Minute, time.Minute))
	rdb, c := attach(t, im, ps, Options{})
	rdb.Set(ctx, "bad:a", "not a number", 0)
	rdb.Set(ctx, "bad:b", "not a number", 0)
	counter := c.Counter()
	for range 10 {
		counter.Add(ctx, "bad:a", 3)
	}
	waitFor(t, func() bool { return counter.Stats().DroppedAdds == 10 })
	st := counter.Stats()
	if st.Dropped != 30 || st.FlushErrors < MaxFlushTries || st.Uncertain != 0 {
		t.Errorf("stats %+v; want 30 dropped after %d refused flushes, none uncertain", st, MaxFlushTries)
	}
	counter.Add(ctx, "bad:b", 5)
	err := c.Close()
	if err == nil {
		t.Fatal("Close = nil with a sum Redis refuses; want an error")
	}
	t.Logf("Close: %v", err)
	if st := counter.Stats(); st.Dropped != 35 || st.DroppedAdds != 11 {
		t.Errorf("stats %+v; want 35 dropped in 11 Adds", st)
	}
	del(ctx, rdb, "bad:a", "bad:b")
}

// testCounterCloseLeaksNothing: the flusher stops at Close.
func testCounterCloseLeaksNothing(t *testing.T, im impl) {
	ps := startPlanServer(t)
	ps.publish(batchedEntry("leak:n", 10*time.Millisecond, time.Minute))
	rdb := im.new()
	defer rdb.Close()
	ctx := context.Background()
	c, base := attachCounted(t, rdb, Options{Agent: ps.URL(), NoReports: true})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Counter().Add(ctx, "leak:n", 1)
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	leaktest.Wait(t, base)
	if v := rdb.Get(ctx, "leak:n").Val(); v != "400" {
		t.Errorf("leak:n = %q after Close; want 400", v)
	}
	rdb.Del(ctx, "leak:n")
}

// TestCounterFailOpen: with the agent away the Counter is plain INCRBY, and Add returns
// Redis's errors on that path.
func TestCounterFailOpen(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: closedTCP(t), MaxRetries: -1})
	defer rdb.Close()
	c, err := Attach(rdb, Options{Agent: "http://" + closedTCP(t), NoReports: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Counter().Add(context.Background(), "k", 1)
	if err == nil {
		t.Fatal("Add with Redis down = nil; want its error")
	}
	if st := c.Counter().Stats(); st.Plain != 1 {
		t.Errorf("stats %+v; want 1 plain Add", st)
	}
}

// incrbys returns how many INCRBYs the servers at addrs have executed, summed.
func incrbys(t *testing.T, addrs ...string) int {
	t.Helper()
	return commandCalls(t, "incrby", addrs...)
}

// commandCalls returns the calls of a command on the servers at addrs, summed, from
// INFO commandstats.
func commandCalls(t testing.TB, name string, addrs ...string) int {
	t.Helper()
	n := 0
	for _, a := range addrs {
		node := redis.NewClient(&redis.Options{Addr: a})
		out, err := node.Info(context.Background(), "commandstats").Result()
		node.Close()
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", a, err)
		}
		var calls int
		for line := range strings.Lines(out) {
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "cmdstat_"+name+":calls=%d", &calls); err == nil {
				n += calls
			}
		}
	}
	return n
}

// TestCounterBatchedOverflow: batched Adds whose sum would overflow an int64 must not
// wrap around into a negative INCRBY. Plain INCRBY fails with Redis's overflow error and
// leaves the counter as it was; the batched path may fail later (a dropped sum, reported
// by Close) but never turns a large positive counter negative.
func TestCounterBatchedOverflow(t *testing.T) {
	srv := redistest.Start(t)
	im := standalone(srv.Addr())
	ctx := context.Background()
	ps := startPlanServer(t)
	ps.publish(batchedEntry("ovf", time.Minute, time.Minute))
	rdb, c := attach(t, im, ps, Options{})
	counter := c.Counter()
	for _, n := range []int64{math.MaxInt64, 1} {
		if err := counter.Add(ctx, "ovf", n); err != nil {
			t.Logf("Add(%d): %v", n, err)
		}
	}
	if v, err := counter.Get(ctx, "ovf"); err == nil && v < 0 {
		t.Errorf("Get(ovf) = %d after adding MaxInt64 and 1; want no wrap-around", v)
	}
	err := c.Close()
	t.Logf("Close: %v", err)
	v, gerr := rdb.Get(ctx, "ovf").Int64()
	if gerr != nil || v < 0 {
		t.Errorf("ovf in Redis = %d, %v after adding MaxInt64 and 1; want no wrap-around to a negative value", v, gerr)
	}
}

// testCounterAgentAway: the agent goes away while a counter is sharded and stays away
// past the client's lease; nothing folds the sub-counters. Get must still count them (the
// value is there, in Redis), in this process and in one that never held the plan, and Add
// must land in the key. When an agent is back, its Recover folds the sub-counters, and
// one grace period later a round takes them off the key's list: Get then reads the key
// alone, and the value is exact throughout.
func testCounterAgentAway(t *testing.T, im impl) {
	const key = "away:likes"
	ctx := context.Background()
	subs, err := topology(t, im).Names(key, 3, mitigate.ShardedCounter)
	if err != nil {
		t.Fatal(err)
	}
	admin := im.new()
	defer admin.Close()
	listed := func() []string {
		t.Helper()
		return keysMatching(t, im, "{hk:t*}subs:"+key)
	}
	clean := func() {
		admin.Del(ctx, key)
		for _, s := range subs {
			admin.Del(ctx, s.Name)
		}
		for _, l := range listed() {
			admin.Del(ctx, l)
		}
	}
	clean()
	t.Cleanup(clean)
	clock := newFakeClock()
	ps := startPlanServer(t)
	const lease = time.Minute
	ps.publish(shardedEntry(key, subs, lease))
	_, c := attach(t, im, ps, Options{Rand: seeded(3), Now: clock.Now})
	waitVersion(t, c, 2)
	// A process that never holds the plan: its agent has none.
	_, fresh := attach(t, im, startPlanServer(t), Options{})
	counter := c.Counter()
	get := func(when string, want int64) {
		t.Helper()
		for _, k := range []*Counter{counter, fresh.Counter()} {
			if got, err := k.Get(ctx, key); err != nil || got != want {
				t.Fatalf("Get %s, by the process that held the plan (%v): got %d, %v; want %d", when, k == counter, got, err, want)
			}
		}
	}
	for range 10 {
		if err := counter.Add(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := counter.Stats(); st.Sharded != 10 {
		t.Fatalf("stats %+v; want 10 sharded Adds", st)
	}
	if n := len(listed()); n != 1 {
		t.Fatalf("lists of %s's sub-counters: %d; want 1", key, n)
	}
	get("while sharded", 10)

	// The agent goes away, and with it the folds; the lease and the grace after it pass.
	ps.fail(http.StatusServiceUnavailable, nil)
	waitFor(t, func() bool { return c.Stats().Plan.Errors > 0 })
	clock.Add(2*lease + time.Second)
	get("with the agent away past the lease and the grace", 10)
	if err := counter.Add(ctx, key, 5); err != nil {
		t.Fatal(err)
	}
	if st := counter.Stats(); st.Plain != 1 {
		t.Fatalf("stats %+v; want 1 plain Add after the lease", st)
	}
	get("after a plain Add", 15)

	// An agent comes back (a restart) with a plan without the entry; it has not folded yet.
	ps.fail(0, nil)
	ps.publish()
	waitVersion(t, c, 3)
	get("with the entry ended, before the fold", 15)

	// The new agent's Recover folds the sub-counters; they stay listed for a grace period.
	eclock := newFakeClock()
	exec, err := mitigate.NewExecutor(mitigate.ExecutorOptions{Redis: admin, Now: eclock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	get("after the fold", 15)
	if n := len(listed()); n != 1 {
		t.Fatalf("lists of %s's sub-counters right after the fold: %d; want 1", key, n)
	}
	eclock.Add(mitigate.DefaultLease + time.Second)
	if err := exec.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if l := listed(); len(l) != 0 {
		t.Errorf("lists of %s's sub-counters one grace period after the fold: %q; want none", key, l)
	}
	get("after the sub-counters left the list", 15)
	if err := exec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := admin.Get(ctx, key).Int64(); err != nil || v != 15 {
		t.Errorf("GET %s: got %d, %v; want 15", key, v, err)
	}
}

// TestCounterGetSampledAsRead: a Get reports one read of the counter's key, whether the
// key is sharded or not, and nothing of the script that reads the key and its list of
// sub-counters, which the hook would take for a write of both.
func TestCounterGetSampledAsRead(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	const key = "sampled:likes"
	subs := []mitigate.Node{{Name: "{hk:sub1:1}" + key}, {Name: "{hk:sub2:1}" + key}}
	ps.publish(shardedEntry(key, subs, time.Minute))
	c, rec := attachSampled(t, srv.Addr(), ps)
	waitVersion(t, c, 2)
	ctx := context.Background()
	for _, k := range []string{key, "plain:likes"} {
		if _, err := c.Counter().Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil { // sends what is pending
		t.Fatal(err)
	}
	got := rec.wait(t, 2)
	slices.Sort(got)
	if want := []string{"app read plain:likes", "app read " + key}; !slices.Equal(got, want) {
		t.Errorf("samples of two Gets: %q; want %q", got, want)
	}
}

// TestCounterListFails: when a sub-counter cannot be listed (here the list's name holds a
// string, so SADD fails), Add increments the key itself, where every reader finds it,
// rather than a sub-counter no reader would know of.
func TestCounterListFails(t *testing.T) {
	srv := redistest.Start(t)
	im := standalone(srv.Addr())
	const key = "unlisted:likes"
	ctx := context.Background()
	subs, err := topology(t, im).Names(key, 2, mitigate.ShardedCounter)
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	ps := startPlanServer(t)
	ps.publish(shardedEntry(key, subs, 10*time.Minute))
	rdb, c := attach(t, im, ps, Options{Rand: seeded(1), Now: clock.Now})
	waitVersion(t, c, 2)
	counter := c.Counter()
	if err := counter.Add(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	lists := keysMatching(t, im, "{hk:t*}subs:"+key)
	if len(lists) != 1 {
		t.Fatalf("lists of %s: %q; want 1", key, lists)
	}
	if err := rdb.Set(ctx, lists[0], "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Add(mitigate.ListRenewal + time.Second) // the listing is renewed at the next Add
	if err := counter.Add(ctx, key, 5); err != nil {
		t.Fatalf("Add with the list unwritable: %v; want the key incremented instead", err)
	}
	if st := counter.Stats(); st.Sharded != 1 || st.Plain != 1 {
		t.Errorf("stats %+v; want 1 sharded Add and 1 plain", st)
	}
	if v, err := rdb.Get(ctx, key).Int64(); err != nil || v != 5 {
		t.Errorf("GET %s: %d, %v; want 5, the Add that could not list its sub-counter", key, v, err)
	}
	// A listing that failed is not tried again by every Add (one that waits for a lagging
	// replica takes up to mitigate.ReplicaWait): for listRetry, Adds increment the key.
	scripts := func() int { return commandCalls(t, "evalsha", srv.Addr()) + commandCalls(t, "eval", srv.Addr()) }
	before := scripts()
	for range 3 {
		if err := counter.Add(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := scripts() - before; n != 0 {
		t.Errorf("%d listing scripts for 3 Adds right after a failed listing; want 0", n)
	}
	clock.Add(listRetry)
	if err := counter.Add(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if n := scripts() - before; n != 1 {
		t.Errorf("%d listing scripts after listRetry; want 1, the listing tried again", n)
	}
	if v, err := rdb.Get(ctx, key).Int64(); err != nil || v != 9 {
		t.Errorf("GET %s: %d, %v; want 9, every Add on the key", key, v, err)
	}
}

// TestCounterGetFromL1: with an L1 entry for the counter and no sharded_counter entry, Get
// is a GET that the L1 answers: a change made behind the client's back shows only once
// the cached value has expired, as for any key the plan caches.
func TestCounterGetFromL1(t *testing.T) {
	srv := redistest.Start(t)
	im := standalone(srv.Addr())
	const key = "cached:views"
	ctx := context.Background()
	ps := startPlanServer(t)
	ps.publish(l1Entry(key, time.Minute, 10*time.Minute))
	_, c := attach(t, im, ps, Options{})
	waitVersion(t, c, 2)
	admin := im.new()
	defer admin.Close()
	if err := admin.Set(ctx, key, 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Counter().Get(ctx, key); err != nil || v != 7 {
		t.Fatalf("first Get: %d, %v; want 7", v, err)
	}
	if err := admin.Set(ctx, key, 9, 0).Err(); err != nil { // not through this client: no invalidation
		t.Fatal(err)
	}
	if v, err := c.Counter().Get(ctx, key); err != nil || v != 7 {
		t.Errorf("second Get: %d, %v; want 7, the value the L1 holds", v, err)
	}
}

// TestCounterGetL1AfterShardedEnds: a key with an L1 entry and a sharded_counter entry
// (a pin, or an event listing both); the sharded_counter entry ends while the L1 stays.
// Get was then a GET of the key, answered by the L1, and missed every increment in the
// sub-counters, which the agent folds into the key only after the entry ended (found by
// a review of mitigation combinations). A process without any plan reads the same key
// exactly all along.
func TestCounterGetL1AfterShardedEnds(t *testing.T) {
	srv := redistest.Start(t)
	im := standalone(srv.Addr())
	ctx := context.Background()
	const key = "likes:l1"
	subs, err := topology(t, im).Names(key, 2, mitigate.ShardedCounter)
	if err != nil {
		t.Fatal(err)
	}
	ps := startPlanServer(t)
	ps.publish(l1Entry(key, time.Second, time.Minute), shardedEntry(key, subs, time.Minute))
	_, c := attach(t, im, ps, Options{Rand: seeded(5)})
	k := c.Counter()
	const n = 10
	for range n {
		if err := k.Add(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := k.Stats(); st.Sharded != n {
		t.Fatalf("stats %+v; want %d sharded Adds", st, n)
	}
	v := c.Stats().Plan.Version
	ps.publish(l1Entry(key, time.Second, time.Minute)) // the sharded_counter entry ends
	waitVersion(t, c, v+1)
	_, other := attach(t, im, startPlanServer(t), Options{})
	if got, err := other.Counter().Get(ctx, key); err != nil || got != n {
		t.Fatalf("Get in a process without a plan = %d, %v; want %d", got, err, n)
	}
	if got, err := k.Get(ctx, key); err != nil || got != n {
		t.Fatalf("Get after the sharded_counter entry ended, L1 kept = %d, %v; want %d", got, err, n)
	}
}

// attachSampled attaches a client of the Redis at addr that follows ps's plan and samples
// every command (source "app"), and starts an agent's UDP port on ps's HTTP port, where
// the client sends its samples; it returns the client and what the agent receives.
func attachSampled(t *testing.T, addr string, ps *planServer) (*Client, *agentSamples) {
	t.Helper()
	u, err := url.Parse(ps.URL())
	if err != nil {
		t.Fatal(err)
	}
	_, rec := startAgentAt(t, u.Host, "")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	c, err := Attach(rdb, Options{Agent: ps.URL(), Source: "app", SampleEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, rec
}
