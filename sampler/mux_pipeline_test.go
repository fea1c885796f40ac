package sampler_test

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// TestMuxPipelineBeforeReading: a client that writes a whole pipeline before it reads a
// reply, as go-redis's Pipelined, redis-py's and Jedis's pipelines do, gets every reply,
// as from Redis directly. The tap stopped reading a shared client once 1 MiB of its
// replies waited; with the client's write blocked on a full socket, neither side moved
// again (found by a differential review: go-redis's Pipelined of 700 GETs of 10 KB and
// 30,000 SETs timed out through the tap and took 99 ms directly). A client pinned by a
// command in such a pipeline waited likewise, for its replies to be read before it got
// its own connection.
//
// Nor is such a client cut for the replies it holds (proxy.max_output_bytes): with a
// million GETs of 100 bytes, the tap had forwarded 165,000 commands by the time the
// client's socket was full, and their replies passed the budget (found by the same
// review). A client owed muxOwed replies is not read until Redis has sent some.
func TestMuxPipelineBeforeReading(t *testing.T) {
	for _, tc := range []struct {
		name        string
		small       int    // GETs of a 3-byte value first
		value       int    // the bytes of the value the GETs read
		gets        int    // GETs next
		middle      string // sent between the GETs and the EXISTS
		reply       string // its reply
		exists      int    // EXISTS of absent keys last
		pin, notPin string // the pin reason it counts, one it does not
	}{
		{"shared", 0, 10_000, 700, "", "", 400_000, sampler.PinBacklog, sampler.PinCommand},
		{"pinned-by-command", 0, 10_000, 700, muxCmd("CLIENT", "SETNAME", "piped"), muxOK, 400_000, sampler.PinCommand, sampler.PinBacklog},
		{"small-replies", 0, 100, 1_000_000, "", "", 0, sampler.PinBacklog, sampler.PinCommand},
		// The tap's first read of it holds up to 2,800 GETs, 28 MB of replies, past the
		// 16 MiB it holds for clients (MaxOutputBytes): it sends Redis at most muxWindow
		// of them first, then twice as many while the replies go out.
		{"large-replies", 0, 10_000, 3_000, "", "", 400_000, sampler.PinBacklog, sampler.PinCommand},
		{"1mb-replies", 0, 1_000_000, 40, "", "", 400_000, sampler.PinBacklog, sampler.PinCommand},
		// A window sized by the small replies (1,024 commands, as one build had it) sent
		// Redis all 100 GETs of 400 KB at once, 40 MB, and the client was cut (found by
		// a review); doubling sends 32 of them next, within the budget.
		{"small-then-large", 17, 400_000, 100, "", "", 400_000, sampler.PinBacklog, sampler.PinCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := strings.Repeat("p", tc.value)
			srv := redisWith(t, map[string]string{"pb:v": value, "pb:s": "abc"})
			p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink()})
			gets, exists := tc.gets, tc.exists
			var pipe bytes.Buffer
			pipe.WriteString(strings.Repeat(muxCmd("GET", "pb:s"), tc.small))
			pipe.WriteString(strings.Repeat(muxCmd("GET", "pb:v"), gets))
			pipe.WriteString(tc.middle)
			for i := range exists {
				pipe.WriteString(muxCmd("EXISTS", fmt.Sprintf("pb:absent:%032d", i)))
			}
			c := muxDial(t, p.Addr().String())
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			written := make(chan error, 1)
			go func() { _, err := c.Write(pipe.Bytes()); written <- err }()
			if err := <-written; err != nil {
				t.Fatalf("writing the %d MB pipeline before reading: %v (direct Redis takes it all)", pipe.Len()>>20, err)
			}
			r := bufio.NewReaderSize(c, 64<<10)
			for i := range tc.small {
				if got, err := muxReadReply(r); got != muxBulk("abc") {
					t.Fatalf("small GET %d: %q, %v; want %q", i, got, err, muxBulk("abc"))
				}
			}
			for i := range gets {
				if got, err := muxReadReply(r); got != muxBulk(value) {
					t.Fatalf("GET %d: %d bytes, %v; want the value", i, len(got), err)
				}
			}
			if tc.middle != "" {
				if got, err := muxReadReply(r); got != tc.reply {
					t.Fatalf("reply to the command between: %q, %v; want %q", got, err, tc.reply)
				}
			}
			for i := range exists {
				if got, err := muxReadReply(r); got != muxInt(0) {
					t.Fatalf("EXISTS %d: %q, %v; want :0", i, got, err)
				}
			}
			if s := p.Stats(); s.Pins[tc.pin] != 1 || s.Pins[tc.notPin] != 0 || s.OutputCuts != 0 {
				t.Errorf("pins %v, cuts %d; want 1 pin for %q, none for %q, no cut", s.Pins, s.OutputCuts, tc.pin, tc.notPin)
			}
			c.expect(t, "+PONG\r\n", "PING") // the client goes on, on its own connection
		})
	}
}

