package sampler

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Multiplexing: the proxy carries the plain commands of every client over one shared
// connection to Redis, as twemproxy does, so Redis reads many clients' commands with one
// read and answers them with one write. A client stays on the shared connection while
// every command it sends is one that keeps no state on its connection and answers with
// exactly one reply (muxable). Its first other command — AUTH, SELECT, HELLO, MULTI,
// WATCH, a blocking pop, SUBSCRIBE, CLIENT, WAIT, a script, an unknown command, bytes that
// do not parse, or a command larger than the read buffer — pins it: the proxy waits until
// the shared connection has answered everything the client sent on it, dials the client a
// connection of its own, and from then on forwards its bytes both ways untouched, exactly
// as without multiplexing. Nothing a client can do on its own connection behaves
// differently, except WAIT and WAITAOF, which count only the writes sent after the pin.

// muxOpen is how many bytes of commands may wait for the shared connection before
// clients wait for it to drain; muxBacklog is how many reply bytes a client that does not
// read may have waiting before the proxy stops reading its commands.
const (
	muxOpen    = 4 << 20
	muxBacklog = 1 << 20
)

// muxRetry is how long the proxy gives every new client its own connection after a
// shared connection could not be opened or was refused (Redis wants AUTH, say).
const muxRetry = 10 * time.Second

// muxCommands are the commands a client may send on the shared connection: those of the
// command table that neither block nor run scripts, plus PING and ECHO.
var muxCommands = func() map[string]struct{} {
	m := map[string]struct{}{"PING": {}, "ECHO": {}}
	for name := range commands {
		switch name {
		case "BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BZPOPMIN", "BZPOPMAX", // block
			"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO": // scripts may SELECT (Redis < 7) and run long
			continue
		}
		m[name] = struct{}{}
	}
	return m
}()

// muxable reports whether a command may go over the shared connection.
func muxable(name []byte) bool {
	if len(name) == 0 || len(name) > maxCommandName {
		return false
	}
	var buf [maxCommandName]byte
	for i, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	_, ok := muxCommands[string(buf[:len(name)])]
	return ok
}

// muxUpstream is one connection to Redis that carries the commands of many clients. The
// clients write to it themselves, one at a time, each writing what the others queued
// while it wrote; one goroutine reads the replies and hands each to the client at the
// head of the queue.
type muxUpstream struct {
	p    *Proxy
	conn net.Conn

	mu      sync.Mutex
	drained sync.Cond // signalled when out is written
	out     []byte    // commands not yet written
	spare   []byte    // out's other buffer
	writing bool      // a client is writing out
	queue   muxQueue  // whose replies come next
	dead    bool      // the connection failed: no more commands
}

// muxEntry is n consecutive replies owed to one client.
type muxEntry struct {
	pc *proxyConn
	n  int
}

// muxQueue is a FIFO of muxEntry in a ring that grows.
type muxQueue struct {
	ring []muxEntry
	head int
	len  int
}

