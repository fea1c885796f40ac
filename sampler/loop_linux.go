//go:build linux

package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/uring"
)

// muxLoop is the event loop of the shared upstream connections: one goroutine that
// waits on epoll for every multiplexed client and for Redis, reads each client's
// commands, writes what a turn gathered to Redis in one write per connection (or one
// per muxFlushAt bytes), and writes each reply straight to its client. Goroutines
// per client would cost a wake-up and a scheduling round per request and write to
// Redis in smaller batches; the loop costs one read and one write per request, and
// one epoll_wait per turn, all of them raw system calls (rawio_linux.go); between
// turns it parks in Go's poller. It owns its clients' sockets (duplicates of the
// accepted ones, outside Go's poller) until it closes them or hands a pinned client
// back to a goroutine of its own as a net.Conn.
//
// There are two shared connections for each protocol, RESP2 and RESP3: one for reads
// and one for writes, so that a write Redis holds back (CLIENT PAUSE WRITE, during a
// failover) holds back only writes, as it would on direct connections, and not every
// read queued behind it. A client's commands go to the connection its first command
// picks, and stay there while it is owed replies: its commands never overtake one
// another. A write it sends behind reads waits for their replies (see hold). A client
// that opens with HELLO 3 (go-redis v9, Lettuce) moves to the RESP3 pair, whose HELLO
// answers it; a Redis without RESP3 pins such a client instead.
type muxLoop struct {
	p      *Proxy
	epfd   int
	wakeR  int // a pipe that wakes the loop: new clients, Close
	wakeW  int
	events []syscall.EpollEvent

	mu       sync.Mutex // guards incoming, closing, drainReq and done
	incoming []*loopClient
	closing  bool
	drainReq bool // drain was called: the loop takes no new clients
	done     bool

	// Owned by the loop goroutine.
	up        [4]loopUpstream // upReads, upWrites, then the same in RESP3
	in        []byte          // replies read from any
	noResp3   bool            // Redis refused HELLO 3: no RESP3 pair
	limits    redisLimits     // Redis's, asked with CONFIG GET
	maxKnown  bool            // limits were asked since the loop began or a shared connection last failed
	outBytes  int             // the clients' replies waiting for room in their sockets, together (see deliver)
	chunks    chunkPool       // for the clients' outQueues
	inBufs    chunkPool       // the clients' input buffers, which only those with bytes pending hold (see spare)
	junk      []byte          // reads whose bytes are dropped
	paused    bool            // outBytes passed MaxOutputBytes: Redis's replies are not read (see pause)
	stall     *time.Timer     // while paused: sets stallDue and wakes the loop once the pause lasted pauseLimit
	stallDue  atomic.Bool
	clients   map[int]*loopClient
	throttled bool          // Redis is behind, or draining: clients' commands are not read
	draining  bool          // Shutdown: owed replies go out, then each client gets a FIN
	finished  []*loopClient // clients to close or hand back after this turn
	stopped   []*loopClient // clients whose parsing stopped at their window (see parseMore)
	failed    []int         // failed shared connections' descriptors, closed after this turn
	routes    routeMemo     // where the last command name went
	authArgs  authArgs      // parses AUTH and HELLO … AUTH again, with all their arguments
	batch     *uring.Batch  // nil where io_uring is not to be had: one system call each
	batchFD   int           // batch's descriptor as the loop started, -1 without: for tests
	sends     []loopSend    // the replies queued in batch, in its order (see deliver)
	reads     []*loopClient // the clients whose reads are queued in batch, in its order (see readClient)
	readRoom  int           // the room in their buffers
	hups      []*loopClient // clients that hung up, once their queued reads are done
}

// loopSend is a write of replies to a client queued in the loop's batch.
type loopSend struct {
	c *loopClient
	b []byte
}

// The shared connections: up[upReads] and up[upWrites] speak RESP2, and the same
// indexes plus upResp3 speak RESP3.
const (
	upReads  = 0
	upWrites = 1
	upResp3  = 2
)

// muxBatch is how many reads or writes the loop gathers for one system call.
const muxBatch = 256

// upNames names the shared connections in logs.
var upNames = [...]string{"reads", "writes", "reads-resp3", "writes-resp3"}

// loopUpstream is a shared connection to Redis.
type loopUpstream struct {
	fd     int // -1 while there is none
	out    []byte
	queue  muxQueue // whose replies come next
	scan   replyScanner
	push   bool // scan is in a push, not a reply
	events uint32
}

// loopClient is a multiplexed client.
type loopClient struct {
	pc      *proxyConn
	fd      int
	in      []byte // in[:pending] is read, parsed and not forwarded; nil while nothing is (see spare)
	pending int
	base    int64    // the parser's offset at in[0]
	out     outQueue // replies its socket had no room for yet
	owed    int      // replies Redis owes it
	on      int      // the shared connection that owes them
	held    int      // in[:held] are a write sent behind reads it is owed and what follows (see hold)
	heldN   int      // the commands in in[:held]
	more    bool     // its parsing stopped at window before the end of in[:pending] (see parseMore)
	window  int      // replies it may be owed before its parsing stops, muxWindow up to muxOwed
	resp3   bool     // it asked for RESP3 with HELLO 3
	authed  bool     // with UpstreamPassword set: it authenticated with the configured credentials
	rest    []byte   // once pinning: what it sent that goes to its own connection
	pinning bool     // it needs its own connection once settled
	eof     bool     // it sent everything
	hup     bool     // its socket hung up or failed: no more reads
	closed  bool     // replies are dropped; closed after the turn
	sending bool     // a write of its replies is queued in the loop's batch
	reading bool     // a read is queued in the loop's batch
	fin     bool     // draining, it was sent a FIN: it is read until it sends one too, unless all it was sent had reached it
	done    bool     // in finished
	events  uint32   // its registered epoll interest; regNone when not registered
}

const regNone = ^uint32(0)

// startLoop opens the shared connection and starts the loop; an error when Redis cannot
// be shared now, nil and nil when the proxy is closing.
func (p *Proxy) startLoop() (*muxLoop, error) {
	l, err := p.newLoop()
	if err != nil {
		return nil, err
	}
	if !p.goTracked(l.run) {
		l.closeFDs()
		return nil, nil
	}
	return l, nil
}

