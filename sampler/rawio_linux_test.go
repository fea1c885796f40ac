//go:build linux

package sampler

import (
	"bytes"
	"syscall"
	"testing"
)

// TestRawIO checks the loop's raw system calls on a non-blocking pipe watched by epoll:
// nothing to read is EAGAIN and no event, not a wait; written bytes are read back whole
// and make the pipe ready; a full pipe refuses writes with EAGAIN.
func TestRawIO(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(epfd)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		t.Fatal(err)
	}
	events := make([]syscall.EpollEvent, 4)
	buf := make([]byte, 64)

	if n, err := pollNow(epfd, events); n != 0 || err != nil {
		t.Fatalf("empty pipe: pollNow = %d, %v; want 0, nil", n, err)
	}
	if n, err := rawRead(p[0], buf); n != -1 || err != syscall.EAGAIN {
		t.Fatalf("empty pipe: rawRead = %d, %v; want -1, EAGAIN", n, err)
	}

	msg := []byte("*1\r\n$4\r\nPING\r\n")
	if n, err := rawWrite(p[1], msg); n != len(msg) || err != nil {
		t.Fatalf("rawWrite = %d, %v; want %d, nil", n, err, len(msg))
	}
	n, err := pollNow(epfd, events)
	if n != 1 || err != nil || events[0].Fd != int32(p[0]) || events[0].Events&syscall.EPOLLIN == 0 {
		t.Fatalf("after a write: pollNow = %d, %v, %+v; want the read end readable", n, err, events[0])
	}
	if n, err := rawRead(p[0], buf); err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("rawRead = %q, %v; want %q", buf[:max(n, 0)], err, msg)
	}
	if n, err := rawRead(p[0], buf); n != -1 || err != syscall.EAGAIN {
		t.Fatalf("drained pipe: rawRead = %d, %v; want -1, EAGAIN", n, err)
	}

	big := make([]byte, 1<<20) // more than a pipe holds
	n, err = rawWrite(p[1], big)
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("rawWrite of 1 MiB = %d, %v; want a short write", n, err)
	}
	if n, err := rawWrite(p[1], big); n != -1 || err != syscall.EAGAIN {
		t.Fatalf("full pipe: rawWrite = %d, %v; want -1, EAGAIN", n, err)
	}
}
