package sampler

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Dialling Redis, and what a client gets when the proxy cannot: see Proxy.

// errUpstreamIsSelf is dialUpstream's error when the upstream address leads to the
// proxy's own listener.
var errUpstreamIsSelf = errors.New("it reaches this proxy itself")

// selfRetry is how long the proxy dials nothing after a connection to the upstream
// address reached its own listener: every client is refused at once meanwhile. The
// upstream may be a name that resolves to another address later.
const selfRetry = 10 * time.Second

// dialUpstream connects to Redis, for a shared connection or a client's own. A
// connection that reached the proxy's own listener (Upstream is Listen, or another
// address that leads to the same socket) is closed before a byte goes out on it, and the
// proxy dials nothing for selfRetry: otherwise each such dial comes back as a new client,
// which dials again, until the process runs out of file descriptors. The first time, it
// logs an error.
func (p *Proxy) dialUpstream() (net.Conn, error) {
	if until := p.selfUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return nil, errUpstreamIsSelf
	}
	conn, err := p.dialer.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		return nil, err
	}
	listen, ok1 := addrPort(p.ln.Addr())
	remote, ok2 := addrPort(conn.RemoteAddr())
	if !ok1 || !ok2 || !reachesListener(listen, remote, isLocalAddr) {
		return conn, nil
	}
	_ = conn.Close()
	p.selfUntil.Store(time.Now().Add(selfRetry).UnixNano())
	if p.selfLogged.CompareAndSwap(false, true) {
		p.log.Error("proxy: the upstream address (proxy.upstream) reaches this tap itself, not Redis: every client gets an error reply until it names the Redis server",
			"upstream", p.upstream, "reached", remote, "listen", p.ln.Addr())
	} else {
		p.log.Debug("proxy: the upstream address reaches this tap itself", "upstream", p.upstream, "reached", remote)
	}
	return nil, errUpstreamIsSelf
}

// addrPort returns a TCP address as a netip.AddrPort, its IP unmapped.
func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.IsValid()
}

// reachesListener reports whether a connection made on this host to remote (its address
// once connected) reached a socket listening on listen: remote is listen, or, when
// listen's host is unspecified (every address of the host, IPv4 and IPv6, as Go's "tcp"
// listeners take them), remote has listen's port and an address of this host (isLocal).
// No other socket can listen there meanwhile, so a Redis on this host answers on another
// port and a Redis elsewhere has an address that is not this host's.
func reachesListener(listen, remote netip.AddrPort, isLocal func(netip.Addr) bool) bool {
	if remote.Port() != listen.Port() {
		return false
	}
	l, r := listen.Addr().Unmap(), remote.Addr().Unmap()
	if !l.IsUnspecified() {
		return l == r
	}
	return isLocal(r)
}

// isLocalAddr reports whether a is an address of this host: a loopback address (the
// whole of 127.0.0.0/8 is this host's), an unspecified one (a connection to it goes to
// this host), or one of its interfaces'.
func isLocalAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// refuseWait bounds how long the proxy answers a client it has no upstream for: from
// its first command, or from its connecting when it sends nothing.
const refuseWait = 5 * time.Second

// refuseIdle ends the connection of a refused client that sends nothing more for that
// long after its last answer: a client library's own commands at connection and the
// app's first one come back to back.
const refuseIdle = 500 * time.Millisecond

// refuseMax bounds the commands answered with the error reply on one connection.
const refuseMax = 1024

// refuse answers the commands of a client that the proxy could not give an upstream (why
// says what went wrong), and that Redis has answered nothing, with an error reply each,
// until it sends nothing for refuseIdle (refuseWait at most), then ends its connection: a FIN, and what the client still
// sends read and dropped until it closes its side, or finLinger once the replies reached
// it (refuseWait at most). A Redis client shows a dropped connection as an I/O error;
// the reply says what is wrong. Every command is answered, not only the first: a client
// library sends its own commands when it connects (go-redis: HELLO, then CLIENT SETINFO)
// and ignores their errors, so the first command of the app's own comes later. sent is
// what the client sent already (to the shared connection's loop, which pinned it). While
// draining it answers nothing, as for any new command.
func (pc *proxyConn) refuse(sent []byte, why error) {
	p, c := pc.p, pc.client
	// Set before looking at draining: a stopReading that came first is seen there, and
	// one that comes after overrides the deadline.
	deadline := time.Now().Add(refuseWait)
	_ = c.SetReadDeadline(deadline)
	if p.draining.Load() {
		pc.finishClient()
		return
	}
	parser, err := NewRESPParser(RESPOptions{})
	if err != nil {
		return
	}
	reply := upstreamError(p.upstream, why)
	buf := make([]byte, 4096)
	out := make([]byte, 0, len(reply))
	answered := 0
	for chunk := sent; answered < refuseMax; {
		parser.Feed(chunk)
		out = out[:0]
		for answered < refuseMax && parser.Skip() {
			out = append(out, reply...)
			answered++
		}
		if parser.Err() != nil && answered < refuseMax {
			out = append(out, reply...) // what cannot be parsed ends the connection, answered
			answered = refuseMax
		}
		if len(out) > 0 {
			if p.draining.Load() {
				pc.finishClient()
				return
			}
			_ = c.SetWriteDeadline(deadline)
			if _, err := c.Write(out); err != nil {
				return
			}
		}
		if answered >= refuseMax {
			break
		}
		if answered > 0 {
			idle := time.Now().Add(refuseIdle)
			if idle.After(deadline) {
				idle = deadline
			}
			_ = c.SetReadDeadline(idle)
			if p.draining.Load() { // as above: a stopReading before this deadline is seen here
				pc.finishClient()
				return
			}
		}
		n, err := c.Read(buf)
		if n == 0 && err != nil {
			if answered == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				return // it left, sent nothing in time, or the drain began
			}
			break // refuseWait is over: end the connection
		}
		chunk = buf[:n]
	}
	acked := connSendQueue(c) == 0
	if !closeWrite(c) {
		return
	}
	if acked {
		_ = c.SetReadDeadline(time.Now().Add(finLinger))
	} else {
		_ = c.SetReadDeadline(time.Now().Add(refuseWait))
	}
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// upstreamError is the reply to each command of a client the proxy has no upstream
// for: a RESP simple error, which RESP2 and RESP3 clients (before and after HELLO 3)
// read alike, with Redis's ERR code first, as twemproxy answers, and no CR or LF inside:
//
//	-ERR hotkeyd proxy: upstream 127.0.0.1:6379 unreachable: connection refused
func upstreamError(upstream string, why error) []byte {
	msg := "ERR hotkeyd proxy: upstream " + upstream + " unreachable: " + shortReason(why)
	msg = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, msg)
	return []byte("-" + msg + "\r\n")
}

// shortReason is what went wrong in a dial error, without the operation and addresses
// that the reply names already: "connection refused", "i/o timeout", "no such host".
func shortReason(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return de.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}