// newLoop returns a loop with its shared connections open, not running yet.
func (p *Proxy) newLoop() (*muxLoop, error) {
	l := &muxLoop{p: p, epfd: -1, wakeR: -1, wakeW: -1, batchFD: -1, clients: make(map[int]*loopClient),
		chunks: chunkPool{max: muxSpareOut / outChunk}, inBufs: chunkPool{max: muxIdleBufs, size: p.bufSize}}
	for i := range l.up {
		l.up[i].fd = -1
	}
	l.in = make([]byte, max(p.bufSize, 64<<10))
	l.junk = make([]byte, 16<<10)
	l.events = make([]syscall.EpollEvent, 256)
	l.failed = make([]int, 0, len(l.up))
	l.startBatch()
	if err := l.open(); err != nil {
		l.closeFDs()
		return nil, err
	}
	return l, nil
}

// startBatch sets up the batch of reads and writes, unless NoIOUring is set or io_uring
// is not to be had here. The first loop logs which.
func (l *muxLoop) startBatch() {
	p := l.p
	if p.noURing {
		return
	}
	b, err := uring.New(muxBatch)
	if err != nil {
		if !p.uringLog.Swap(true) {
			p.log.Info("proxy: io_uring is not available: the tap makes one system call for each read and write", "err", err)
		}
		return
	}
	if !p.uringLog.Swap(true) {
		p.log.Info("proxy: the tap reads its clients and writes their replies in batches through io_uring")
	}
	l.batch, l.batchFD = b, b.Fd()
	l.sends = make([]loopSend, 0, muxBatch)
	l.reads = make([]*loopClient, 0, muxBatch)
}

// open sets up epoll, the wake pipe and the two shared connections.
func (l *muxLoop) open() error {
	var err error
	if l.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	var pipe [2]int
	if err = syscall.Pipe2(pipe[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	l.wakeR, l.wakeW = pipe[0], pipe[1]
	if err = l.ctl(syscall.EPOLL_CTL_ADD, l.wakeR, syscall.EPOLLIN); err != nil {
		return err
	}
	for i := range l.up {
		if err = l.dial(i); errors.Is(err, errNoResp3) {
			l.noResp3 = true
		} else if err != nil {
			return err
		}
	}
	return nil
}

// dial opens shared connection i.
func (l *muxLoop) dial(i int) error {
	conn, err := l.p.openShared(i >= upResp3)
	if err != nil {
		return err
	}
	if !l.maxKnown {
		// Asked once per loop, and again after a shared connection failed: Redis may
		// have restarted with other limits.
		limits, err := l.p.redisLimits(conn)
		if err != nil {
			// The server closed the connection on CONFIG GET, as twemproxy does on a
			// command it does not know: Redis's defaults stand, on a new connection.
			_ = conn.Close()
			if conn, err = l.p.openShared(i >= upResp3); err != nil {
				return err
			}
			limits = defaultRedisLimits
		}
		if limits.maxOut > 0 && limits.maxOut != l.limits.maxOut {
			l.p.log.Warn("proxy: Redis limits each connection's replies (client-output-buffer-limit normal), and a shared connection's as a whole: a burst of replies to the multiplexed clients past it makes Redis close that connection, disconnecting every client owed replies on it; leave the limit at 0 (the tap bounds the replies it holds itself: proxy.max_output_bytes), or set it above the largest burst",
				"upstream", l.p.upstream, "limit_bytes", limits.maxOut)
		}
		if limits.evictClients != "" && limits.evictClients != l.limits.evictClients {
			l.p.log.Warn("proxy: Redis evicts its largest clients once all clients' buffers pass maxmemory-clients, and counts a shared connection as one client: evicting it disconnects every client on it at once; leave maxmemory-clients at 0 behind the tap (which bounds the replies it holds itself: proxy.max_output_bytes), or set proxy.multiplex: false",
				"upstream", l.p.upstream, "maxmemory_clients", limits.evictClients)
		}
		l.limits, l.maxKnown = limits, true
	}
	fd, err := takeFD(conn)
	if err != nil {
		return err
	}
	u := &l.up[i]
	u.fd, u.events = fd, syscall.EPOLLIN
	if l.paused {
		u.events = syscall.EPOLLRDHUP // see watchUp
	}
	if len(u.out) > 0 {
		// Commands queued in the turn that gave up the last connection: send them
		// as soon as this one has room, not when another event comes.
		u.events |= syscall.EPOLLOUT
	}
	return l.ctl(syscall.EPOLL_CTL_ADD, fd, u.events)
}

// takeFD returns a duplicate of conn's socket, still non-blocking, and closes conn, so
// that the socket leaves Go's poller and only the loop waits on it.
func takeFD(conn net.Conn) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		_ = conn.Close()
		return -1, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		_ = conn.Close()
		return -1, err
	}
	fd := -1
	cerr := raw.Control(func(s uintptr) { fd, err = dupCloseOnExec(int(s)) })
	_ = conn.Close()
	if cerr != nil {
		return -1, cerr
	}
	return fd, err
}

// dupCloseOnExec duplicates fd, closed on exec: no child started meanwhile inherits it.
func dupCloseOnExec(fd int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	nfd, err := syscall.Dup(fd)
	if err != nil {
		return -1, os.NewSyscallError("dup", err)
	}
	syscall.CloseOnExec(nfd)
	return nfd, nil
}

func (l *muxLoop) ctl(op, fd int, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd)}
	if err := syscall.EpollCtl(l.epfd, op, fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// adopt hands the loop a new client; false when the loop is closing (the client is
// then untouched).
func (l *muxLoop) adopt(pc *proxyConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing || l.drainReq || l.done {
		return false
	}
	fd, err := takeFD(pc.client)
	if err != nil {
		l.p.log.Debug("proxy: take client socket", "err", err)
		l.p.untrack(pc)
		return true // the client is closed: nothing more to do
	}
	l.incoming = append(l.incoming, &loopClient{pc: pc, fd: fd, events: regNone, window: muxWindow})
	l.p.stats.shared.Add(1)
	l.wake()
	return true
}

// alive reports whether the loop still takes clients.
func (l *muxLoop) alive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.closing && !l.drainReq && !l.done
}

// drain makes the loop take no more commands, deliver the replies its clients are owed,
// end each client's connection with a FIN once it is owed nothing, read and drop what the
// client sends until it sends a FIN too, close it, and return once it has no clients.
func (l *muxLoop) drain() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done && !l.closing {
		l.drainReq = true
		l.wake()
	}
}

// close makes the loop close every client and return.
func (l *muxLoop) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.closing = true
		l.wake()
	}
}

// wake writes a byte to the wake pipe; called with l.mu held.
func (l *muxLoop) wake() {
	_, _ = syscall.Write(l.wakeW, []byte{0})
}

