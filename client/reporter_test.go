package client

import (
	"context"
	"fmt"
	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"math"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// capture decodes the datagrams a Reporter sends, in place of the UDP socket.
type capture struct {
	mu        sync.Mutex // guards the fields below
	samples   []string
	datagrams [][]byte
	err       error
}

func (c *capture) send(data []byte) error {
	var b sampler.Batch
	if _, err := sampler.DecodeReport(&b, data); err != nil {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.datagrams = append(c.datagrams, slices.Clone(data))
	for _, s := range b.Samples {
		c.samples = append(c.samples, sampleString(b.Source, s))
	}
	return nil
}

func (c *capture) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.samples)
}

// sampleString formats a sample as "source op key [counter] [bytes=N]".
func sampleString(source string, s sampler.Sample) string {
	str := fmt.Sprintf("%s %s %s", source, s.Op, s.Key)
	if s.Counter {
		str += " counter"
	}
	if s.Bytes > 0 {
		str += fmt.Sprintf(" bytes=%d", s.Bytes)
	}
	if s.Truncated {
		str += " truncated"
	}
	return str
}

// newTestReporter starts a Reporter whose datagrams go to send instead of a socket.
func newTestReporter(t *testing.T, opts ReporterOptions, send func([]byte) error) *Reporter {
	t.Helper()
	r, err := newReporter(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.send = send
	go r.run()
	t.Cleanup(func() { r.Close() })
	return r
}

func nop(context.Context, redis.Cmder) error { return nil }

func TestHookSamples(t *testing.T) {
	ctx := context.Background()
	withVal := func(c *redis.StringCmd, v string) redis.Cmder { c.SetVal(v); return c }
	tests := []struct {
		name string
		cmd  redis.Cmder
		want []string
	}{
		{"get", withVal(redis.NewStringCmd(ctx, "get", "user:1"), "hello"), []string{"app read user:1 bytes=5"}},
		{"get upper, missing", redis.NewStringCmd(ctx, "GET", "user:2"), []string{"app read user:2"}},
		{"set", redis.NewStatusCmd(ctx, "set", "user:1", "value", "ex", 10), []string{"app write user:1 bytes=5"}},
		{"setex", redis.NewStatusCmd(ctx, "setex", "s", 10, "abc"), []string{"app write s bytes=3"}},
		{"mget", func() redis.Cmder {
			c := redis.NewSliceCmd(ctx, "mget", "a", "b", "c")
			c.SetVal([]any{"1", nil, "333"})
			return c
		}(), []string{"app read a bytes=1", "app read b", "app read c bytes=3"}},
		{"mset", redis.NewStatusCmd(ctx, "mset", "a", "1", "b", "22"), []string{"app write a bytes=1", "app write b bytes=2"}},
		{"del", redis.NewIntCmd(ctx, "del", "a", "b"), []string{"app write a", "app write b"}},
		{"incr", redis.NewIntCmd(ctx, "incr", "hits"), []string{"app write hits counter"}},
		{"incrby", redis.NewIntCmd(ctx, "incrby", "hits", 5), []string{"app write hits counter"}},
		{"hget", redis.NewStringCmd(ctx, "hget", "h", "f"), []string{"app read h"}},
		{"eval", redis.NewCmd(ctx, "eval", "return 1", 2, "k1", "k2", "arg"), []string{"app write k1", "app write k2"}},
		{"sunionstore", redis.NewIntCmd(ctx, "sunionstore", "d", "a", "b"), []string{"app write d", "app read a", "app read b"}},
		{"copy", redis.NewIntCmd(ctx, "copy", "a", []byte("b"), "replace"), []string{"app write b", "app read a"}},
		{"bitop", redis.NewIntCmd(ctx, "bitop", "and", "d", "a"), []string{"app write d", "app read a"}},
		{"zunionstore", redis.NewIntCmd(ctx, "zunionstore", "d", 2, "a", "b", "weights", 1, 2), []string{"app write d", "app read a", "app read b"}},
		{"zunionstore numkeys not a number", redis.NewIntCmd(ctx, "zunionstore", "d", "x", "a"), nil},
		{"zunionstore numkeys too large", redis.NewIntCmd(ctx, "zunionstore", "d", 3, "a", "b"), nil},
		{"sort", redis.NewStringSliceCmd(ctx, "sort", "k", "by", "store"), []string{"app read k"}},
		{"sort store", redis.NewIntCmd(ctx, "SORT", "k", "get", "#", "STORE", "d"), []string{"app write d", "app read k"}},
		{"sort store last", redis.NewIntCmd(ctx, "sort", "k", "store"), []string{"app read k"}},
		{"georadius storedist", redis.NewIntCmd(ctx, "georadius", "g", 15, 37, 200, "km", "storedist", "d"), []string{"app write d", "app read g"}},
		{"copy too short", redis.NewIntCmd(ctx, "copy", "a"), nil},
		{"bytes key", redis.NewStringCmd(ctx, "get", []byte{0, 'k'}), []string{"app read \x00k"}},
		{"int key", redis.NewStringCmd(ctx, "get", 42), []string{"app read 42"}},
		{"ping", redis.NewStatusCmd(ctx, "ping"), nil},
		{"unknown", redis.NewCmd(ctx, "frobnicate", "x"), nil},
		{"no key", redis.NewStringCmd(ctx, "get"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c capture
			r := newTestReporter(t, ReporterOptions{Source: "app", SampleEvery: 1}, c.send)
			if err := r.Hook().ProcessHook(nop)(ctx, tt.cmd); err != nil {
				t.Fatal(err)
			}
			r.Close()
			if got := c.get(); !slices.Equal(got, tt.want) {
				t.Errorf("got %q; want %q", got, tt.want)
			}
			st := r.Stats()
			if n := uint64(len(tt.want)); st.Sampled != n || st.Sent != n || st.Dropped != 0 {
				t.Errorf("stats %+v; want %d sampled and sent, 0 dropped", st, n)
			}
		})
	}
}

func TestHookPipeline(t *testing.T) {
	ctx := context.Background()
	var c capture
	r := newTestReporter(t, ReporterOptions{Source: "app", SampleEvery: 1}, c.send)
	cmds := []redis.Cmder{
		redis.NewStatusCmd(ctx, "multi"),
		redis.NewStringCmd(ctx, "get", "p1"),
		redis.NewIntCmd(ctx, "incr", "p2"),
		redis.NewSliceCmd(ctx, "exec"),
	}
	wantErr := fmt.Errorf("boom")
	err := r.Hook().ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return wantErr })(ctx, cmds)
	if err != wantErr {
		t.Errorf("got error %v; want the pipeline's own %v", err, wantErr)
	}
	r.Close()
	if got, want := c.get(), []string{"app read p1", "app write p2 counter"}; !slices.Equal(got, want) {
		t.Errorf("got %q; want %q", got, want)
	}
}

