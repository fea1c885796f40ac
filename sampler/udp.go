package sampler

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/defaults"
)

// UDPOptions configures a UDPServer. The zero value works except for Sink, which is
// required.
type UDPOptions struct {
	// Listen is the UDP address to listen on; default "127.0.0.1:9736". Port 0 picks a
	// free port (see UDPServer.Addr).
	Listen string
	// Readers is the number of goroutines reading datagrams, each with its own buffer and
	// Batch; default runtime.GOMAXPROCS(0). Allowed: 0 (the default) to 64.
	Readers int
	// SocketBuffer is the SO_RCVBUF size in bytes asked of the kernel, which absorbs
	// bursts while readers are busy; default 8 MiB. Linux grants at most
	// net.core.rmem_max (raise it with sysctl for busy agents). Allowed: 0 (the default)
	// or 64 KiB to 1 GiB.
	SocketBuffer int
	// MaxSamples bounds the samples of one datagram, as HTTPOptions.MaxSamples bounds a
	// body's: a datagram with more is dropped, and its samples counted, as DropTooLarge.
	// Zero or less means DefaultMaxSamples.
	MaxSamples int
	// Token, when not empty, is required in every report; a report without it or with
	// another token is dropped and counted as DropAuth. Default: none required.
	Token string
	// Sink receives every decoded batch (Accept) and every dropped datagram (Drop).
	// Required. Accept is called from several reader goroutines at once.
	Sink Sink
	// Logger receives, at warn level, the first datagram dropped as malformed, too large
	// (in bytes or in samples) or without the token, with the sender's address, the
	// source when the header got that far, and why; then at most one such line a minute,
	// with the number of datagrams dropped since the line before. With its debug level
	// on, every other dropped datagram is logged at debug level. Default: none.
	Logger *slog.Logger
}

// Defaults of UDPOptions.
const (
	DefaultUDPListen    = "127.0.0.1:9736"
	DefaultSocketBuffer = 8 << 20
	maxUDPReaders       = 64
)

// UDPServer receives report datagrams (see AppendReport) and hands their samples to a Sink.
// Its methods are safe for concurrent use.
type UDPServer struct {
	conn       *net.UDPConn
	readers    int
	maxSamples int
	token      []byte
	sink       Sink
	dropLog    dropLog // logs dropped datagrams, a line a minute at most

	mu      sync.Mutex // guards closed and the start of readers, so Close never races wg.Add
	closed  bool
	done    chan struct{} // closed by Close
	serving bool
	wg      sync.WaitGroup // the reader goroutines

	drops     bool          // the kernel reports the socket's drops with each datagram (Linux)
	dropsSeen atomic.Uint32 // the kernel's drop count last passed to the Sink
}

// NewUDPServer validates opts and binds the socket, so that Addr is known before Serve.
func NewUDPServer(opts UDPOptions) (*UDPServer, error) {
	if opts.Sink == nil {
		return nil, errors.New("sampler: UDP Sink: nil; a Sink is required")
	}
	if opts.Listen == "" {
		opts.Listen = DefaultUDPListen
	}
	if opts.Readers < 0 || opts.Readers > maxUDPReaders {
		return nil, fmt.Errorf("sampler: UDP Readers %d: must be 0 (GOMAXPROCS) to %d", opts.Readers, maxUDPReaders)
	}
	opts.Readers = defaults.Or(opts.Readers, runtime.GOMAXPROCS(0))
	if opts.SocketBuffer != 0 && (opts.SocketBuffer < 64<<10 || opts.SocketBuffer > 1<<30) {
		return nil, fmt.Errorf("sampler: UDP SocketBuffer %d: must be 0 (8 MiB) or 65536 to 1073741824 bytes", opts.SocketBuffer)
	}
	opts.SocketBuffer = defaults.Or(opts.SocketBuffer, DefaultSocketBuffer)
	if len(opts.Token) > MaxTokenLen {
		return nil, fmt.Errorf("sampler: UDP Token of %d bytes: must be at most %d", len(opts.Token), MaxTokenLen)
	}
	addr, err := net.ResolveUDPAddr("udp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("sampler: UDP Listen %q: %w", opts.Listen, err)
	}
	conn, err := net.ListenUDP("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("sampler: UDP Listen %q: %w", opts.Listen, err)
	}
	// The kernel caps the size at net.core.rmem_max; a smaller buffer still works.
	_ = conn.SetReadBuffer(opts.SocketBuffer)
	s := &UDPServer{
		conn:       conn,
		readers:    opts.Readers,
		maxSamples: opts.MaxSamples,
		sink:       opts.Sink,
		done:       make(chan struct{}),
		drops:      countKernelDrops(conn),
		dropLog:    newDropLog(opts.Logger, "udp"),
	}
	if s.maxSamples <= 0 {
		s.maxSamples = DefaultMaxSamples
	}
	if opts.Token != "" {
		s.token = []byte(opts.Token)
	}
	return s, nil
}

// Addr returns the address the server listens on.
func (s *UDPServer) Addr() net.Addr { return s.conn.LocalAddr() }

// Serve reads datagrams until ctx is done or Close is called, then closes the socket,
// waits for its reader goroutines to end and returns nil. It returns an error if called
// twice.
func (s *UDPServer) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if s.serving {
		s.mu.Unlock()
		return errors.New("sampler: UDPServer.Serve called twice")
	}
	s.serving = true
	for range s.readers {
		s.wg.Go(s.read)
	}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-s.done:
	}
	return s.Close()
}

