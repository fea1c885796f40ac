package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// TestReporterRecoversWhenAgentReturns: with no agent on the port, the kernel's ICMP
// port-unreachable makes writes on the connected socket fail with ECONNREFUSED; the
// samples are dropped and counted, and once an agent listens on the port again, samples
// reach it over the same socket.
func TestReporterRecoversWhenAgentReturns(t *testing.T) {
	addr := closedPort(t)
	r, err := NewReporter(ReporterOptions{Agent: addr, Source: "app", SampleEvery: 1, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	process := r.Hook().ProcessHook(nop)
	ctx := context.Background()
	get := func(key string) {
		if err := process(ctx, redis.NewStringCmd(ctx, "get", key)); err != nil {
			t.Fatalf("the hook returned %v; want the command's own nil", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Stats().Dropped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no sample dropped in 5 s with no agent; stats %+v", r.Stats())
		}
		get("before")
		time.Sleep(2 * time.Millisecond)
	}
	rec := &agentSamples{}
	srv, err := sampler.NewUDPServer(sampler.UDPOptions{Listen: addr, Readers: 1, Sink: rec})
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	go srv.Serve(ctx)
	defer srv.Close()
	deadline = time.Now().Add(5 * time.Second)
	for {
		get("after")
		time.Sleep(2 * time.Millisecond)
		rec.mu.Lock()
		n := len(rec.samples)
		rec.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent came back and got nothing in 5 s; stats %+v", r.Stats())
		}
	}
}

// TestReporterRoundTrip is a property test of the SDK's encoder against the decoder:
// random commands of random keys (empty, binary, up to over a datagram) go through the
// hook; every datagram decodes, none is over MaxDatagram unless it holds one sample that
// does not fit any smaller, and the samples arrive in order, none lost or changed.
func TestReporterRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		maxDatagram := []int{0, 128, 512, sampler.SafeReportSize, 9000, sampler.MaxReportSize}[round%6]
		limit := maxDatagram
		if limit == 0 {
			limit = sampler.SafeReportSize
		}
		every := 1 + rng.IntN(1000)
		token := ""
		if round%3 == 1 {
			token = "tok"
		}
		var c capture
		r := newTestReporter(t, ReporterOptions{Source: fmt.Sprint("src-", round), SampleEvery: every, Token: token,
			MaxDatagram: maxDatagram, Buffer: 1 << 14, FlushInterval: time.Minute}, c.send)
		// Every command is sampled: pick with a Rand that always draws 0.
		r.rand = func() uint64 { return 0 }
		process := r.Hook().ProcessHook(nop)
		ctx := context.Background()
		var want []string
		for range 2000 {
			n := rng.IntN(20)
			if rng.IntN(100) == 0 {
				n = rng.IntN(2 * limit)
			}
			k := make([]byte, n)
			for i := range k {
				k[i] = byte(rng.IntN(256))
			}
			key := string(k)
			if len(key) > sampler.MaxReportKey { // cut to fit a datagram, and marked
				want = append(want, "src-"+fmt.Sprint(round)+" write "+key[:sampler.MaxReportKey]+" truncated")
			} else {
				want = append(want, "src-"+fmt.Sprint(round)+" write "+key)
			}
			process(ctx, redis.NewIntCmd(ctx, "del", key))
		}
		r.Close()
		got := c.get()
		if len(got) != len(want) {
			t.Fatalf("round %d: %d samples arrived; want %d", round, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("round %d: sample %d: %q; want %q", round, i, got[i], want[i])
			}
		}
		c.mu.Lock()
		for i, d := range c.datagrams {
			var b sampler.Batch
			if _, err := sampler.DecodeReport(&b, d); err != nil {
				t.Fatalf("round %d: datagram %d: %v", round, i, err)
			}
			if (len(d) > limit || slices.ContainsFunc(b.Samples, func(s sampler.Sample) bool { return s.Truncated })) && len(b.Samples) != 1 {
				t.Errorf("round %d: datagram %d: %d bytes, %d samples; want at most %d bytes or one sample", round, i, len(d), len(b.Samples), limit)
			}
			if wantRate := 1 / float64(every); b.Rate != wantRate {
				t.Errorf("round %d: rate %v; want 1/%d", round, b.Rate, every)
			}
		}
		c.mu.Unlock()
	}
}

// TestCloseRacesHook closes Reporters while goroutines run sampled commands through the
// hook: once Close has returned and the commands have ended, every sample taken is
// either sent or counted as dropped (Stats: Sampled = Sent + Dropped; nothing waits).
func TestCloseRacesHook(t *testing.T) {
	for round := range 50 {
		r := newTestReporter(t, ReporterOptions{Source: "app", SampleEvery: 1, Buffer: 64}, func([]byte) error { return nil })
		process := r.Hook().ProcessHook(nop)
		ctx := context.Background()
		cmd := redis.NewStringCmd(ctx, "get", "k")
		stop := make(chan struct{})
		done := make(chan struct{}, 2)
		for range 2 {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					select {
					case <-stop:
						return
					default:
						process(ctx, cmd)
					}
				}
			}()
		}
		waitFor(t, func() bool { return r.Stats().Sampled > 0 }) // the commands run
		r.Close()
		close(stop)
		<-done
		<-done
		if st := r.Stats(); st.Sent+st.Dropped != st.Sampled {
			t.Fatalf("round %d: after Close: stats %+v; want Sent + Dropped = Sampled (%d unaccounted)", round, st, st.Sampled-st.Sent-st.Dropped)
		}
	}
}
