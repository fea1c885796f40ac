package sampler

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/defaults"
)

// MonitorOptions configure a Monitor. Only Sink must be set; the zero value of every
// other field picks its default.
type MonitorOptions struct {
	// Addr is the Redis server's address. Default "127.0.0.1:6379".
	Addr string
	// Username and Password, when Password is set, are sent with AUTH before MONITOR
	// (Username empty means the default user). Default: no AUTH.
	Username, Password string
	// SampleEvery samples one command in SampleEvery, at random. 1 samples every
	// command. Default 100.
	SampleEvery int
	// Source names the samples' source in every Batch. Default "monitor".
	Source string
	// Sink receives the samples. Required.
	Sink Sink
	// BatchSize is how many samples a Batch holds at most. Default 256.
	BatchSize int
	// FlushInterval is how long a sample may wait for its batch to fill. Default 100ms.
	FlushInterval time.Duration
	// DialTimeout bounds connecting, AUTH and the MONITOR handshake. Default 5s.
	DialTimeout time.Duration
	// MinBackoff is the wait before the first reconnection; each failure doubles it up to
	// MaxBackoff, and a connection that delivered lines resets it. Defaults 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// MaxLineBytes is the longest MONITOR line read whole. Of a longer line (a big value,
	// escaped) only the arguments within the first MaxLineBytes are parsed. Default 64 KiB.
	MaxLineBytes int
	// MaxKeyBytes is the longest key sampled; a longer key is sampled by its first
	// MaxKeyBytes bytes and marked Truncated. Default 512.
	MaxKeyBytes int
	// Seed seeds the sampling draws. Default 0.
	Seed uint64
	// Logger receives connection errors at warn level. Default: none.
	Logger *slog.Logger
}

// Monitor defaults.
const (
	DefaultMonitorAddr         = "127.0.0.1:6379"
	DefaultMonitorSource       = "monitor"
	DefaultMonitorMinBackoff   = 100 * time.Millisecond
	DefaultMonitorMaxBackoff   = 10 * time.Second
	DefaultMonitorMaxLineBytes = 64 << 10
)

// Monitor is a development-only source: it connects to one Redis server, sends MONITOR,
// and samples the commands the server echoes, reconnecting with backoff when the
// connection fails.
//
// MONITOR is expensive for the server: Redis formats every command it executes for every
// monitoring client, which roughly halves its throughput, and a monitor that reads slowly
// makes the server buffer without bound. Use Monitor on a development machine or for a
// short look, never in production; the proxy tap and the client hook are the sources for
// real traffic.
//
// A Monitor runs in the goroutine that calls Serve; it is not safe to call Serve twice at
// once.
type Monitor struct {
	addr, user, pass string
	every            int
	logq             float64
	source           string
	sink             Sink
	batchSize        int
	interval         time.Duration
	dialTimeout      time.Duration
	minBackoff       time.Duration
	maxBackoff       time.Duration
	maxLine          int
	maxKey           int
	rng              rand.PCG
	log              *slog.Logger

	closed    chan struct{} // closed by Close
	closeOnce sync.Once

	skip    int
	batch   proxyBatch
	line    monitorLine
	pending []Sample
}

