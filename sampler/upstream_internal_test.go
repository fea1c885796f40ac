package sampler

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
)

func TestReachesListener(t *testing.T) {
	// A host with the loopback addresses and 192.0.2.2 (and its IPv6 fd00::2).
	local := func(a netip.Addr) bool {
		return a.IsLoopback() || a == netip.MustParseAddr("192.0.2.2") || a == netip.MustParseAddr("fd00::2")
	}
	tests := []struct {
		listen, remote string
		want           bool
	}{
		{"127.0.0.1:7441", "127.0.0.1:7441", true},
		{"127.0.0.1:7441", "127.0.0.1:6379", false}, // a Redis on the same host
		{"127.0.0.1:7441", "127.0.0.2:7441", false}, // another loopback address: not this socket
		{"127.0.0.1:7441", "[::ffff:127.0.0.1]:7441", true},
		{"[::1]:7441", "[::1]:7441", true},
		{"[::1]:7441", "127.0.0.1:7441", false},
		{"[::]:7441", "127.0.0.1:7441", true}, // ":7441" and upstream localhost:7441
		{"[::]:7441", "[::1]:7441", true},
		{"[::]:7441", "127.0.0.2:7441", true}, // another address that reaches the same socket
		{"[::]:7441", "192.0.2.2:7441", true},
		{"[::]:7441", "[fd00::2]:7441", true},
		{"0.0.0.0:7441", "192.0.2.2:7441", true},
		{"[::]:7441", "192.0.2.3:7441", false}, // a Redis on another host, on the same port
		{"[::]:7441", "192.0.2.2:6379", false}, // a Redis on this host, on another port
		{"192.0.2.2:7441", "192.0.2.2:7441", true},
		{"192.0.2.2:7441", "127.0.0.1:7441", false},
	}
	for _, tt := range tests {
		listen, remote := netip.MustParseAddrPort(tt.listen), netip.MustParseAddrPort(tt.remote)
		if got := reachesListener(listen, remote, local); got != tt.want {
			t.Errorf("reachesListener(%s, %s): got %v; want %v", tt.listen, tt.remote, got, tt.want)
		}
	}
}

func TestIsLocalAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.2", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"0.0.0.0", true},
		{"192.0.2.200", false}, // TEST-NET-1: on no interface here, unless 192.0.2.200 is ours
		{"203.0.113.7", false},
	}
	addrs, _ := net.InterfaceAddrs()
	for _, tt := range tests {
		want := tt.want
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.String() == tt.addr {
				want = true
			}
		}
		if got := isLocalAddr(netip.MustParseAddr(tt.addr)); got != want {
			t.Errorf("isLocalAddr(%s): got %v; want %v", tt.addr, got, want)
		}
	}
	// Every address of an interface is this host's.
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !isLocalAddr(ip) {
				t.Errorf("isLocalAddr(%s), an interface's address: got false; want true", ip)
			}
		}
	}
}

func TestUpstreamError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		upstream string
		err      error
		want     string
	}{
		{"127.0.0.1:6379", refused, "-ERR hotkeyd proxy: upstream 127.0.0.1:6379 unreachable: connection refused\r\n"},
		{"redis:6379", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "redis"}},
			"-ERR hotkeyd proxy: upstream redis:6379 unreachable: no such host\r\n"},
		{"127.0.0.1:7441", errUpstreamIsSelf, "-ERR hotkeyd proxy: upstream 127.0.0.1:7441 unreachable: it reaches this proxy itself\r\n"},
		{"h:1", fmt.Errorf("wrapped: %w", errors.New("a\r\nb")), "-ERR hotkeyd proxy: upstream h:1 unreachable: wrapped: a  b\r\n"},
	}
	for _, tt := range tests {
		if got := string(upstreamError(tt.upstream, tt.err)); got != tt.want {
			t.Errorf("upstreamError(%q, %v): got %q; want %q", tt.upstream, tt.err, got, tt.want)
		}
	}
}
