package client

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/defaults"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// ReporterOptions configures a Reporter. The zero value works: it reports one command in
// 100 to an agent on 127.0.0.1:9736 under the program's name.
type ReporterOptions struct {
	// Agent is the UDP address of the hotkeyd agent, host:port (not a URL, unlike
	// Options.Agent); default "127.0.0.1:9736".
	Agent string
	// Source names this app in the agent's metrics: 1 to 64 bytes of printable UTF-8.
	// Default: the program's file name (os.Args[0] without its directory).
	Source string
	// SampleEvery makes the hook sample one command in N, at random; default 100.
	// 1 samples every command. Allowed: 0 (the default) to 4,294,967,295.
	SampleEvery int
	// Token is sent in every report, for an agent that requires one; default none.
	// Allowed: up to 255 bytes.
	Token string
	// Buffer is how many samples may wait for the sender. When it is full the hook drops
	// samples (and counts them) rather than wait. Default 8,192. Allowed: 0 (the default)
	// to 1,048,576.
	Buffer int
	// FlushInterval is the longest a sample waits before it is sent; a full datagram goes
	// at once. Default 100ms. Allowed: 0 (the default) or 1ms to 1 minute.
	FlushInterval time.Duration
	// MaxDatagram bounds the size of a datagram; default 1,400 bytes
	// (sampler.SafeReportSize), which is never fragmented. A sample too large for it is
	// sent in a datagram of its own; a key longer than sampler.MaxReportKey (60,000
	// bytes) is cut to it, marked truncated (as the agent marks keys it cuts) and sent
	// alone. Allowed: 0 (the default) or 128 to 65,507. However large, a datagram holds
	// at most 10,000 samples, the agent's default limits.max_samples_per_report.
	MaxDatagram int
	// Rand returns uniformly distributed numbers that choose the sampled commands. It
	// must be safe for concurrent use. Default: math/rand/v2's Uint64, which keeps its
	// state per thread and takes no lock.
	Rand func() uint64
	// FollowsPlan marks the reports as coming from a client that applies hotkeyd's plan
	// (sampler.Batch.FollowsPlan), so the agent counts this traffic as reachable by L1
	// and batched counters. Set it when the Reporter's client also follows the plan, as
	// Attach does; default false.
	FollowsPlan bool
}

// Defaults of ReporterOptions.
const (
	DefaultAgent         = "127.0.0.1:9736"
	DefaultSampleEvery   = 100
	DefaultBuffer        = 8192
	DefaultFlushInterval = 100 * time.Millisecond
)

// Stats counts a Reporter's samples since it started. Sampled = Sent + Dropped + the
// samples still waiting in the buffer.
type Stats struct {
	// Sampled is the number of samples taken, one per key of a sampled command.
	Sampled uint64
	// Sent is the number of samples in datagrams the socket accepted. UDP does not say
	// whether the agent received them; the agent's metrics do.
	Sent uint64
	// Dropped is the number of samples lost: the buffer was full, the agent was
	// unreachable, or the Reporter was closed.
	Dropped uint64
	// Datagrams is the number of datagrams sent.
	Datagrams uint64
}

// Reporter samples Redis commands through its Hook and sends the samples to the agent.
// Create it with NewReporter and Close it when done. It is safe for concurrent use.
type Reporter struct {
	// Read by the hook on every command.
	every uint64
	rand  func() uint64 // nil for math/rand/v2's Uint64, called directly

	queue  chan pending
	closed atomic.Bool

	sampled   atomic.Uint64
	sent      atomic.Uint64
	dropped   atomic.Uint64
	datagrams atomic.Uint64

	// Used by the sender goroutine only.
	source      string
	follows     bool
	rate        float64
	token       []byte
	maxDatagram int
	interval    time.Duration
	send        func([]byte) error

	conn      net.Conn      // nil until the agent's name resolves; the sender's after NewReporter
	agent     string        // the agent's address, for dialling again
	redialAt  time.Time     // when the sender may try to dial again
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the sender has returned
	closeOnce sync.Once
	closeErr  error
}

// pending is a sample on its way to the sender. key is a string because go-redis keys
// usually are: the hook passes them on without copying.
type pending struct {
	key       string
	bytes     uint32
	op        sampler.Op
	counter   bool
	truncated bool // key is the start of a longer one (see enqueue)
}

// NewReporter validates opts, opens a UDP socket towards the agent and starts the sender
// goroutine. It fails only on invalid options; an agent that is not running is not an
// error, nor is one whose host name does not resolve (yet): samples are dropped until it
// is reachable, and the sender resolves the name again at most once a second.
func NewReporter(opts ReporterOptions) (*Reporter, error) {
	r, err := newReporter(opts)
	if err != nil {
		return nil, err
	}
	r.send = r.write
	go r.run()
	return r, nil
}

