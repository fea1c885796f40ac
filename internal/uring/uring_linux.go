package uring

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The io_uring ABI (include/uapi/linux/io_uring.h). Its system call numbers are the same
// on every architecture.
const (
	sysSetup = 425
	sysEnter = 426

	opSend = 26 // IORING_OP_SEND
	opRecv = 27 // IORING_OP_RECV

	setupSubmitAll   = 1 << 7 // IORING_SETUP_SUBMIT_ALL: a bad entry does not stop the rest
	setupCoopTaskrun = 1 << 8 // IORING_SETUP_COOP_TASKRUN

	enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	featSingleMmap   = 1 << 0 // IORING_FEAT_SINGLE_MMAP
	featNoDrop       = 1 << 1 // IORING_FEAT_NODROP
	featSubmitStable = 1 << 2 // IORING_FEAT_SUBMIT_STABLE

	offSQRing = 0
	offSQEs   = 0x10000000
)

// params is struct io_uring_params; sqOff and cqOff are struct io_sqring_offsets and
// io_cqring_offsets, whose last field, a __u64, is the last two words.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  [10]uint32 // head, tail, ring_mask, ring_entries, flags, dropped, array, …
	cqOff                                                                  [10]uint32 // head, tail, ring_mask, ring_entries, overflow, cqes, …
}

// sqe is struct io_uring_sqe, 64 bytes.
type sqe struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	opFlags  uint32 // msg_flags for send and recv
	userData uint64
	bufIndex uint16
	pers     uint16
	splice   int32
	addr3    uint64
	pad      uint64
}

// cqe is struct io_uring_cqe, 16 bytes.
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// ErrUnsupported is returned by New where io_uring cannot be used.
var ErrUnsupported = errors.New("uring: io_uring is not available")

// Batch is an io_uring instance used for batches of up to Cap operations.
type Batch struct {
	fd      int
	ring    []byte // the SQ and CQ rings, one mapping
	sqeMem  []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []sqe
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []cqe
	n       int      // operations queued
	res     []int32  // their results, in the order queued
	bufs    [][]byte // the buffers of the operations queued, kept alive until Submit
}

// New returns a Batch of up to entries operations (a power of two, 1 to 4096).
func New(entries int) (*Batch, error) {
	if entries < 1 || entries > 4096 || entries&(entries-1) != 0 {
		return nil, fmt.Errorf("uring: %d entries: must be a power of two from 1 to 4096", entries)
	}
	p := params{flags: setupSubmitAll | setupCoopTaskrun}
	fd, _, errno := syscall.Syscall(sysSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("%w: io_uring_setup: %v", ErrUnsupported, errno)
	}
	b := &Batch{fd: int(fd)}
	syscall.CloseOnExec(b.fd)
	const want = featSingleMmap | featNoDrop | featSubmitStable
	if p.features&want != want {
		_ = syscall.Close(b.fd)
		return nil, fmt.Errorf("%w: features %#x lack %#x", ErrUnsupported, p.features, want)
	}
	size := max(p.sqOff[6]+p.sqEntries*4, p.cqOff[5]+p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	var err error
	b.ring, err = syscall.Mmap(b.fd, offSQRing, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		_ = syscall.Close(b.fd)
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, os.NewSyscallError("mmap", err))
	}
	b.sqeMem, err = syscall.Mmap(b.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		_ = syscall.Munmap(b.ring)
		_ = syscall.Close(b.fd)
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, os.NewSyscallError("mmap", err))
	}
	base := unsafe.Pointer(&b.ring[0])
	word := func(off uint32) *uint32 { return (*uint32)(unsafe.Add(base, off)) }
	b.sqHead, b.sqTail, b.sqMask = word(p.sqOff[0]), word(p.sqOff[1]), *word(p.sqOff[2])
	b.sqArray = unsafe.Slice(word(p.sqOff[6]), p.sqEntries)
	b.cqHead, b.cqTail, b.cqMask = word(p.cqOff[0]), word(p.cqOff[1]), *word(p.cqOff[2])
	b.cqes = unsafe.Slice((*cqe)(unsafe.Add(base, p.cqOff[5])), p.cqEntries)
	b.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&b.sqeMem[0])), p.sqEntries)
	b.res = make([]int32, p.sqEntries)
	b.bufs = make([][]byte, p.sqEntries)
	return b, nil
}

// Fd returns the io_uring descriptor.
func (b *Batch) Fd() int { return b.fd }

