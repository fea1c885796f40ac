package uring

import (
	"fmt"
	"syscall"
	"testing"
)

// BenchmarkSyscall is the cost of a system call that does nothing (getppid): what each
// read or write that a Batch gathers saves.
func BenchmarkSyscall(b *testing.B) {
	for b.Loop() {
		syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
}

// BenchmarkSend sends a 11-byte reply to each of n loopback TCP connections, whose
// peers a goroutine each reads, with a write(2) each (the baseline) and with one
// Batch; ns/op is per send.
func BenchmarkSend(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8, 16} {
		fds := readPeers(b, n)
		msg := []byte("$5\r\nhello\r\n")
		b.Run(fmt.Sprintf("write/conns=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				fd := fds[i%n]
				for {
					if _, err := syscall.Write(fd, msg); err != syscall.EAGAIN {
						break
					}
				}
			}
		})
		b.Run(fmt.Sprintf("batch/conns=%d", n), func(b *testing.B) {
			batch := newBatch(b, 16)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				batch.Send(fds[i%n], msg)
				if batch.Len() == n {
					if _, err := batch.Submit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if _, err := batch.Submit(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// readPeers returns n loopback TCP connections' sending descriptors, non-blocking, each
// with a goroutine reading its peer until the benchmark ends.
func readPeers(b *testing.B, n int) []int {
	b.Helper()
	fds := make([]int, n)
	for i := range fds {
		a, z := tcpPair(b)
		fds[i] = a
		if err := syscall.SetNonblock(z, false); err != nil {
			b.Fatal(err)
		}
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if k, err := syscall.Read(z, buf); k <= 0 && err != syscall.EINTR {
					return
				}
			}
		}()
	}
	return fds
}
