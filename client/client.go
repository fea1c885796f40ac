package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// Options configures Attach. The zero value works: it follows the plan of an agent on
// http://127.0.0.1:9736, reports one command in 100 to its UDP port under the program's
// name, and keeps an L1 with the defaults of CacheOptions.
type Options struct {
	// Agent is the base URL of the hotkeyd agent's HTTP API, where the plan is fetched;
	// default "http://127.0.0.1:9736", with its port. Samples go to the same host and port
	// over UDP.
	Agent string
	// Source names this app in the agent's metrics; default: the program's file name.
	// See ReporterOptions.Source.
	Source string
	// SampleEvery makes the hook report one command in N; default 100. See
	// ReporterOptions.SampleEvery.
	SampleEvery int
	// Token is sent in every report, for an agent that requires one; default none.
	Token string
	// NoReports turns the reporting hook off: the client follows the plan but sends no
	// samples. Default false (reports on).
	NoReports bool
	// PlanWait is how long each long-poll asks the agent to wait for a new plan; default
	// 30s. The HTTP timeout is PlanWait + 10s. Allowed: 0 (the default) or 1s to 60s.
	PlanWait time.Duration
	// Cache configures the L1 of the plan's keys and the cache of Get. They are two
	// caches, each with its own MaxEntries and MaxBytes, so together they hold up to
	// twice those (with the defaults 2 × 100,000 entries and 2 × 64 MiB); they share
	// one MaxLoads bulkhead. Defaults: see CacheOptions.
	Cache CacheOptions
	// Registry, when not nil, gets the client's metrics (hotkeyd_client_*); Close
	// unregisters them. Default: none.
	Registry *prometheus.Registry
	// Logger gets what the client has to say; default slog.Default() (as it is when
	// Attach is called). Nothing is logged per command in normal operation. It logs:
	//   - at Warn, each failed fetch of the plan (one per retry: 1s doubling to 30s);
	//   - at Warn, once, when the held plan's leases have run out (commands then go to
	//     Redis unmitigated), and at Info, once, when a plan is taken again after that
	//     or after failed fetches;
	//   - at Warn, the first write of a split key whose copying to the copies failed
	//     (the client then reads that key from the original until it has copied the
	//     original to the copies in the background), and at Info when it has done so;
	//   - at Debug, each failed attempt at that copying;
	//   - at Warn, each failed flush of a batched counter's sum (per key, per flush);
	//     at Error, each sum given up after failed flushes (see Counter);
	//   - at Debug, each failed listing of a sub-counter.
	// To silence it, pass slog.New(slog.DiscardHandler).
	Logger *slog.Logger
	// Now is the clock for leases and caches; default time.Now.
	Now func() time.Time
	// Rand returns uniformly distributed numbers: which copy a read goes to, TTL jitter,
	// early refresh. It must be safe for concurrent use. Default: math/rand/v2's Uint64.
	Rand func() uint64
}

// Defaults of Options.
const (
	DefaultAgentURL = "http://127.0.0.1:9736"
	DefaultPlanWait = 30 * time.Second
)

// CopyStats counts what the client did for keys split into copies.
type CopyStats struct {
	// Reads are reads sent to a copy; Fallbacks those repeated on the original because
	// the copy failed or did not exist.
	Reads, Fallbacks uint64
	// Mirrors are writes whose result was copied to the key's copies; MirrorErrors
	// those whose copying failed (the app saw the original's result).
	Mirrors, MirrorErrors uint64
	// Unmirrored are writes the client could not mirror (multi-key writes, MULTI/EXEC,
	// scripts, blocking pops, unknown commands): the key's reads went back to the
	// original until a repair had copied the original to the copies.
	Unmirrored uint64
	// Repairs count the copies brought up to date in the background after a write whose
	// outcome was unknown or whose copying failed (counted in MirrorErrors), which
	// turned the key's reads back to the copies.
	Repairs uint64
}

// ClientStats is everything a Client counts.
type ClientStats struct {
	Plan PlanStats
	// L1 is the cache of the plan's L1 keys; Aside the cache of Get.
	L1, Aside CacheStats
	Copies    CopyStats
	// Reports are the reporting hook's counts (zero with NoReports).
	Reports Stats
}

