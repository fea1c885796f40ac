package sampler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/defaults"
)

// ProxyOptions configure a Proxy. Only Sink must be set; the zero value of every other
// field picks its default.
type ProxyOptions struct {
	// Listen is the TCP address clients connect to. Default "127.0.0.1:0", a free port
	// that Addr reports.
	Listen string
	// Upstream is the Redis server's address. Default "127.0.0.1:6379".
	Upstream string
	// SampleEvery samples one command in SampleEvery, at random (a Bernoulli draw per
	// command, made with one random number per sample). 1 samples every command.
	// Default 100.
	SampleEvery int
	// Source names the samples' source in every Batch. Default "proxy".
	Source string
	// Sink receives the samples. Required.
	Sink Sink
	// BufferSize is the size of each connection's forwarding buffers, the most bytes one
	// read moves, and the largest command a client may send over the shared connection
	// (a larger one, or one larger than Redis takes, gives it a connection of its own).
	// Default 64 KiB.
	BufferSize int
	// BatchSize is how many samples a Batch holds at most. Default 256.
	BatchSize int
	// FlushInterval is how long a sample may wait for its batch to fill before the batch
	// is handed to the Sink anyway. Default 100ms.
	FlushInterval time.Duration
	// DialTimeout bounds connecting to Upstream. Default 5s.
	DialTimeout time.Duration
	// MaxKeyBytes is the longest key sampled; a longer key is sampled by its first
	// MaxKeyBytes bytes and marked Truncated. Default 512.
	MaxKeyBytes int
	// Seed seeds the sampling draws; each connection mixes in its sequence number.
	// Default 0.
	Seed uint64
	// ConnPerClient turns multiplexing off: every client gets its own connection to
	// Upstream from the start, and the proxy is a plain TCP relay that reads a copy of
	// the commands. By default the proxy carries clients' plain commands over one shared
	// connection (see Proxy).
	ConnPerClient bool
	// SchedPolicy is what the proxy does with the scheduling policy of the process's
	// threads on Linux: SchedOff (the default) leaves it alone; SchedAuto switches it
	// with the clients' pipelining (see Proxy); SchedBatch makes it SCHED_BATCH while the
	// proxy serves. It applies to the whole process: run one such Proxy per process.
	SchedPolicy SchedPolicy
	// SchedInterval is how often SchedAuto looks at the clients' reads. Default 20ms.
	SchedInterval time.Duration
	// DrainTimeout bounds the drain that Serve runs when its context ends (see
	// Shutdown): connections still open after it are closed. Default 5s.
	DrainTimeout time.Duration
	// UpstreamUsername and UpstreamPassword are the credentials the shared connections
	// authenticate with, for a Redis that wants AUTH (requirepass, or ACL users): with a
	// password set, a client shares them only once it has authenticated with exactly
	// these credentials, and any other client gets a connection of its own (see Proxy).
	// An empty username is Redis's user "default" (the legacy `AUTH password`). Without
	// a password, a Redis that wants AUTH is not shared. The password is never logged.
	UpstreamUsername, UpstreamPassword string
	// MaxOutputBytes bounds the replies the proxy holds for its multiplexed clients
	// together: replies Redis sent that a client has not read yet. Past it the proxy
	// stops reading Redis's replies, which Redis keeps as it keeps a direct client's,
	// until the clients have read half. Every client of the shared connections waits
	// meanwhile, so if that takes a second, the clients holding the most are
	// disconnected, each with a warning naming it, until half is left: a client that
	// reads slowly, or not at all, holds up the others for a second at most.
	// Default 16 MiB; allowed 1 MiB to 1 GiB. The process's memory can reach about twice
	// as much while the budget is full.
	MaxOutputBytes int
	// AccessCheckTTL is how long a passed check that Redis lets a new connection in
	// without AUTH, or with the configured credentials, lets new clients onto the shared
	// connections without another (see Proxy). With 0, every new client waits for a check
	// that started after it came, which dials Redis: each client that connects costs
	// Redis a connection and the client a round trip, as without the proxy. With a TTL, a
	// Redis that begins to want a password can still get new clients over the shared
	// connections for up to the TTL, as it keeps serving the connections opened before.
	// Default 0; allowed 0 to 1m.
	AccessCheckTTL time.Duration
	// NoIOUring makes the multiplexed clients' event loop make one system call for each
	// read and write. By default, on Linux, it reads the clients that epoll found ready,
	// and writes the replies that one read from Redis carried, with one io_uring system
	// call each where the kernel allows it (Linux 5.19 or later, with io_uring neither
	// disabled nor blocked by seccomp, as Docker's default profile does), and one call
	// each otherwise. A system call costs about a microsecond before it does anything on
	// the machines measured (docs/BENCHMARKS.md).
	NoIOUring bool
	// Logger receives connection errors at debug level, accept errors and shared
	// connections that fail at warn level, and an Upstream that reaches the proxy itself
	// at error level. Default: none.
	Logger *slog.Logger
}

// Proxy defaults.
const (
	DefaultProxyListen        = "127.0.0.1:0"
	DefaultProxyUpstream      = "127.0.0.1:6379"
	DefaultProxySampleEvery   = 100
	DefaultProxySource        = "proxy"
	DefaultProxyBufferSize    = 64 << 10
	DefaultProxyBatchSize     = 256
	DefaultProxyFlushInterval = 100 * time.Millisecond
	DefaultProxyDialTimeout   = 5 * time.Second
	DefaultProxyMaxKeyBytes   = 512
	DefaultProxyDrainTimeout  = 5 * time.Second
	DefaultProxyMaxOutput     = 16 << 20
)

// pauseLimit is how long the clients of the event loop wait, while it holds
// MaxOutputBytes of replies, before it cuts those holding the most (see MaxOutputBytes):
// go-redis's read timeout is 3 s by default.
const pauseLimit = time.Second

// proxyBatches is how many batch buffers a Proxy cycles through; when all are waiting
// for the Sink, new samples are dropped as DropOverload.
const proxyBatches = 4

