package mitigate

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// testCopiesTypesAndTTL: copies of a string, hash, list and zset keep type, value and TTL;
// a Recommend or Observe entry writes nothing.
func testCopiesTypesAndTTL(t *testing.T, b backend) {
	ctx := context.Background()
	do := func(args ...any) {
		t.Helper()
		if err := b.rdb.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	do("SET", "ct:str", "hello", "PX", 50000)
	do("HSET", "ct:hash", "a", "1", "b", "2")
	do("RPUSH", "ct:list", "x", "y", "z")
	do("ZADD", "ct:zset", 1, "one", 2, "two")
	do("PEXPIRE", "ct:zset", 80000)
	do("SET", "ct:rec", "r")
	do("SET", "ct:obs", "o")

	keys := []string{"ct:str", "ct:hash", "ct:list", "ct:zset"}
	var entries []Entry
	copies := map[string][]Node{}
	for _, k := range keys {
		copies[k] = b.names(t, k, 3, Copies)
		entries = append(entries, execEntry(k, Copies, Enforce, copies[k]))
	}
	recNames, obsNames := b.names(t, "ct:rec", 2, Copies), b.names(t, "ct:obs", 2, Copies)
	entries = append(entries, execEntry("ct:rec", Copies, Recommend, recNames), execEntry("ct:obs", Copies, Observe, obsNames))

	e := newTestExecutor(t, b, time.Hour, time.Minute)
	if err := e.Apply(ctx, execPlan(entries...)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, k := range keys {
		wantDump, err := b.rdb.Do(ctx, "DUMP", k).Text()
		if err != nil {
			t.Fatal(err)
		}
		wantType, _ := b.rdb.Do(ctx, "TYPE", k).Text()
		wantTTL, _ := b.rdb.Do(ctx, "PTTL", k).Int64()
		for _, c := range copies[k] {
			if got, _ := b.rdb.Do(ctx, "TYPE", c.Name).Text(); got != wantType {
				t.Errorf("TYPE %s: got %q; want %q", c.Name, got, wantType)
			}
			if got, err := b.rdb.Do(ctx, "DUMP", c.Name).Text(); err != nil || got != wantDump {
				t.Errorf("DUMP %s: got %q, %v; want the original's %q", c.Name, got, err, wantDump)
			}
			got, _ := b.rdb.Do(ctx, "PTTL", c.Name).Int64()
			if (wantTTL == -1) != (got == -1) || got < wantTTL-2000 || got > wantTTL+2000 {
				t.Errorf("PTTL %s: got %d; want %d ± 2000 (-1 for none)", c.Name, got, wantTTL)
			}
		}
	}
	if got := e.count(Copies, ActionCopyWrite); got != 12 {
		t.Errorf("copy_write: got %v; want 12", got)
	}
	for _, n := range append(recNames, obsNames...) {
		if got, _ := b.rdb.Do(ctx, "EXISTS", n.Name).Int(); got != 0 {
			t.Errorf("copy %s of a recommend/observe entry exists; want none", n.Name)
		}
	}
	// Applying the same plan again writes nothing.
	if err := e.Apply(ctx, execPlan(entries...)); err != nil {
		t.Fatal(err)
	}
	if got := e.count(Copies, ActionCopyWrite); got != 12 {
		t.Errorf("copy_write after the same plan again: got %v; want 12", got)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b.noneLeft(t, "{hk:copy*")
}

// testCopiesRefresh: a write that bypasses the SDK reaches the copies within the refresh
// period; a DEL of the original removes them; a new original brings them back.
func testCopiesRefresh(t *testing.T, b backend) {
	ctx := context.Background()
	const key = "cr:score:match42"
	if err := b.rdb.Do(ctx, "SET", key, "0-0").Err(); err != nil {
		t.Fatal(err)
	}
	names := b.names(t, key, 3, Copies)
	e := newTestExecutor(t, b, 100*time.Millisecond, time.Minute)
	e.Offer(execPlan(execEntry(key, Copies, Enforce, names)))
	stop := e.run(t)
	defer stop()

	all := func(want string) func() bool {
		return func() bool {
			for _, n := range names {
				got, err := b.rdb.Do(ctx, "GET", n.Name).Text()
				if errors.Is(err, redis.Nil) {
					got = "<none>"
				} else if err != nil {
					return false
				}
				if got != want {
					return false
				}
			}
			return true
		}
	}
	eventually(t, "copies written", all("0-0"))
	if err := b.rdb.Do(ctx, "SET", key, "1-0").Err(); err != nil { // a writer that bypasses the SDK
		t.Fatal(err)
	}
	eventually(t, "bypassing write reaches the copies", all("1-0"))
	if err := b.rdb.Do(ctx, "DEL", key).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "copies gone after DEL of the original", all("<none>"))
	if err := b.rdb.Do(ctx, "SET", key, "2-1").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "copies back with the original", all("2-1"))
	if e.count(Copies, ActionCopyDelete) < 3 || e.count(Copies, ActionCopyRefresh) < 6 {
		t.Errorf("copy_delete %v, copy_refresh %v; want ≥ 3 and ≥ 6", e.count(Copies, ActionCopyDelete), e.count(Copies, ActionCopyRefresh))
	}
}

// testCopiesEnd: when the entry leaves the plan its copies go at once, a copy a stale
// client writes afterwards goes within the grace period, and copies whose names changed
// (a topology change) are deleted under their old names.
func testCopiesEnd(t *testing.T, b backend) {
	ctx := context.Background()
	const key = "ce:sale:sku:7"
	if err := b.rdb.Do(ctx, "SET", key, "price").Err(); err != nil {
		t.Fatal(err)
	}
	names := b.names(t, key, 3, Copies)
	e := newTestExecutor(t, b, 50*time.Millisecond, 300*time.Millisecond)
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatal(err)
	}
	if got := len(b.keys(t, "{hk:copy*"+key)); got != 3 {
		t.Fatalf("copies after Apply: got %d; want 3", got)
	}

	// Names change: two old names replaced by made-up ones (what a resharding does).
	renamed := []Node{names[0], {Name: "{hk:copy2:9}" + key}, {Name: "{hk:copy3:9}" + key}}
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, renamed))); err != nil {
		t.Fatal(err)
	}
	got := b.keys(t, "{hk:copy*"+key)
	want := []string{renamed[0].Name, renamed[1].Name, renamed[2].Name}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("copies after rename: got %q; want %q", got, want)
	}

	// The entry turns into a recommendation: every copy goes at once.
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Recommend, renamed))); err != nil {
		t.Fatal(err)
	}
	b.noneLeft(t, "{hk:copy*")

	// A stale client writes a copy after the end: a round deletes it, again and again
	// until the grace period passes quietly.
	stop := e.run(t)
	defer stop()
	if err := b.rdb.Do(ctx, "SET", renamed[1].Name, "stale").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "stale copy deleted", func() bool { return len(b.keys(t, "{hk:copy*")) == 0 })
	eventually(t, "retired copies forgotten after the grace period", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.retiring) == 0
	})
}

