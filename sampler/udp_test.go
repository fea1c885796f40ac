package sampler

import (
	"context"
	"fmt"
	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// udpCountSink counts what a UDPServer hands it; safe for concurrent use.
type udpCountSink struct {
	samples atomic.Int64
	batches atomic.Int64
	drops   atomic.Int64
}

func (s *udpCountSink) Accept(b Batch) {
	s.batches.Add(1)
	s.samples.Add(int64(len(b.Samples)))
}

func (s *udpCountSink) Drop(_, _ string, n int) { s.drops.Add(int64(n)) }

// startUDP starts a server on a free loopback port and stops it when the test ends,
// checking that no goroutine is left behind.
func startUDP(t *testing.T, opts UDPOptions) (*UDPServer, *net.UDPConn) {
	t.Helper()
	before := runtime.NumGoroutine()
	opts.Listen = "127.0.0.1:0"
	srv, err := NewUDPServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	conn, err := net.DialUDP("udp", nil, srv.Addr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve returned %v; want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return within 5s of Close")
		}
		leaktest.Wait(t, before)
	})
	return srv, conn
}

// udpWaitFor polls cond for up to 5s.
func udpWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestUDPServer(t *testing.T) {
	sink := &jsonTestSink{}
	_, conn := startUDP(t, UDPOptions{Sink: sink, Readers: 2})

	garbage := [][]byte{
		[]byte("hello"),
		{0x68, 1, 0, 0, 0, 0, 1, 3, 'b', 'a', 'd', 0, 5}, // a source, then a wrong count
		{0x68, 9},
		{},
	}
	const reports = 40
	want := make([]string, 0, reports*3)
	for i := range reports {
		src := fmt.Sprintf("app-%d", i%3)
		b := Batch{Source: src, Rate: 0.01, Samples: []Sample{
			{Key: fmt.Appendf(nil, "user:%d", i), Op: OpRead},
			{Key: fmt.Appendf(nil, "cart:%d", i), Op: OpWrite},
			{Key: []byte("hits"), Op: OpWrite, Counter: true},
		}}
		for _, s := range b.Samples {
			want = append(want, fmt.Sprintf("%s %s %s", src, s.Op, s.Key))
		}
		data, err := AppendReport(nil, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := conn.Write(garbage[i/10]); err != nil {
				t.Fatal(err)
			}
		}
	}
	udpWaitFor(t, "all samples and drops", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.samples) >= len(want) && len(sink.drops) >= len(garbage)
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	got := slices.Sorted(slices.Values(sink.samples))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got samples %q;\nwant %q", got, want)
	}
	drops := slices.Sorted(slices.Values(sink.drops))
	wantDrops := []string{"bad malformed 1", "unknown malformed 1", "unknown malformed 1", "unknown malformed 1"}
	if !slices.Equal(drops, wantDrops) {
		t.Errorf("got drops %q; want %q", drops, wantDrops)
	}
}

func TestUDPServerToken(t *testing.T) {
	sink := &jsonTestSink{}
	_, conn := startUDP(t, UDPOptions{Sink: sink, Token: "s3cret", Readers: 1})
	b := Batch{Source: "app", Rate: 1, Samples: []Sample{{Key: []byte("k"), Op: OpRead}, {Key: []byte("j"), Op: OpRead}}}
	for _, token := range []string{"", "wrong", "s3cret"} {
		data, err := AppendReport(nil, b, []byte(token))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	udpWaitFor(t, "one batch and two drops", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.samples) >= 2 && len(sink.drops) >= 2
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if got, want := strings.Join(sink.samples, ","), "app read k,app read j"; got != want {
		t.Errorf("accepted %q; want %q", got, want)
	}
	if got, want := strings.Join(sink.drops, ","), "app auth 2,app auth 2"; got != want {
		t.Errorf("dropped %q; want %q", got, want)
	}
}

func TestUDPServerLifecycle(t *testing.T) {
	before := runtime.NumGoroutine()
	sink := &udpCountSink{}

	// Cancelling the context stops Serve.
	srv, err := NewUDPServer(UDPOptions{Listen: "127.0.0.1:0", Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel: got %v; want nil", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: got %v; want nil", err)
	}
	if err := srv.Serve(context.Background()); err != nil {
		t.Errorf("Serve after Close: got %v; want nil", err)
	}

	// Close before Serve: Serve returns at once.
	srv, err = NewUDPServer(UDPOptions{Listen: "127.0.0.1:0", Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if err := srv.Serve(context.Background()); err != nil {
		t.Errorf("Serve after Close: got %v; want nil", err)
	}
	leaktest.Wait(t, before)
}

func TestNewUDPServerErrors(t *testing.T) {
	sink := &udpCountSink{}
	tests := []struct {
		name string
		opts UDPOptions
		want string
	}{
		{"no sink", UDPOptions{}, "sampler: UDP Sink: nil; a Sink is required"},
		{"readers", UDPOptions{Sink: sink, Readers: 65}, "sampler: UDP Readers 65: must be 0 (GOMAXPROCS) to 64"},
		{"buffer", UDPOptions{Sink: sink, SocketBuffer: 100}, "sampler: UDP SocketBuffer 100: must be 0 (8 MiB) or 65536 to 1073741824 bytes"},
		{"token", UDPOptions{Sink: sink, Token: strings.Repeat("t", 256)}, "sampler: UDP Token of 256 bytes: must be at most 255"},
		{"listen", UDPOptions{Sink: sink, Listen: "127.0.0.1:x"}, `sampler: UDP Listen "127.0.0.1:x": `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := NewUDPServer(tt.opts)
			if err == nil {
				srv.Close()
				t.Fatalf("got no error; want %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got %q; want %q", err, tt.want)
			}
		})
	}
}

// BenchmarkUDPServer sends real 50-sample datagrams over loopback to a UDPServer with 2
// readers and a counting sink, and reports the samples it received per second. The sender
// shares the machine's cores with the readers; datagrams the kernel dropped are reported
// as lost%.
func BenchmarkUDPServer(b *testing.B) {
	sink := &udpCountSink{}
	srv, err := NewUDPServer(UDPOptions{Listen: "127.0.0.1:0", Sink: sink, Readers: 2})
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(context.Background())
	defer srv.Close()
	conn, err := net.DialUDP("udp", nil, srv.Addr().(*net.UDPAddr))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetWriteBuffer(4 << 20)
	const perDatagram = 50
	data, err := AppendReport(nil, reportBatch("bench", 0.01, perDatagram), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		if _, err := conn.Write(data); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			runtime.Gosched() // let the readers run on a small machine
		}
	}
	b.StopTimer()
	want := int64(b.N) * perDatagram
	last, lastAt := sink.samples.Load(), time.Now()
	for got := last; got < want && time.Since(lastAt) < 200*time.Millisecond; got = sink.samples.Load() {
		if got != last {
			last, lastAt = got, time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	got := sink.samples.Load()
	elapsed := lastAt.Sub(start)
	if got == want {
		elapsed = time.Since(start)
	}
	b.ReportMetric(float64(got)/elapsed.Seconds(), "samples/s")
	b.ReportMetric(100*float64(want-got)/float64(want), "lost%")
	b.ReportMetric(float64(len(data)), "bytes/datagram")
}
