//go:build linux

package sampler

import (
	"bufio"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// These tests drive the event loop's turns by hand, from the test's goroutine, with the
// events a turn is handed written out, to reach orders of events that epoll may report
// but a test cannot bring about on purpose.

// newTestLoop returns an event loop with its shared connections to a real Redis open and
// no goroutine running it: the test calls turn itself.
func newTestLoop(t *testing.T) *muxLoop {
	t.Helper()
	srv := redistest.Start(t)
	p, err := NewProxy(ProxyOptions{Upstream: srv.Addr(), Sink: SinkFunc(func(Batch) {})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	l, err := p.newLoop()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.shutdown)
	return l
}

// testLoopConn connects a client through a loopback socket and returns the proxy's
// connection for it, as Serve accepts it, and the client's end.
func testLoopConn(t *testing.T, p *Proxy) (*proxyConn, *bufio.Reader, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	pc := &proxyConn{p: p, client: accepted}
	pc.parser, _ = NewRESPParser(RESPOptions{MaxArgBytes: p.maxKey})
	pc.skip = pc.draw()
	return pc, bufio.NewReader(conn), conn
}

// testAdopt hands pc to l, as proxyConn.run does; the loop takes it in with the next
// event on its wake pipe.
func testAdopt(t *testing.T, l *muxLoop, pc *proxyConn) *loopClient {
	t.Helper()
	if !l.adopt(pc) {
		t.Fatal("adopt: the loop refused a client")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.incoming[len(l.incoming)-1]
}

// driveLoop runs turns of l, each on the events epoll has then, until done reports true;
// it fails the test when 10 s pass first.
func driveLoop(t *testing.T, l *muxLoop, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		n, err := syscall.EpollWait(l.epfd, l.events, 10)
		if err != nil && err != syscall.EINTR {
			t.Fatal(err)
		}
		if n > 0 && !l.turn(n) {
			t.Fatal("the loop ended")
		}
	}
}

// readReply reads one reply from r in the background; the channel has its bytes (or the
// error) once it is whole.
func readReply(r *bufio.Reader) <-chan string {
	ch := make(chan string, 1)
	go func() {
		var s replyScanner
		var b []byte
		for {
			c, err := r.ReadByte()
			if err != nil {
				ch <- "error: " + err.Error()
				return
			}
			b = append(b, c)
			if _, done := s.scan([]byte{c}); done {
				ch <- string(b)
				return
			}
		}
	}()
	return ch
}

// received reports whether ch has a value, storing it in *got.
func received(ch <-chan string, got *string) func() bool {
	return func() bool {
		select {
		case *got = <-ch:
			return true
		default:
			return false
		}
	}
}

// TestLoopUpstreamFDReuse: a shared connection fails early in a turn (a write to it
// fails while a client is read, say), and a client accepted meanwhile is given the same
// descriptor number, as dup gives the lowest free one, and is taken in later in that
// turn. Epoll reported the turn's events before the failure, so one of them may still
// name the failed connection's descriptor, with EPOLLHUP: it must not reach the new
// client, which would be hung up without having done anything.
func TestLoopUpstreamFDReuse(t *testing.T) {
	l := newTestLoop(t)
	pc, r, conn := testLoopConn(t, l.p)
	old := l.up[upReads].fd
	l.upFailed(upReads, errors.New("test: failed early in the turn"))

	// Fill every free descriptor below the failed one's number, so that the next dup
	// (the new client's) takes that number if it is free.
	var hold []int
	defer func() {
		for _, fd := range hold {
			_ = syscall.Close(fd)
		}
	}()
	for {
		fd, err := syscall.Dup(l.wakeR)
		if err != nil {
			t.Fatal(err)
		}
		if fd >= old {
			_ = syscall.Close(fd)
			break
		}
		hold = append(hold, fd)
	}
	c := testAdopt(t, l, pc)
	t.Logf("failed upstream descriptor %d, new client's %d", old, c.fd)
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}

	// The turn: the wake pipe (the new client), then the failed connection's event.
	l.events[0] = syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(l.wakeR)}
	l.events[1] = syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLERR | syscall.EPOLLHUP, Fd: int32(old)}
	if !l.turn(2) {
		t.Fatal("the loop ended")
	}
	if c.hup || c.closed || c.done {
		t.Fatalf("new client after a stale event of the failed connection it took the number of: hup %v, closed %v, done %v; want none",
			c.hup, c.closed, c.done)
	}
	var got string
	driveLoop(t, l, "the new client's PING to be answered", received(readReply(r), &got))
	if got != "+PONG\r\n" {
		t.Fatalf("PING: got %q; want +PONG", got)
	}
}

// TestLoopRedialSendsQueued: a shared connection fails early in a turn, and a client read
// later in that turn queues a command for it; the connection is dialled again at the end
// of the turn, and the command must go out on the new one without waiting for another
// client's event.
func TestLoopRedialSendsQueued(t *testing.T) {
	l := newTestLoop(t)
	pc, r, conn := testLoopConn(t, l.p)
	c := testAdopt(t, l, pc)
	l.events[0] = syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(l.wakeR)}
	if !l.turn(1) {
		t.Fatal("the loop ended")
	}

	l.upFailed(upReads, errors.New("test: failed early in the turn"))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	l.events[0] = syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(c.fd)}
	if !l.turn(1) {
		t.Fatal("the loop ended")
	}
	if u := &l.up[upReads]; u.fd < 0 || len(u.out) > 0 && u.events&syscall.EPOLLOUT == 0 {
		t.Fatalf("after the redial: descriptor %d, %d bytes to send, events %#x; want a connection that sends them or waits for room",
			u.fd, len(u.out), u.events)
	}
	var got string
	driveLoop(t, l, "the PING queued for the failed connection to be answered", received(readReply(r), &got))
	if got != "+PONG\r\n" {
		t.Fatalf("PING: got %q; want +PONG", got)
	}
}
