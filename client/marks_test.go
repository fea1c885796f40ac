package client

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// The tests here hold the reads of a split key to the original across plan versions: a
// new plan version (a renewal every 30 s, or any change of another key) has keyPlans of
// its own, which turned copy reads back on while the copies still lacked a write of this
// client (found by a review of mitigation combinations).

// splitKey starts a Redis and a plan server whose plan splits key into 2 copies,
// attaches a client that follows it, and sets key, and so its copies, to 1.
func splitKey(t *testing.T, key string) (redis.UniversalClient, *Client, *planServer) {
	t.Helper()
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	ps.publish(copiesEntry(key, copyNames(key, 2), time.Minute))
	rdb, c := attach(t, standalone(srv.Addr()), ps, Options{})
	if err := rdb.Set(context.Background(), key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb, c, ps
}

// republish publishes entries as the next plan version and waits until c holds it.
func republish(t *testing.T, c *Client, ps *planServer, entries ...mitigate.Entry) {
	t.Helper()
	v := c.Stats().Plan.Version
	ps.publish(entries...)
	waitVersion(t, c, v+1)
}

// TestMultiMarkSurvivesPlan: a split key written inside MULTI, with a plan version coming
// between the queuing and EXEC. The write happens at EXEC, under the new plan, which knew
// nothing of it.
func TestMultiMarkSurvivesPlan(t *testing.T) {
	const key = "mk:multi"
	rdb, c, ps := splitKey(t, key)
	ctx := context.Background()
	conn := rdb.(*redis.Client).Conn()
	defer conn.Close()
	if err := conn.Do(ctx, "multi").Err(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Set(ctx, key, "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	republish(t, c, ps, copiesEntry(key, copyNames(key, 2), time.Minute)) // a renewal
	if err := conn.Do(ctx, "exec").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "2" {
			t.Fatalf("GET %d after EXEC returned %q, %v; want 2 (copy stats %+v)", i, got, err, c.Stats().Copies)
		}
	}
}

// TestUnmirroredSurvivesPlan: a write the client cannot mirror (MSET), then at once a
// plan that changes only another key.
func TestUnmirroredSurvivesPlan(t *testing.T) {
	const key = "{u}mk:unmirrored"
	rdb, c, ps := splitKey(t, key)
	ctx := context.Background()
	if err := rdb.MSet(ctx, key, "2", "{u}other", "x").Err(); err != nil {
		t.Fatal(err)
	}
	republish(t, c, ps, copiesEntry(key, copyNames(key, 2), time.Minute), l1Entry("unrelated", time.Second, time.Minute))
	for i := range 5 {
		if got := rdb.Get(ctx, key).Val(); got != "2" {
			t.Fatalf("GET %d after MSET 2 and an unrelated plan change returned %q; want 2 (copy stats %+v)", i, got, c.Stats().Copies)
		}
	}
}

// TestUnsureRepairSurvivesPlan: a write of unknown outcome turns copy reads off until a
// repair has copied the original; a plan renewal meanwhile ended the repair, and the new
// plan read the copies, which lacked the write that Redis applied.
func TestUnsureRepairSurvivesPlan(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	key := "mk:unsure"
	names := copyNames(key, 2)
	ps.publish(copiesEntry(key, names, time.Minute))
	const timeout = 150 * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: timeout, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := attachTo(t, rdb, ps, Options{})
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer plain.Close()
	// A timed-out write is applied or not (go-redis drops the connection; Redis may or
	// may not have read the command): try until one is applied.
	for try := range 10 {
		old, val := "old"+strconv.Itoa(try), "new"+strconv.Itoa(try)
		if err := rdb.Set(ctx, key, old, 0).Err(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return rdb.Get(ctx, key).Val() == old }) // an earlier try's repair done
		busy := make(chan error, 1)
		go func() { busy <- busyScript.Run(ctx, plain, []string{key}, 800).Err() }()
		time.Sleep(100 * time.Millisecond)
		err := rdb.Set(ctx, key, val, 0).Err()
		if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("SET during the busy script: %v; want a timeout", err)
		}
		republish(t, c, ps, copiesEntry(key, names, time.Minute)) // a renewal
		if err := <-busy; err != nil {
			t.Fatal(err)
		}
		if got := plain.Get(ctx, key).Val(); got != val {
			continue // the timed-out SET was not applied: again
		}
		for i := range 5 {
			if got, err := rdb.Get(ctx, key).Result(); err != nil || got != val {
				t.Fatalf("try %d, GET %d after the original returned %s: %q, %v; want %s (copy stats %+v)", try, i, val, got, err, val, c.Stats().Copies)
			}
		}
		return
	}
	t.Skip("no timed-out SET was applied in 10 tries")
}

// duringHook runs do once, when a command named name is about to go out, alone or first
// in a pipeline (it sits inside the SDK's hook: added after Attach).
type duringHook struct {
	name string
	do   func()
	done bool
}

func (h *duringHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *duringHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.at(cmds[0])
		return next(ctx, cmds)
	}
}
func (h *duringHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.at(cmd)
		return next(ctx, cmd)
	}
}

func (h *duringHook) at(cmd redis.Cmder) {
	if cmd.Name() == h.name && !h.done {
		h.done = true
		h.do()
	}
}