// Client follows hotkeyd's plan for one go-redis client. Make it with Attach and Close it
// when done. It is safe for concurrent use.
type Client struct {
	rdb      redis.UniversalClient
	reporter *Reporter // nil with NoReports
	follower *follower
	l1       *Cache // the plan's L1 keys, filled by the hook
	aside    *Cache // Get's keys
	counter  *Counter
	nodes    *nodeHooks // with a ClusterClient: its node clients' hooks; else nil
	now      func() time.Time
	rand     func() uint64
	log      *slog.Logger
	timeout  time.Duration // for mirroring writes to copies
	reg      *prometheus.Registry
	metrics  prometheus.Collector

	// stripes order the writes of a split key and the copying of their result within
	// the process, so the copies end with the value the original ends with.
	stripes [64]stripe // 64 at most: lockStripes takes a uint64 of their indexes

	copyReads, copyFallbacks, mirrors, mirrorErrors, unmirrored, repairs atomic.Uint64

	// life ends at Close; the repairs of copies run in it.
	life           context.Context
	repairSem      chan struct{}         // bounds the repair attempts running at once
	repairMu       sync.Mutex            // guards repairing and repairsStopped
	repairing      map[*keyPlan]struct{} // the keys (of one plan each) whose repair runs
	repairsStopped bool                  // Close has begun: start no repair
	repairWG       sync.WaitGroup        // the repairs running

	first     chan struct{} // closed when the first plan arrives
	firstOnce sync.Once
	closed    atomic.Bool
	cancel    context.CancelFunc
	done      chan struct{} // closed when the follower has returned
	transport *http.Transport
	closeOnce sync.Once
	closeErr  error
}

// Attach makes rdb follow hotkeyd's plan and report its traffic: it adds the reporting
// hook and the plan hook to rdb and starts following the agent's plan in the
// background. rdb must be a non-nil *redis.Client or *redis.ClusterClient (a client of
// redis.NewUniversalClient or redis.NewFailoverClient is one of these); Attach refuses a
// *redis.Ring and any other type. It fails on invalid options and on an rdb that already
// has a Client attached (Close that one first): a second would report every command
// twice, keep a second L1 and mirror writes twice. An agent that is away is not an error
// (rdb behaves as plain Redis until a plan comes).
// With a *redis.ClusterClient it also hooks every node client, for the transactions of
// ClusterClient.Watch (see the package documentation).
//
// go-redis cannot remove hooks: after Close they stay installed and pass every command
// through unchanged; a ClusterClient's node clients made after Close get none.
func Attach(rdb redis.UniversalClient, opts Options) (*Client, error) {
	switch r := rdb.(type) {
	case nil:
		return nil, errors.New("client: Attach: rdb is nil; pass a *redis.Client or *redis.ClusterClient")
	case *redis.Client:
		if r == nil {
			return nil, errors.New("client: Attach: rdb is a nil *redis.Client; pass one made by redis.NewClient")
		}
	case *redis.ClusterClient:
		if r == nil {
			return nil, errors.New("client: Attach: rdb is a nil *redis.ClusterClient; pass one made by redis.NewClusterClient")
		}
	default:
		// A *redis.Ring runs Watch's transactions on its shards' clients, past the hooks
		// Attach adds, and the agent plans copies and sub-counters for Redis Cluster
		// slots, not for a Ring's shards.
		return nil, fmt.Errorf("client: Attach: rdb is a %T; only a *redis.Client or *redis.ClusterClient is supported", rdb)
	}
	agent := opts.Agent
	if agent == "" {
		agent = DefaultAgentURL
	}
	u, err := url.Parse(agent)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: Agent %q: want an http:// or https:// URL such as %s", opts.Agent, DefaultAgentURL)
	}
	if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
		// Without one the plan would come from port 80 (http) and the samples go to 9736.
		return nil, fmt.Errorf("client: Agent %q: name the agent's port, 1 to 65535, such as %s; samples go to the same port over UDP", opts.Agent, DefaultAgentURL)
	}
	if opts.PlanWait != 0 && (opts.PlanWait < time.Second || opts.PlanWait > time.Minute) {
		return nil, fmt.Errorf("client: PlanWait %v: must be 0 (30s) or 1s to 1m", opts.PlanWait)
	}
	wait := cmp0(opts.PlanWait, DefaultPlanWait)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.Uint64
	}
	opts.Cache.Now, opts.Cache.Rand = opts.Now, opts.Rand
	l1, err := newCache(opts.Cache, nil)
	if err != nil {
		return nil, err
	}
	aside, _ := newCache(opts.Cache, l1.sem) // same options, already checked
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Client{
		rdb: rdb, l1: l1, aside: aside, now: opts.Now, rand: opts.Rand, log: log,
		timeout: l1.loadTimeout, reg: opts.Registry,
		first: make(chan struct{}), done: make(chan struct{}),
		repairSem: make(chan struct{}, repairsAtOnce), repairing: make(map[*keyPlan]struct{}),
	}
	for i := range c.stripes {
		c.stripes[i].token = make(chan struct{}, 1)
	}
	c.counter = newCounter(c)
	// Before anything starts: a second Client would report every command twice, keep a
	// second L1 and mirror each write of a split key twice.
	if _, dup := attached.LoadOrStore(rdb, c); dup {
		return nil, fmt.Errorf("client: Attach: rdb (%T %p) already has a hotkeyd Client attached; "+
			"use that one, or Close it before attaching again", rdb, rdb)
	}
	if !opts.NoReports {
		c.reporter, err = NewReporter(ReporterOptions{Agent: u.Host,
			Source: opts.Source, SampleEvery: opts.SampleEvery, Token: opts.Token,
			Rand: opts.Rand, FollowsPlan: true})
		if err != nil {
			attached.CompareAndDelete(rdb, c)
			l1.Close()
			aside.Close()
			return nil, err
		}
	}
	c.transport = &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConns: 2, IdleConnTimeout: 90 * time.Second,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	c.follower = &follower{
		url:  u.JoinPath("/v1/plan").String(),
		wait: wait, now: opts.Now, log: log, min: backoffMin, max: backoffMax,
		http:    &http.Client{Transport: c.transport, Timeout: wait + 10*time.Second},
		prepare: carryMarks, onPlan: c.onPlan,
	}
	if c.reg != nil {
		c.metrics = newCollector(c)
		if err := c.reg.Register(c.metrics); err != nil {
			c.reporterClose()
			attached.CompareAndDelete(rdb, c)
			l1.Close()
			aside.Close()
			return nil, fmt.Errorf("client: Registry: %w", err)
		}
	}
	cc, _ := rdb.(*redis.ClusterClient)
	if cc != nil {
		c.nodes = &nodeHooks{seen: make(map[*redis.Client]struct{})}
		cc.OnNewNode(c.hookNode) // before the existing nodes are looked for: none is missed
	}
	if c.reporter != nil {
		rdb.AddHook(c.reporter.Hook()) // outermost: it sees each command as the app sent it
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.life, c.cancel = ctx, cancel
	rdb.AddHook(planHook{c})
	go func() {
		defer close(c.done)
		var retry chan struct{}
		if cc != nil && !c.hookExistingNodes(ctx, cc) {
			retry = make(chan struct{})
			go func() {
				defer close(retry)
				c.retryHookExistingNodes(ctx, cc)
			}()
		}
		c.follower.run(ctx)
		if retry != nil {
			<-retry
		}
	}()
	return c, nil
}