func (l *muxLoop) run() {
	defer l.shutdown()
	// Between turns the goroutine parks in Go's poller, which watches the epoll
	// descriptor (readable while it has events), rather than blocking in epoll_wait:
	// a goroutine blocked in a system call keeps the runtime's monitor thread (sysmon)
	// from its long sleeps. Under redis-benchmark it woke 2,700 times a second and took
	// 8 % of the proxy's time; with the loop parked in the poller, 0.3 %.
	fd, err := dupCloseOnExec(l.epfd)
	if err != nil {
		l.p.sharedFailed(err)
		return
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		l.p.sharedFailed(os.NewSyscallError("fcntl", err))
		return
	}
	f := os.NewFile(uintptr(fd), "epoll")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Read(func(uintptr) bool {
			for {
				n, err := pollNow(l.epfd, l.events)
				switch {
				case err == syscall.EINTR:
				case err != nil:
					l.p.log.Warn("proxy: epoll_wait", "err", err)
					return true
				case n == 0:
					return false // park until epoll has events
				case !l.turn(n):
					return true
				}
			}
		})
	}
	if err != nil {
		l.p.sharedFailed(fmt.Errorf("wait for the epoll descriptor in Go's poller: %w", err))
	}
}

// turn handles the n events epoll reported; false when the loop is to end.
func (l *muxLoop) turn(n int) bool {
	// Clients first, and their commands off to Redis, which then works on them
	// while the replies read below go out to their clients.
	replies := false
	for _, ev := range l.events[:n] {
		fd := int(ev.Fd)
		up := l.upstream(fd)
		switch {
		case fd == l.wakeR:
			// The reads queued so far first, as if made: the drain that admit may
			// start drops what clients sent that is not queued for Redis.
			l.readAll()
			if !l.admit() {
				return false
			}
		case up >= 0:
			if ev.Events&syscall.EPOLLOUT != 0 {
				l.flushUp(up)
			}
			replies = replies || ev.Events&(syscall.EPOLLIN|syscall.EPOLLERR|syscall.EPOLLHUP|syscall.EPOLLRDHUP) != 0
		default:
			c := l.clients[fd]
			if c == nil || c.closed {
				continue
			}
			if ev.Events&syscall.EPOLLOUT != 0 {
				l.flushClient(c)
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
				l.readClient(c)
			}
			if ev.Events&(syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
				if c.reading {
					l.hups = append(l.hups, c) // after its read (readAll)
				} else {
					l.hangUp(c)
				}
			}
		}
	}
	l.readAll()
	// One write per connection carries every command of this turn.
	for i := range l.up {
		l.flushUp(i)
	}
	if replies {
		for _, ev := range l.events[:n] {
			// While paused, only a connection that failed or Redis closed is read: to its end.
			if i := l.upstream(int(ev.Fd)); i >= 0 && ev.Events&(syscall.EPOLLERR|syscall.EPOLLHUP|syscall.EPOLLRDHUP) != 0 ||
				i >= 0 && !l.paused && ev.Events&syscall.EPOLLIN != 0 {
				l.readUp(i)
			}
		}
		for i := range l.up {
			l.flushUp(i) // writes that replies released (see hold)
		}
	}
	if l.paused && l.stallDue.Swap(false) {
		l.checkStall()
	}
	if l.paused && l.outBytes <= l.p.maxOutput/2 {
		l.resume()
	}
	if len(l.stopped) > 0 {
		l.parseMoreAll()
	}
	l.finish()
	l.p.stats.outputBytes.Store(int64(l.outBytes))
	if l.draining {
		return len(l.clients) > 0 // no new commands: no shared connection to redial
	}
	for i := range l.up {
		if l.up[i].fd < 0 && !(i >= upResp3 && l.noResp3) && !l.redial(i) {
			return false
		}
	}
	return true
}

// upstream returns the index of the shared connection fd is, or -1.
func (l *muxLoop) upstream(fd int) int {
	for i := range l.up {
		if l.up[i].fd == fd {
			return i
		}
	}
	return -1
}

// admit drains the wake pipe and registers new clients; false when closing.
func (l *muxLoop) admit() bool {
	var b [64]byte
	for {
		if n, _ := syscall.Read(l.wakeR, b[:]); n <= 0 {
			break
		}
	}
	l.mu.Lock()
	incoming, closing, drain := l.incoming, l.closing, l.drainReq
	l.incoming = nil
	l.mu.Unlock()
	for _, c := range incoming {
		c.base = c.pc.parser.Offset()
		l.clients[c.fd] = c
		if closing {
			l.drop(c)
			continue
		}
		l.update(c)
	}
	if drain && !closing && !l.draining {
		l.startDrain()
	}
	return !closing
}

// startDrain begins the drain (see drain): the commands a client sent that are not
// queued for Redis are dropped, a client waiting to be pinned is not (what it sent
// after its shared replies was never forwarded), and from now on readClient only reads
// and drops what clients send, so that no socket is closed with data unread.
func (l *muxLoop) startDrain() {
	l.draining = true
	l.throttled = true
	for _, c := range l.clients {
		if c.closed || c.done {
			continue // a pinned client handed back now drains on its own (runOwn)
		}
		c.pinning, c.rest, c.pending, c.held, c.heldN, c.more = false, nil, 0, 0, 0, false
		l.update(c)
		l.settle(c)
	}
}

// update registers the epoll interest c needs now.
func (l *muxLoop) update(c *loopClient) {
	if c.hup || c.closed {
		return
	}
	var want uint32
	if !c.pinning && !c.eof && !l.throttled && c.held == 0 && !c.more && c.owed < muxOwed && (c.backlog() == 0 || c.owed == 0) {
		want |= syscall.EPOLLIN // with replies waiting, to see it send more (see readClient)
	} else if l.draining && !c.eof {
		want |= syscall.EPOLLIN // to drop what it sends
	}
	if c.backlog() > 0 {
		want |= syscall.EPOLLOUT
	}
	if want == c.events {
		return
	}
	op := syscall.EPOLL_CTL_MOD
	if c.events == regNone {
		op = syscall.EPOLL_CTL_ADD
	}
	if err := l.ctl(op, c.fd, want); err != nil {
		l.p.log.Debug("proxy: register client", "client", c.addr(), "err", err)
		l.drop(c)
		return
	}
	c.events = want
}