func (q *muxQueue) push(pc *proxyConn, n int) {
	if q.len > 0 {
		if tail := &q.ring[(q.head+q.len-1)%len(q.ring)]; tail.pc == pc {
			tail.n += n
			return
		}
	}
	if q.len == len(q.ring) {
		ring := make([]muxEntry, max(16, 2*len(q.ring)))
		for i := range q.len {
			ring[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = ring, 0
	}
	q.ring[(q.head+q.len)%len(q.ring)] = muxEntry{pc, n}
	q.len++
}

// front returns the entry at the head; ok is false when the queue is empty.
func (q *muxQueue) front() (e *muxEntry, ok bool) {
	if q.len == 0 {
		return nil, false
	}
	return &q.ring[q.head], true
}

func (q *muxQueue) pop() {
	q.ring[q.head] = muxEntry{}
	q.head = (q.head + 1) % len(q.ring)
	q.len--
}

// shared returns the shared upstream connection, opening one when there is none or the
// last one failed; nil when multiplexing is off, the proxy is closing, or Redis cannot be
// shared now (then the client gets a connection of its own).
func (p *Proxy) shared() *muxUpstream {
	if !p.multiplex {
		return nil
	}
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	if u := p.mux; u != nil {
		u.mu.Lock()
		dead := u.dead
		u.mu.Unlock()
		if !dead {
			return u
		}
		p.mux = nil
	}
	if p.ctx.Err() != nil || time.Now().Before(p.muxRetryAt) {
		return nil
	}
	conn, err := p.openShared()
	if err != nil {
		p.muxRetryAt = time.Now().Add(muxRetry)
		p.log.Warn("proxy: cannot share an upstream connection; clients get one each for now",
			"upstream", p.upstream, "err", err, "retry_in", muxRetry)
		return nil
	}
	u := &muxUpstream{p: p, conn: conn}
	u.drained.L = &u.mu
	if !p.goTracked(u.readReplies) {
		_ = conn.Close()
		return nil
	}
	p.mux = u
	return u
}

// openShared dials Redis and checks with a PING that the connection can be shared: a
// Redis that wants AUTH answers -NOAUTH, and then each client must authenticate itself.
func (p *Proxy) openShared() (net.Conn, error) {
	conn, err := p.dialer.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		return nil, err
	}
	setNoDelay(conn)
	_ = conn.SetDeadline(time.Now().Add(p.dialer.Timeout))
	if _, err = io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err == nil {
		var line string
		line, err = bufio.NewReaderSize(conn, 64).ReadString('\n')
		if err == nil && line != "+PONG\r\n" {
			err = fmt.Errorf("PING answered %q", line)
		}
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// closeShared closes the shared connection, on Close.
func (p *Proxy) closeShared() {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	if p.mux != nil {
		_ = p.mux.conn.Close()
	}
}

// send queues cmds, n complete commands of pc, for the shared connection, and writes
// them unless another client is writing already (it then writes them too). It reports
// false, having queued nothing, when the connection has failed.
func (u *muxUpstream) send(pc *proxyConn, cmds []byte, n int) bool {
	u.mu.Lock()
	for len(u.out) >= muxOpen && !u.dead {
		u.drained.Wait()
	}
	if u.dead {
		u.mu.Unlock()
		return false
	}
	u.out = append(u.out, cmds...)
	u.queue.push(pc, n)
	pc.owe(n)
	if u.writing {
		u.mu.Unlock()
		return true
	}
	u.writing = true
	// Let the clients that are ready to run add their commands first, so that one
	// write carries them all: as an event loop writes once per turn.
	u.mu.Unlock()
	runtime.Gosched()
	u.mu.Lock()
	for len(u.out) > 0 && !u.dead {
		b := u.out
		u.out = u.spare[:0]
		u.mu.Unlock()
		_, err := u.conn.Write(b)
		u.mu.Lock()
		u.spare = b[:0]
		u.drained.Broadcast()
		if err != nil {
			u.failLocked(err)
		}
	}
	u.writing = false
	u.mu.Unlock()
	return true
}

// failLocked marks the connection dead and closes it; the reader then closes every
// client still owed a reply. Called with u.mu held.
func (u *muxUpstream) failLocked(err error) {
	if !u.dead {
		u.dead = true
		u.p.log.Debug("proxy: shared upstream connection failed", "err", err)
	}
	_ = u.conn.Close()
	u.drained.Broadcast()
}

// readReplies reads the shared connection's replies and hands each to the client whose
// command it answers, until the connection fails; then it closes every client still
// owed a reply, since those replies are lost.
func (u *muxUpstream) readReplies() {
	var scan replyScanner
	buf := make([]byte, max(u.p.bufSize, 64<<10))
	var pc *proxyConn // the client at the head of the queue
	left := 0         // how many replies it is owed, as far as this goroutine knows
	var err error
	for err == nil {
		var n int
		n, err = u.conn.Read(buf)
		data := buf[:n]
		for len(data) > 0 && err == nil {
			if pc == nil {
				if pc, left = u.head(0); pc == nil {
					err = errors.New("a reply no client is waiting for")
					break
				}
			}
			// Deliver in one piece pc's whole replies in data, and the start of one
			// that continues past data.
			end, replies := 0, 0
			for end < len(data) && replies < left {
				k, done := scan.scan(data[end:])
				if scan.err != nil {
					err = scan.err
					break
				}
				end += k
				if done {
					replies++
				}
			}
			pc.deliver(data[:end], replies)
			data = data[end:]
			if replies > 0 {
				pc, left = u.head(replies)
			}
		}
	}
	u.mu.Lock()
	u.failLocked(err)
	for {
		e, ok := u.queue.front()
		if !ok {
			break
		}
		e.pc.abandon()
		u.queue.pop()
	}
	u.mu.Unlock()
}

// head takes served replies off the head of the queue and returns the client at the
// head then and how many replies it is owed; nil when no one is owed a reply.
func (u *muxUpstream) head(served int) (*proxyConn, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.queue.front()
	if served > 0 && ok {
		if e.n -= served; e.n == 0 {
			u.queue.pop()
			e, ok = u.queue.front()
		}
	}
	if !ok {
		return nil, 0
	}
	return e.pc, e.n
}

// The client side of multiplexing, on proxyConn. Its fields are guarded by pc.wmu:
// owed, backlog, flushing, gone.

// owe records that the shared connection owes pc n more replies.
func (pc *proxyConn) owe(n int) {
	pc.wmu.Lock()
	pc.owed += n
	pc.wmu.Unlock()
}

// deliver writes b, the bytes of the shared connection's replies to pc, which complete
// replies of them, to the client: at once when its socket has room, else from a
// goroutine of its own, in order either way.
func (pc *proxyConn) deliver(b []byte, replies int) {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	pc.owed -= replies
	if !pc.gone && len(b) > 0 {
		if pc.flushing {
			pc.backlog = append(pc.backlog, b...)
		} else {
			n, err := pc.tryWrite(b)
			switch {
			case err != nil:
				pc.goneLocked(err)
			case n < len(b):
				pc.backlog = append(pc.backlog, b[n:]...)
				pc.flushing = true
				if !pc.p.goTracked(pc.flush) {
					pc.goneLocked(net.ErrClosed)
				}
			}
		}
	}
	if pc.owed == 0 || pc.gone {
		pc.settled.Broadcast()
	}
}

// tryWrite writes as much of b to the client as its socket takes now, without waiting.
func (pc *proxyConn) tryWrite(b []byte) (n int, err error) {
	if pc.rawClient == nil {
		return 0, nil // the flush goroutine writes it all
	}
	rerr := pc.rawClient.Write(func(fd uintptr) bool {
		for n < len(b) {
			k, e := sysIO(syscall.Write, fd, b[n:])
			switch e {
			case nil:
				n += k
			case syscall.EINTR:
			case syscall.EAGAIN:
				return true
			default:
				err = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	return n, err
}

// flush writes the backlog to the client, waiting as long as the client takes to read.
func (pc *proxyConn) flush() {
	var spare []byte
	for {
		pc.wmu.Lock()
		if len(pc.backlog) == 0 || pc.gone {
			pc.flushing = false
			pc.settled.Broadcast()
			pc.wmu.Unlock()
			return
		}
		b := pc.backlog
		pc.backlog = spare[:0]
		pc.wmu.Unlock()
		_, err := pc.client.Write(b)
		spare = b
		pc.wmu.Lock()
		if err != nil {
			pc.goneLocked(err)
		}
		pc.settled.Broadcast() // the backlog shrank
		pc.wmu.Unlock()
	}
}

// goneLocked gives up on the client after a failed write; called with pc.wmu held.
func (pc *proxyConn) goneLocked(err error) {
	if !pc.gone {
		pc.gone = true
		pc.backlog = nil
		pc.p.log.Debug("proxy: write client", "client", pc.client.RemoteAddr(), "err", err)
		_ = pc.client.Close()
	}
	pc.settled.Broadcast()
}

// abandon closes a client whose replies the failed shared connection will never send.
func (pc *proxyConn) abandon() {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	pc.goneLocked(errLostReplies)
}

var errLostReplies = errors.New("the shared upstream connection failed with replies owed")

// abandonIfOwed closes the client when it is owed replies, and reports whether it did.
func (pc *proxyConn) abandonIfOwed() bool {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	if pc.owed == 0 {
		return false
	}
	pc.goneLocked(errLostReplies)
	return true
}

// waitSettled waits until the client has every reply the shared connection owed it,
// written (all), or until its backlog is under muxBacklog (!all), or it is gone.
func (pc *proxyConn) waitSettled(all bool) {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	for !pc.gone {
		if all && pc.owed == 0 && !pc.flushing {
			return
		}
		if !all && len(pc.backlog) < muxBacklog {
			return
		}
		pc.settled.Wait()
	}
}

// runShared serves the client over the shared connection u until it must be pinned or
// is done. It returns pin true with rest, the bytes it read and did not forward, when the
// client needs its own connection from here on.
func (pc *proxyConn) runShared(u *muxUpstream, buf []byte) (rest []byte, pin bool) {
	p := pc.p
	ps := pc.parser
	pending := 0 // buf[:pending] is read, parsed and not yet forwarded
	base := ps.Offset()

	err := readInto(pc.client, func() []byte { return buf[pending:] }, func(n int) bool {
		ps.Feed(buf[pending : pending+n])
		pending += n
		end, cmds := 0, 0 // buf[:end] holds cmds whole commands that may be shared
		stop := false
		for {
			if !pc.nextCommand() {
				break
			}
			if !muxable(ps.Name()) {
				stop = true
				break
			}
			end = int(ps.Offset() - base)
			cmds++
		}
		if ps.Err() != nil || pending == len(buf) && end == 0 {
			stop = true // bytes Redis must judge, or a command too large to hold
		}
		if cmds > 0 {
			pc.waitSettled(false)
			for !u.send(pc, buf[:end], cmds) {
				// The shared connection failed. If it owed this client replies, they
				// are lost and the client must go; otherwise take the next shared
				// connection, or one of its own.
				if pc.abandonIfOwed() {
					return false
				}
				if u = p.shared(); u == nil {
					stop = true
					end = 0
					break
				}
			}
			copy(buf, buf[end:pending])
			pending -= end
			base += int64(end)
		}
		if stop {
			rest, pin = buf[:pending], true
			return false
		}
		return true
	})
	if pin {
		pc.sampleRest()
		pc.waitSettled(true)
		pc.wmu.Lock()
		gone := pc.gone
		pc.wmu.Unlock()
		return rest, !gone
	}
	if err == io.EOF {
		// The client has sent everything: answer what it asked, then close.
		pc.waitSettled(true)
	} else if err != nil {
		p.log.Debug("proxy: read client", "client", pc.client.RemoteAddr(), "err", err)
	}
	pc.wmu.Lock()
	pc.gone = true // drop replies still coming
	pc.wmu.Unlock()
	return nil, false
}
