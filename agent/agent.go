package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/internal/defaults"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/registry"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure an Agent. The zero value runs detection with defaults and no network
// listener; cmd/hotkeyd fills these from config.
type Options struct {
	// Detector shapes the sketches and the window. Default: detector's defaults.
	Detector detector.Options
	// Rules decide when a key is hot. Default: detector.DefaultRules().
	Rules *detector.Rules
	// HTTPListen is the API's TCP address ("127.0.0.1:9736"); empty: no HTTP server.
	HTTPListen string
	// UDPListen is the address for report datagrams; empty: no UDP listener.
	UDPListen string
	// UDPReaders is the number of UDP reader goroutines. Default: GOMAXPROCS.
	UDPReaders int
	// AuthToken, when set, is required as "Authorization: Bearer TOKEN" on mutating
	// endpoints and in UDP reports. Default: none.
	AuthToken string
	// MaxKeyBytes truncates longer keys (and marks them truncated). Default: 512.
	MaxKeyBytes int
	// MaxBodyBytes bounds a POST /v1/samples body. Default: 1 MiB.
	MaxBodyBytes int64
	// MaxSamplesPerReport bounds the samples of one report. Default: 10,000.
	MaxSamplesPerReport int
	// BodyTimeout bounds how long a request with a body (POST, PUT, DELETE) may take to
	// send it once its headers are in: a client that stalls is cut off rather than
	// holding a connection. Default: 30s.
	BodyTimeout time.Duration
	// HashKeys replaces key names by a short hash in the API and in metrics.
	HashKeys bool
	// KeyMinRatio bounds the per-key series of /metrics (hotkeyd_key_*): a ranked key has
	// them while it is hot, has an active mitigation, is predicted by an armed registry
	// event, or its read or write rate is at least KeyMinRatio × the threshold it would be
	// hot at (overrides included: hotkeyd_key_threshold_ratio ≥ KeyMinRatio); the other
	// ranked keys, background noise, have none. The API (/v1/topk, /v1/keys) shows every
	// ranked key regardless. At most 1. Default 0.1; a negative value exports every
	// ranked key.
	KeyMinRatio float64
	// RedisAddrs are Redis addresses (a standalone server, or any nodes of a cluster);
	// with them the agent learns the topology, names copies on distinct primaries and
	// publishes the plan in Redis. Empty: detection and client-side mitigations only.
	RedisAddrs []string
	// RedisUsername and RedisPassword authenticate every connection to RedisAddrs (the
	// topology, the executor, INFO readings). Default: none, Redis's user "default".
	RedisUsername, RedisPassword string
	// Planner configures the mitigation rules, hysteresis and lease. Default: mitigate's.
	Planner mitigate.PlannerOptions
	// Events is the registry of predicted hot keys. Default: an in-memory store.
	Events registry.Store
	// RedisInfo is how often the agent reads each primary's INFO (commands, CPU, bytes),
	// for hotkeyd_redis_*_total and /v1/nodes; with RedisAddrs only. Default: 10s;
	// negative: never.
	RedisInfo time.Duration
	// CopyRefresh is how often the agent rewrites copies of split keys from their
	// originals (the staleness bound for writers that bypass the SDK). Default: 1s.
	CopyRefresh time.Duration
	// Version names the build (the binary's version); it is logged in the start line and
	// exported as hotkeyd_build_info{version,goversion}. Default: "(devel)".
	Version string
	// History is how many one-second points of rate history a key keeps. Default: 60.
	History int
	// Sources build extra sample sources (the proxy tap, MONITOR) that send to the agent;
	// New calls each with the agent as the sink, Run serves them and closes them at the end.
	Sources []NewSource
	// Registry receives the agent's metrics. Default: a new registry (see Registry).
	Registry *prometheus.Registry
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// DefaultKeyMinRatio is the default of Options.KeyMinRatio.
const DefaultKeyMinRatio = 0.3

// Source is a sample source that runs until its context ends or it is closed.
type Source interface {
	Serve(ctx context.Context) error
	Close() error
}

// NewSource builds a Source that hands its samples to sink.
type NewSource func(sink sampler.Sink) (Source, error)

// Agent is the hotkeyd service. See the package doc.
type Agent struct {
	opts    Options
	det     *detector.Detector
	tracker *detector.Tracker // owned by the evaluation loop
	metrics *metrics
	log     *slog.Logger
	now     func() time.Time
	udp     *sampler.UDPServer
	sources []Source
	http    *http.Server
	httpLn  net.Listener
	view    atomic.Pointer[view]
	planner *mitigate.Planner
	store   *mitigate.Store
	redis   atomic.Pointer[redisState] // nil until the topology is known
	toRedis chan mitigate.Plan         // the newest plan not yet published in Redis
	index   atomic.Pointer[registry.Index]
	events  events     // written by the evaluation loop only
	history *histories // owned by the evaluation loop; read through view
	ready   atomic.Bool
	items   sync.Pool // *[]detector.Item scratch batches for Accept, so ingest does not allocate

	// stopping ends the waits of GET /v1/plan when the agent stops, so that SDK clients
	// holding one do not keep the HTTP server's shutdown waiting for its time limit.
	stopping    context.Context
	endStopping context.CancelFunc

	closeOnce sync.Once
}

// New validates the options, builds the detector and binds the listeners, so that their
// addresses are known before Run.
func New(o Options) (*Agent, error) {
	if o.Rules == nil {
		r := detector.DefaultRules()
		o.Rules = &r
	}
	o.MaxKeyBytes = defaults.Or(o.MaxKeyBytes, 512)
	if o.MaxKeyBytes < 1 {
		return nil, fmt.Errorf("agent: max key bytes %d: must be ≥ 1", o.MaxKeyBytes)
	}
	o.History = defaults.Or(o.History, 60)
	o.KeyMinRatio = defaults.Or(o.KeyMinRatio, DefaultKeyMinRatio)
	if !(o.KeyMinRatio <= 1) { // NaN too
		return nil, fmt.Errorf("agent: key min ratio %v: must be ≤ 1 (a fraction of the hot threshold), or negative for every ranked key", o.KeyMinRatio)
	}
	o.Version = defaults.Or(o.Version, "(devel)")
	o.BodyTimeout = defaults.Or(o.BodyTimeout, 30*time.Second)
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	det, err := detector.New(o.Detector)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	tr, err := detector.NewTracker(*o.Rules)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{opts: o, det: det, tracker: tr, log: o.Logger, now: o.Now, history: newHistories(o.History)}
	a.stopping, a.endStopping = context.WithCancel(context.Background())
	a.opts.Detector = det.Options()
	if o.Planner.Now == nil {
		o.Planner.Now = o.Now
	}
	if a.planner, err = mitigate.NewPlanner(o.Planner); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.store = mitigate.NewStore(mitigate.StoreOptions{Now: o.Now})
	if o.Events == nil {
		o.Events = registry.NewMemory(registry.MemoryOptions{})
	}
	a.events.store = o.Events
	empty, err := registry.NewIndex(nil, registry.IndexOptions{})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.index.Store(empty) // until the store is first read
	if a.events.tracker, err = registry.NewTracker(registry.TrackerOptions{}); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.toRedis = make(chan mitigate.Plan, 1)
	a.store.Subscribe(func(p mitigate.Plan) {
		select { // keep only the newest: drop a plan still waiting
		case <-a.toRedis:
		default:
		}
		a.toRedis <- p
	})
	a.view.Store(&view{})
	if a.metrics, err = newMetrics(a, o.Registry); err != nil {
		return nil, err
	}
	if o.UDPListen != "" {
		a.udp, err = sampler.NewUDPServer(sampler.UDPOptions{Listen: o.UDPListen, Readers: o.UDPReaders,
			MaxSamples: o.MaxSamplesPerReport, Token: o.AuthToken, Sink: a, Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("agent: udp.listen %q: %w", o.UDPListen, err)
		}
	}
	for i, newSource := range o.Sources {
		src, err := newSource(a)
		if err != nil {
			a.closeListeners()
			return nil, fmt.Errorf("agent: source %d: %w", i, err)
		}
		a.sources = append(a.sources, src)
		if ps, ok := src.(proxyStatser); ok {
			if err := o.Registry.Register(newProxyCollector(ps)); err != nil {
				a.closeListeners()
				return nil, fmt.Errorf("agent: source %d: metrics: %w", i, err)
			}
		}
	}
	if o.HTTPListen != "" {
		if a.httpLn, err = net.Listen("tcp", o.HTTPListen); err != nil {
			a.closeListeners()
			return nil, fmt.Errorf("agent: http.listen %q: %w", o.HTTPListen, err)
		}
		a.http = &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	}
	return a, nil
}

// HTTPAddr returns the API's address, nil without one.
func (a *Agent) HTTPAddr() net.Addr {
	if a.httpLn == nil {
		return nil
	}
	return a.httpLn.Addr()
}

// UDPAddr returns the address of the report listener, nil without one.
func (a *Agent) UDPAddr() net.Addr {
	if a.udp == nil {
		return nil
	}
	return a.udp.Addr()
}

// ownName returns the original key of a copy or a sub-counter name (mitigate.ParseName:
// "{hk:copy2:…}score:match42" is score:match42), and key itself otherwise. A proxy tap or
// MONITOR sees the names SDK clients send; counted as themselves, a split key would look
// cold once its reads go to the copies, its mitigation would end while the traffic goes
// on, and the names would turn hot and get mitigations of their own. The prefix test
// keeps other keys at one comparison.
func ownName(key []byte) []byte {
	if len(key) < 5 || key[0] != '{' || key[1] != 'h' || key[2] != 'k' || key[3] != ':' {
		return key
	}
	if _, _, orig, ok := mitigate.ParseName(string(key)); ok && orig != "" {
		return key[len(key)-len(orig):]
	}
	return key
}

// Registry returns the registry holding the agent's metrics.
func (a *Agent) Registry() *prometheus.Registry { return a.opts.Registry }

// Detector returns the agent's detector.
func (a *Agent) Detector() *detector.Detector { return a.det }

// Accept takes a batch of samples from a source (sampler.Sink). Keys longer than
// MaxKeyBytes are truncated and marked; each sample counts Count/Rate requests of the full
// traffic, rounded stochastically so that sums stay unbiased, and as many times its Bytes.
// A sample of a name hotkeyd makes in Redis, a copy or a sub-counter, counts for the key it
// stands for (see ownName).
func (a *Agent) Accept(b sampler.Batch) {
	rate := b.Rate
	if !(rate > 0 && rate <= 1) {
		rate = 1
	}
	scale := 1 / rate
	origin := FlagOther
	if b.FollowsPlan {
		origin = FlagFollowsPlan
	}
	buf, _ := a.items.Get().(*[]detector.Item)
	if buf == nil {
		s := make([]detector.Item, 0, 256)
		buf = &s
	}
	items := (*buf)[:0]
	for i := range b.Samples {
		s := &b.Samples[i]
		key, flags := ownName(s.Key), origin
		if len(key) > a.opts.MaxKeyBytes {
			key, flags = key[:a.opts.MaxKeyBytes], flags|FlagTruncated
		}
		if s.Truncated {
			flags |= FlagTruncated
		}
		if s.Counter {
			flags |= detector.FlagCounter
		}
		n := weight(s.Count, scale)
		items = append(items, detector.Item{
			Key: key, Write: s.Op == sampler.OpWrite, Flags: flags, N: n, Samples: s.Count,
			Size: uint32(min(uint64(s.Bytes)*uint64(n), math.MaxUint32)),
		})
		if len(items) == cap(items) || i == len(b.Samples)-1 {
			a.det.AddBatch(items)
			items = items[:0]
		}
	}
	clear(items[:cap(items)]) // do not keep the source's key buffers alive
	*buf = items
	a.items.Put(buf)
	a.metrics.received(b.Source, len(b.Samples))
}

// Flags the agent keeps with ranked keys, beside detector.FlagCounter.
const (
	// FlagTruncated marks a key that was longer than MaxKeyBytes.
	FlagTruncated uint8 = 1 << 6
	// FlagFollowsPlan marks a key seen from clients that follow the plan (the Go SDK).
	FlagFollowsPlan uint8 = 1 << 5
	// FlagOther marks a key seen from other sources (proxy tap, MONITOR, other clients).
	FlagOther uint8 = 1 << 4
)

// weight returns count × scale as a whole number of requests, rounding the fraction up
// with its probability so that the expected value is exact.
func weight(count uint32, scale float64) uint32 {
	if count == 0 {
		count = 1
	}
	w := float64(count) * scale
	if w >= math.MaxUint32 {
		return math.MaxUint32
	}
	n := math.Floor(w)
	if f := w - n; f > 0 && rand.Float64() < f {
		n++
	}
	return uint32(max(n, 1))
}

// Drop records samples that a source dropped (sampler.Sink).
func (a *Agent) Drop(source, reason string, n int) { a.metrics.dropped(source, reason, n) }

// Run starts the listeners, the sources and the evaluation loop, and serves until ctx
// ends; then it stops listening, lets the sources drain, and returns nil. An error means a
// listener or source failed.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errc := make(chan error, 2+len(a.sources))
	var wg sync.WaitGroup
	start := func(name string, serve func(context.Context) error) {
		wg.Go(func() {
			if err := serve(ctx); err != nil {
				err = fmt.Errorf("agent: %s: %w", name, err)
				errc <- err
				cancel(err)
			}
		})
	}
	a.det.Advance(a.now())
	if a.udp != nil {
		start("udp", a.udp.Serve)
	}
	for i, s := range a.sources {
		start(fmt.Sprintf("source %d", i), s.Serve)
	}
	if a.http != nil {
		start("http", func(context.Context) error {
			if err := a.http.Serve(a.httpLn); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	wg.Go(func() { a.loop(ctx) })
	if len(a.opts.RedisAddrs) > 0 {
		wg.Go(func() { a.connectRedis(ctx) })
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-a.toRedis:
					a.publishToRedis(p)
				}
			}
		})
	}
	a.ready.Store(true)
	a.log.Info("hotkeyd agent started", "http", addrString(a.HTTPAddr()), "udp", addrString(a.UDPAddr()),
		"window", a.opts.Detector.Window(), "topk", a.opts.Detector.K, "version", a.opts.Version, "go", runtime.Version())

	<-ctx.Done()
	stopping := a.now()
	a.log.Info("hotkeyd agent stopping: listeners close, sources drain, the last samples are counted",
		"reason", context.Cause(ctx))
	a.ready.Store(false)
	a.shutdown()
	wg.Wait()
	a.evaluate() // count what arrived while draining
	a.closeRedis()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	a.log.Info("hotkeyd agent stopped", "took", a.now().Sub(stopping).Round(time.Millisecond))
	return errors.Join(errs...)
}

// shutdown stops the listeners and sources. HTTP requests in flight and the sources that
// drain (the proxy tap, whose clients get the replies in flight; it began when Run's
// context ended) share one 5 s bound; what is still open then is closed.
func (a *Agent) shutdown() {
	a.closeOnce.Do(func() {
		a.endStopping() // waiting plan requests answer now, as if no plan came
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if a.http != nil {
			if err := a.http.Shutdown(ctx); err != nil {
				a.log.Warn("http shutdown", "err", err)
			}
		}
		for _, s := range a.sources {
			if d, ok := s.(interface{ Shutdown(context.Context) error }); ok {
				if err := d.Shutdown(ctx); err != nil {
					a.log.Warn("source drain cut short: its connections still open were closed", "err", err)
				}
			}
		}
		a.closeListeners() // Close after Shutdown does nothing
	})
}

func (a *Agent) closeListeners() {
	if a.udp != nil {
		a.udp.Close()
	}
	for _, s := range a.sources {
		if err := s.Close(); err != nil {
			a.log.Warn("closing a source", "err", err)
		}
	}
	if a.httpLn != nil && a.http == nil {
		a.httpLn.Close()
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return "off"
	}
	return a.String()
}