func TestPick(t *testing.T) {
	// With a counter for Rand, exactly one value in every (2⁶⁴/N) is picked: the lowest.
	for _, every := range []int{1, 2, 4, 100} {
		step := math.MaxUint64/uint64(every*8) + 1
		var x uint64
		r, err := newReporter(ReporterOptions{SampleEvery: every, Rand: func() uint64 { x += step; return x - step }})
		if err != nil {
			t.Fatal(err)
		}
		picked := 0
		for range every * 8 {
			if r.pick() {
				picked++
			}
		}
		r.conn.Close()
		if picked != 8 {
			t.Errorf("SampleEvery %d: picked %d of %d evenly spread values; want 8", every, picked, every*8)
		}
	}
	// The default random source: about one in N.
	r, err := newReporter(ReporterOptions{SampleEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.conn.Close()
	const n = 100000
	picked := 0
	for range n {
		if r.pick() {
			picked++
		}
	}
	// Binomial(100000, 0.1): sd ≈ 95; 6 sd either side.
	if picked < 9430 || picked > 10570 {
		t.Errorf("SampleEvery 10: picked %d of %d; want about %d", picked, n, n/10)
	}
}

// TestHookNeverBlocks stalls the sender and checks that the hook keeps returning at once,
// dropping and counting what does not fit the buffer.
func TestHookNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	stalled := func([]byte) error { <-release; return nil }
	r := newTestReporter(t, ReporterOptions{SampleEvery: 1, Buffer: 16, MaxDatagram: 128}, stalled)
	process := r.Hook().ProcessHook(nop)
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "some:key")
	const n = 100000
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		for range n {
			if err := process(ctx, cmd); err != nil {
				t.Error(err)
				break
			}
		}
		done <- time.Since(start)
	}()
	select {
	case d := <-done:
		t.Logf("%d commands with a stalled sender took %v", n, d)
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("the hook blocked on a stalled sender")
	}
	st := r.Stats()
	// At most the buffer and one datagram's worth (in the sender) are not dropped.
	if st.Sampled != n || st.Dropped < n-16-16 {
		t.Errorf("stats %+v; want %d sampled, at least %d dropped", st, n, n-32)
	}
	close(release)
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if st := r.Stats(); st.Sent+st.Dropped != st.Sampled {
		t.Errorf("after Close: stats %+v; want Sent + Dropped = Sampled", st)
	}
}