// redialEvery is how often the sender tries again to open the socket towards an agent
// whose name did not resolve.
const redialEvery = time.Second

// write sends a datagram; it runs in the sender goroutine.
func (r *Reporter) write(b []byte) error {
	if r.conn == nil {
		if time.Now().Before(r.redialAt) {
			return errNoSocket
		}
		conn, err := net.Dial("udp", r.agent)
		if err != nil {
			r.redialAt = time.Now().Add(redialEvery)
			return err
		}
		r.conn = conn
	}
	_, err := r.conn.Write(b)
	return err
}

var errNoSocket = errors.New("client: no socket towards the agent: its name did not resolve")

// newReporter is NewReporter without starting the sender, so that tests can replace send.
func newReporter(opts ReporterOptions) (*Reporter, error) {
	if opts.Agent == "" {
		opts.Agent = DefaultAgent
	}
	if strings.Contains(opts.Agent, "://") {
		return nil, fmt.Errorf("client: Agent %q: want the agent's UDP address host:port, such as %s, not a URL", opts.Agent, DefaultAgent)
	}
	if opts.Source == "" {
		opts.Source = defaultSource()
	}
	if opts.SampleEvery < 0 || uint64(opts.SampleEvery) > math.MaxUint32 {
		return nil, fmt.Errorf("client: SampleEvery %d: must be 0 (100) to 4294967295", opts.SampleEvery)
	}
	opts.SampleEvery = defaults.Or(opts.SampleEvery, DefaultSampleEvery)
	if opts.Buffer < 0 || opts.Buffer > 1<<20 {
		return nil, fmt.Errorf("client: Buffer %d: must be 0 (8192) to 1048576 samples", opts.Buffer)
	}
	opts.Buffer = defaults.Or(opts.Buffer, DefaultBuffer)
	if opts.FlushInterval != 0 && (opts.FlushInterval < time.Millisecond || opts.FlushInterval > time.Minute) {
		return nil, fmt.Errorf("client: FlushInterval %v: must be 0 (100ms) or 1ms to 1m", opts.FlushInterval)
	}
	opts.FlushInterval = defaults.Or(opts.FlushInterval, DefaultFlushInterval)
	if opts.MaxDatagram != 0 && (opts.MaxDatagram < 128 || opts.MaxDatagram > sampler.MaxReportSize) {
		return nil, fmt.Errorf("client: MaxDatagram %d: must be 0 (1400) or 128 to %d bytes", opts.MaxDatagram, sampler.MaxReportSize)
	}
	opts.MaxDatagram = defaults.Or(opts.MaxDatagram, sampler.SafeReportSize)
	var token []byte
	if opts.Token != "" {
		token = []byte(opts.Token)
	}
	rate := 1 / float64(opts.SampleEvery)
	// An empty report checks the source and token as the agent will.
	if _, err := sampler.AppendReport(nil, sampler.Batch{Source: opts.Source, Rate: rate}, token); err != nil {
		return nil, fmt.Errorf("client: Source or Token: %w", err)
	}
	if h := sampler.ReportHeaderSize(opts.Source, token); h+16 > opts.MaxDatagram {
		return nil, fmt.Errorf("client: MaxDatagram %d: must leave room for samples after a header of %d bytes", opts.MaxDatagram, h)
	}
	conn, err := net.Dial("udp", opts.Agent)
	var dnsErr *net.DNSError
	if err != nil && !errors.As(err, &dnsErr) { // a name that does not resolve is an agent away
		return nil, fmt.Errorf("client: Agent %q: %w", opts.Agent, err)
	}
	return &Reporter{
		every:       uint64(opts.SampleEvery),
		rand:        opts.Rand,
		queue:       make(chan pending, opts.Buffer),
		source:      opts.Source,
		follows:     opts.FollowsPlan,
		rate:        rate,
		token:       token,
		maxDatagram: opts.MaxDatagram,
		interval:    opts.FlushInterval,
		conn:        conn,
		agent:       opts.Agent,
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}, nil
}

// defaultSource is the program's file name, or "go-app" when that is not a valid source.
func defaultSource() string {
	name := filepath.Base(os.Args[0])
	if len(name) > sampler.MaxSourceLen {
		name = name[:sampler.MaxSourceLen]
	}
	if _, err := sampler.AppendReport(nil, sampler.Batch{Source: name, Rate: 1}, nil); err != nil {
		return "go-app"
	}
	return name
}