// Proxy is the RESP proxy tap: a TCP proxy in front of one Redis server that forwards
// what clients send and what Redis answers byte for byte, and samples the commands.
//
// By default (on Linux) it multiplexes, as twemproxy does: the plain commands of every
// client — the key commands of the command table except those that may block (blocking
// pops, XREADGROUP, and XREAD unless STREAMS is its first option) and scripts, plus PING
// and ECHO — go over connections to Redis that all clients share, written in one write
// per turn of an event loop, so Redis reads and answers many clients at once; each reply
// goes back to the client whose command it answers. There is one shared connection for
// reads and one for writes (so that writes Redis holds back during a failover do not hold
// back reads), for each protocol: a client that opens with a plain HELLO 3 (go-redis v9,
// Lettuce) is served by the RESP3 pair. CLIENT SETINFO, CLIENT MAINT_NOTIFICATIONS
// (go-redis v9) and SELECT 0, which clients send when they connect, are shared too: on a
// shared connection they change nothing that matters. A client's first other command
// (AUTH and HELLO with AUTH, except with the configured credentials (see below), SELECT
// of another database, HELLO with SETNAME or after other commands, MULTI, WATCH, BLPOP,
// SUBSCRIBE, another CLIENT subcommand, WAIT, EVAL, an unknown command), bytes that do
// not parse, or a command larger than BufferSize or than Redis takes (its
// proto-max-bulk-len and client-query-buffer-limit, asked with CONFIG GET when a shared
// connection opens) pins it: once the shared connection has answered all it sent there,
// the client gets a connection of its own and from then on its bytes pass both ways
// untouched, so everything Redis speaks keeps working — pipelining, AUTH and SELECT, blocking
// commands, MULTI/EXEC, pub/sub, RESP3, MONITOR (a client that switched to RESP3 on the
// shared connection has its own one switched too, with HELLO 3, before its bytes go
// there).
// What a shared connection changes for a client that is never pinned is only what Redis
// reports about connections (CLIENT LIST, INFO clients). WAIT and WAITAOF count the writes
// a client made on its own connection, not those it made before the pin. A new client
// goes on the shared connection only once a connection opened after it came has had
// +PONG, not -NOAUTH, to a PING (clients that connect together share that check; with
// ProxyOptions.AccessCheckTTL, one opened up to that long before it came will do);
// otherwise every client gets its own connection, as with ConnPerClient, and the proxy
// tries sharing again after a while. So a Redis that wants AUTH is not shared, unless
// ProxyOptions.UpstreamPassword (and UpstreamUsername, for an ACL user) are set: then
// every shared connection, and the check's, authenticates with them (AUTH) before its
// PING, and a client shares the connections only once it has authenticated as that
// very user: its AUTH password, AUTH user password or HELLO 2|3 AUTH user password
// (without SETNAME, sent as a RESP array) with the configured credentials goes over the
// shared connection like a plain command — Redis answers it there as it would on the
// client's own, and authenticating the shared connection as its own user again changes
// nothing — and marks the client authenticated. Any other command from a client not yet
// authenticated (which Redis would refuse with -NOAUTH), and any AUTH or HELLO AUTH with
// other credentials (a wrong password, another ACL user), pins it (ProxyStats.Pins
// PinAuth): on its own connection Redis answers it exactly as directly, and a client
// never gets the configured user's rights over the shared connections without having
// presented its credentials. An authenticated client that is pinned later has its own
// connection authenticated with the configured credentials (HELLO 3 AUTH for a RESP3
// client) before its bytes go there. The password is compared in constant time and never
// logged. One gap remains when the password is rotated: a client that presents the old
// configured password after Redis stopped taking it (connected before the rotation, or
// after it on a check from before it: AccessCheckTTL) gets -WRONGPASS to its AUTH, but
// the shared connections, authenticated before, still serve it until they are reopened —
// with the password it knew, so no more than it could have had directly before the
// rotation. Configure the new password and restart the tap when rotating.
// When the shared connection fails, the clients it owed replies are disconnected (those
// replies are lost, as they would be with a direct connection) and the others go on over
// a new one.
//
// No upstream. A client that Redis has answered nothing and that the proxy cannot reach
// Redis for (it cannot dial the client's own connection, nor, when multiplexing, open the
// shared ones) gets each command it sends within 5 s answered with an error reply, a RESP
// simple error that RESP2 and RESP3 clients read alike, and then its connection ended
// (every command, not only the first: client libraries send their own when they connect,
// and ignore their errors):
//
//	-ERR hotkeyd proxy: upstream 127.0.0.1:6379 unreachable: connection refused
//
// These are the only replies the proxy ever makes itself: a client that Redis answered and
// that loses its upstream is disconnected, as on a direct connection. A connection to
// Upstream that reaches the proxy's own listener (Upstream is Listen, or another address
// of the same socket: localhost, another loopback address or one of the host's, for a
// proxy listening on every address) counts as one that failed ("it reaches this proxy
// itself"): the proxy closes it before sending anything, logs an error the first time,
// and dials nothing for 10 s, so that its own connections do not come back to it as
// clients that dial again. An address that leads to the listener through NAT is not
// recognised.
//
// A client on a connection of its own has two goroutines, one per direction. The
// client-to-server one writes what it read upstream first and only then parses its copy,
// so parsing overlaps the server's work instead of adding to the request's latency.
// Bytes that do not parse as RESP stop the sampling of that connection (one
// DropMalformed) and are still forwarded; Redis itself closes such a connection.
//
// Stopping. Shutdown stops the proxy gracefully: it stops accepting at once and takes no
// new commands (what clients send from then on is read and dropped), delivers the whole
// reply to every command already forwarded to Redis, then ends each client's connection
// with a FIN, reads what the client still sends until it closes its side (or briefly,
// once all it was sent has reached it, so that an idle pooled connection does not hold
// the stop), and closes it; what is still open when its context ends is closed then. Serve does the same when its
// context ends, bounded by DrainTimeout. Close closes every connection at once, mid-reply.
//
// Samples go to the Sink in batches from one goroutine, at most BatchSize at a time or
// every FlushInterval. A Sink that cannot keep up makes the proxy drop samples
// (DropOverload), never slow down forwarding.
//
// Pipelined clients. On a machine where the proxy shares its CPUs with its clients, a
// client that pipelines wakes the proxy with each write, and the woken proxy preempts it
// in the middle of its burst: the two take turns on one CPU, a batch of commands each,
// while Redis waits on the other. With SchedAuto, once nine in ten of the multiplexed
// clients' reads carry 4 commands or more (at 2,000 reads a second or more), every
// thread of the process runs as SCHED_BATCH, whose woken threads do not preempt: the
// client finishes its burst, and the proxy then reads many clients in one turn. Once
// fewer than half do, the threads run as SCHED_OTHER again, since a client that waits
// for each command's reply would then wait for the proxy too. After a second without a
// client read the check sleeps, and the next read wakes it. Each switch is logged at
// debug level, and at info level the first one and then the policy in force once it has
// held for a second (or once a minute while it keeps switching); Stats reports it.
//
// A Proxy is safe for concurrent use.
type Proxy struct {
	ln        net.Listener
	upstream  string
	every     int
	logq      float64 // log(1 - 1/every), for the geometric draws
	source    string
	sink      Sink
	bufSize   int
	maxOutput int           // MaxOutputBytes
	pauseFor  time.Duration // pauseLimit, or a test's: read by the loop's goroutine only after a pause begins
	maxKey    int
	interval  time.Duration
	dialer    net.Dialer
	seed      uint64
	log       *slog.Logger
	batches   *proxyBatcher

	multiplex  bool
	noURing    bool        // NoIOUring
	uringLog   atomic.Bool // whether the loop uses io_uring was logged
	sched      SchedPolicy
	schedEvery time.Duration
	muxMu      sync.Mutex    // guards loop, muxRetryAt, muxRetry and sharedDown
	loop       *muxLoop      // the shared upstream connection's event loop, or nil
	muxRetryAt time.Time     // no shared connection before then
	muxRetry   time.Duration // the wait after a shared connection failed: muxRetry, or a test's
	sharedDown bool          // sharing failed and has not worked since: log when it does
	probes     probeGate     // new clients' checks that Redis lets a new connection in
	auth       *upstreamAuth // the shared connections' credentials; nil when none are configured
	selfUntil  atomic.Int64  // unix nanoseconds: no dial before then, the upstream reached the proxy itself (dialUpstream)
	selfLogged atomic.Bool   // that was logged as an error

	ctx          context.Context // cancelled once the connections are gone or forced closed; bounds dials
	cancel       context.CancelFunc
	drainTimeout time.Duration

	mu      sync.Mutex // guards closed, forced, serving, conns and the Adds to wg and bgWG
	closed  bool       // draining or closed: no new clients
	forced  bool       // every connection closed at once: no new connections
	serving bool
	conns   map[*proxyConn]struct{}
	wg      sync.WaitGroup // connection goroutines and the loop
	bgWG    sync.WaitGroup // the flusher and the scheduler

	draining   atomic.Bool   // set with closed: clients' commands are no longer forwarded
	drainOnce  sync.Once     // starts the drain
	forceOnce  sync.Once     // closes every connection
	finishOnce sync.Once     // stops the flusher and the scheduler
	drainStart chan struct{} // closed when the drain starts
	drained    chan struct{} // closed when wg is done: every connection is gone
	finished   chan struct{} // closed when the last samples are with the Sink

	nconn atomic.Uint64 // connections accepted, for seeding
	stats proxyCounters
	stop  chan struct{} // closed once the connections are gone; stops the flusher
}