// attached maps each rdb that Attach has hooked (its *redis.Client or
// *redis.ClusterClient) to its live Client; Close removes it. It is package state, against
// the rule of the house, because go-redis offers no way to list or remove a client's
// hooks: only the package can know that an rdb is followed already.
var attached sync.Map

// nodeHooks tracks the node clients of a ClusterClient that have c's nodeHook.
type nodeHooks struct {
	mu sync.Mutex // guards seen and hooked
	// seen holds the node clients hooked until the ones that existed at Attach have
	// all been found (OnNewNode and ForEachShard may both name a node made meanwhile);
	// nil after that, when only OnNewNode hooks nodes, each once.
	seen   map[*redis.Client]struct{}
	hooked int // node clients hooked, for tests
}

// hookNode installs c's nodeHook on a node client of the ClusterClient, once. After
// Close it installs nothing (go-redis keeps the OnNewNode callback).
func (c *Client) hookNode(n *redis.Client) {
	h := c.nodes
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.closed.Load() {
		return // and remember nothing: go-redis keeps calling after Close
	}
	if h.seen != nil {
		if _, ok := h.seen[n]; ok {
			return
		}
		h.seen[n] = struct{}{}
	}
	n.AddHook(nodeHook{c})
	h.hooked++
}

// hookExistingNodes hooks the node clients cc made before Attach, and reports whether
// it found them: go-redis makes them lazily and calls OnNewNode only for nodes made
// later. ForEachShard reloads the cluster's slots (one CLUSTER SLOTS, bounded by the
// load timeout), or falls back on the slots it holds, and names every primary and
// replica in them. It fails only when cc has never loaded the slots; cc may then hold
// node clients for the seed addresses.
func (c *Client) hookExistingNodes(ctx context.Context, cc *redis.ClusterClient) bool {
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := cc.ForEachShard(lctx, func(_ context.Context, n *redis.Client) error {
		c.hookNode(n)
		return nil
	})
	if err != nil {
		return false
	}
	c.nodes.mu.Lock()
	c.nodes.seen = nil
	c.nodes.mu.Unlock()
	return true
}

// retryHookExistingNodes calls hookExistingNodes with a backoff of 1s doubling to 30s
// until it succeeds or ctx ends.
func (c *Client) retryHookExistingNodes(ctx context.Context, cc *redis.ClusterClient) {
	backoff := backoffMin
	t := time.NewTimer(backoff)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.hookExistingNodes(ctx, cc) {
			return
		}
		backoff = min(2*backoff, backoffMax)
		t.Reset(backoff)
	}
}

