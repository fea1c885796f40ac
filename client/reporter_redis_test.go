package client

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestReporterRedis runs real commands against a real redis-server with the hook
// installed and checks what a real UDP agent receives.
func TestReporterRedis(t *testing.T) {
	srv := redistest.Start(t)
	agent, received := startAgent(t, "s3cret")
	r, err := NewReporter(ReporterOptions{Agent: agent.Addr().String(), Source: "checkout", SampleEvery: 1,
		Token: "s3cret", FlushInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	rdb.AddHook(r.Hook())
	ctx := context.Background()

	steps := []struct {
		name string
		run  func() error
		want []string
	}{
		{"SET", func() error { return rdb.Set(ctx, "user:1", "alice", 0).Err() }, []string{"checkout write user:1 bytes=5"}},
		{"GET", func() error { return rdb.Get(ctx, "user:1").Err() }, []string{"checkout read user:1 bytes=5"}},
		{"GET missing", func() error {
			if err := rdb.Get(ctx, "nobody").Err(); err != redis.Nil {
				return fmt.Errorf("got %v; want redis.Nil", err)
			}
			return nil
		}, []string{"checkout read nobody"}},
		{"MSET", func() error { return rdb.MSet(ctx, "a", "1", "b", "22").Err() }, []string{"checkout write a bytes=1", "checkout write b bytes=2"}},
		{"MGET", func() error { return rdb.MGet(ctx, "a", "b", "c").Err() }, []string{"checkout read a bytes=1", "checkout read b bytes=2", "checkout read c"}},
		{"DEL", func() error { return rdb.Del(ctx, "a", "b").Err() }, []string{"checkout write a", "checkout write b"}},
		{"INCR", func() error { return rdb.Incr(ctx, "hits").Err() }, []string{"checkout write hits counter"}},
		{"INCRBY", func() error { return rdb.IncrBy(ctx, "hits", 5).Err() }, []string{"checkout write hits counter"}},
		{"HSET", func() error { return rdb.HSet(ctx, "h", "f", "v").Err() }, []string{"checkout write h"}},
		{"SADD", func() error { return rdb.SAdd(ctx, "s:a", "1", "2").Err() }, []string{"checkout write s:a"}},
		{"SUNIONSTORE", func() error {
			if n, err := rdb.SUnionStore(ctx, "s:dst", "s:a", "s:b").Result(); err != nil || n != 2 {
				return fmt.Errorf("got %d, %v; want 2", n, err)
			}
			return nil
		}, []string{"checkout write s:dst", "checkout read s:a", "checkout read s:b"}},
		{"ZUNIONSTORE", func() error {
			return rdb.ZUnionStore(ctx, "z:dst", &redis.ZStore{Keys: []string{"z:a", "z:b"}, Weights: []float64{1, 2}}).Err()
		}, []string{"checkout write z:dst", "checkout read z:a", "checkout read z:b"}},
		{"SORT STORE", func() error { return rdb.SortStore(ctx, "s:a", "s:sorted", &redis.Sort{}).Err() },
			[]string{"checkout write s:sorted", "checkout read s:a"}},
		{"COPY", func() error { return rdb.Copy(ctx, "s:a", "s:copy", 0, true).Err() },
			[]string{"checkout write s:copy", "checkout read s:a"}},
		{"pipeline", func() error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Get(ctx, "user:1")
				p.Set(ctx, "p:2", "xy", 0)
				p.Incr(ctx, "p:3")
				p.Ping(ctx)
				return nil
			})
			return err
		}, []string{"checkout read user:1 bytes=5", "checkout write p:2 bytes=2", "checkout write p:3 counter"}},
		{"transaction", func() error {
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "tx:1")
				p.Get(ctx, "user:1")
				return nil
			})
			return err
		}, []string{"checkout write tx:1 counter", "checkout read user:1 bytes=5"}},
	}
	var want []string
	for _, step := range steps {
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want = append(want, step.want...)
	}
	got := received.wait(t, len(want))
	// The client's own connection set-up (HELLO, CLIENT SETINFO) has no keys: no samples.
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the agent received\n%q;\nwant\n%q", got, want)
	}
	if st := r.Stats(); st.Dropped != 0 || st.Sampled != uint64(len(want)) {
		t.Errorf("stats %+v; want %d sampled, 0 dropped", st, len(want))
	}
}

// TestReporterRedisSampleRate checks that about one command in SampleEvery is sampled.
func TestReporterRedisSampleRate(t *testing.T) {
	srv := redistest.Start(t)
	agent, received := startAgent(t, "")
	r, err := NewReporter(ReporterOptions{Agent: agent.Addr().String(), Source: "app", SampleEvery: 10, FlushInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	rdb.AddHook(r.Hook())
	ctx := context.Background()
	const n = 3000
	for i := range n / 10 {
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := range 10 {
				p.Get(ctx, fmt.Sprint("k:", i*10+j))
			}
			return nil
		}); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	// Binomial(3000, 0.1): mean 300, sd ≈ 16.4; allow 6 sd.
	if st.Sampled < 200 || st.Sampled > 400 {
		t.Errorf("sampled %d of %d commands with SampleEvery 10; want about 300", st.Sampled, n)
	}
	if got := received.wait(t, int(st.Sampled)); len(got) != int(st.Sampled) || st.Sent != st.Sampled {
		t.Errorf("agent received %d, stats %+v; want all %d sampled sent and received", len(got), st, st.Sampled)
	}
}

// TestReporterNoAgent runs commands with nothing listening on the agent's port: every
// command succeeds, and the samples are dropped and counted.
func TestReporterNoAgent(t *testing.T) {
	srv := redistest.Start(t)
	r, err := NewReporter(ReporterOptions{Agent: closedPort(t), SampleEvery: 1, FlushInterval: time.Millisecond, MaxDatagram: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	rdb.AddHook(r.Hook())
	ctx := context.Background()
	var slowest time.Duration
	for i := range 2000 {
		start := time.Now()
		if err := rdb.Set(ctx, fmt.Sprint("k:", i), "v", 0).Err(); err != nil {
			t.Fatalf("SET %d: %v", i, err)
		}
		slowest = max(slowest, time.Since(start))
		if i%200 == 199 {
			time.Sleep(2 * time.Millisecond) // let the sender meet the ICMP errors
		}
	}
	t.Logf("slowest SET with no agent: %v", slowest)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.Dropped == 0 || st.Sent+st.Dropped != st.Sampled || st.Sampled != 2000 {
		t.Errorf("stats %+v; want 2000 sampled, some dropped, Sent + Dropped = Sampled", st)
	}
}

// TestReporterCluster checks the hook on a ClusterClient against a real 3-primary cluster.
func TestReporterCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cluster := redistest.StartCluster(t, 3)
	agent, received := startAgent(t, "")
	r, err := NewReporter(ReporterOptions{Agent: agent.Addr().String(), Source: "app", SampleEvery: 1, FlushInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	defer rdb.Close()
	rdb.AddHook(r.Hook())
	ctx := context.Background()
	var want []string
	for i := range 20 {
		key := fmt.Sprint("user:", i) // spread over the three primaries
		if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Get(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		want = append(want, "app write "+key+" bytes=1", "app read "+key+" bytes=1")
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 10 {
			p.Incr(ctx, fmt.Sprint("n:", i))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		want = append(want, fmt.Sprintf("app write n:%d counter", i))
	}
	got := received.wait(t, len(want))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the agent received\n%q;\nwant\n%q", got, want)
	}
}