// ProxyStats counts what the proxy does with its clients.
type ProxyStats struct {
	// SharedClients is how many clients the shared upstream connection serves now;
	// OwnClients how many have a connection of their own.
	SharedClients, OwnClients int64
	// Pins counts clients moved from the shared connection to their own, by reason:
	// PinCommand (a command that keeps state or blocks), PinMalformed (bytes that do not
	// parse), PinTooLarge (a command larger than BufferSize or than Redis takes), PinAuth
	// (with UpstreamPassword set, a command before the client authenticated with the
	// configured credentials, or an AUTH with others), PinBacklog (it sent more while its
	// replies waited in the proxy, as a client does that writes a whole pipeline before
	// reading).
	Pins map[string]uint64
	// SharedFailures counts shared upstream connections that failed or could not be
	// opened (Redis down, wanting AUTH, or refusing the configured credentials), but not
	// those Redis closed while they owed nothing (its timeout setting).
	SharedFailures uint64
	// OutputBytes is the replies waiting now for multiplexed clients to read them, as of
	// the event loop's last turn, and those pinned clients took along to their own
	// connections and have not read yet; OutputCuts counts the clients disconnected because
	// those stayed past MaxOutputBytes for a second (see MaxOutputBytes).
	OutputBytes int64
	OutputCuts  uint64
	// SchedBatch reports whether the proxy runs the process's threads as SCHED_BATCH
	// now (ProxyOptions.SchedPolicy).
	SchedBatch bool
}

// Reasons a client is pinned, the keys of ProxyStats.Pins.
const (
	PinCommand   = "command"
	PinMalformed = "malformed"
	PinTooLarge  = "too_large"
	PinAuth      = "auth"
	PinBacklog   = "backlog"
)

type proxyCounters struct {
	shared, own                           atomic.Int64
	pinCommand, pinMalformed, pinTooLarge atomic.Uint64
	pinAuth, pinBacklog                   atomic.Uint64
	handedOut                             atomic.Int64 // replies handed back with pinned clients, not yet written (see handBack)
	sharedFailures, outputCuts            atomic.Uint64
	outputBytes                           atomic.Int64
	reads, deepReads                      atomic.Uint64 // for SchedAuto: see countRead
	schedBatch                            atomic.Bool
	schedIdle                             idleGate // SchedAuto's check sleeps: see sleepUntilRead
}

// pinReason names the reason a pin counter counts, as ProxyStats.Pins does.
func (s *proxyCounters) pinReason(pin *atomic.Uint64) string {
	switch pin {
	case &s.pinMalformed:
		return PinMalformed
	case &s.pinTooLarge:
		return PinTooLarge
	case &s.pinAuth:
		return PinAuth
	case &s.pinBacklog:
		return PinBacklog
	}
	return PinCommand
}

