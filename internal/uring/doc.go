// Package uring submits batches of non-blocking socket sends and receives to the Linux
// kernel in one system call each, through io_uring.
//
// The proxy tap's event loop makes a write to a client for almost every reply and a read
// from a client for almost every command; on the machine measured, each system call
// costs about a microsecond before it does any work, a sixth of a small send on loopback
// TCP (BenchmarkSyscall, BenchmarkSend; docs/BENCHMARKS.md). A Batch gathers the operations of one turn and issues them with one
// io_uring_enter. Every operation is flagged MSG_DONTWAIT, so the kernel runs each at
// once, in the order queued, and completes it with what it did: the bytes sent or read,
// or -EAGAIN where the socket had no room or nothing to read. So Submit returns with
// every result known and the kernel holding no buffer, and a caller handles each result
// exactly as that of a non-blocking write(2) or read(2).
//
// New fails where io_uring is missing or forbidden (kernels before 5.19, a seccomp
// profile such as Docker's default, kernel.io_uring_disabled): callers then make the
// system calls one by one. A Batch is not safe for concurrent use.
package uring
