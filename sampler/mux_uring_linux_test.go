package sampler_test

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/internal/uring"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// uringHere reports whether io_uring can be used on this machine, as the loop finds out.
func uringHere(t *testing.T) bool {
	t.Helper()
	b, err := uring.New(8)
	if errors.Is(err, uring.ErrUnsupported) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	return true
}

// TestMuxIOUringChosen: the loop batches through io_uring where the kernel allows it,
// says which in the log, and makes a system call each with NoIOUring.
func TestMuxIOUringChosen(t *testing.T) {
	here := uringHere(t)
	srv := redistest.Start(t)
	for _, m := range []muxMode{sharedMode, muxModes[1]} {
		t.Run(m.name, func(t *testing.T) {
			var logs logbuf.Buffer
			p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), NoIOUring: m.noURing, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			c := muxDial(t, p.Addr().String())
			c.expect(t, muxOK, "SET", "uring:"+m.name, "v")
			c.expect(t, muxBulk("v"), "GET", "uring:"+m.name)
			want := here && !m.noURing
			if got := sampler.LoopBatched(p); got != want {
				t.Errorf("loop batches through io_uring: got %v; want %v (io_uring here: %v)", got, want, here)
			}
			lines := logs.Lines(`batches through io_uring|io_uring is not available`)
			switch {
			case m.noURing && len(lines) > 0:
				t.Errorf("NoIOUring: got log %q; want nothing of io_uring", lines)
			case !m.noURing && len(lines) != 1:
				t.Errorf("got log lines %q; want one saying whether the tap uses io_uring", lines)
			}
		})
	}
}

// TestMuxIOUringFails: when io_uring fails under a running loop, the loop logs it and
// goes on with a system call for each read and write, and no client sees a wrong or
// missing reply, neither those connected before nor a new one.
func TestMuxIOUringFails(t *testing.T) {
	const n = 8
	p, conns, logs := brokenBatch(t, n)
	// Every client pipelines some INCRs and reads their replies, round after round:
	// the first batch after the break fails, and what it held must be done one by one.
	for round := range 5 {
		for i, c := range conns {
			var req string
			for range 3 {
				req += muxCmd("INCR", "uring:c"+strconv.Itoa(i))
			}
			c.send(t, req)
		}
		for i, c := range conns {
			for k := range 3 {
				want := int64(2 + round*3 + k)
				if got := c.reply(t); got != muxInt(want) {
					t.Fatalf("round %d, client %d, INCR %d: got %q; want %q", round, i, k, got, muxInt(want))
				}
			}
		}
	}
	late := muxDial(t, p.Addr().String())
	late.expect(t, muxBulk(fmt.Sprint(2+5*3-1)), "GET", "uring:c0")
	if lines := logs.Lines(`level=WARN.*io_uring failed`); len(lines) != 1 {
		t.Errorf("got warnings %q; want one that io_uring failed", lines)
	}
	if got := p.Stats().SharedClients; got != n+1 {
		t.Errorf("shared clients: got %d; want %d", got, n+1)
	}
}

// TestMuxIOUringFailsManyReady: io_uring fails in the batch that a turn sends early, to
// hold its reads to what Redis may still be sent (more than 64 clients ready at once, at
// the default 64 KiB buffers): the loop goes on with a call each, and every client gets
// its reply. It crashed on a nil batch before.
func TestMuxIOUringFailsManyReady(t *testing.T) {
	_, conns, logs := brokenBatch(t, 200)
	// With one P, the loop does not run until every client has written: all are ready
	// in its next turn.
	old := runtime.GOMAXPROCS(1)
	for i, c := range conns {
		c.send(t, muxCmd("INCR", "uring:c"+strconv.Itoa(i)))
	}
	runtime.GOMAXPROCS(old)
	for i, c := range conns {
		if got := c.reply(t); got != muxInt(2) {
			t.Fatalf("client %d: got %q; want %q", i, got, muxInt(2))
		}
	}
	if lines := logs.Lines(`level=WARN.*io_uring failed`); len(lines) != 1 {
		t.Errorf("got warnings %q; want one that io_uring failed", lines)
	}
}

// brokenBatch starts a proxy whose loop serves n clients, each of which has INCRed
// uring:cI once, and then breaks the loop's io_uring (BreakLoopBatch); it skips the test
// where io_uring is not to be had.
func brokenBatch(t *testing.T, n int) (*sampler.Proxy, []*muxConn, *logbuf.Buffer) {
	t.Helper()
	if !uringHere(t) {
		t.Skip("no io_uring here")
	}
	srv := redistest.Start(t)
	logs := &logbuf.Buffer{}
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	conns := make([]*muxConn, n)
	for i := range conns {
		conns[i] = muxDial(t, p.Addr().String())
		conns[i].expect(t, muxInt(1), "INCR", "uring:c"+strconv.Itoa(i))
	}
	if ok, err := sampler.BreakLoopBatch(p); !ok || err != nil {
		t.Fatalf("BreakLoopBatch: got %v, %v; want true, nil", ok, err)
	}
	return p, conns, logs
}