// Stats returns the proxy's counters now.
func (p *Proxy) Stats() ProxyStats {
	s := &p.stats
	return ProxyStats{
		SharedClients: s.shared.Load(),
		OwnClients:    s.own.Load(),
		Pins: map[string]uint64{
			PinCommand:   s.pinCommand.Load(),
			PinMalformed: s.pinMalformed.Load(),
			PinTooLarge:  s.pinTooLarge.Load(),
			PinAuth:      s.pinAuth.Load(),
			PinBacklog:   s.pinBacklog.Load(),
		},
		SharedFailures: s.sharedFailures.Load(),
		OutputBytes:    s.outputBytes.Load() + s.handedOut.Load(),
		OutputCuts:     s.outputCuts.Load(),
		SchedBatch:     s.schedBatch.Load(),
	}
}

// NewProxy validates o and starts listening on o.Listen; Serve then accepts clients.
func NewProxy(o ProxyOptions) (*Proxy, error) {
	if o.Sink == nil {
		return nil, errors.New("sampler: ProxyOptions.Sink is nil: must be a Sink (SinkFunc adapts a function)")
	}
	if o.SampleEvery < 0 {
		return nil, fmt.Errorf("sampler: ProxyOptions.SampleEvery %d: must be ≥ 1, or 0 for the default %d",
			o.SampleEvery, DefaultProxySampleEvery)
	}
	if o.MaxOutputBytes != 0 && (o.MaxOutputBytes < 1<<20 || o.MaxOutputBytes > 1<<30) {
		return nil, fmt.Errorf("sampler: ProxyOptions.MaxOutputBytes %d: must be between %d and %d, or 0 for the default %d",
			o.MaxOutputBytes, 1<<20, 1<<30, DefaultProxyMaxOutput)
	}
	if o.BufferSize != 0 && (o.BufferSize < 512 || o.BufferSize > 16<<20) {
		return nil, fmt.Errorf("sampler: ProxyOptions.BufferSize %d: must be between 512 and %d, or 0 for the default %d",
			o.BufferSize, 16<<20, DefaultProxyBufferSize)
	}
	if o.BatchSize < 0 {
		return nil, fmt.Errorf("sampler: ProxyOptions.BatchSize %d: must be ≥ 1, or 0 for the default %d",
			o.BatchSize, DefaultProxyBatchSize)
	}
	if o.FlushInterval < 0 {
		return nil, fmt.Errorf("sampler: ProxyOptions.FlushInterval %v: must be > 0, or 0 for the default %v",
			o.FlushInterval, DefaultProxyFlushInterval)
	}
	if o.DialTimeout < 0 {
		return nil, fmt.Errorf("sampler: ProxyOptions.DialTimeout %v: must be > 0, or 0 for the default %v",
			o.DialTimeout, DefaultProxyDialTimeout)
	}
	if o.SchedPolicy > SchedBatch {
		return nil, fmt.Errorf("sampler: ProxyOptions.SchedPolicy %v: must be SchedOff, SchedAuto or SchedBatch", o.SchedPolicy)
	}
	if o.SchedInterval != 0 && (o.SchedInterval < time.Millisecond || o.SchedInterval > time.Minute) {
		return nil, fmt.Errorf("sampler: ProxyOptions.SchedInterval %v: must be between 1ms and 1m, or 0 for the default %v",
			o.SchedInterval, DefaultProxySchedInterval)
	}
	if o.DrainTimeout < 0 {
		return nil, fmt.Errorf("sampler: ProxyOptions.DrainTimeout %v: must be > 0, or 0 for the default %v",
			o.DrainTimeout, DefaultProxyDrainTimeout)
	}
	if o.AccessCheckTTL < 0 || o.AccessCheckTTL > time.Minute {
		return nil, fmt.Errorf("sampler: ProxyOptions.AccessCheckTTL %v: must be between 0 (a check for each new client) and 1m",
			o.AccessCheckTTL)
	}
	if o.MaxKeyBytes < 0 || o.MaxKeyBytes > respMaxInline {
		return nil, fmt.Errorf("sampler: ProxyOptions.MaxKeyBytes %d: must be between 1 and %d, or 0 for the default %d",
			o.MaxKeyBytes, respMaxInline, DefaultProxyMaxKeyBytes)
	}
	p := &Proxy{
		upstream:   defaults.Or(o.Upstream, DefaultProxyUpstream),
		every:      defaults.Or(o.SampleEvery, DefaultProxySampleEvery),
		source:     defaults.Or(o.Source, DefaultProxySource),
		sink:       o.Sink,
		bufSize:    defaults.Or(o.BufferSize, DefaultProxyBufferSize),
		maxOutput:  defaults.Or(o.MaxOutputBytes, DefaultProxyMaxOutput),
		maxKey:     defaults.Or(o.MaxKeyBytes, DefaultProxyMaxKeyBytes),
		interval:   defaults.Or(o.FlushInterval, DefaultProxyFlushInterval),
		seed:       o.Seed,
		log:        o.Logger,
		multiplex:  !o.ConnPerClient,
		noURing:    o.NoIOUring,
		auth:       newUpstreamAuth(o.UpstreamUsername, o.UpstreamPassword),
		sched:      o.SchedPolicy,
		schedEvery: defaults.Or(o.SchedInterval, DefaultProxySchedInterval),
		muxRetry:   muxRetry,
		probes:     probeGate{fresh: o.AccessCheckTTL, now: time.Now},
		pauseFor:   pauseLimit,
		conns:      make(map[*proxyConn]struct{}),
		stop:       make(chan struct{}),
		drainStart: make(chan struct{}),
		drained:    make(chan struct{}),
		finished:   make(chan struct{}),
	}
	p.drainTimeout = defaults.Or(o.DrainTimeout, DefaultProxyDrainTimeout)
	if _, _, err := net.SplitHostPort(p.upstream); err != nil {
		return nil, fmt.Errorf("sampler: ProxyOptions.Upstream %q: must be host:port: %v", p.upstream, err)
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.logq = math.Log1p(-1 / float64(p.every))
	p.stats.schedIdle = newIdleGate()
	p.dialer.Timeout = defaults.Or(o.DialTimeout, DefaultProxyDialTimeout)
	p.batches = newProxyBatcher(defaults.Or(o.BatchSize, DefaultProxyBatchSize), p.maxKey)
	ln, err := net.Listen("tcp", defaults.Or(o.Listen, DefaultProxyListen))
	if err != nil {
		return nil, fmt.Errorf("sampler: proxy: %w", err)
	}
	p.ln = ln
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// Serve accepts clients until ctx is done or Shutdown or Close is called. When ctx is
// done it drains the proxy as Shutdown does, for DrainTimeout at most, and returns nil;
// after Shutdown or Close it returns nil once they are done. It returns an error when
// accepting fails for good, and when called a second time.
func (p *Proxy) Serve(ctx context.Context) error {
	p.mu.Lock()
	if p.serving {
		p.mu.Unlock()
		return errors.New("sampler: Proxy.Serve called twice")
	}
	p.serving = true
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.bgWG.Add(1)
	go p.flusher()
	if p.sched != SchedOff {
		p.bgWG.Add(1)
		go func() {
			defer p.bgWG.Done()
			p.scheduler()
		}()
	}
	p.mu.Unlock()

	stop := context.AfterFunc(ctx, p.beginDrain)
	defer stop()
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			switch {
			case closed && ctx.Err() != nil:
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.drainTimeout)
				err := p.Shutdown(dctx)
				cancel()
				if err != nil {
					p.log.Warn("proxy: drain cut short: connections still open were closed", "drain_timeout", p.drainTimeout)
				}
				return nil
			case closed:
				<-p.finished // Shutdown or Close is at work
				return nil
			case errors.Is(err, net.ErrClosed):
				_ = p.Close()
				return nil
			}
			// Out of file descriptors and the like: wait and retry, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("proxy: accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-p.drainStart:
				continue // Accept fails, closed
			}
		}
		backoff = 0
		pc := &proxyConn{p: p, client: c}
		if !p.track(pc) {
			_ = c.Close()
			continue
		}
		go pc.run()
	}
}