// Stats returns the Reporter's counts so far.
func (r *Reporter) Stats() Stats {
	finished := false
	select {
	case <-r.done: // the sender has returned, and its counts are all in
		finished = true
	default:
	}
	// Loaded in this order, so that a sample counted as sent, dropped or left is always
	// counted as sampled too (enqueue counts it sampled first).
	st := Stats{Datagrams: r.datagrams.Load(), Sent: r.sent.Load(), Dropped: r.dropped.Load()}
	if finished {
		// What is left in the queue (put there by hooks that raced with Close) is never
		// sent: nothing takes it out any more.
		st.Dropped += uint64(len(r.queue))
	}
	st.Sampled = r.sampled.Load()
	return st
}

// Close sends what is waiting, stops the sender goroutine and closes the socket. The
// hook stays installed but samples nothing after Close. Close returns the error of
// closing the socket, if any, and nil when called again.
func (r *Reporter) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		close(r.stop)
		<-r.done
		if r.conn != nil {
			r.closeErr = r.conn.Close()
		}
	})
	return r.closeErr
}

// enqueue hands a sample to the sender without ever waiting.
func (r *Reporter) enqueue(p pending) {
	r.sampled.Add(1)
	if len(p.key) > sampler.MaxReportKey { // else no datagram could carry it
		p.key, p.truncated = p.key[:sampler.MaxReportKey], true
	}
	select {
	case r.queue <- p:
	default:
		r.dropped.Add(1)
	}
}

// run is the sender goroutine.
func (r *Reporter) run() {
	defer close(r.done)
	ticker := time.NewTicker(r.interval)
	defer ticker.Stop()
	w := datagramWriter{r: r, header: sampler.ReportHeaderSize(r.source, r.token)}
	w.reset()
	for {
		select {
		case p := <-r.queue:
			w.add(p)
		case <-ticker.C:
			w.flush()
		case <-r.stop:
			// Send what is queued; a hook that raced with Close may add a few more,
			// which the bounded loop leaves behind and Stats counts as dropped.
		drain:
			for range cap(r.queue) {
				select {
				case p := <-r.queue:
					w.add(p)
				default:
					break drain
				}
			}
			w.flush()
			return
		}
	}
}

// maxDatagramSamples bounds the samples of one datagram: the agent drops a report of more
// than limits.max_samples_per_report samples (default sampler.DefaultMaxSamples) as
// too_large, and a large MaxDatagram of short keys would hold more (some 13,000 of 5
// bytes in 65,507).
const maxDatagramSamples = sampler.DefaultMaxSamples

// datagramWriter packs samples into datagrams; it belongs to the sender goroutine.
type datagramWriter struct {
	r      *Reporter
	header int // the size of a report's header
	size   int // the size of the report so far
	batch  sampler.Batch
	arena  []byte // the keys of batch.Samples, back to back
	ends   []int  // ends[i] is where sample i's key ends in arena
	buf    []byte
}

func (w *datagramWriter) reset() {
	w.batch = sampler.Batch{Source: w.r.source, Rate: w.r.rate, FollowsPlan: w.r.follows, Samples: w.batch.Samples[:0]}
	w.arena, w.ends, w.size = w.arena[:0], w.ends[:0], w.header
}

func (w *datagramWriter) add(p pending) {
	if p.truncated { // alone: an agent older than the truncated bit refuses its datagram
		w.flush()
	}
	start := len(w.arena)
	w.arena = append(w.arena, p.key...)
	s := sampler.Sample{Key: w.arena[start:], Op: p.op, Counter: p.counter, Count: 1, Bytes: p.bytes, Truncated: p.truncated}
	n := sampler.ReportSampleSize(s)
	if (w.size+n > w.r.maxDatagram || len(w.batch.Samples) == maxDatagramSamples) && len(w.batch.Samples) > 0 {
		w.arena = w.arena[:start]
		w.flush()
		start = 0
		w.arena = append(w.arena, p.key...)
		s.Key = w.arena
	}
	w.batch.Samples = append(w.batch.Samples, s)
	w.ends = append(w.ends, len(w.arena))
	w.size += n
	if w.size >= w.r.maxDatagram || p.truncated { // full, or one sample too large to share a datagram
		w.flush()
	}
}

func (w *datagramWriter) flush() {
	n := uint64(len(w.batch.Samples))
	if n == 0 {
		return
	}
	start := 0
	for i, end := range w.ends { // the arena may have moved as it grew
		w.batch.Samples[i].Key = w.arena[start:end]
		start = end
	}
	var err error
	w.buf, err = sampler.AppendReport(w.buf[:0], w.batch, w.r.token)
	if err == nil {
		err = w.r.send(w.buf)
	}
	if err != nil { // the agent is unreachable (ECONNREFUSED), a key over 64 KiB, …
		w.r.dropped.Add(n)
	} else {
		w.r.sent.Add(n)
		w.r.datagrams.Add(1)
	}
	if cap(w.arena) > 1<<20 { // do not keep a buffer grown by one huge key
		w.arena, w.buf = nil, nil
	}
	w.reset()
}