// readClient reads what c sent and queues its whole plain commands for Redis (see
// parseClient). A client whose replies wait in the tap, for room in its socket, is not
// read: more commands would only pile up more replies. If it sends more once it is owed
// nothing here, it gets a connection of its own (pinBacklog). Nor is one owed muxOwed
// replies or more, so that what Redis owes a client that stops reading stays within
// what the tap can take in (MaxOutputBytes) while it waits for those replies.
func (l *muxLoop) readClient(c *loopClient) {
	if c.closed || c.pinning || c.eof || l.throttled || c.held > 0 || c.more || c.backlog() > 0 || c.owed >= muxOwed {
		switch {
		case l.draining && !c.closed && !c.eof:
			l.discard(c)
		case !c.closed && !c.pinning && !c.eof && !c.hup && c.held == 0 && c.backlog() > 0 && c.owed == 0:
			l.pinBacklog(c)
			l.settle(c)
		}
		return
	}
	if c.in == nil {
		c.in = l.inBufs.get()[:l.p.bufSize]
	}
	if l.batch != nil && !c.reading {
		// The reads queued are parsed only once all are made, so they are held to what
		// Redis may still be sent before the clients are throttled (see throttle).
		room := muxOpen - l.readRoom
		for i := range l.up {
			room -= len(l.up[i].out)
		}
		if room < len(c.in)-c.pending {
			l.readAll() // may close c (a shared connection failed), or end the batch
			if l.throttled || c.closed {
				l.spare(c)
				return // read once Redis has caught up, or not at all
			}
		}
		if l.batch != nil {
			if _, ok := l.batch.Recv(c.fd, c.in[c.pending:]); ok {
				c.reading = true
				l.reads = append(l.reads, c)
				l.readRoom += len(c.in) - c.pending
				return // read (readAll)
			}
		}
	}
	n, err := ioRetry(rawRead, c.fd, c.in[c.pending:])
	l.read(c, n, err)
}

// readAll reads the clients whose reads readClient queued in the loop's batch, with one
// system call, and goes on with each as readClient would have.
func (l *muxLoop) readAll() {
	if len(l.reads) == 0 {
		return
	}
	l.readRoom = 0
	res, ok := l.submit()
	for k, c := range l.reads {
		c.reading = false
		l.reads[k] = nil
		n, errno := l.result(res, ok, k, rawRead, c.fd, c.in[c.pending:])
		if c.closed {
			l.spare(c)
			continue
		}
		l.read(c, n, errno)
	}
	l.reads = l.reads[:0]
	for k, c := range l.hups {
		l.hups[k] = nil
		l.hangUp(c)
	}
	l.hups = l.hups[:0]
}

// submit issues the loop's batch and returns its results; false when its operations
// are to be made one system call each (see result). That is so for a batch of one,
// which costs more through io_uring than as a call of its own (BenchmarkSend in
// internal/uring). Should io_uring fail, so is every batch from then on, starting with
// this one when none of its operations ran, as is the case with every failure seen.
func (l *muxLoop) submit() ([]int32, bool) {
	if l.batch.Len() == 1 {
		l.batch.Drop()
		return nil, false
	}
	res, err := l.batch.Submit()
	if err != nil {
		l.p.log.Warn("proxy: io_uring failed: one system call for each read and write from now on", "err", err)
		_ = l.batch.Close()
		l.batch = nil
		if res == nil {
			return nil, false // nothing ran
		}
	}
	// Should io_uring have failed with some operations taken, those it did not complete
	// fail with ECANCELED: their clients are dropped, since whether they ran is not known.
	return res, true
}

// result returns the k-th result of a batch as rw would have: when submit said so (not
// ok), by calling rw on fd and b.
func (l *muxLoop) result(res []int32, ok bool, k int, rw func(int, []byte) (int, error), fd int, b []byte) (int, error) {
	if !ok {
		return ioRetry(rw, fd, b)
	}
	if n := int(res[k]); n >= 0 {
		return n, nil
	}
	return -1, syscall.Errno(-res[k])
}

// read goes on with readClient once c's read returned n and err.
func (l *muxLoop) read(c *loopClient, n int, err error) {
	switch {
	case err == syscall.EAGAIN:
		l.spare(c)
		return
	case err != nil:
		l.p.log.Debug("proxy: read client", "client", c.addr(), "err", err)
		l.drop(c)
		return
	case n == 0:
		c.eof = true // answer what it asked, then close
		l.spare(c)
		l.update(c)
		l.settle(c)
		return
	}
	c.pc.parser.Feed(c.in[c.pending : c.pending+n])
	c.pending += n
	l.parseClient(c)
	if c.more {
		l.stopped = append(l.stopped, c)
	}
	l.spare(c)
	l.update(c) // not read while owed muxOwed
}

// spare gives c's input buffer back to the loop's pool when it holds nothing: an idle
// client holds none (with thousands of pooled connections, 64 KiB each made most of the
// tap's memory). A pinned client's buffer goes with it (rest).
func (l *muxLoop) spare(c *loopClient) {
	if c.pending == 0 && !c.pinning && c.in != nil {
		l.inBufs.put(c.in)
		c.in = nil
	}
}