// Shutdown stops the proxy gracefully and returns nil once every connection is closed:
//
//  1. It stops accepting clients at once.
//  2. It takes no new commands: what clients send from then on is read and dropped,
//     never forwarded (a client's socket is not closed with data unread, which would
//     make the kernel reset the connection).
//  3. Every command already forwarded to Redis gets its whole reply: the proxy counts
//     the replies each client is owed.
//  4. Then each client's connection is ended with a FIN, what the client still sends is
//     read and dropped until it closes its side, and the connection is closed. A client
//     that every byte it was sent has reached (the kernel's SIOCOUTQ, on Linux) is
//     closed without waiting for it: an idle pooled connection would not close its side
//     before the deadline, and the close can lose it nothing.
//
// When ctx is done first, every connection still open is closed at once (a client
// blocked in BLPOP, a subscriber, MONITOR, one that never closes its side, or one whose
// commands or replies did not parse, so that they cannot be counted) and Shutdown
// returns ctx's error. Either way the last samples go to the Sink and the proxy's
// goroutines have returned when it returns. Calls may overlap; all wait for the same
// drain, and a call after the proxy is closed does nothing and returns nil.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.beginDrain()
	var err error
	select {
	case <-p.drained:
	default:
		select {
		case <-p.drained:
		case <-ctx.Done():
			err = ctx.Err()
			p.force()
			<-p.drained
		}
	}
	p.finishOnce.Do(func() {
		p.cancel()    // the scheduler stops
		close(p.stop) // no connection adds samples any more: the flusher takes the last
		p.bgWG.Wait()
		close(p.finished)
	})
	<-p.finished
	return err
}

// Close closes the proxy at once: it stops accepting, closes every connection, even
// mid-reply, hands the last samples to the Sink, and waits until all the proxy's
// goroutines have returned. It is Shutdown with a context already done, but returns nil.
// After Close or Shutdown it does nothing.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = p.Shutdown(ctx)
	return nil
}

// beginDrain starts the drain (see Shutdown), once: no new clients, and no client's
// commands forwarded from now on.
func (p *Proxy) beginDrain() {
	p.drainOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.draining.Store(true)
		close(p.drainStart)
		for pc := range p.conns {
			pc.stopReading()
		}
		p.mu.Unlock()
		_ = p.ln.Close()
		p.drainShared()
		go func() {
			p.wg.Wait() // no Add from 0 now: goTracked is called by counted goroutines only
			close(p.drained)
		}()
	})
}

// force closes every connection at once and stops the loop, once.
func (p *Proxy) force() {
	p.forceOnce.Do(func() {
		p.mu.Lock()
		p.forced = true
		for pc := range p.conns {
			pc.closeBoth()
		}
		p.mu.Unlock()
		p.cancel() // dials in progress fail
		p.closeShared()
	})
}

// track registers a connection and counts its goroutine; false when the proxy is closed.
func (p *Proxy) track(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[pc] = struct{}{}
	p.wg.Add(1)
	return true
}