func (c *Client) reporterClose() {
	if c.reporter != nil {
		c.reporter.Close()
	}
}

// onPlan runs in the follower's goroutine for each new plan: it drops L1 values of keys
// the plan no longer caches.
func (c *Client) onPlan(old, ix *planIndex) {
	c.firstOnce.Do(func() { close(c.first) })
	c.carryRepairs(old, ix)
	c.counter.onPlan(ix)
	c.l1.retain(func(key string) bool {
		k := ix.keys[key]
		return k != nil && k.l1TTL > 0
	})
}

// WaitPlan waits until the client holds a plan from the agent, or ctx ends. Commands
// never wait for the plan; an app may call it at start-up so that its first requests
// already follow the plan. Its error wraps ctx's and says why no plan came when a fetch
// has failed (the agent not listening, an error answer, an invalid plan). After Close it
// returns at once: nil if a plan had come, else an error saying the client was closed.
func (c *Client) WaitPlan(ctx context.Context) error {
	select {
	case <-c.first:
		return nil
	case <-c.done: // closed: no plan will come
		select {
		case <-c.first:
			return nil
		default:
		}
		return fmt.Errorf("client: closed before a plan came from the agent at %s", c.follower.url)
	case <-ctx.Done():
		if err := c.follower.failure(); err != nil {
			return fmt.Errorf("client: no plan from the agent at %s yet (last try: %v): %w", c.follower.url, err, ctx.Err())
		}
		return fmt.Errorf("client: no plan from the agent at %s yet: %w", c.follower.url, ctx.Err())
	}
}

// Plan returns the plan the client holds (its leases may have run out), and false when
// it has none yet.
func (c *Client) Plan() (mitigate.Plan, bool) {
	if ix := c.follower.cur.Load(); ix != nil {
		return ix.plan, true
	}
	return mitigate.Plan{}, false
}

// Get is the cache-aside helper for app code: it returns key's value from the client's
// cache, or calls load to get it, with the stampede protection of Cache.Get (one load
// per key at a time, early refresh, stale-while-revalidate and stale-if-error within the
// hard TTL, the MaxLoads bulkhead), CacheOptions.TTL and CacheOptions.LoadTimeout, which
// bounds how long Get waits for a load even when the load ignores its context. Its keys
// are the app's own names, separate from the L1 of the plan's Redis keys: writes through
// rdb do not invalidate them; call Invalidate. load must not be nil.
func (c *Client) Get(ctx context.Context, key string, load func(context.Context) ([]byte, error)) ([]byte, error) {
	return c.aside.Get(ctx, key, load)
}

// Invalidate drops key's value from Get's cache.
func (c *Client) Invalidate(key string) { c.aside.Invalidate(key) }

// Stats returns the client's counts so far.
func (c *Client) Stats() ClientStats {
	st := ClientStats{
		Plan: c.follower.stats(), L1: c.l1.Stats(), Aside: c.aside.Stats(),
		Copies: CopyStats{Reads: c.copyReads.Load(), Fallbacks: c.copyFallbacks.Load(),
			Mirrors: c.mirrors.Load(), MirrorErrors: c.mirrorErrors.Load(), Unmirrored: c.unmirrored.Load(),
			Repairs: c.repairs.Load()},
	}
	if c.reporter != nil {
		st.Reports = c.reporter.Stats()
	}
	return st
}

// Close flushes the Counter's pending sums, stops following the plan, ends loads in
// progress, sends the pending samples and unregisters the metrics. The hooks stay
// installed and pass commands straight through. Once Close has returned, rdb can be
// attached again. Close returns nil when called again, and on a nil Client or one not
// made by Attach.
func (c *Client) Close() error {
	if c == nil || c.cancel == nil {
		return nil
	}
	c.closeOnce.Do(func() {
		cerr := c.counter.close()
		c.closed.Store(true)
		c.cancel()
		<-c.done
		c.stopRepairs()
		c.transport.CloseIdleConnections()
		c.l1.Close()
		c.aside.Close()
		if c.reporter != nil {
			c.closeErr = c.reporter.Close()
		}
		c.closeErr = errors.Join(cerr, c.closeErr)
		if c.reg != nil {
			c.reg.Unregister(c.metrics)
		}
		attached.CompareAndDelete(c.rdb, c)
	})
	return c.closeErr
}

// pick returns a number in [0, n) from c.rand (Lemire's multiply-shift).
func (c *Client) pick(n int) int {
	hi, _ := bits.Mul64(c.rand(), uint64(n))
	return int(hi)
}