func TestDatagramPacking(t *testing.T) {
	var c capture
	r := newTestReporter(t, ReporterOptions{Source: "app", SampleEvery: 1, FlushInterval: time.Minute, Buffer: 4096}, c.send)
	process := r.Hook().ProcessHook(nop)
	ctx := context.Background()
	var want []string
	for i := range 1000 {
		key := fmt.Sprintf("key:%d:%s", i, strings.Repeat("x", i%50))
		want = append(want, "app read "+key)
		process(ctx, redis.NewStringCmd(ctx, "get", key))
	}
	big := strings.Repeat("B", 3000) // over MaxDatagram: sent alone
	want = append(want, "app read "+big)
	process(ctx, redis.NewStringCmd(ctx, "get", big))
	huge := strings.Repeat("H", sampler.MaxReportSize) // over any datagram: cut, marked and sent alone
	cut := huge[:sampler.MaxReportKey]
	want = append(want, "app read "+cut+" truncated")
	process(ctx, redis.NewStringCmd(ctx, "get", huge))
	r.Close()

	if got := c.get(); !slices.Equal(got, want) {
		t.Errorf("got %d samples; want %d, in order", len(got), len(want))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		t.Errorf("a datagram did not decode: %v", c.err)
	}
	for i, d := range c.datagrams {
		if len(d) > sampler.SafeReportSize && !strings.Contains(string(d), big) && !strings.Contains(string(d), cut) {
			t.Errorf("datagram %d: %d bytes; want at most %d", i, len(d), sampler.SafeReportSize)
		}
	}
	// Datagrams are filled: fewer than 1.25 times the minimum number.
	if min := 1000 * 30 / sampler.SafeReportSize; len(c.datagrams) > min*5/4+3 {
		t.Errorf("%d datagrams for 1000 samples of about 30 bytes and two large ones; want at most %d", len(c.datagrams), min*5/4+3)
	}
	if st := r.Stats(); st.Sent != 1002 || st.Dropped != 0 {
		t.Errorf("stats %+v; want 1002 sent, the huge key cut", st)
	}
}

func TestFlushInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c capture
		r, err := newReporter(ReporterOptions{Source: "app", SampleEvery: 1, FlushInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		r.send = c.send
		go r.run()
		defer r.Close()
		ctx := context.Background()
		time.Sleep(50 * time.Millisecond)
		r.Hook().ProcessHook(nop)(ctx, redis.NewStringCmd(ctx, "get", "k"))
		synctest.Wait()
		if got := len(c.get()); got != 0 {
			t.Fatalf("at 50ms: %d samples sent; want 0 before the interval", got)
		}
		time.Sleep(51 * time.Millisecond)
		synctest.Wait()
		if got := c.get(); !slices.Equal(got, []string{"app read k"}) {
			t.Fatalf("at 101ms: sent %q; want the sample, at the first tick", got)
		}
	})
}