// parseClient queues for Redis the whole plain commands in what c sent and the parser
// was fed. Its first other command, bytes that do not parse, or a command larger than
// its buffer or than Redis takes (limits.maxCmd) pin it. With UpstreamPassword set, so
// do any command before it authenticated with the configured credentials and an AUTH
// with other credentials; an AUTH with the configured ones is a plain command (see
// Proxy). A write behind reads it is owed is held (see hold). Parsing stops where c
// would be owed window replies (see parseMore).
func (l *muxLoop) parseClient(c *loopClient) {
	pc := c.pc
	ps := pc.parser
	end, cmds := 0, 0  // in[:end] holds cmds whole commands for the shared connection
	last, held := 0, 0 // in[:last] holds every whole command parsed; in[end:last] held ones (see hold)
	var pin *atomic.Uint64
	for {
		if c.owed+cmds+held >= c.window && ps.Buffered() > 0 {
			c.more = true
			break
		}
		if !pc.nextCommand() {
			break
		}
		if ps.Offset()-c.base-int64(last) > l.limits.maxCmd {
			// Redis would refuse it and close the shared connection.
			pin = &l.p.stats.pinTooLarge
			pc.sent = 1 + int64(held) // they go to the client's own connection (see below)
			break
		}
		first := c.owed == 0 && cmds == 0 // it may pick its connection
		shared, write := l.routes.route(ps.Name(), ps.Sub(), ps.NArgs())
		proto, hello := 0, false // a HELLO that may be shared, and its protocol
		if !shared {
			proto, hello = helloProto(ps.Name(), ps.Sub(), ps.NArgs())
		}
		authed := c.authed
		if a := l.p.auth; a != nil && (!shared || !c.authed) {
			// The shared connections are authenticated as the configured user: a
			// client shares them only once it authenticated as that user too, with
			// AUTH or HELLO AUTH, which the shared connection answers as it would
			// the client's own (the same user again changes nothing there). Any
			// other command before that, or other credentials, are for Redis to
			// judge on a connection of the client's own.
			// The command's bytes are c.in[last:]: those before it are parsed.
			kind, helloAs := l.authArgs.classify(a, ps.Name(), ps.NArgs(), c.in[last:ps.Offset()-c.base])
			switch {
			case kind == authMatch && helloAs == 0: // AUTH
				authed, shared = true, true
			case kind == authMatch: // HELLO 2|3 AUTH
				authed, proto, hello = true, helloAs, true
			case kind == authOther || !c.authed:
				pin = &l.p.stats.pinAuth
				pc.sent = 1 + int64(held)
			}
			if pin != nil {
				break
			}
		}
		if !shared {
			if !hello || !first || proto == 3 && l.noResp3 {
				pin = &l.p.stats.pinCommand
				pc.sent = 1 + int64(held) // they go to the client's own connection (see below)
				break
			}
			c.resp3 = proto == 3 // the pair of that protocol answers the HELLO
		}
		c.authed = authed
		last = int(ps.Offset() - c.base)
		if held > 0 || write && shared && !first && c.on != upWrites && c.on != upWrites+upResp3 {
			held++ // it and what follows wait in the buffer (see hold)
			continue
		}
		if first {
			c.on = upReads
			if write {
				c.on = upWrites
			}
			if c.resp3 {
				c.on += upResp3
			}
		}
		end = last
		cmds++
	}
	switch {
	case ps.Err() != nil:
		pin = &l.p.stats.pinMalformed // bytes Redis must judge
		pc.sent = int64(held)
	case c.more:
	case pin == nil && c.pending == len(c.in) && last == 0:
		pin = &l.p.stats.pinTooLarge // a command larger than the buffer
	case pin == nil && int64(c.pending-last)+ps.bulkRemaining() > min(int64(len(c.in)), l.limits.maxCmd):
		// A bulk string that cannot fit the buffer, or makes the command longer than
		// Redis takes: pin now rather than once the buffer is full, so that Redis
		// judges its length at once, as it would on a connection of its own (a length
		// over proto-max-bulk-len is an error).
		pin = &l.p.stats.pinTooLarge
		pc.sent = int64(held)
	}
	var pinName string // the command that pinned it, for the log
	if pin != nil {
		if pc.sent > int64(held) && l.p.log.Enabled(context.Background(), slog.LevelDebug) {
			pinName = string(ps.Name())
		}
		// The parser still reads in[:pending] until it has parsed all of it: before the
		// shift below, or it would take shifted bytes for the rest of the stream (and stop
		// sampling the connection at a command that crosses the buffer's end). sent counts
		// the commands of rest, which its own connection is sent first: those held, the
		// one that pinned it when parsed, and those sampleRest parses.
		pc.sampleRest()
	}
	if cmds > 0 {
		if l.p.sched == SchedAuto {
			l.p.stats.countRead(cmds)
		}
		u := &l.up[c.on]
		u.out = append(u.out, c.in[:end]...)
		u.queue.push(c, cmds)
		c.owed += cmds
		l.shift(c, end)
		// Send early what is enough to start Redis on (unless the last write is still
		// waiting for room), and stop at muxOpen.
		if len(u.out) >= muxOpen || len(u.out) >= muxFlushAt && u.events&syscall.EPOLLOUT == 0 {
			l.flushUp(c.on)
		}
	}
	if pin != nil {
		pin.Add(1)
		if l.p.log.Enabled(context.Background(), slog.LevelDebug) {
			attrs := []any{"client", c.addr(), "reason", l.p.stats.pinReason(pin)}
			if pinName != "" { // a command pinned it, not bytes
				attrs = append(attrs, "command", pinName)
			}
			l.p.log.Debug("proxy: client pinned: it gets a connection of its own", attrs...)
		}
		c.rest = c.in[:c.pending]
		c.pinning = true
		l.update(c)
		l.settle(c)
		return
	}
	if held > 0 {
		c.held, c.heldN = last-end, held
		l.update(c)
	}
}

// hold explains c.held. A client's commands go to the shared connection its first one
// picks while it is owed replies, so that they run in the order sent. A write sent behind
// reads would then go to the reads connection, where a CLIENT PAUSE WRITE (a failover's)
// would hold every other client's reads behind it. So it waits, with what follows it, and
// the client is not read, until those reads are answered (release); then they go to the
// writes connection. The client waits a round trip more, as it would for the read's
// reply before sending the write. A command among them that pins the client takes them
// all to its own connection instead, once it is owed nothing.

// release queues c's held commands on the writes connection once c is owed nothing.
func (l *muxLoop) release(c *loopClient) {
	n, cmds := c.held, c.heldN
	c.held, c.heldN = 0, 0
	c.on = upWrites
	if c.resp3 {
		c.on += upResp3
	}
	u := &l.up[c.on]
	u.out = append(u.out, c.in[:n]...) // written at the end of the turn
	u.queue.push(c, cmds)
	c.owed += cmds
	l.shift(c, n)
	l.spare(c)
	l.update(c)
}

// shift drops in[:n], which went to a shared connection, moving what follows to the
// front. A parser stopped before the end of its input (more) is told where that input
// is now.
func (l *muxLoop) shift(c *loopClient, n int) {
	c.pending = copy(c.in, c.in[n:c.pending])
	c.base += int64(n)
	if ps := c.pc.parser; c.more {
		ps.Refeed(c.in[c.pending-ps.Buffered() : c.pending])
	}
}

// parseMore goes on with c, whose parsing stopped where it would have been owed window
// replies (more): a client that sends a long pipeline at once, such as one written whole
// before reading, has at most window commands in flight, not all those of one read of
// its socket (up to 3,000 GETs in 64 KiB, whose replies could pass MaxOutputBytes while
// it is still writing). Its next commands go once Redis answered half of those and its
// socket took the replies, and its window doubles, up to muxOwed: it starts at
// muxWindow so that the first replies to a client that is not reading stay within the
// budget and its socket for values of up to 1 MB. Doubling, not more, keeps that true
// when its replies grow: after 16 small replies, a window sized for them (1,024) let
// 100 GETs of 400 KB written before reading pass the budget, and the client was cut
// where doubling pins it (TestMuxPipelineBeforeReading/small-then-large). If the
// replies wait for it once it is owed nothing, it is not reading, and it is pinned with
// the rest (pinBacklog), as when it sends more then. Reports whether c waits no more.
func (l *muxLoop) parseMore(c *loopClient) bool {
	switch {
	case !c.more || c.closed || c.hup || c.pinning:
		c.more = false // gone, or its bytes go with it (rest)
		return true
	case l.throttled || c.held > 0:
		return false
	case c.backlog() > 0 && c.owed == 0:
		l.pinBacklog(c)
		l.settle(c)
		return true
	case c.backlog() > 0 || c.owed > c.window/2:
		return false
	}
	c.more = false
	c.window = min(2*c.window, muxOwed)
	l.parseClient(c)
	l.spare(c)
	l.update(c)
	return !c.more
}

