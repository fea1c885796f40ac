package client

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// benchClient is a Client that talks to nothing, with a plan of entries installed directly.
func benchClient(b *testing.B, entries ...mitigate.Entry) *Client {
	b.Helper()
	return benchAttach(b, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), entries...)
}

// benchAttach attaches a Client to rdb, a go-redis client that talks to nothing, with no
// agent and a plan of entries installed directly. Both are closed when b ends.
func benchAttach(b *testing.B, rdb redis.UniversalClient, entries ...mitigate.Entry) *Client {
	b.Helper()
	b.Cleanup(func() { rdb.Close() })
	c, err := Attach(rdb, Options{Agent: "http://127.0.0.1:1", NoReports: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	c.follower.cur.Store(newPlanIndex(mitigate.Plan{Version: 1, Generated: planNow, Primaries: 3, Entries: entries}, time.Now()))
	return c
}

// redisNext stands for Redis at the end of the hook chain: GET answers "value".
func redisNext(_ context.Context, cmd redis.Cmder) error {
	if sc, ok := cmd.(*redis.StringCmd); ok {
		sc.SetVal("value")
	}
	return nil
}

var benchSink error

// BenchmarkPlanHook measures what the plan hook adds to a command, with a stand-in for
// Redis at the end of the chain: "baseline" calls it directly; "no-plan" goes through
// the hook with no plan (agent away); "miss-path" is a GET of a key the plan does not
// name, with a plan of L1 and copies entries for other keys; "write-path" a SET of such a
// key; "hit" a GET answered from L1; "hit-parallel" the same from all cores.
func BenchmarkPlanHook(b *testing.B) {
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		cmd := redis.NewStringCmd(context.Background(), "get", "user:42")
		for b.Loop() {
			benchSink = redisNext(context.Background(), cmd)
		}
	})
	benchHookCases(b, benchClient, func(c *Client) redis.ProcessHook { return planHook{c}.ProcessHook(redisNext) })
	ctx := context.Background()
	plan := hookBenchPlan()
	b.Run("hit-parallel", func(b *testing.B) {
		process := planHook{benchClient(b, plan...)}.ProcessHook(redisNext)
		process(ctx, redis.NewStringCmd(ctx, "get", "score:match42"))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			cmd := redis.NewStringCmd(ctx, "get", "score:match42")
			var err error
			for pb.Next() {
				err = process(ctx, cmd)
			}
			_ = err
		})
	})
}

// hookBenchPlan is the plan of the hook benchmarks: an L1 entry and a split key, neither
// of them the key of the miss and write cases.
func hookBenchPlan() []mitigate.Entry {
	return []mitigate.Entry{
		l1Entry("score:match42", time.Hour, time.Hour),
		copiesEntry("feed:home", copyNames("feed:home", 3), time.Hour),
	}
}

// benchHookCases runs the cases BenchmarkPlanHook and BenchmarkClusterPlanHook share,
// each through chain(c): the hooks of a client c made by newClient, down to a stand-in
// for Redis.
func benchHookCases(b *testing.B, newClient func(*testing.B, ...mitigate.Entry) *Client, chain func(*Client) redis.ProcessHook) {
	ctx := context.Background()
	plan := hookBenchPlan()
	run := func(b *testing.B, process redis.ProcessHook, cmd redis.Cmder) {
		b.ReportAllocs()
		for b.Loop() {
			benchSink = process(ctx, cmd)
		}
	}
	miss := redis.NewStringCmd(ctx, "get", "user:42")
	b.Run("no-plan", func(b *testing.B) {
		c := newClient(b)
		c.follower.cur.Store(nil)
		run(b, chain(c), miss)
	})
	b.Run("miss-path", func(b *testing.B) { run(b, chain(newClient(b, plan...)), miss) })
	b.Run("write-path", func(b *testing.B) {
		run(b, chain(newClient(b, plan...)), redis.NewStatusCmd(ctx, "set", "user:42", "v"))
	})
	b.Run("hit", func(b *testing.B) {
		run(b, chain(newClient(b, plan...)), redis.NewStringCmd(ctx, "get", "score:match42"))
	})
}

// BenchmarkHotKeyReads reads one hot key from G goroutines through one client on a real
// redis-server, with L1 off (no plan) and on (an L1 entry with the default TTL of 1s),
// and reports the reads Redis served per second (redis_reads/s) beside the app's
// (app_reads/s). With L1, Redis should see about one read per client per TTL.
func BenchmarkHotKeyReads(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, l1 := range []bool{false, true} {
		for _, p := range []int{1, 8, 64} {
			g := p * runtime.GOMAXPROCS(0)
			b.Run(fmt.Sprintf("L1=%v/G=%d", l1, g), func(b *testing.B) {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: g})
				defer rdb.Close()
				c, err := Attach(rdb, Options{Agent: "http://127.0.0.1:1", NoReports: true})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if l1 {
					c.follower.cur.Store(newPlanIndex(mitigate.Plan{Version: 1, Generated: planNow, Primaries: 1,
						Entries: []mitigate.Entry{l1Entry("hot", time.Second, time.Hour)}}, time.Now()))
				}
				rdb.Set(ctx, "hot", "value", 0)
				before := redisGets(b, srv.Addr())
				b.SetParallelism(p)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := rdb.Get(ctx, "hot").Err(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				secs := b.Elapsed().Seconds()
				b.ReportMetric(float64(redisGets(b, srv.Addr())-before)/secs, "redis_reads/s")
				b.ReportMetric(float64(b.N)/secs, "app_reads/s")
			})
		}
	}
}

// BenchmarkStampede sends 50 concurrent GETs of a key nobody has cached, per iteration,
// and reports how many reached Redis (redis_reads/op): 50 without the SDK, 1 with L1's
// single-flight.
func BenchmarkStampede(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, sdk := range []bool{false, true} {
		b.Run(fmt.Sprintf("singleflight=%v", sdk), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 50})
			defer rdb.Close()
			var c *Client
			if sdk {
				var err error
				c, err = Attach(rdb, Options{Agent: "http://127.0.0.1:1", NoReports: true})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				c.follower.cur.Store(newPlanIndex(mitigate.Plan{Version: 1, Generated: planNow, Primaries: 1,
					Entries: []mitigate.Entry{l1Entry("cold", time.Second, time.Hour)}}, time.Now()))
			}
			rdb.Set(ctx, "cold", "value", 0)
			before := redisGets(b, srv.Addr())
			for b.Loop() {
				if c != nil {
					c.l1.Invalidate("cold") // a cold key again
				}
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range 50 {
					wg.Go(func() {
						<-start
						rdb.Get(ctx, "cold")
					})
				}
				close(start)
				wg.Wait()
			}
			b.ReportMetric(float64(redisGets(b, srv.Addr())-before)/float64(b.N), "redis_reads/op")
		})
	}
}
