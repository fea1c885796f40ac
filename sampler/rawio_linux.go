//go:build linux

package sampler

import (
	"net"
	"syscall"
	"unsafe"
)

// The event loop's system calls. Its sockets and its epoll descriptor are non-blocking,
// so read, write and a zero-timeout epoll_wait return at once, and the loop makes them
// as raw system calls, without telling Go's scheduler that it may block, as syscall.Read
// and Write do on every call: the loop makes two calls per request at -P 1. Together
// with parking in Go's poller between turns (muxLoop.run), this took the proxy's CPU per
// request from 8.95 to 7.40 µs under redis-benchmark (docs/BENCHMARKS.md).

// rawRead is read(2) on a non-blocking descriptor.
func rawRead(fd int, b []byte) (int, error) {
	return rawIO(syscall.SYS_READ, fd, b)
}

// rawWrite is write(2) on a non-blocking descriptor.
func rawWrite(fd int, b []byte) (int, error) {
	return rawIO(syscall.SYS_WRITE, fd, b)
}

func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// pollNow is epoll_wait(2) with a zero timeout: the events ready now, without waiting.
// It is epoll_pwait with no signal mask, which every Linux architecture has.
func pollNow(epfd int, events []syscall.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd),
		uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// sendQueue returns how many bytes fd's socket has sent or holds that its peer has not
// acknowledged (SIOCOUTQ), -1 when it cannot tell. 0 means every byte written reached
// the peer's kernel: closing the socket then loses nothing, even if a reset follows.
func sendQueue(fd int) int {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		return -1
	}
	return int(n)
}

// connSendQueue is sendQueue of c's socket; -1 when c has none.
func connSendQueue(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	if rc.Control(func(fd uintptr) { n = sendQueue(int(fd)) }) != nil {
		return -1
	}
	return n
}