// parseMoreAll runs parseMore on the clients whose parsing stopped, at the end of each
// turn, and sends what they had.
func (l *muxLoop) parseMoreAll() {
	kept := l.stopped[:0]
	for _, c := range l.stopped {
		if !l.parseMore(c) {
			kept = append(kept, c)
		}
	}
	clear(l.stopped[len(kept):])
	l.stopped = kept
	for i := range l.up {
		l.flushUp(i)
	}
}

// discard reads what c sent while draining and drops it; at its end of file c is closed
// once it is owed nothing.
func (l *muxLoop) discard(c *loopClient) {
	n, err := ioRetry(rawRead, c.fd, l.junk)
	switch {
	case err == syscall.EAGAIN:
	case err != nil:
		l.p.log.Debug("proxy: read client", "client", c.addr(), "err", err)
		l.drop(c)
	case n == 0:
		c.eof = true
		l.update(c)
		l.settle(c)
	}
}

// hangUp stops watching a client whose socket hung up or failed: it can send nothing
// more, and epoll would report it again and again. What it is owed is still written
// (and fails if it is gone); then it is closed.
func (l *muxLoop) hangUp(c *loopClient) {
	if c.closed || c.hup {
		return
	}
	if c.events != regNone {
		_ = l.ctl(syscall.EPOLL_CTL_DEL, c.fd, 0)
		c.events = regNone
	}
	c.hup = true
	c.pinning = false // nobody to serve on a connection of its own
	l.settle(c)
}

// flushUp writes the commands gathered for shared connection i.
func (l *muxLoop) flushUp(i int) {
	u := &l.up[i]
	if u.fd < 0 || len(u.out) == 0 {
		return
	}
	n, err := ioRetry(rawWrite, u.fd, u.out)
	if err != nil && err != syscall.EAGAIN {
		l.upFailed(i, err)
		return
	}
	u.out = u.out[:copy(u.out, u.out[max(n, 0):])]
	if l.watchUp(i) {
		l.throttle()
	}
}

// watchUp registers the epoll interest shared connection i needs now: its replies
// unless paused, and room to write while it has commands to send. False when that
// failed, and with it the connection.
func (l *muxLoop) watchUp(i int) bool {
	u := &l.up[i]
	if u.fd < 0 {
		return false
	}
	want := uint32(syscall.EPOLLIN)
	if l.paused {
		want = syscall.EPOLLRDHUP // Redis closing it, which is read to its end at once
	}
	if len(u.out) > 0 {
		want |= syscall.EPOLLOUT
	}
	if want != u.events {
		if err := l.ctl(syscall.EPOLL_CTL_MOD, u.fd, want); err != nil {
			l.upFailed(i, err)
			return false
		}
		u.events = want
	}
	return true
}

// throttle stops reading clients while Redis is behind on either connection, and
// starts again when it has caught up.
func (l *muxLoop) throttle() {
	throttle := l.draining || l.paused
	for i := range l.up {
		throttle = throttle || len(l.up[i].out) >= muxOpen
	}
	if throttle != l.throttled {
		l.throttled = throttle
		for _, c := range l.clients {
			l.update(c)
		}
	}
}

// readUp reads shared connection i's replies and hands each to the client whose command
// it answers.
func (l *muxLoop) readUp(i int) {
	u := &l.up[i]
	if u.fd < 0 {
		return
	}
	defer l.sendAll() // before l.in is read into again
	n, err := ioRetry(rawRead, u.fd, l.in)
	switch {
	case err == syscall.EAGAIN:
		return
	case err != nil:
		l.upFailed(i, err)
		return
	case n == 0:
		l.upFailed(i, errClosedByRedis)
		return
	}
	data := l.in[:n]
	for len(data) > 0 {
		// A RESP3 push (a client-tracking invalidation redirected to this connection's
		// id, which HELLO reports) answers no command: skip it. No client is subscribed
		// or tracking here; those are pinned.
		if u.push || u.scan.between() && data[0] == '>' {
			k, done := u.scan.scan(data)
			if u.scan.err != nil {
				l.upFailed(i, u.scan.err)
				return
			}
			u.push = !done
			data = data[k:]
			continue
		}
		e, ok := u.queue.front()
		if !ok {
			l.upFailed(i, errors.New("a reply no client is waiting for"))
			return
		}
		// c's whole replies in data in one piece, and the start of one that goes on.
		end, replies := 0, 0
		for end < len(data) && replies < e.n {
			if u.scan.between() && data[end] == '>' {
				break // a push: skipped above
			}
			k, done := u.scan.scan(data[end:])
			if u.scan.err != nil {
				l.upFailed(i, u.scan.err)
				return
			}
			end += k
			if done {
				replies++
			}
		}
		c := e.c
		if e.n -= replies; e.n == 0 {
			u.queue.pop()
		}
		l.deliver(c, data[:end], replies)
		data = data[end:]
	}
}

// deliver writes reply bytes to c, completing replies of them: straight to its socket
// when it has room, the rest when epoll says it has. The replies waiting for room, all
// clients' together, are held to about the proxy's MaxOutputBytes (see pause).
func (l *muxLoop) deliver(c *loopClient, b []byte, replies int) {
	if c.sending || l.batch != nil && l.batch.Len() == l.batch.Cap() {
		// Its replies queued before these go first, and are settled with what it was
		// owed then: settle must not take it for done while these wait.
		l.sendAll()
	}
	c.owed -= replies
	if c.closed {
		return
	}
	if c.owed < muxOwed && c.owed+replies >= muxOwed {
		l.update(c) // it may be read again
	}
	if c.backlog() == 0 && len(b) > 0 {
		if l.batch != nil {
			l.batch.Send(c.fd, b) // room made above
			c.sending = true
			l.sends = append(l.sends, loopSend{c: c, b: b})
			return // sent (sendAll)
		}
		n, err := ioRetry(rawWrite, c.fd, b)
		if err != nil && err != syscall.EAGAIN {
			l.p.log.Debug("proxy: write client", "client", c.addr(), "err", err)
			l.drop(c)
			return
		}
		b = b[max(n, 0):]
	}
	l.sent(c, b)
}

