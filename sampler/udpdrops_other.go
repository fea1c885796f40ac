//go:build !linux

package sampler

import "net"

// countKernelDrops: only Linux reports a socket's drops with its datagrams.
func countKernelDrops(*net.UDPConn) bool { return false }

func kernelDrops([]byte) (uint32, bool) { return 0, false }
