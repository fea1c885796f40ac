package client

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// standIn is the innermost hook of the write-path benchmarks: it answers every command
// in process, so that what they measure is the hooks' own cost, not the network's.
type standIn struct{}

func (standIn) DialHook(next redis.DialHook) redis.DialHook { return next }

func (standIn) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error { standInAnswer(cmd); return nil }
}

func (standIn) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			standInAnswer(cmd)
		}
		return nil
	}
}

func standInAnswer(cmd redis.Cmder) {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		c.SetVal("value")
	case *redis.StatusCmd:
		c.SetVal("OK")
	case *redis.IntCmd:
		c.SetVal(1)
	}
}

// attachStandIn attaches a Client following entries to a go-redis client whose commands
// the stand-in answers, and waits until it holds them.
func attachStandIn(b *testing.B, entries ...mitigate.Entry) (*redis.Client, *Client) {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", PoolSize: 128})
	b.Cleanup(func() { rdb.Close() })
	ps := startPlanServer(b)
	u, _ := url.Parse(ps.URL())
	udpSink(b, u.Host) // the reporter's datagrams
	if entries != nil {
		ps.publish(entries...)
	}
	c, err := Attach(rdb, Options{Agent: ps.URL(), Source: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	rdb.AddHook(standIn{}) // after Attach's hooks: innermost
	held := func() int {
		if ix := c.follower.cur.Load(); ix != nil {
			return len(ix.keys)
		}
		return -1
	}
	deadline := time.Now().Add(5 * time.Second)
	for held() != len(entries) {
		if time.Now().After(deadline) {
			b.Fatalf("the client holds %d plan entries; want %d", held(), len(entries))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return rdb, c
}

// udpSink reads and discards the datagrams sent to hostport.
func udpSink(b testing.TB, hostport string) {
	pc, err := net.ListenPacket("udp", hostport)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() { pc.Close() })
}

var benchKeys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkWritePath measures a SET of keys the plan does not name, which should cost
// the same whatever the plan holds for other keys: "empty" (no plan entries), "l1other"
// (an L1 entry, cached, for another key: every write used to take the L1 shard's lock
// twice), "owedother" (a batched counter with a sum pending, for another key: every write
// used to lock a counter stripe per key), and "l1key" (a SET of the L1 key itself, which
// takes the slow path by design). seq runs one goroutine, par 64 on GOMAXPROCS Ps.
//
//	go test ./client -run '^$' -bench BenchmarkWritePath -benchmem -count 5
func BenchmarkWritePath(b *testing.B) {
	ctx := context.Background()
	cases := []struct {
		name    string
		entries []mitigate.Entry
		setup   func(*redis.Client, *Client)
		key     func(i int) string
	}{
		{"empty", nil, nil, nil},
		{"l1other", []mitigate.Entry{l1Entry("hot:l1", time.Hour, time.Hour)}, func(rdb *redis.Client, c *Client) {
			if err := rdb.Get(ctx, "hot:l1").Err(); err != nil || c.l1.size.Load() != 1 {
				b.Fatalf("L1 not filled: %v, %d entries", err, c.l1.size.Load())
			}
		}, nil},
		{"owedother", []mitigate.Entry{batchedEntry("ctr:hot", time.Minute, time.Hour)}, func(_ *redis.Client, c *Client) {
			if err := c.Counter().Add(ctx, "ctr:hot", 1); err != nil || c.counter.owed.Load() != 1 {
				b.Fatalf("no sum pending: %v", err)
			}
		}, nil},
		{"l1key", []mitigate.Entry{l1Entry("hot:l1", time.Hour, time.Hour)}, nil, func(int) string { return "hot:l1" }},
	}
	for _, par := range []bool{false, true} {
		for _, cs := range cases {
			name := "seq/" + cs.name
			if par {
				name = "par/" + cs.name
			}
			b.Run(name, func(b *testing.B) {
				rdb, c := attachStandIn(b, cs.entries...)
				if cs.setup != nil {
					cs.setup(rdb, c)
				}
				key := cs.key
				if key == nil {
					key = func(i int) string { return benchKeys[i&1023] }
				}
				b.ReportAllocs()
				if !par {
					i := 0
					for b.Loop() {
						if err := rdb.Set(ctx, key(i), "value", 0).Err(); err != nil {
							b.Fatal(err)
						}
						i++
					}
					return
				}
				b.SetParallelism(32)
				var seed atomic.Int64
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(seed.Add(97))
					for pb.Next() {
						if err := rdb.Set(ctx, key(i), "value", 0).Err(); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		}
	}
}
