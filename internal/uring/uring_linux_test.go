package uring

import (
	"bytes"
	"errors"
	"net"
	"syscall"
	"testing"
)

func newBatch(t testing.TB, entries int) *Batch {
	t.Helper()
	b, err := New(entries)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("io_uring here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// tcpPair returns the descriptors of both ends of a loopback TCP connection, non-blocking.
func tcpPair(t testing.TB) (int, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fd := func(conn net.Conn) int {
		f, err := conn.(*net.TCPConn).File()
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
		nfd, err := syscall.Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		if err := syscall.SetNonblock(nfd, true); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Close(nfd) })
		return nfd
	}
	return fd(c), fd(s)
}

func TestNewEntries(t *testing.T) {
	for _, n := range []int{0, 3, 8192, -1} {
		if _, err := New(n); err == nil || errors.Is(err, ErrUnsupported) {
			t.Errorf("New(%d): got %v; want an error naming the entries allowed", n, err)
		}
	}
}

// TestBatchInOrder sends to three sockets, then receives from them and from one with
// nothing to read, in one batch each: each result is that of its own operation.
func TestBatchInOrder(t *testing.T) {
	b := newBatch(t, 8)
	var a, z [4]int
	for i := range a {
		a[i], z[i] = tcpPair(t)
	}
	msgs := [][]byte{[]byte("one"), []byte("second"), []byte("third message")}
	for i, m := range msgs {
		if k, ok := b.Send(a[i], m); !ok || k != i {
			t.Fatalf("Send %d: got %d, %v; want %d, true", i, k, ok, i)
		}
	}
	if b.Len() != 3 {
		t.Fatalf("Len: got %d; want 3", b.Len())
	}
	res, err := b.Submit()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if int(res[i]) != len(m) {
			t.Errorf("send %d: got %d; want %d", i, res[i], len(m))
		}
	}
	if b.Len() != 0 {
		t.Fatalf("Len after Submit: got %d; want 0", b.Len())
	}
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, 64)
		if _, ok := b.Recv(z[i], bufs[i]); !ok {
			t.Fatal("Recv: batch full")
		}
	}
	res, err = b.Submit()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("results: got %d; want 4", len(res))
	}
	for i, m := range msgs {
		// Loopback delivers at once: the bytes are there when send returns.
		if got := bufs[i][:max(res[i], 0)]; !bytes.Equal(got, m) {
			t.Errorf("recv %d: got %q (%d); want %q", i, got, res[i], m)
		}
	}
	if res[3] != -int32(syscall.EAGAIN) {
		t.Errorf("recv with nothing to read: got %d; want -EAGAIN (%d)", res[3], -int32(syscall.EAGAIN))
	}
}

// TestBatchFull: a send to a socket with no room completes at once with what fit, then
// -EAGAIN, as write(2) on a non-blocking socket does; a closed peer gives -EPIPE, not a
// SIGPIPE.
func TestBatchFull(t *testing.T) {
	b := newBatch(t, 4)
	a, z := tcpPair(t)
	big := make([]byte, 64<<20)
	sent := 0
	for range 2 {
		b.Send(a, big)
		res, err := b.Submit()
		if err != nil {
			t.Fatal(err)
		}
		sent += max(int(res[0]), 0)
		if res[0] < 0 && res[0] != -int32(syscall.EAGAIN) {
			t.Fatalf("send to a full socket: got %d; want bytes or -EAGAIN", res[0])
		}
	}
	if sent == 0 || sent >= 2*len(big) {
		t.Fatalf("sent %d of %d bytes to a peer that reads nothing; want a part", sent, 2*len(big))
	}
	b.Send(a, []byte("x"))
	res, err := b.Submit()
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != -int32(syscall.EAGAIN) {
		t.Errorf("send to a full socket: got %d; want -EAGAIN", res[0])
	}
	_ = syscall.Close(z)
	a2, z2 := tcpPair(t)
	_ = syscall.Shutdown(z2, syscall.SHUT_RDWR)
	_ = syscall.Close(z2)
	var got int32
	for range 3 { // the first send after the peer closed may still be taken
		b.Send(a2, []byte("x"))
		res, err := b.Submit()
		if err != nil {
			t.Fatal(err)
		}
		if got = res[0]; got < 0 {
			break
		}
	}
	if got != -int32(syscall.EPIPE) && got != -int32(syscall.ECONNRESET) {
		t.Errorf("send to a closed peer: got %d; want -EPIPE or -ECONNRESET", got)
	}
}

func TestBatchCap(t *testing.T) {
	b := newBatch(t, 2)
	a, _ := tcpPair(t)
	if b.Cap() != 2 {
		t.Fatalf("Cap: got %d; want 2", b.Cap())
	}
	for i := range 2 {
		if _, ok := b.Send(a, []byte("x")); !ok {
			t.Fatalf("Send %d: batch full", i)
		}
	}
	if _, ok := b.Send(a, []byte("x")); ok {
		t.Fatal("Send past Cap: got true; want false")
	}
	if _, ok := b.Recv(a, nil); ok {
		t.Fatal("Recv into an empty buffer: got true; want false")
	}
	if res, err := b.Submit(); err != nil || len(res) != 2 || res[0] != 1 || res[1] != 1 {
		t.Fatalf("Submit: got %v, %v; want [1 1]", res, err)
	}
	if res, err := b.Submit(); err != nil || len(res) != 0 {
		t.Fatalf("empty Submit: got %v, %v; want no results", res, err)
	}
}

// TestBatchBroken: when io_uring_enter fails, Submit says so, nothing queued ran, and
// the batch is empty (the proxy's loop then makes the same calls one by one).
func TestBatchBroken(t *testing.T) {
	b := newBatch(t, 4)
	a, z := tcpPair(t)
	b.Send(a, []byte("lost"))
	null, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(null)
	if err := syscall.Dup3(null, b.Fd(), syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Submit(); err == nil {
		t.Fatalf("Submit on a broken ring: got %v, nil; want an error", res)
	}
	if b.Len() != 0 {
		t.Errorf("Len after a failed Submit: got %d; want 0", b.Len())
	}
	buf := make([]byte, 8)
	if n, err := syscall.Read(z, buf); err != syscall.EAGAIN {
		t.Errorf("the peer read %q, %v; want nothing (EAGAIN)", buf[:max(n, 0)], err)
	}
}

// TestBatchDrop: operations dropped do not run, and the batch is empty and usable.
func TestBatchDrop(t *testing.T) {
	b := newBatch(t, 4)
	a, z := tcpPair(t)
	b.Send(a, []byte("dropped"))
	b.Drop()
	if b.Len() != 0 {
		t.Fatalf("Len after Drop: got %d; want 0", b.Len())
	}
	b.Send(a, []byte("sent"))
	if res, err := b.Submit(); err != nil || len(res) != 1 || res[0] != 4 {
		t.Fatalf("Submit after Drop: got %v, %v; want [4]", res, err)
	}
	buf := make([]byte, 16)
	n, err := syscall.Read(z, buf)
	if err != nil || string(buf[:n]) != "sent" {
		t.Errorf("the peer read %q, %v; want %q", buf[:max(n, 0)], err, "sent")
	}
}