// goTracked runs f on a goroutine that Shutdown waits for; false, not running f, when
// the proxy's connections were closed (force). Only goroutines that wg counts call it, so
// that wg never goes up from 0 while Shutdown waits.
func (p *Proxy) goTracked(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forced {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

func (p *Proxy) untrack(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// setConn stores c in *field, one of a proxyConn's connections (client, up), where
// Shutdown finds it; false, storing nothing, when the connections were closed (force).
func (p *Proxy) setConn(field *net.Conn, c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forced {
		return false
	}
	*field = c
	return true
}

// proxyConn is one client connection and its upstream connection: the shared one at
// first (through the loop), its own once pinned.
type proxyConn struct {
	p      *Proxy
	client net.Conn // replaced when the loop hands the client back; guarded by p.mu then
	up     net.Conn // its own upstream, set once dialled; guarded by p.mu until then

	parser  *RESPParser
	broken  bool // the stream did not parse; sampling stopped
	rng     rand.PCG
	skip    int      // commands until the next sample, this one included
	pending []Sample // the samples of one command

	// On its own connection, for the drain (see Shutdown).
	sent     int64       // commands forwarded upstream (toServer's; the loop's before it hands the client back)
	want     int64       // replies the client is owed when draining began; -1 when not known
	draining atomic.Bool // set by toServer after want: no more commands go upstream
	fin      atomic.Bool // the client was sent a FIN and all before it: discard stops at its read deadline
}

// stopReading makes the client's pending and next reads fail with a timeout, which
// toServer takes as the start of the drain; called with p.mu held.
func (pc *proxyConn) stopReading() {
	_ = pc.client.SetReadDeadline(time.Now())
}

// closeBoth closes both connections; called with p.mu held or after untrack.
func (pc *proxyConn) closeBoth() {
	_ = pc.client.Close()
	if pc.up != nil {
		_ = pc.up.Close()
	}
}

func (pc *proxyConn) run() {
	p := pc.p
	defer p.wg.Done()
	setNoDelay(pc.client)
	n := p.nconn.Add(1)
	pc.rng.Seed(p.seed, n*0x9e3779b97f4a7c15)
	pc.parser, _ = NewRESPParser(RESPOptions{MaxArgBytes: p.maxKey})
	pc.skip = pc.draw()
	if l := p.muxLoop(); l != nil && l.adopt(pc) {
		return // the loop serves it now
	}
	pc.runOwn(nil, nil, false, false, false)
}

// runOwn serves the client over a connection of its own, first sending rest, what the
// client sent before (to the shared connection's loop) that was not forwarded. waiting
// is what Redis answered it there that it has not read yet: the client gets it before
// any reply from its own connection, and, since it may be sending more meanwhile (see
// pinBacklog), rest and what follows go to Redis while it is written. With
// resp3 the client switched to RESP3 with HELLO 3 on the shared connection, and with
// authed it authenticated there with the configured credentials, so its own connection
// is switched and authenticated too (HELLO 3, AUTH, or HELLO 3 AUTH) before rest goes
// out. With answered, Redis answered it something there; otherwise, when Redis cannot be
// reached, its commands get an error reply (refuse) rather than a dropped
// connection.
func (pc *proxyConn) runOwn(waiting, rest []byte, resp3, authed, answered bool) {
	p := pc.p
	p.stats.own.Add(1)
	defer func() {
		p.stats.own.Add(-1)
		p.untrack(pc)
		pc.closeBoth()
	}()
	if p.draining.Load() {
		if pc.writeWaiting(waiting) {
			pc.finishClient() // what it sent is not forwarded: no reply is owed
		}
		return
	}
	up, err := p.dialUpstream()
	if err != nil {
		p.log.Debug("proxy: dial upstream", "upstream", p.upstream, "err", err)
		if !answered {
			pc.refuse(rest, err)
		}
		pc.writeWaiting(waiting)
		return
	}
	if !p.setConn(&pc.up, up) {
		_ = up.Close()
		pc.writeWaiting(waiting)
		return
	}
	setNoDelay(up)
	if resp3 || authed {
		_ = up.SetDeadline(time.Now().Add(p.dialer.Timeout))
		if err := p.setUpOwn(up, resp3, authed); err != nil {
			p.log.Debug("proxy: prepare a pinned client's own connection as the shared one", "err", err)
			pc.writeWaiting(waiting)
			return
		}
		_ = up.SetDeadline(time.Time{})
	}
	if p.draining.Load() {
		if pc.writeWaiting(waiting) {
			pc.finishClient()
		}
		return
	}
	back := make(chan struct{})
	go func() {
		defer close(back)
		if pc.writeWaiting(waiting) {
			pc.toClient()
		} else {
			pc.closeBoth()
		}
	}()
	// From here on a drain that starts fails toServer's reads (stopReading), and the
	// commands of rest, counted in sent by the loop, are owed replies.
	if len(rest) > 0 {
		if _, err := up.Write(rest); err != nil {
			p.log.Debug("proxy: write upstream", "err", err)
			pc.closeBoth()
			<-back
			return
		}
	}
	pc.toServer(make([]byte, p.bufSize))
	<-back
}

// writeWaiting writes the client the replies waiting for it that it took along from the
// shared connection (see runOwn), and reports whether that went well.
func (pc *proxyConn) writeWaiting(waiting []byte) bool {
	if len(waiting) == 0 {
		return true
	}
	_, err := pc.client.Write(waiting)
	pc.p.stats.handedOut.Add(-int64(len(waiting)))
	if err != nil {
		pc.p.log.Debug("proxy: write client", "err", err)
		return false
	}
	return true
}

// setUpOwn makes up, a pinned client's new connection, what the shared one was for the
// client: RESP3 when resp3, authenticated with the configured credentials when authed.
func (p *Proxy) setUpOwn(up net.Conn, resp3, authed bool) error {
	name, command, want := "HELLO 3", helloResp3, "%"
	switch {
	case resp3 && authed:
		name, command = "HELLO 3 AUTH", p.auth.hello3
	case authed:
		name, command, want = "AUTH", p.auth.auth, "+OK\r\n"
	}
	reply, err := roundTrip(up, name, command)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !bytes.HasPrefix(reply, []byte(want)) {
		if authed {
			reply = p.auth.redact(reply)
		}
		err = fmt.Errorf("%s answered %q; want %q…", name, reply[:min(len(reply), 120)], want)
		if resp3 && !authed {
			err = fmt.Errorf("%w: %w", errNoResp3, err)
		}
		return err
	}
	return nil
}

func setNoDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}

// toServer forwards client to server and samples its copy of the bytes.
func (pc *proxyConn) toServer(buf []byte) {
	err, werr := pump(pc.up, pc.client, buf, pc.parse)
	if werr != nil {
		pc.p.log.Debug("proxy: write upstream", "err", werr)
	}
	if err == io.EOF {
		// The client is done sending; let the server finish its replies, after which it
		// closes and toClient closes everything.
		if closeWrite(pc.up) {
			return
		}
	}
	if werr == nil && errors.Is(err, os.ErrDeadlineExceeded) && pc.p.draining.Load() {
		// Shutdown: the commands forwarded so far are all the client gets answered.
		pc.want = pc.sent
		if pc.broken {
			pc.want = -1 // not counted: toClient forwards until the deadline
		}
		pc.draining.Store(true)
		_ = pc.up.SetReadDeadline(time.Now()) // toClient looks at want now
		discard(pc.client, buf, &pc.fin)
		return // toClient ends the client's side; runOwn closes the connections
	}
	pc.closeBoth()
}

// toClient forwards server to client untouched, counting the replies (not pushes) for
// the drain. Once draining, it forwards the replies the client is owed and no byte more,
// then ends its side of the client's connection with a FIN; toServer reads the client
// until it closes its side too.
//
// It counts after the write, as toServer parses, so that counting adds nothing to a
// reply's latency.
func (pc *proxyConn) toClient() {
	buf := make([]byte, pc.p.bufSize)
	var rc replyCounter
	for {
		if pc.draining.Load() && rc.reached(pc.want) {
			break
		}
		n, err := pc.up.Read(buf)
		if n > 0 {
			data := buf[:n]
			draining := pc.draining.Load()
			if draining && pc.want >= 0 {
				data = data[:rc.count(data, pc.want)] // no byte past the last reply owed
			}
			if _, werr := pc.client.Write(data); werr != nil {
				pc.p.log.Debug("proxy: write client", "err", werr)
				pc.closeBoth()
				return
			}
			if !draining {
				rc.count(data, math.MaxInt64)
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && pc.draining.Load() {
				_ = pc.up.SetReadDeadline(time.Time{}) // toServer's wake-up once want is set
				continue
			}
			break
		}
	}
	if pc.draining.Load() {
		acked := connSendQueue(pc.client) == 0 // every byte it was sent reached it
		if closeWrite(pc.client) {
			if acked {
				pc.finSent(pc.client) // toServer stops reading it after finLinger
			}
			return // toServer reads the client until it closes its side
		}
	}
	pc.closeBoth()
}

// replyCounter counts the replies in a server-to-client stream, leaving out RESP3 pushes
// (which answer no command).
type replyCounter struct {
	scan replyScanner
	push bool  // the reply being scanned is a push
	n    int64 // replies ended so far
}

// count scans data, stopping after the reply that makes n reach limit, and returns how
// many bytes of data it scanned. After a scan error it counts nothing more (see reached).
func (r *replyCounter) count(data []byte, limit int64) int {
	i := 0
	for i < len(data) && r.n < limit && r.scan.err == nil {
		if !r.push && r.scan.between() && data[i] == '>' {
			r.push = true
		}
		k, done := r.scan.scan(data[i:])
		i += k
		if done {
			if !r.push {
				r.n++
			}
			r.push = false
		}
	}
	if r.scan.err != nil {
		return len(data)
	}
	return i
}

// reached reports whether want replies have ended; never when want is negative (not
// known) or the stream did not parse.
func (r *replyCounter) reached(want int64) bool {
	return want >= 0 && r.scan.err == nil && r.n >= want
}

// finishClient ends a client that is owed nothing, while draining: a FIN, then what it
// sends is read and dropped until it closes its side, or for finLinger when all it was
// sent had reached it.
func (pc *proxyConn) finishClient() {
	acked := connSendQueue(pc.client) == 0
	if closeWrite(pc.client) {
		if acked {
			pc.finSent(pc.client)
		}
		discard(pc.client, make([]byte, 4096), &pc.fin)
	}
}

// finLinger is how long a draining proxy goes on reading and dropping what a client
// sends after it was sent a FIN, when everything it was sent had reached it, before
// closing its connection: long enough for commands on their way, and short, so that an
// idle pooled connection, which does not close its side until it is used again, does not
// hold the stop until the deadline. Nothing the client was sent can be lost by the close.
const finLinger = 50 * time.Millisecond

// finSent bounds discard's reads of c, the client's connection, to finLinger from now.
func (pc *proxyConn) finSent(c net.Conn) {
	pc.fin.Store(true)
	_ = c.SetReadDeadline(time.Now().Add(finLinger))
}

// closeWrite shuts the writing side of c, a TCP connection, which sends a FIN; false when
// c cannot do that.
func closeWrite(c net.Conn) bool {
	cw, ok := c.(interface{ CloseWrite() error })
	return ok && cw.CloseWrite() == nil
}

// discard reads and drops what c sends until it ends or fails, or, once fin is set, until
// its read deadline (finSent's). Before that it clears the read deadline that stopped the
// client's reads when the drain began (stopReading).
func discard(c net.Conn, buf []byte, fin *atomic.Bool) {
	for {
		_, err := c.Read(buf)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) && !fin.Load():
			_ = c.SetReadDeadline(time.Time{})
			if fin.Load() { // finSent's deadline came before this clear: set it again
				_ = c.SetReadDeadline(time.Now().Add(finLinger))
			}
		default:
			return
		}
	}
}

// pump copies src to dst through buf, handing each chunk to seen (when not nil) after it
// was written, until src ends (err io.EOF), reading fails (err), or writing fails (werr).
//
// Each read goes on until the socket is empty (EAGAIN) before waiting for the poller, as
// net.Conn.Read does. Waiting as soon as a read comes back short would save that last
// read(2), but Go's poller is edge-triggered: when a client's last request and its end of
// file arrive together, the short read takes the request and the edge, and the end of
// file would never be seen.
func pump(dst, src net.Conn, buf []byte, seen func([]byte)) (err, werr error) {
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr = dst.Write(buf[:n]); werr != nil {
				return nil, werr
			}
			if seen != nil {
				seen(buf[:n])
			}
		}
		if rerr != nil {
			return rerr, nil
		}
	}
}