// TestCopiesOneFailingCopy: a copy the executor cannot write (here an ACL forbids its
// name; in production its node is down) must not stop the other copies from following
// the original: they are written, refreshed, and deleted with the original, every round.
func TestCopiesOneFailingCopy(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer admin.Close()
	const key = "cf:k"
	names, err := StandaloneTopology(s.Addr()).Names(key, 2, Copies)
	if err != nil {
		t.Fatal(err)
	}
	bad, good := names[0].Name, names[1].Name
	// The executor's user may touch every key but the first copy (the claim keys
	// included: without them the executor deletes no copy, fail safe).
	if err := admin.Do(ctx, "ACL", "SETUSER", "exec", "on", ">pw", "resetkeys", "~"+key, "~"+good, "~hk:claim{hk:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "exec", Password: "pw", MaxRetries: -1})
	defer rdb.Close()
	e, err := NewExecutor(ExecutorOptions{Redis: rdb, RefreshPeriod: time.Hour, GracePeriod: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	admin.Set(ctx, key, "v1", 0)
	admin.Set(ctx, good, "stale", 0) // left by an SDK client's write, say
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err == nil {
		t.Errorf("Apply with %s forbidden = nil; want its error", bad)
	}
	if got := admin.Get(ctx, good).Val(); got != "v1" {
		t.Errorf("after Apply, %s = %q; want v1 (the original's value)", good, got)
	}
	admin.Set(ctx, key, "v2", 0)
	_ = e.Refresh(ctx)
	if got := admin.Get(ctx, good).Val(); got != "v2" {
		t.Errorf("after a refresh, %s = %q; want v2 (the original's value)", good, got)
	}
	admin.Del(ctx, key)
	_ = e.Refresh(ctx)
	if n := admin.Exists(ctx, good).Val(); n != 0 {
		t.Errorf("after the original's DEL and a refresh, %s exists; want it deleted (a copy never outlives its original by more than a round)", good)
	}
	admin.Set(ctx, good, "stale", 0)
	_ = e.Apply(ctx, execPlan())
	if n := admin.Exists(ctx, good).Val(); n != 0 {
		t.Errorf("after the entry ended, %s exists; want it deleted at once", good)
	}
	_ = e.Close(ctx)
}