func TestCloseFlushes(t *testing.T) {
	before := runtime.NumGoroutine()
	agent, received := startAgent(t, "")
	r, err := NewReporter(ReporterOptions{Agent: agent.Addr().String(), Source: "app", SampleEvery: 1, FlushInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.Hook().ProcessHook(nop)(ctx, redis.NewStringCmd(ctx, "get", "a"))
	r.Hook().ProcessHook(nop)(ctx, redis.NewStringCmd(ctx, "set", "b", "v"))
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got := received.wait(t, 2)
	if want := []string{"app read a", "app write b bytes=1"}; !slices.Equal(got, want) {
		t.Errorf("got %q; want %q", got, want)
	}
	// Samples after Close are not taken.
	r.Hook().ProcessHook(nop)(ctx, redis.NewStringCmd(ctx, "get", "late"))
	if st := r.Stats(); st.Sampled != 2 || st.Sent != 2 {
		t.Errorf("stats %+v; want 2 sampled and sent", st)
	}
	agent.Close()
	leaktest.Wait(t, before)
}

func TestNewReporterErrors(t *testing.T) {
	tests := []struct {
		name string
		opts ReporterOptions
		want string
	}{
		{"sample every", ReporterOptions{SampleEvery: -1}, "client: SampleEvery -1: must be 0 (100) to 4294967295"},
		{"buffer", ReporterOptions{Buffer: 1<<20 + 1}, "client: Buffer 1048577: must be 0 (8192) to 1048576 samples"},
		{"interval", ReporterOptions{FlushInterval: time.Microsecond}, "client: FlushInterval 1µs: must be 0 (100ms) or 1ms to 1m"},
		{"datagram", ReporterOptions{MaxDatagram: 100}, "client: MaxDatagram 100: must be 0 (1400) or 128 to 65507 bytes"},
		{"datagram vs header", ReporterOptions{Source: "app", MaxDatagram: 128, Token: strings.Repeat("t", 120)}, "client: MaxDatagram 128: must leave room for samples after a header of 134 bytes"},
		{"source", ReporterOptions{Source: strings.Repeat("s", 65)}, "client: Source or Token: report: source of 65 bytes: must be 1 to 64 bytes"},
		{"token", ReporterOptions{Token: strings.Repeat("t", 256)}, "client: Source or Token: report: token of 256 bytes: must be at most 255"},
		{"agent", ReporterOptions{Agent: "127.0.0.1"}, `client: Agent "127.0.0.1": dial udp: address 127.0.0.1: missing port in address`},
		// Options.Agent of Attach is a URL; an app that passes the same string here must
		// be told what this field wants instead of "too many colons in address".
		{"agent URL", ReporterOptions{Agent: "http://127.0.0.1:9736"}, `client: Agent "http://127.0.0.1:9736": want the agent's UDP address host:port, such as 127.0.0.1:9736, not a URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReporter(tt.opts)
			if err == nil {
				r.Close()
				t.Fatalf("got no error; want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("got %q; want %q", err, tt.want)
			}
		})
	}
}

// agentSamples records what a real sampler.UDPServer receives.
type agentSamples struct {
	mu      sync.Mutex // guards samples
	samples []string
}

func (a *agentSamples) Accept(b sampler.Batch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range b.Samples {
		a.samples = append(a.samples, sampleString(b.Source, s))
	}
}

func (a *agentSamples) Drop(string, string, int) {}

// wait returns the samples once there are at least n, failing after 5s.
func (a *agentSamples) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		got := slices.Clone(a.samples)
		a.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent received %d samples in 5s; want %d: %q", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startAgent starts a real UDP agent on a free loopback port, stopped when the test ends.
func startAgent(t *testing.T, token string) (*sampler.UDPServer, *agentSamples) {
	t.Helper()
	return startAgentAt(t, "127.0.0.1:0", token)
}

// startAgentAt starts a real UDP agent listening on listen, stopped when the test ends.
func startAgentAt(t *testing.T, listen, token string) (*sampler.UDPServer, *agentSamples) {
	t.Helper()
	rec := &agentSamples{}
	srv, err := sampler.NewUDPServer(sampler.UDPOptions{Listen: listen, Readers: 1, Sink: rec, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background())
	t.Cleanup(func() { srv.Close() })
	return srv, rec
}

// closedPort returns a loopback UDP address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	return addr
}

func TestAgentUnreachableHook(t *testing.T) {
	r, err := NewReporter(ReporterOptions{Agent: closedPort(t), SampleEvery: 1, FlushInterval: time.Millisecond, MaxDatagram: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	process := r.Hook().ProcessHook(nop)
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; r.Stats().Dropped == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no sample dropped in 5s with no agent; stats %+v", r.Stats())
		}
		if err := process(ctx, redis.NewStringCmd(ctx, "get", fmt.Sprint("k", i))); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if i%100 == 99 {
			time.Sleep(time.Millisecond)
		}
	}
	r.Close()
	if st := r.Stats(); st.Sent+st.Dropped != st.Sampled {
		t.Errorf("stats %+v; want Sent + Dropped = Sampled", st)
	}
}

var benchErr error

// BenchmarkHook measures what the hook adds to a command: "baseline" calls the next hook
// directly, "unsampled" goes through the hook without sampling (the path of 99 commands
// in 100), "1in100" is the default, "sampled" samples every command.
func BenchmarkHook(b *testing.B) {
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "user:42")
	run := func(b *testing.B, process redis.ProcessHook) {
		b.ReportAllocs()
		for b.Loop() {
			benchErr = process(ctx, cmd)
		}
	}
	newR := func(b *testing.B, every int) *Reporter {
		r, err := newReporter(ReporterOptions{SampleEvery: every, Buffer: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		r.send = func([]byte) error { return nil }
		go r.run()
		b.Cleanup(func() { r.Close() })
		return r
	}
	b.Run("baseline", func(b *testing.B) { run(b, nop) })
	b.Run("unsampled", func(b *testing.B) { run(b, newR(b, math.MaxUint32).Hook().ProcessHook(nop)) })
	b.Run("1in100", func(b *testing.B) { run(b, newR(b, 100).Hook().ProcessHook(nop)) })
	b.Run("sampled", func(b *testing.B) { run(b, newR(b, 1).Hook().ProcessHook(nop)) })
	b.Run("unsampled-parallel", func(b *testing.B) {
		process := newR(b, math.MaxUint32).Hook().ProcessHook(nop)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var err error
			for pb.Next() {
				err = process(ctx, cmd)
			}
			_ = err
		})
	})
	b.Run("pipeline10-1in100", func(b *testing.B) {
		cmds := make([]redis.Cmder, 10)
		for i := range cmds {
			cmds[i] = redis.NewStringCmd(ctx, "get", fmt.Sprint("user:", i))
		}
		process := newR(b, 100).Hook().ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
		b.ReportAllocs()
		for b.Loop() {
			benchErr = process(ctx, cmds)
		}
	})
}