// TestMuxIdleClientsMemory: a shared client that sent its commands and was answered
// holds no input buffer: each took 64 KiB (BufferSize) for as long as it stayed
// connected, and 2,000 pooled connections took 150 MB of heap, past the 128 MiB the
// deploy files give hotkeyd (found by the differential review).
func TestMuxIdleClientsMemory(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink()})
	const clients = 500
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	muxDial(t, p.Addr().String()).expect(t, "+PONG\r\n", "PING") // the loop and its shared connections
	before := heap()
	conns := make([]*muxConn, 0, clients)
	for range clients {
		c := muxDial(t, p.Addr().String())
		c.expect(t, "+PONG\r\n", "PING")
		conns = append(conns, c)
	}
	waitFor(t, "every client on the shared connections", func() bool { return p.Stats().SharedClients == clients+1 })
	per := (int64(heap()) - int64(before)) / clients
	t.Logf("heap in use per idle client, the test's side included: %d bytes", per)
	if per > 24<<10 {
		t.Errorf("heap in use grew by %d bytes per idle shared client; want under 24 KiB (its input buffer is %d)", per, sampler.DefaultProxyBufferSize)
	}
	for _, c := range conns {
		c.expect(t, "+PONG\r\n", "PING") // each can still be served
	}
}

// TestMuxIdleUpstreamClosed: Redis's timeout setting closes the shared connections that
// stay idle that long (here the writes connection and the RESP3 pair, under RESP2
// reads). That loses no client anything, so it is neither counted as a failure nor
// warned of (the review saw 66 warnings and failures in a few minutes with timeout 1),
// and the clients go on, writes included.
func TestMuxIdleUpstreamClosed(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--timeout", "1"}})
	var logs logbuf.Buffer
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	c := muxDial(t, p.Addr().String())
	for start := time.Now(); time.Since(start) < 3*time.Second; {
		c.expect(t, muxNil, "GET", "idle:absent") // keeps the reads connection busy
		time.Sleep(100 * time.Millisecond)
	}
	c.expect(t, muxOK, "SET", "idle:k", "v")
	c.expect(t, muxBulk("v"), "GET", "idle:k")
	if s := p.Stats(); s.SharedFailures != 0 {
		t.Errorf("shared connection failures %d; want 0: an idle connection closed by Redis failed no client", s.SharedFailures)
	}
	log := logs.String()
	if strings.Contains(log, "level=WARN") {
		t.Errorf("log warns:\n%s", log)
	}
	if !strings.Contains(log, "closed an idle shared upstream connection") {
		t.Errorf("Redis closed no idle shared connection in 3 s with timeout 1 (the test's premise); log:\n%s", log)
	}
}