// Cap returns how many operations a batch holds.
func (b *Batch) Cap() int { return len(b.sqes) }

// Len returns how many operations are queued.
func (b *Batch) Len() int { return b.n }

// Send queues a send of p to the socket fd and returns its index in the batch; false
// when the batch is full. p must not be empty.
func (b *Batch) Send(fd int, p []byte) (int, bool) { return b.queue(opSend, fd, p) }

// Recv queues a receive into p from the socket fd and returns its index in the batch;
// false when the batch is full. p must not be empty.
func (b *Batch) Recv(fd int, p []byte) (int, bool) { return b.queue(opRecv, fd, p) }

func (b *Batch) queue(op uint8, fd int, p []byte) (int, bool) {
	if b.n == len(b.sqes) || len(p) == 0 {
		return 0, false
	}
	tail := *b.sqTail // only this side writes it
	i := tail & b.sqMask
	b.sqes[i] = sqe{opcode: op, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(&p[0]))),
		len: uint32(min(len(p), 1<<30)), opFlags: syscall.MSG_DONTWAIT | syscall.MSG_NOSIGNAL, userData: uint64(b.n)}
	b.sqArray[i] = i
	b.bufs[b.n] = p
	atomic.StoreUint32(b.sqTail, tail+1)
	b.n++
	return b.n - 1, true
}

// Drop forgets the queued operations, which do not run.
func (b *Batch) Drop() {
	atomic.StoreUint32(b.sqTail, atomic.LoadUint32(b.sqHead)) // the kernel reads the tail only when entered
	clear(b.bufs[:b.n])
	b.n = 0
}

// Submit issues the queued operations and returns their results, in the order queued:
// for each, the bytes sent or received, or a negated errno (-EAGAIN: no room, or
// nothing to read). The slice is valid until the next Submit, and the batch is empty
// again. An error with no results means that nothing ran. An error with results, which
// no kernel has been seen to give, means that io_uring failed after taking some of the
// operations: those whose result is -ECANCELED may or may not have run, and the Batch
// is not to be used again.
func (b *Batch) Submit() ([]int32, error) {
	n := b.n
	if n == 0 {
		return b.res[:0], nil
	}
	defer clear(b.bufs[:n])
	b.n = 0
	// Every operation runs at once (MSG_DONTWAIT) and is completed by the time the call
	// that takes it returns, so the first call need not tell Go's scheduler that it may
	// block (which would let the runtime hand the thread's work to another thread, with
	// the wake-ups that costs). Should a completion be missing all the same, the calls
	// that wait for it do tell it.
	for k := range b.res[:n] {
		b.res[k] = pending
	}
	submitted, done := 0, 0
	for first := true; submitted < n || done < n; first = false {
		var r uintptr
		var errno syscall.Errno
		if first {
			r, _, errno = syscall.RawSyscall6(sysEnter, uintptr(b.fd), uintptr(n), 0, 0, 0, 0)
		} else {
			r, _, errno = syscall.Syscall6(sysEnter, uintptr(b.fd), uintptr(n-submitted), uintptr(n-done), enterGetEvents, 0, 0)
		}
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0 && submitted == 0:
			b.Drop() // nothing was taken
			return nil, os.NewSyscallError("io_uring_enter", errno)
		case errno != 0:
			for k := range b.res[:n] {
				if b.res[k] == pending {
					b.res[k] = -int32(syscall.ECANCELED)
				}
			}
			return b.res[:n], fmt.Errorf("uring: %d of %d operations issued, %d completed: %w", submitted, n, done, os.NewSyscallError("io_uring_enter", errno))
		}
		submitted += int(r)
		head, tail := *b.cqHead, atomic.LoadUint32(b.cqTail)
		for ; head != tail; head++ {
			c := &b.cqes[head&b.cqMask]
			if c.userData < uint64(n) {
				b.res[c.userData] = c.res
				done++
			}
		}
		atomic.StoreUint32(b.cqHead, head)
	}
	return b.res[:n], nil
}

// pending marks a result not seen yet; no operation completes with it.
const pending = math.MinInt32

// Close releases the ring. Operations queued and not submitted are dropped.
func (b *Batch) Close() error {
	if b.fd < 0 {
		return nil
	}
	_ = syscall.Munmap(b.sqeMem)
	_ = syscall.Munmap(b.ring)
	err := syscall.Close(b.fd)
	b.fd = -1
	return err
}