// NewMonitor validates o and returns a Monitor; Serve connects.
func NewMonitor(o MonitorOptions) (*Monitor, error) {
	if o.Sink == nil {
		return nil, errors.New("sampler: MonitorOptions.Sink is nil: must be a Sink (SinkFunc adapts a function)")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"SampleEvery", o.SampleEvery}, {"BatchSize", o.BatchSize}, {"MaxKeyBytes", o.MaxKeyBytes}} {
		if f.v < 0 {
			return nil, fmt.Errorf("sampler: MonitorOptions.%s %d: must be ≥ 1, or 0 for the default", f.name, f.v)
		}
	}
	if o.MaxLineBytes != 0 && (o.MaxLineBytes < 256 || o.MaxLineBytes > 64<<20) {
		return nil, fmt.Errorf("sampler: MonitorOptions.MaxLineBytes %d: must be between 256 and %d, or 0 for the default %d",
			o.MaxLineBytes, 64<<20, DefaultMonitorMaxLineBytes)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"FlushInterval", o.FlushInterval}, {"DialTimeout", o.DialTimeout}, {"MinBackoff", o.MinBackoff}, {"MaxBackoff", o.MaxBackoff}} {
		if f.v < 0 {
			return nil, fmt.Errorf("sampler: MonitorOptions.%s %v: must be > 0, or 0 for the default", f.name, f.v)
		}
	}
	m := &Monitor{
		addr:        defaults.Or(o.Addr, DefaultMonitorAddr),
		user:        o.Username,
		pass:        o.Password,
		every:       defaults.Or(o.SampleEvery, DefaultProxySampleEvery),
		source:      defaults.Or(o.Source, DefaultMonitorSource),
		sink:        o.Sink,
		batchSize:   defaults.Or(o.BatchSize, DefaultProxyBatchSize),
		interval:    defaults.Or(o.FlushInterval, DefaultProxyFlushInterval),
		dialTimeout: defaults.Or(o.DialTimeout, DefaultProxyDialTimeout),
		minBackoff:  defaults.Or(o.MinBackoff, DefaultMonitorMinBackoff),
		maxBackoff:  defaults.Or(o.MaxBackoff, DefaultMonitorMaxBackoff),
		maxLine:     defaults.Or(o.MaxLineBytes, DefaultMonitorMaxLineBytes),
		maxKey:      defaults.Or(o.MaxKeyBytes, DefaultProxyMaxKeyBytes),
		log:         o.Logger,
		closed:      make(chan struct{}),
	}
	if m.maxBackoff < m.minBackoff {
		return nil, fmt.Errorf("sampler: MonitorOptions.MaxBackoff %v: must be ≥ MinBackoff %v", m.maxBackoff, m.minBackoff)
	}
	if _, _, err := net.SplitHostPort(m.addr); err != nil {
		return nil, fmt.Errorf("sampler: MonitorOptions.Addr %q: must be host:port: %v", m.addr, err)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.logq = math.Log1p(-1 / float64(m.every))
	m.rng.Seed(o.Seed, 0x6d6f6e69746f72)
	m.skip = m.draw()
	return m, nil
}