// Close stops the server: it closes the socket and waits for the readers to end. It
// returns nil, also when called more than once.
func (s *UDPServer) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
		s.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// kernelDropped passes to the Sink, as DropOverload, the datagrams the kernel dropped
// since the count last seen, total being its count so far: datagrams that came while the
// socket's buffer was full, their samples unknown (n counts datagrams).
func (s *UDPServer) kernelDropped(total uint32) {
	for {
		seen := s.dropsSeen.Load()
		d := total - seen        // wraps with the kernel's 32-bit counter
		if d == 0 || d > 1<<31 { // no new drop, or an older count read late by another reader
			return
		}
		if s.dropsSeen.CompareAndSwap(seen, total) {
			s.sink.Drop("unknown", DropOverload, int(d))
			return
		}
	}
}

// read is one reader goroutine: its own buffer, its own Batch, no allocation per datagram
// in steady state.
func (s *UDPServer) read() {
	buf := make([]byte, 64<<10) // over the largest UDP payload, so nothing is truncated
	var oob []byte
	if s.drops {
		oob = make([]byte, 64)
	}
	var b Batch
	for {
		n, oobn, _, from, err := s.conn.ReadMsgUDPAddrPort(buf, oob)
		if oobn > 0 {
			if total, ok := kernelDrops(oob[:oobn]); ok {
				s.kernelDropped(total)
			}
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient error (out of memory, an ICMP error on some systems); do not
			// spin if it persists.
			select {
			case <-s.done:
				return
			case <-time.After(time.Millisecond):
			}
			continue
		}
		token, err := DecodeReport(&b, buf[:n])
		if err != nil {
			src := b.Source
			if src == "" {
				src = "unknown"
			}
			reason := DropMalformed
			if n > MaxReportSize {
				reason = DropTooLarge
			}
			s.sink.Drop(src, reason, 1)
			if line, ok := s.dropLog.due(); ok {
				s.dropLog.warn(line, from, src, reason, err)
			}
			continue
		}
		if s.token != nil && subtle.ConstantTimeCompare(token, s.token) != 1 {
			s.sink.Drop(b.Source, DropAuth, max(len(b.Samples), 1))
			if line, ok := s.dropLog.due(); ok {
				s.dropLog.warn(line, from, b.Source, DropAuth, tokenError(token))
			}
			continue
		}
		if len(b.Samples) > s.maxSamples {
			s.sink.Drop(b.Source, DropTooLarge, len(b.Samples))
			if line, ok := s.dropLog.due(); ok {
				s.dropLog.warn(line, from, b.Source, DropTooLarge, fmt.Errorf(
					"report: %s samples; send at most %s per datagram (limits.max_samples_per_report)",
					group(len(b.Samples)), group(s.maxSamples)))
			}
			continue
		}
		s.sink.Accept(b)
	}
}

// tokenError says why a datagram's token was refused, without showing it.
func tokenError(token []byte) error {
	if token == nil {
		return errors.New("report: no token (flag bit 0 clear); the agent requires auth.token")
	}
	return fmt.Errorf("report: token of %d bytes is not the agent's auth.token", len(token))
}

// dropLog logs reports a transport drops: the first at once, then at most one line a
// minute at warn level, each with the number dropped since the line before and not
// logged there. It costs nothing until a report is dropped, and then a clock read and
// two atomic operations when it does not log, so a flood of garbage logs a line a minute.
// At debug level (asked for while writing a sender) every other drop has a debug line
// of its own. Safe for concurrent use.
type dropLog struct {
	log       *slog.Logger // nil: log nothing
	transport string       // "udp" or "http", in each line
	debug     bool         // log's debug level is on
	now       func() time.Time
	next      atomic.Int64 // Unix nanoseconds before which no line is logged
	unlogged  atomic.Int64 // reports dropped since the last line and not logged
}

// dropLogEvery is the least time between two warn lines of a dropLog.
const dropLogEvery = time.Minute

func newDropLog(log *slog.Logger, transport string) dropLog {
	return dropLog{log: log, transport: transport, now: time.Now,
		debug: log != nil && log.Enabled(context.Background(), slog.LevelDebug)}
}

// dropLine is a line a dropLog is due to write: at warn level, with the number of reports
// dropped since the last such line and not logged at warn, or at debug level.
type dropLine struct {
	unlogged int64
	debug    bool
}

// due records a dropped report and reports whether to log it. The caller then calls
// warn; building the line's values only then keeps the drops that are not logged free of
// allocations.
func (d *dropLog) due() (line dropLine, ok bool) {
	if d.log == nil {
		return dropLine{}, false
	}
	now := d.now().UnixNano()
	next := d.next.Load()
	if now < next || !d.next.CompareAndSwap(next, now+int64(dropLogEvery)) {
		d.unlogged.Add(1) // logged less than a minute ago, or another reader logs now
		return dropLine{debug: true}, d.debug
	}
	return dropLine{unlogged: d.unlogged.Swap(0)}, true
}

// warn logs a dropped report: from is the sender's address, source its source ("unknown"
// when not read), reason one of the Drop… reasons, err why.
func (d *dropLog) warn(line dropLine, from any, source, reason string, err error) {
	if line.debug {
		d.log.Debug("sample report dropped", "transport", d.transport, "reason", reason, "from", from,
			"source", source, "err", err)
		return
	}
	d.log.Warn("sample report dropped", "transport", d.transport, "reason", reason, "from", from,
		"source", source, "err", err, "unlogged", line.unlogged)
}
