package sampler

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
)

// testClock is a clock a test moves while other goroutines read it.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *testClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func debugLogger(buf *logbuf.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestUDPDropsLogged: a sender that is not the Go SDK can learn why its datagrams are
// dropped from the agent's log: the first malformed one is logged at once with the
// sender's address, the source and the decoder's error; then at most one line a minute,
// with the number dropped meanwhile. Valid datagrams log nothing.
func TestUDPDropsLogged(t *testing.T) {
	var buf logbuf.Buffer
	sink := &udpCountSink{}
	srv, err := NewUDPServer(UDPOptions{Listen: "127.0.0.1:0", Readers: 2, Sink: sink, Logger: debugLogger(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	clk := newTestClock()
	srv.dropLog.now = clk.now
	go srv.Serve(context.Background())
	t.Cleanup(func() { srv.Close() })
	conn, err := net.DialUDP("udp", nil, srv.Addr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	from := conn.LocalAddr().String()

	good, err := AppendReport(nil, Batch{Source: "py", Rate: 1, Samples: []Sample{{Key: []byte("k"), Op: OpRead, Count: 1}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := append(bytes.Clone(good[:len(good)-5]), 0x11, 1, 0, 1, 'k') // op byte 0x11: reserved bit
	for range 10 {
		conn.Write(good)
	}
	udpWaitFor(t, "10 samples", func() bool { return sink.samples.Load() == 10 })
	if got := buf.Lines("."); len(got) != 0 {
		t.Fatalf("after valid datagrams, the log holds %q; want nothing", got)
	}
	for range 40 {
		conn.Write(bad)
	}
	// A reader counts a drop before it logs it.
	udpWaitFor(t, "40 drops and their lines", func() bool {
		return sink.drops.Load() == 40 && len(buf.Lines("dropped")) == 40
	})
	lines := buf.Lines("level=WARN.*dropped")
	if len(lines) != 1 {
		t.Fatalf("after 40 malformed datagrams, warn lines %q; want 1", lines)
	}
	// At debug level every other drop has a line of its own.
	if debug := buf.Lines("level=DEBUG.*dropped.*op byte 0x11"); len(debug) != 39 {
		t.Errorf("after 40 malformed datagrams, %d debug lines; want 39, one for each drop not warned of", len(debug))
	}
	for _, want := range []string{"level=WARN", "transport=udp", "reason=malformed", "from=" + from, "source=py", "op byte 0x11", "unlogged=0"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q lacks %q", lines[0], want)
		}
	}
	clk.add(59 * time.Second)
	conn.Write(bad)
	udpWaitFor(t, "41 drops", func() bool { return sink.drops.Load() == 41 })
	clk.add(time.Second)
	conn.Write([]byte("GET / HTTP/1.1\r\n"))
	udpWaitFor(t, "42 drops and a second line", func() bool { return sink.drops.Load() == 42 && len(buf.Lines("level=WARN.*dropped")) > 1 })
	lines = buf.Lines("level=WARN.*dropped")
	if len(lines) != 2 {
		t.Fatalf("a minute after the first line, log lines %q; want 2", lines)
	}
	for _, want := range []string{"source=unknown", "magic byte 0x47", "unlogged=40"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("log line %q lacks %q", lines[1], want)
		}
	}
}

// TestHTTPDropsLogged: as TestUDPDropsLogged, for POST /v1/samples, with the remote
// address.
func TestHTTPDropsLogged(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) { testHTTPDropsLogged(t, level) })
	}
}

func testHTTPDropsLogged(t *testing.T, level slog.Level) {
	var buf logbuf.Buffer
	sink := &jsonTestSink{}
	h := HTTPHandler(sink, HTTPOptions{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))})
	clk := newTestClock()
	h.(*httpHandler).dropLog.now = clk.now
	post := func(body string) int {
		r := httptest.NewRequest("POST", "/v1/samples", strings.NewReader(body))
		r.RemoteAddr = "192.0.2.7:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := post(`{"source":"sh","samples":[{"key":"k","op":"read"}]}`); code != http.StatusAccepted {
		t.Fatalf("valid report: %d; want 202", code)
	}
	if got := buf.Lines("."); len(got) != 0 {
		t.Fatalf("after a valid report, the log holds %q; want nothing", got)
	}
	for range 40 {
		post(`{"source":"sh","samples":[{"key":"k","op":"delete"}]}`)
	}
	lines := buf.Lines("level=WARN.*dropped")
	if len(lines) != 1 {
		t.Fatalf("after 40 malformed reports, warn lines %q; want 1", lines)
	}
	wantDebug := 0
	if level == slog.LevelDebug {
		wantDebug = 39 // every drop not warned of
	}
	if debug := buf.Lines("level=DEBUG.*dropped.*transport=http"); len(debug) != wantDebug {
		t.Errorf("after 40 malformed reports at level %v, %d debug lines; want %d", level, len(debug), wantDebug)
	}
	for _, want := range []string{"level=WARN", "transport=http", "reason=malformed", "from=192.0.2.7:4711", "source=sh", `samples[0].op: \"delete\" is not allowed`, "unlogged=0"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q lacks %q", lines[0], want)
		}
	}
	clk.add(time.Minute)
	post(`{"samples":[]}`)
	if lines = buf.Lines("level=WARN.*dropped"); len(lines) != 2 || !strings.Contains(lines[1], "unlogged=39") || !strings.Contains(lines[1], "source=unknown") {
		t.Errorf("a minute later, log lines %q; want a second one with source=unknown unlogged=39", lines)
	}
}