// TestMuxPinKeepsSampling: a client pinned by a command while it is owed a reply, whose
// commands run past the end of the tap's 64 KiB buffer, is sampled to its last command.
// The loop moved the buffer's bytes before the parser had read them all, so the parser
// took the moved bytes for the rest of the stream, met a protocol error at the command
// that crossed the buffer's end and stopped sampling the connection; such a connection
// also held a graceful stop to its drain timeout (found by the verifying review).
func TestMuxPinKeepsSampling(t *testing.T) {
	srv := redisWith(t, map[string]string{"pk:s": "x"})
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: sink, SampleEvery: 1})
	c := muxDial(t, p.Addr().String())
	var b bytes.Buffer
	b.WriteString(muxCmd("GET", "pk:s"))       // owed when the next pins it
	b.WriteString(muxCmd("CLIENT", "GETNAME")) // pins it
	const exists = 100                         // 1 KB each: past 64 KiB
	for i := range exists {
		b.WriteString(muxCmd("EXISTS", fmt.Sprintf("pk:%03d:%s", i, strings.Repeat("p", 400))))
	}
	c.send(t, b.String())
	for range 2 + exists {
		c.reply(t)
	}
	count := func() (samples, malformed int) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.samples), sink.drops[sampler.DropMalformed]
	}
	n, bad := count()
	for deadline := time.Now().Add(5 * time.Second); n < 1+exists && time.Now().Before(deadline); n, bad = count() {
		time.Sleep(10 * time.Millisecond) // the proxy hands samples on every 100 ms
	}
	if n != 1+exists || bad != 0 {
		t.Errorf("%d samples, %d dropped as malformed; want %d (the GET and every EXISTS), none dropped", n, bad, 1+exists)
	}
}

// TestMuxLongPipelineSampled: a pipeline longer than muxOwed in one read of the tap
// goes to Redis muxOwed commands at a time, the rest waiting in the client's buffer,
// parsed only when their turn comes; the buffer's bytes move in between. Every command
// is still answered in order and sampled once, commands across the buffer's end
// included (keys of varied lengths put them there).
func TestMuxLongPipelineSampled(t *testing.T) {
	srv := redistest.Start(t)
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: sink, SampleEvery: 1, BatchSize: 16 << 10})
	const gets = 12_000 // 600 KB, over 1,000 commands per 64 KiB read
	var pipe bytes.Buffer
	want := make(map[string]bool, gets)
	for i := range gets {
		key := fmt.Sprintf("lp:%05d:%s", i, strings.Repeat("k", i%41))
		want[key] = true
		if i%2 == 0 {
			pipe.WriteString(muxCmd("EXISTS", key))
		} else {
			pipe.WriteString(muxCmd("GET", key))
		}
	}
	c := muxDial(t, p.Addr().String())
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	written := make(chan error, 1)
	go func() { _, err := c.Write(pipe.Bytes()); written <- err }()
	r := bufio.NewReader(c)
	for i := range gets {
		wantReply := muxNil
		if i%2 == 0 {
			wantReply = muxInt(0)
		}
		if got, err := muxReadReply(r); got != wantReply {
			t.Fatalf("reply %d: %q, %v; want %q", i, got, err, wantReply)
		}
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	c.expect(t, "+PONG\r\n", "PING")
	count := func() (keys map[string]int, n, malformed, overload int) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		keys = map[string]int{}
		for _, s := range sink.samples {
			keys[s.key]++
		}
		return keys, len(sink.samples), sink.drops[sampler.DropMalformed], sink.drops[sampler.DropOverload]
	}
	keys, n, bad, overload := count()
	for deadline := time.Now().Add(5 * time.Second); n < gets && time.Now().Before(deadline); keys, n, bad, overload = count() {
		time.Sleep(10 * time.Millisecond) // the proxy hands samples on every 100 ms
	}
	if n != gets || bad != 0 || overload != 0 {
		t.Errorf("%d samples, %d dropped as malformed, %d for overload; want %d, none dropped", n, bad, overload, gets)
	}
	for key := range want {
		if keys[key] != 1 {
			t.Errorf("key %q sampled %d times; want once", key, keys[key])
			break
		}
	}
}