// sendAll writes the replies queued in the loop's batch, with one system call.
func (l *muxLoop) sendAll() {
	if len(l.sends) == 0 {
		return
	}
	res, ok := l.submit()
	for k, s := range l.sends {
		c, b := s.c, s.b
		c.sending = false
		l.sends[k] = loopSend{}
		n, errno := l.result(res, ok, k, rawWrite, c.fd, b)
		if c.closed {
			continue
		}
		if errno != nil && errno != syscall.EAGAIN {
			l.p.log.Debug("proxy: write client", "client", c.addr(), "err", errno)
			l.drop(c)
			continue
		}
		l.sent(c, b[max(n, 0):])
	}
	l.sends = l.sends[:0]
}

// sent goes on with deliver once b is what c's socket did not take.
func (l *muxLoop) sent(c *loopClient, b []byte) {
	if len(b) > 0 {
		c.out.push(b, &l.chunks)
		l.outBytes += len(b)
		if l.outBytes > l.p.maxOutput && !l.paused {
			l.pause()
		}
		l.update(c)
	}
	if c.owed == 0 && c.held > 0 {
		l.release(c) // after the replies that free it
	}
	l.settle(c)
}

// pinBacklog pins c, which sends more while it is owed nothing here and its replies
// wait in the tap, as a client does that writes a whole pipeline before it reads
// (go-redis's Pipelined, redis-py's and Jedis's pipelines). Not reading it until it
// reads would leave both sides waiting for ever, its write blocked on a full socket; on
// a connection of its own, Redis keeps what it has not read, as it would directly. Its
// replies waiting go along (handBack), and what it sends from now on goes there.
func (l *muxLoop) pinBacklog(c *loopClient) {
	l.p.stats.pinBacklog.Add(1)
	l.p.log.Debug("proxy: client pinned: it gets a connection of its own", "client", c.addr(),
		"reason", PinBacklog, "replies_waiting", c.backlog())
	c.pc.sent = 0
	if c.more { // what it sent from in[0] on is not parsed yet
		c.more = false
		c.pc.sampleRest()
	}
	c.rest = c.in[:c.pending]
	c.pinning = true
	l.update(c)
}

// addr returns the client's address, for logs.
func (c *loopClient) addr() net.Addr { return c.pc.client.RemoteAddr() }

// backlog is the bytes of replies waiting for room in c's socket.
func (c *loopClient) backlog() int { return c.out.len() }

// pause stops reading Redis's replies, and the clients' commands, once the replies
// waiting for the clients passed MaxOutputBytes: Redis then keeps the rest, as it keeps
// a client's replies on a connection of the client's own, while the clients read what
// the tap holds; resume starts again at half the budget. Without it a client that reads
// slower than Redis answers, or several large replies at once, would pile the replies up
// in the tap's memory. Clients reading at full speed make a pause last milliseconds.
// But while paused every client of the shared connections waits, its replies behind the
// slow one's in Redis: so a pause that lasts pauseLimit ends with checkStall cutting the
// clients holding the most until half the budget is left.
func (l *muxLoop) pause() {
	l.paused = true
	for i := range l.up {
		l.watchUp(i)
	}
	l.throttle()
	l.stallDue.Store(false)
	l.stall = time.AfterFunc(l.p.pauseFor, l.stallTick)
}

// stallTick runs on the timer's goroutine: it marks a stall check due and wakes the loop.
func (l *muxLoop) stallTick() {
	l.stallDue.Store(true)
	l.mu.Lock()
	if !l.done {
		l.wake()
	}
	l.mu.Unlock()
}

// checkStall ends a pause that lasted pauseLimit (see pause), run by the loop.
func (l *muxLoop) checkStall() {
	for l.outBytes > l.p.maxOutput/2 {
		if !l.cut() {
			l.resume() // nobody holds any: nothing to wait for
			return
		}
	}
}

// resume reads Redis's replies again (see pause).
func (l *muxLoop) resume() {
	l.paused = false
	l.stall.Stop()
	for i := range l.up {
		l.watchUp(i)
	}
	l.throttle()
}

// cut disconnects the client whose replies wait most (see pause); false when none holds
// any.
func (l *muxLoop) cut() bool {
	var worst *loopClient
	for _, c := range l.clients {
		if !c.closed && c.backlog() > 0 && (worst == nil || c.backlog() > worst.backlog()) {
			worst = c
		}
	}
	if worst == nil {
		return false
	}
	l.p.stats.outputCuts.Add(1)
	l.p.log.Warn("proxy: client disconnected: the replies waiting for the tap's clients passed proxy.max_output_bytes, and for a second they did not read half of them while every client of the shared connections waited; it held the most",
		"client", worst.addr(), "its_bytes", worst.backlog(), "max_output_bytes", l.p.maxOutput, "replies_owed", worst.owed)
	l.drop(worst)
	return true
}

// flushClient writes what c's socket had no room for.
func (l *muxLoop) flushClient(c *loopClient) {
	if c.backlog() == 0 {
		return
	}
	for c.backlog() > 0 {
		b := c.out.front()
		n, err := ioRetry(rawWrite, c.fd, b)
		if err == syscall.EAGAIN {
			break
		}
		if err != nil {
			l.drop(c)
			return
		}
		c.out.consume(n, &l.chunks)
		l.outBytes -= n
		if n < len(b) {
			break // the socket is full
		}
	}
	l.update(c)
	l.settle(c)
}

// settle schedules c to be closed or handed back after this turn when it is waiting for
// nothing more. While draining, a client owed nothing gets a FIN, and is closed once it
// sends one too (see discard).
func (l *muxLoop) settle(c *loopClient) {
	handOver := c.pinning && !c.closed && !c.hup // its waiting replies go along (handBack)
	if c.done || c.owed > 0 || c.backlog() > 0 && !handOver {
		return
	}
	if c.closed || c.pinning || c.eof || c.hup {
		c.done = true
		l.finished = append(l.finished, c)
		return
	}
	if l.draining && !c.fin {
		c.fin = true
		acked := sendQueue(c.fd) == 0 // every byte it was sent reached it
		if err := syscall.Shutdown(c.fd, syscall.SHUT_WR); err != nil {
			l.p.log.Debug("proxy: end a client's connection", "client", c.addr(), "err", err)
			l.drop(c)
			return
		}
		if acked {
			// Nothing it was sent can be lost now, so it is closed at once rather than
			// once it closes its side, which an idle pooled connection does not do before
			// the deadline. What it sent is dropped first, so that the close sends no
			// reset; were one to follow, it comes after the FIN.
			for {
				if n, err := ioRetry(rawRead, c.fd, l.junk); n <= 0 || err != nil {
					break
				}
			}
			c.done = true
			l.finished = append(l.finished, c)
		}
	}
}

// drop closes c after this turn; replies still owed to it are discarded.
func (l *muxLoop) drop(c *loopClient) {
	c.closed = true
	l.outBytes -= c.backlog()
	c.out.reset(&l.chunks)
	if !c.done {
		c.done = true
		l.finished = append(l.finished, c)
	}
}