// draw returns how many commands to count before the next sample, that one included: a
// geometric variable with mean SampleEvery, so every command is sampled independently
// with probability 1/SampleEvery.
func (pc *proxyConn) draw() int {
	if pc.p.every == 1 {
		return 1
	}
	u := (float64(pc.rng.Uint64()>>11) + 1) / (1 << 53) // in (0, 1]
	k := 1 + math.Floor(math.Log(u)/pc.p.logq)
	if k > 1<<30 {
		return 1 << 30
	}
	return int(k)
}

// parse feeds a copy of forwarded bytes to the parser and samples the commands it
// completes.
func (pc *proxyConn) parse(data []byte) {
	if pc.broken {
		return
	}
	pc.parser.Feed(data)
	pc.sampleRest()
}

// sampleRest samples the commands that complete in what the parser was fed, counting
// them in sent, and stops sampling the connection when the bytes do not parse.
func (pc *proxyConn) sampleRest() {
	for pc.nextCommand() {
		pc.sent++
	}
	if err := pc.parser.Err(); err != nil && !pc.broken {
		pc.broken = true
		pc.p.sink.Drop(pc.p.source, DropMalformed, 1)
		pc.p.log.Debug("proxy: stopped sampling a connection", "client", pc.client.RemoteAddr(), "err", err)
	}
}

// nextCommand parses the next command, sampling it when its turn has come, and reports
// whether there was one; the parser's Name then has its name.
func (pc *proxyConn) nextCommand() bool {
	ps := pc.parser
	if pc.skip > 1 {
		if !ps.Skip() {
			return false
		}
		pc.skip--
		return true
	}
	if !ps.Next() {
		return false
	}
	pc.skip = pc.draw()
	pc.sample(ps)
	return true
}

