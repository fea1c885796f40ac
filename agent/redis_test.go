package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/client"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/redis/go-redis/v9"
)

// runAgent starts a real agent on loopback ports and stops it when the test ends.
func runAgent(t *testing.T, o Options) *Agent {
	t.Helper()
	o.HTTPListen, o.UDPListen = "127.0.0.1:0", "127.0.0.1:0"
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a
}

// hotIn polls GET /v1/topk until key shows as hot with the given op rate, up to 10 s.
func hotIn(t *testing.T, a *Agent, key, op string) Key {
	t.Helper()
	url := fmt.Sprintf("http://%s/v1/topk?n=5&op=%s", a.HTTPAddr(), op)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		var got TopK
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range got.Keys {
			if k.Key == key && k.Hot {
				return k
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not hot within 10 s; top-k: %+v", key, got.Keys)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hammer runs fn in a loop from a few goroutines until the test ends.
func hammer(t *testing.T, fn func(i int)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				fn(i)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestHookTrafficDetected: an app's go-redis client with the reporting hook reads one key
// far more than others; the agent, fed only by the hook's UDP reports, flags it.
func TestHookTrafficDetected(t *testing.T) {
	srv := redistest.Start(t)
	a := runAgent(t, Options{})
	rep, err := client.NewReporter(client.ReporterOptions{Agent: a.UDPAddr().String(), Source: "checkout", SampleEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	rdb.Set(ctx, "cart:flash", "1", 0) // before the hook: the key is only ever read once reported
	rdb.AddHook(rep.Hook())
	hammer(t, func(i int) {
		rdb.Get(ctx, "cart:flash")
		rdb.Get(ctx, fmt.Sprint("cart:", i%1000))
		if i%10 == 0 {
			rdb.Incr(ctx, "stats:views")
		}
	})
	k := hotIn(t, a, "cart:flash", "read")
	t.Logf("hook: cart:flash hot at %.0f reads/s", k.ReadRate)
	if k.WriteRate != 0 {
		t.Errorf("cart:flash write rate %v; want 0 (only GETs)", k.WriteRate)
	}
}

// TestProxyTrafficDetected: clients talk to Redis through the agent's proxy tap; the agent
// flags the hot key from the tapped traffic, and the clients see Redis's own answers.
func TestProxyTrafficDetected(t *testing.T) {
	srv := redistest.Start(t)
	var proxy *sampler.Proxy
	a := runAgent(t, Options{Sources: []NewSource{func(sink sampler.Sink) (Source, error) {
		p, err := sampler.NewProxy(sampler.ProxyOptions{Upstream: srv.Addr(), SampleEvery: 10, Sink: sink})
		proxy = p
		return p, err
	}}})
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr().String()})
	t.Cleanup(func() { rdb.Close() }) // after hammer's goroutines end: cleanups run last first
	ctx := context.Background()
	if err := rdb.Set(ctx, "score:match42", "3-1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	hammer(t, func(i int) {
		if v, err := rdb.Get(ctx, "score:match42").Result(); err == nil && v != "3-1" {
			t.Errorf("GET through the proxy: %q; want 3-1", v)
		}
		rdb.Incr(ctx, "likes:match42")
	})
	k := hotIn(t, a, "score:match42", "read")
	t.Logf("proxy: score:match42 hot at %.0f reads/s", k.ReadRate)
	w := hotIn(t, a, "likes:match42", "write")
	if !w.Counter {
		t.Errorf("likes:match42 is written with INCR; want it marked counter")
	}
	// The proxy's client counts are among the agent's metrics. go-redis v9 opens with
	// HELLO 3 and CLIENT SETINFO, which keep a connection shared, and may send CLIENT
	// MAINT_NOTIFICATIONS, which pins it: the pool's connections are counted, on either.
	families, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "hotkeyd_proxy_clients" {
			for _, m := range f.GetMetric() {
				clients[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if clients["shared"]+clients["own"] < 1 {
		t.Errorf("hotkeyd_proxy_clients: got %v; want the go-redis pool's connections", clients)
	}
}

// TestDetectionLatencyUDP: over the real UDP path, a key that jumps from nothing to 10×
// the read threshold shows as hot in /v1/topk. The time it took is logged (the benchmark
// in bench/ reports its distribution); the test asserts only that it happens.
func TestDetectionLatencyUDP(t *testing.T) {
	a := runAgent(t, Options{})
	conn, err := net.Dial("udp", a.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rate := 10 * a.tracker.Rules().Read.Rate // requests/s of full traffic
	start := time.Now()
	hammer(t, func(int) {
		// 1 in 100 sampled: each 10 ms, rate/100/100 samples of the spike key.
		n := uint32(rate / 100 / 100)
		dgram, err := sampler.AppendReport(nil, sampler.Batch{Source: "spike", Rate: 0.01, Samples: []sampler.Sample{
			{Key: []byte("flash:sale"), Op: sampler.OpRead, Count: n},
		}}, nil)
		if err != nil {
			t.Error(err)
			return
		}
		conn.Write(dgram)
		time.Sleep(40 * time.Millisecond) // 4 goroutines: one datagram per 10 ms in all
	})
	hotIn(t, a, "flash:sale", "read")
	t.Logf("flagged %v after the first spike datagram (tick %v)", time.Since(start).Round(time.Millisecond), a.opts.Detector.Tick)
}