// finish closes the clients that are done and gives pinned ones their own goroutine, and
// closes the descriptors of shared connections that failed.
//
// No descriptor the loop watches is closed before finish: epoll reported the turn's
// events before the turn began, and an event for a closed descriptor would reach what
// took its number meanwhile, a client that adopt (on another goroutine) took in with it.
func (l *muxLoop) finish() {
	for _, fd := range l.failed {
		_ = syscall.Close(fd)
	}
	l.failed = l.failed[:0]
	for _, c := range l.finished {
		delete(l.clients, c.fd)
		l.p.stats.shared.Add(-1)
		if c.events != regNone {
			_ = l.ctl(syscall.EPOLL_CTL_DEL, c.fd, 0)
		}
		if c.pinning && !c.closed {
			l.handBack(c)
			continue
		}
		_ = syscall.Close(c.fd)
		l.p.untrack(c.pc)
	}
	clear(l.finished)
	l.finished = l.finished[:0]
}

// handBack gives a pinned client a goroutine that writes it the replies waiting for it
// here, dials it a connection of its own and forwards its bytes from then on, starting
// with rest; that connection is first switched to RESP3 and authenticated as the shared
// ones are, when the client did that on them. The replies waiting no longer count
// against MaxOutputBytes: they are what Redis answered before the client was owed
// nothing, which the budget bounded.
func (l *muxLoop) handBack(c *loopClient) {
	p, pc := l.p, c.pc
	waiting := c.out.take(&l.chunks)
	l.outBytes -= len(waiting)
	f := os.NewFile(uintptr(c.fd), "client")
	conn, err := net.FileConn(f) // a duplicate, in Go's poller
	_ = f.Close()
	if err != nil {
		p.log.Debug("proxy: hand a client back", "err", err)
		p.untrack(pc)
		return
	}
	p.stats.handedOut.Add(int64(len(waiting)))
	// base, the parser's offset at in[0], is 0 at admit and moves past each command that
	// went to a shared connection, all of them answered by now (settle): above 0, Redis
	// answered the client something.
	rest, resp3, authed, answered := c.rest, c.resp3, c.authed, c.base > 0
	if !p.setConn(&pc.client, conn) || !p.goTracked(func() { pc.runOwn(waiting, rest, resp3, authed, answered) }) {
		p.stats.handedOut.Add(-int64(len(waiting)))
		_ = conn.Close()
		p.untrack(pc)
	}
}

// errClosedByRedis is a shared connection's end of file.
var errClosedByRedis = errors.New("closed by Redis")

// upFailed gives up shared connection i: the clients owed replies on it are closed,
// since those replies are lost, and the loop dials a new one at the end of the turn. Its
// descriptor is closed after the turn too (see finish). A connection that Redis closed
// while it owed nothing and had nothing to send is not counted as failed nor warned of:
// Redis's timeout setting closes connections idle that long, as the RESP3 pair is while
// only RESP2 clients come, and the writes connection under reads alone.
func (l *muxLoop) upFailed(i int, err error) {
	u := &l.up[i]
	if u.fd < 0 {
		return
	}
	_, owed := u.queue.front()
	idle := !owed && len(u.out) == 0 && err == errClosedByRedis
	if idle {
		l.p.log.Debug("proxy: Redis closed an idle shared upstream connection (its timeout setting, or a restart); opening another",
			"upstream", l.p.upstream, "conn", upNames[i])
	} else {
		l.p.stats.sharedFailures.Add(1)
	}
	l.maxKnown = false // asked again at the redial
	_ = l.ctl(syscall.EPOLL_CTL_DEL, u.fd, 0)
	l.failed = append(l.failed, u.fd)
	u.fd = -1
	dropped := 0
	var named []string // the first few, for the log
	for {
		e, ok := u.queue.front()
		if !ok {
			break
		}
		if !e.c.closed {
			dropped++
			if len(named) < 8 {
				named = append(named, fmt.Sprint(e.c.addr()))
			}
		}
		l.drop(e.c)
		u.queue.pop()
	}
	if !idle {
		l.p.log.Warn("proxy: shared upstream connection failed; the clients owed replies on it are disconnected",
			"upstream", l.p.upstream, "conn", upNames[i], "clients", dropped, "first_clients", strings.Join(named, ","), "err", err)
	}
	u.out = u.out[:0]
	u.scan, u.push = replyScanner{}, false
	l.throttle()
}

// redial opens a new shared connection i; when that fails it closes every client and
// reports false, ending the loop.
func (l *muxLoop) redial(i int) bool {
	err := l.dial(i)
	if err == nil {
		return true
	}
	l.p.sharedFailed(err)
	return false
}

// shutdown closes every client and the loop's descriptors; the loop takes no more
// clients.
func (l *muxLoop) shutdown() {
	l.mu.Lock()
	l.done = true
	incoming := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	if l.stall != nil {
		l.stall.Stop()
	}
	for _, c := range incoming {
		l.clients[c.fd] = c
	}
	for _, c := range l.clients {
		l.drop(c)
	}
	l.finish()
	l.p.stats.outputBytes.Store(int64(l.outBytes)) // 0: nobody is left to hold any
	l.closeFDs()
}

func (l *muxLoop) closeFDs() {
	if l.batch != nil {
		_ = l.batch.Close()
	}
	for i := range l.up {
		if l.up[i].fd >= 0 {
			_ = syscall.Close(l.up[i].fd)
		}
	}
	for _, fd := range []int{l.epfd, l.wakeR} {
		if fd >= 0 {
			_ = syscall.Close(fd)
		}
	}
	l.mu.Lock()
	if l.wakeW >= 0 {
		_ = syscall.Close(l.wakeW)
		l.wakeW = -1
	}
	l.mu.Unlock()
}

// ioRetry calls read or write, retrying when a signal interrupted it.
func ioRetry(rw func(int, []byte) (int, error), fd int, b []byte) (int, error) {
	for {
		n, err := rw(fd, b)
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// muxEntry is n consecutive replies owed to one client.
type muxEntry struct {
	c *loopClient
	n int
}

// muxQueue is a FIFO of muxEntry in a ring that grows.
type muxQueue struct {
	ring []muxEntry
	head int
	len  int
}

func (q *muxQueue) push(c *loopClient, n int) {
	if q.len > 0 {
		if tail := &q.ring[(q.head+q.len-1)%len(q.ring)]; tail.c == c {
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
	q.ring[(q.head+q.len)%len(q.ring)] = muxEntry{c, n}
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
	if q.len == 0 {
		q.head = 0
	}
}