// TestSplitDuringWrite: a write of a key the plan held does not split goes to the
// original only; a plan that splits the key comes while it is under way, and the agent
// has written the copies from the original before the write reached it. The copies lack
// the write, so this client reads the key from the original until a repair.
func TestSplitDuringWrite(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	key := "mk:meanwhile"
	names := copyNames(key, 2)
	ps.publish() // nothing split
	rdb, c := attach(t, standalone(srv.Addr()), ps, Options{})
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer plain.Close()
	for _, k := range append([]string{key}, names...) {
		if err := plain.Set(ctx, k, "1", 0).Err(); err != nil { // the agent's copies of 1
			t.Fatal(err)
		}
	}
	rdb.AddHook(&duringHook{name: "set", do: func() { republish(t, c, ps, copiesEntry(key, names, time.Minute)) }})
	if err := rdb.Set(ctx, key, "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "2" {
			t.Fatalf("GET %d after SET 2 returned %q, %v; want 2 (copy stats %+v)", i, got, err, c.Stats().Copies)
		}
	}
	waitFor(t, func() bool { return c.Stats().Copies.Repairs == 1 })
	for _, name := range names {
		if got := plain.Get(ctx, name).Val(); got != "2" {
			t.Errorf("copy %s after the repair holds %q; want 2", name, got)
		}
	}
}

// TestCopiesChangeDuringWrite: a split key's write, mirrored to the copies of the plan
// this client held, is under way when a plan that renames the copies or adds one comes,
// and the agent has written the new copies before the write reached the original (found
// by the review that verified the tests above).
func TestCopiesChangeDuringWrite(t *testing.T) {
	for _, tt := range []struct {
		name      string
		pipe, add bool
	}{{"rename", false, false}, {"add", false, true}, {"rename/pipeline", true, false}, {"add/pipeline", true, true}} {
		t.Run(tt.name, func(t *testing.T) {
			const key = "mk:renamed"
			rdb, c, ps := splitKey(t, key)
			ctx := context.Background()
			names := []string{"{hk:copy1:50001}" + key, "{hk:copy2:50002}" + key}
			if tt.add {
				names = append(copyNames(key, 2), "{hk:copy3:50003}"+key)
			}
			for _, name := range names {
				if err := rdb.Set(internal(ctx), name, "1", 0).Err(); err != nil { // the agent's copies of 1
					t.Fatal(err)
				}
			}
			rdb.AddHook(&duringHook{name: "set", do: func() { republish(t, c, ps, copiesEntry(key, names, time.Minute)) }})
			var err error
			if tt.pipe {
				_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Set(ctx, key, "2", 0).Err() })
			} else {
				err = rdb.Set(ctx, key, "2", 0).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range 40 { // a random copy each
				if got := rdb.Get(ctx, key).Val(); got != "2" {
					t.Fatalf("GET %d after SET 2 returned %q; want 2 (copy stats %+v)", i, got, c.Stats().Copies)
				}
			}
		})
	}
}

// TestMarkedWriteGoesToOriginal: while a key's copy reads are off, a write of it goes to
// the original only, not mirrored (a copy's node that hangs held every write of the key
// for the client's timeout: the verifying review saw 1 write in 12 s), and the repair
// that follows copies it; in a pipeline too.
func TestMarkedWriteGoesToOriginal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(ctx context.Context, rdb redis.UniversalClient, key string) error
	}{
		{"command", func(ctx context.Context, rdb redis.UniversalClient, key string) error {
			return rdb.Set(ctx, key, "2", 0).Err()
		}},
		{"pipeline", func(ctx context.Context, rdb redis.UniversalClient, key string) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key, "2", 0)
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testMarkedWrite(t, "mk:marked:"+tc.name, tc.write)
		})
	}
}

func testMarkedWrite(t *testing.T, key string, write func(context.Context, redis.UniversalClient, string) error) {
	rdb, c, _ := splitKey(t, key)
	ctx := context.Background()
	c.follower.cur.Load().lookup(key).markUnsure() // as a write of unknown outcome does
	mirrors := c.Stats().Copies.Mirrors
	if err := write(ctx, rdb, key); err != nil {
		t.Fatal(err)
	}
	if got := rdb.Get(ctx, key).Val(); got != "2" {
		t.Fatalf("GET after SET 2 returned %q; want 2 (from the original)", got)
	}
	if n := c.Stats().Copies.Mirrors - mirrors; n != 0 {
		t.Errorf("the SET of a marked key was mirrored (%d); want it sent to the original only", n)
	}
	waitFor(t, func() bool { return c.Stats().Copies.Repairs == 1 })
	for _, name := range copyNames(key, 2) {
		if got := rdb.Get(internal(ctx), name).Val(); got != "2" {
			t.Errorf("copy %s after the repair holds %q; want 2", name, got)
		}
	}
}

// TestMarkedKeyUnderSteadyWrites: a split key written steadily through this client is
// marked once (by a script). Its copy reads must come back while the writes go on: once
// writes of a marked key stopped taking the stripe, each repair raced every write in
// flight and lost, and the original's node took every read until the writes paused
// (found by the review that verified the change).
func TestMarkedKeyUnderSteadyWrites(t *testing.T) {
	const key = "mk:steady"
	rdb, c, _ := splitKey(t, key)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		untilStop(&wg, stop, func(int) bool { rdb.Incr(ctx, key); return true })
	}
	defer func() { close(stop); wg.Wait() }()
	if err := redis.NewScript(`return redis.call('INCR', KEYS[1])`).Run(ctx, rdb, []string{key}).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		reads := c.Stats().Copies.Reads
		for range 20 {
			rdb.Get(ctx, key)
		}
		return c.Stats().Copies.Reads-reads >= 10
	})
}
