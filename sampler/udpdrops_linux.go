package sampler

import (
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// countKernelDrops asks the kernel to report, with each datagram, how many the socket has
// dropped so far (SO_RXQ_OVFL): those that came while its receive buffer was full.
func countKernelDrops(conn *net.UDPConn) bool {
	rc, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Control(func(fd uintptr) {
		ok = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1) == nil
	})
	return ok
}

// kernelDrops reads the socket's drop count from a datagram's control messages, without
// allocating; false when it carries none (the kernel sends it once drops have happened).
func kernelDrops(oob []byte) (uint32, bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if h.Len < unix.SizeofCmsghdr || uint64(h.Len) > uint64(len(oob)) {
			return 0, false
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && int(h.Len) >= unix.CmsgLen(4) {
			return *(*uint32)(unsafe.Pointer(&oob[unix.CmsgLen(0)])), true
		}
		next := unix.CmsgSpace(int(h.Len) - unix.CmsgLen(0))
		if next > len(oob) {
			return 0, false
		}
		oob = oob[next:]
	}
	return 0, false
}