// Serve monitors until ctx is done or Close is called, reconnecting after failures, and
// returns nil then, having handed the last samples to the Sink.
func (m *Monitor) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := m.minBackoff
	for {
		up, lines, err := m.session(ctx)
		m.flush()
		if ctx.Err() != nil {
			return nil
		}
		if lines > 0 {
			backoff = m.minBackoff
		}
		if up {
			m.log.Warn("monitor: connection lost", "addr", m.addr, "err", err, "retry_in", backoff)
		} else {
			m.log.Warn("monitor: could not connect", "addr", m.addr, "err", err, "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, m.maxBackoff)
	}
}

// Close makes Serve return; it returns nil, also when called more than once.
func (m *Monitor) Close() error {
	m.closeOnce.Do(func() { close(m.closed) })
	return nil
}

// session runs one connection and returns whether it came up (the server took MONITOR)
// and how many lines it read then.
func (m *Monitor) session(ctx context.Context) (up bool, lines int, err error) {
	d := net.Dialer{Timeout: m.dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return false, 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	r := bufio.NewReaderSize(conn, m.maxLine)
	_ = conn.SetDeadline(time.Now().Add(m.dialTimeout))
	if m.pass != "" {
		var auth []byte
		if m.user != "" {
			auth = appendRESPCommand(nil, "AUTH", m.user, m.pass)
		} else {
			auth = appendRESPCommand(nil, "AUTH", m.pass)
		}
		if err := handshake(conn, r, auth); err != nil {
			return false, 0, fmt.Errorf("AUTH: %w", err)
		}
	}
	if err := handshake(conn, r, appendRESPCommand(nil, "MONITOR")); err != nil {
		return false, 0, fmt.Errorf("MONITOR: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})

	lastFlush := time.Now()
	for {
		if len(m.batch.samples) > 0 {
			// Wake up to flush a partial batch when the server is quiet.
			_ = conn.SetReadDeadline(lastFlush.Add(m.interval))
		} else {
			_ = conn.SetReadDeadline(time.Time{})
		}
		line, err := r.ReadSlice('\n')
		partial := false
		if errors.Is(err, bufio.ErrBufferFull) {
			partial = true
		} else if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				m.flush()
				lastFlush = time.Now()
				continue
			}
			return true, lines, err
		}
		lines++
		if len(line) > 0 && line[0] == '-' {
			return true, lines, fmt.Errorf("server error: %s", bytes.TrimSpace(line[1:]))
		}
		m.skip--
		if m.skip <= 0 {
			m.skip = m.draw()
			m.sampleLine(line, partial)
		}
		if partial {
			if err := discardLine(r); err != nil {
				return true, lines, err
			}
		}
		if len(m.batch.samples) >= m.batchSize || time.Since(lastFlush) >= m.interval {
			m.flush()
			lastFlush = time.Now()
		}
	}
}

// sampleLine parses one MONITOR line ("+1339518083.107412 [0 127.0.0.1:60866] …\r\n")
// and adds its keys to the batch.
func (m *Monitor) sampleLine(line []byte, partial bool) {
	if len(line) == 0 || line[0] != '+' {
		m.sink.Drop(m.source, DropMalformed, 1)
		return
	}
	line = bytes.TrimSuffix(line[1:], []byte("\r\n"))
	if err := m.line.parse(line, partial); err != nil {
		if m.line.monitorOK() {
			return // the "+OK" that answers MONITOR itself
		}
		m.sink.Drop(m.source, DropMalformed, 1)
		return
	}
	args := m.line.args
	if len(args) > 0 && isScriptCall(args[0]) {
		// Redis echoes each command a script or function runs, as a line of client
		// "lua" sampled with its own read or write: the call's keys would count twice.
		return
	}
	nargs := len(args)
	if partial {
		nargs++ // arguments were cut off
	}
	pending, tooLarge := appendKeySamples(m.pending[:0], args, m.line.sizes, nargs)
	m.pending = pending
	if partial && tooLarge > 0 {
		tooLarge-- // the cut-off arguments are values, not keys, most likely
	}
	if tooLarge > 0 {
		m.sink.Drop(m.source, DropTooLarge, tooLarge)
	}
	for _, s := range pending {
		if len(s.Key) > m.maxKey { // only keys: the command name and numkeys stay whole
			s.Key, s.Truncated = s.Key[:m.maxKey], true // sampled by its prefix
		}
		m.batch.keys = append(m.batch.keys, s.Key...)
		s.Key = nil
		m.batch.samples = append(m.batch.samples, s)
		m.batch.ends = append(m.batch.ends, len(m.batch.keys))
	}
}

// flush hands the batch to the Sink.
func (m *Monitor) flush() {
	b := &m.batch
	if len(b.samples) == 0 {
		return
	}
	b.fix()
	m.sink.Accept(Batch{Source: m.source, Rate: 1 / float64(m.every), Samples: b.samples})
	clear(b.samples)
	b.samples, b.ends, b.keys = b.samples[:0], b.ends[:0], b.keys[:0]
}

// draw returns how many lines to count until the next sample, that one included.
func (m *Monitor) draw() int {
	if m.every == 1 {
		return 1
	}
	u := (float64(m.rng.Uint64()>>11) + 1) / (1 << 53)
	return int(min(1+math.Floor(math.Log(u)/m.logq), 1<<30))
}

// discardLine reads up to and including the next '\n'.
func discardLine(r *bufio.Reader) error {
	for {
		_, err := r.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// handshake sends a command and expects "+…" back.
func handshake(conn net.Conn, r *bufio.Reader, cmd []byte) error {
	if _, err := conn.Write(cmd); err != nil {
		return err
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if len(line) == 0 || line[0] != '+' {
		return fmt.Errorf("server replied %q", bytes.TrimSpace(line))
	}
	return nil
}

func appendRESPCommand(dst []byte, args ...string) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, "\r\n"...)
	for _, a := range args {
		dst = append(dst, '$')
		dst = strconv.AppendInt(dst, int64(len(a)), 10)
		dst = append(dst, "\r\n"...)
		dst = append(dst, a...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

// monitorLine parses MONITOR lines into reused buffers.
type monitorLine struct {
	raw   []byte   // the line last parsed
	db    int      // the database the command ran in
	args  [][]byte // unquoted arguments, views into buf
	sizes []int64  // len of each argument
	buf   []byte
}

// monitorOK reports whether the last line parsed was "OK", MONITOR's own reply.
func (l *monitorLine) monitorOK() bool { return string(l.raw) == "OK" }

// parse parses a MONITOR line without its "+" and "\r\n":
//
//	1339518083.107412 [0 127.0.0.1:60866] "SET" "k\x00y" "v"
//
// The address may be an IPv6 one ([::1]:6379), "lua" or "unix:/path". Each argument is
// double quoted with Redis's escapes (\" \\ \n \r \t \a \b \xHH). With partial, the line
// was cut short: the argument in progress at its end is dropped instead of being an error.
func (l *monitorLine) parse(line []byte, partial bool) error {
	l.raw = line
	l.args, l.sizes, l.buf = l.args[:0], l.sizes[:0], l.buf[:0]
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || !monitorTimestamp(line[:sp]) {
		return errors.New("monitor line: no timestamp")
	}
	rest := line[sp+1:]
	if len(rest) < 2 || rest[0] != '[' {
		return errors.New("monitor line: no [db client]")
	}
	sp = bytes.IndexByte(rest, ' ')
	if sp < 2 {
		return errors.New("monitor line: no database number")
	}
	db, err := strconv.Atoi(string(rest[1:sp]))
	if err != nil || db < 0 {
		return fmt.Errorf("monitor line: database %q: must be a number ≥ 0", rest[1:sp])
	}
	l.db = db
	end := bytes.Index(rest, []byte(`] "`))
	if end < 0 {
		return errors.New(`monitor line: no '] "' before the arguments`)
	}
	rest = rest[end+2:]
	// Arguments are quoted, so a NUL byte cannot be one; splitArg would treat it as text.
	if bytes.IndexByte(rest, 0) >= 0 {
		return errors.New("monitor line: NUL byte")
	}
	for {
		start := len(l.buf)
		var ok bool
		var reason string
		l.buf, rest, ok, reason = splitArg(l.buf, rest)
		if reason != "" {
			if partial {
				l.buf = l.buf[:start]
				break
			}
			return errors.New("monitor line: " + reason)
		}
		if !ok {
			break
		}
		arg := l.buf[start:len(l.buf):len(l.buf)]
		l.args = append(l.args, arg)
		l.sizes = append(l.sizes, int64(len(arg)))
	}
	if len(l.args) == 0 {
		return errors.New("monitor line: no command")
	}
	return nil
}

// monitorTimestamp reports whether b looks like "1339518083.107412".
func monitorTimestamp(b []byte) bool {
	dot := bytes.IndexByte(b, '.')
	if dot <= 0 || dot == len(b)-1 {
		return false
	}
	for i, c := range b {
		if i != dot && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// isScriptCall reports whether name, in any case, runs a script or function: EVAL,
// EVALSHA, FCALL and their _RO forms.
func isScriptCall(name []byte) bool {
	for _, kw := range [...]string{"EVAL", "EVALSHA", "FCALL", "EVAL_RO", "EVALSHA_RO", "FCALL_RO"} {
		if isWord(name, kw) {
			return true
		}
	}
	return false
}