// sample turns the command in ps into one Sample per key and hands them on.
func (pc *proxyConn) sample(ps *RESPParser) {
	pending, tooLarge := appendKeySamples(pc.pending[:0], ps.Args(), ps.sizes, ps.NArgs())
	pc.pending = pending
	if tooLarge > 0 {
		pc.p.sink.Drop(pc.p.source, DropTooLarge, tooLarge)
	}
	if len(pending) > 0 {
		if dropped := pc.p.batches.add(pending); dropped > 0 {
			pc.p.sink.Drop(pc.p.source, DropOverload, dropped)
		}
	}
}

// appendKeySamples appends one Sample per key of the command in args, whose full sizes
// are in sizes (an argument may have been kept only in part) and which had nargs
// arguments in all. Each key is sampled with what the command does to it: a command
// that writes one key from others (SUNIONSTORE dst src…, COPY src dst) gives a write of
// the destination and reads of the sources. A key kept only in part is sampled by its
// prefix, marked Truncated; tooLarge is one when arguments past those kept were lost.
// Bytes is the size of the value written when that is plain from the arguments: the
// value after each key of MSET, the arguments after the key of a single-key write (SET
// key value, LPUSH key a b); 0 otherwise.
func appendKeySamples(dst []Sample, args [][]byte, sizes []int64, nargs int) (out []Sample, tooLarge int) {
	if len(args) == 0 {
		return dst, 0
	}
	cmd, ok := LookupCommand(args[0])
	if !ok {
		return dst, 0
	}
	k, dest, ok := cmd.Keys(args)
	if !ok {
		return dst, 0
	}
	if nargs > len(args) {
		tooLarge++ // keys past the kept arguments are lost
	}
	if dest > 0 {
		dst = append(dst, Sample{
			Key: args[dest], Op: OpWrite, Count: 1,
			Truncated: sizes[dest] > int64(len(args[dest])),
		})
	}
	for i := k.First; i <= k.Last; i += k.Step {
		var size int64
		switch {
		case k.Step == 2 && i+1 < len(args):
			size = sizes[i+1] // MSET key value …
		case k.Op == OpWrite && !cmd.Counter && cmd.NumKeysAt == 0 && cmd.First == cmd.Last:
			for j := k.Last + 1; j < len(args); j++ {
				size += sizes[j] // SET key value, LPUSH key a b …
			}
		}
		dst = append(dst, Sample{
			Key: args[i], Op: k.Op, Counter: cmd.Counter, Count: 1,
			Bytes:     uint32(min(size, math.MaxUint32)),
			Truncated: sizes[i] > int64(len(args[i])),
		})
	}
	return dst, tooLarge
}

// flusher hands full batches to the Sink, and partial ones every FlushInterval, until
// the connections are gone (Shutdown, Close); then it hands over what is left.
func (p *Proxy) flusher() {
	defer p.bgWG.Done()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case b := <-p.batches.full:
			p.deliver(b)
		case <-t.C:
			if b := p.batches.take(); b != nil {
				p.deliver(b)
			}
		case <-p.stop:
			p.drain()
			return
		}
	}
}

// drain delivers whatever the batcher holds: the full batches waiting, then the one
// being filled.
func (p *Proxy) drain() {
	for {
		select {
		case b := <-p.batches.full:
			p.deliver(b)
			continue
		default:
		}
		break
	}
	if b := p.batches.take(); b != nil {
		p.deliver(b)
	}
}

func (p *Proxy) deliver(b *proxyBatch) {
	b.fix()
	p.sink.Accept(Batch{Source: p.source, Rate: 1 / float64(p.every), Samples: b.samples})
	p.batches.recycle(b)
}

// proxyBatch is a batch being filled: samples whose keys are copied into keys.
type proxyBatch struct {
	samples []Sample
	ends    []int // end of each sample's key in keys
	keys    []byte
}

// fix points every sample's Key into keys, which may have moved as it grew.
func (b *proxyBatch) fix() {
	start := 0
	for i, end := range b.ends {
		b.samples[i].Key = b.keys[start:end:end]
		start = end
	}
}

// proxyBatcher gathers the samples of all connections into batches.
type proxyBatcher struct {
	size int
	free chan *proxyBatch // empty batches
	full chan *proxyBatch // batches for the flusher

	mu  sync.Mutex // guards cur
	cur *proxyBatch
}

func newProxyBatcher(size, maxKey int) *proxyBatcher {
	pb := &proxyBatcher{
		size: size,
		free: make(chan *proxyBatch, proxyBatches),
		full: make(chan *proxyBatch, proxyBatches),
	}
	for range proxyBatches {
		pb.free <- &proxyBatch{
			samples: make([]Sample, 0, size),
			ends:    make([]int, 0, size),
			keys:    make([]byte, 0, size*min(maxKey, 64)),
		}
	}
	return pb
}

// add copies samples into the current batch, passes it on when full, and returns how
// many samples it had to drop because every batch is waiting for the Sink.
func (pb *proxyBatcher) add(samples []Sample) (dropped int) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	for i, s := range samples {
		if pb.cur == nil {
			select {
			case pb.cur = <-pb.free:
			default:
				return len(samples) - i
			}
		}
		b := pb.cur
		b.keys = append(b.keys, s.Key...)
		s.Key = nil
		b.samples = append(b.samples, s)
		b.ends = append(b.ends, len(b.keys))
		if len(b.samples) >= pb.size {
			pb.full <- b // never blocks: it has room for every batch
			pb.cur = nil
		}
	}
	return 0
}

// take removes and returns the current batch when it holds samples.
func (pb *proxyBatcher) take() *proxyBatch {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	b := pb.cur
	if b == nil || len(b.samples) == 0 {
		return nil
	}
	pb.cur = nil
	return b
}

// recycle empties a delivered batch and returns it to the free list.
func (pb *proxyBatcher) recycle(b *proxyBatch) {
	clear(b.samples) // drop the key references
	b.samples, b.ends, b.keys = b.samples[:0], b.ends[:0], b.keys[:0]
	pb.free <- b // never blocks: it has room for every batch
}