// TestHTTPHandlerContentEncoding: a body in any Content-Encoding but identity is answered
// 415 and counted as malformed; identity (any case) is read as no encoding.
func TestHTTPHandlerContentEncoding(t *testing.T) {
	body := `{"source":"app","samples":[{"key":"k","op":"read"}]}`
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(body))
	zw.Close()
	for _, tt := range []struct {
		encoding []string
		body     string
		code     int
	}{
		{nil, body, 202},
		{[]string{"identity"}, body, 202},
		{[]string{"IDENTITY"}, body, 202},
		{[]string{"gzip"}, z.String(), 415},
		{[]string{"br"}, body, 415},
		{[]string{"identity", "gzip"}, body, 415},
		{[]string{"identity, deflate"}, body, 415},
		{[]string{"x-unknown"}, body, 415},
	} {
		sink := &jsonTestSink{}
		h := HTTPHandler(sink, HTTPOptions{})
		r := httptest.NewRequest("POST", "/v1/samples", strings.NewReader(tt.body))
		for _, e := range tt.encoding {
			r.Header.Add("Content-Encoding", e)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.code {
			t.Errorf("Content-Encoding %q: %d %s; want %d", tt.encoding, w.Code, w.Body, tt.code)
			continue
		}
		if tt.code != 415 {
			continue
		}
		if msg := w.Body.String(); !strings.Contains(msg, "Content-Encoding") || !strings.Contains(msg, "identity") {
			t.Errorf("Content-Encoding %q: body %s; want an error naming Content-Encoding and identity", tt.encoding, msg)
		}
		sink.mu.Lock()
		if got := strings.Join(sink.drops, ","); got != "unknown malformed 1" {
			t.Errorf("Content-Encoding %q: dropped %q; want %q", tt.encoding, got, "unknown malformed 1")
		}
		sink.mu.Unlock()
	}
}

// TestUDPTooManySamplesLogged: a datagram with more samples than MaxSamples is dropped
// whole, its samples counted as too_large, and logged as the other drops are, with the
// limit and the setting that raises it: over UDP the sender gets no answer, so the log
// is the only place it can learn why. A datagram within the limit, sent before, is kept.
func TestUDPTooManySamplesLogged(t *testing.T) {
	var buf logbuf.Buffer
	sink := &jsonTestSink{}
	_, conn := startUDP(t, UDPOptions{Readers: 1, MaxSamples: 3, Sink: sink, Logger: debugLogger(&buf)})
	report := func(n int) []byte {
		b := Batch{Source: "py", Rate: 1}
		for i := range n {
			b.Samples = append(b.Samples, Sample{Key: fmt.Appendf(nil, "k%d", i), Op: OpRead})
		}
		data, err := AppendReport(nil, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	conn.Write(report(3))
	conn.Write(report(4))
	udpWaitFor(t, "3 samples, a drop and a line", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.samples) == 3 && len(sink.drops) == 1 && len(buf.Lines("level=WARN.*dropped")) == 1
	})
	sink.mu.Lock()
	drops := strings.Join(sink.drops, ",")
	sink.mu.Unlock()
	if drops != "py too_large 4" {
		t.Errorf("dropped %q; want %q, the datagram's 4 samples", drops, "py too_large 4")
	}
	line := buf.Lines("level=WARN.*dropped")[0]
	for _, want := range []string{"level=WARN", "transport=udp", "reason=too_large", "source=py", "4 samples", "at most 3", "limits.max_samples_per_report"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %q", line, want)
		}
	}
}
