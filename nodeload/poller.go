package nodeload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Commander runs a command on the Redis node at addr (mitigate.NodeClients does).
type Commander interface {
	NodeDo(ctx context.Context, addr string, args ...any) (any, error)
}

// Options configure New. Primaries and Conn are required.
type Options struct {
	// Primaries returns the addresses of the primaries to read, at each poll (the
	// topology's, which changes with failovers). Required.
	Primaries func() []string
	// Conn runs INFO. Required.
	Conn Commander
	// Interval is how often Run reads every primary. Default: 10s.
	Interval time.Duration
	// Timeout bounds the reading of one node. Default: 2s, and at most Interval.
	Timeout time.Duration
	// Now stamps readings. Default: time.Now.
	Now func() time.Time
	// OnFailing receives a primary whose reading failed after it answered (or at its
	// first reading), once per run of failures, for the operator's log. Default: nothing.
	OnFailing func(addr string, err error)
	// OnRecovered receives a primary that answers again after OnFailing. A primary that
	// leaves the list (a failover) is forgotten, failing or not: no OnRecovered if it
	// comes back. Default: nothing.
	OnRecovered func(addr string)
}

// DefaultInterval is Options.Interval's default.
const DefaultInterval = 10 * time.Second

// Poller reads the primaries' INFO on an interval and keeps, per primary, the last two
// readings.
type Poller struct {
	opts Options

	mu    sync.Mutex // guards nodes
	nodes map[string]*node
}

// node is what the poller knows of one primary.
type node struct {
	last    Reading // zero until the node has answered
	read    bool    // last holds a reading
	load    Load
	ok      bool // load holds a rate
	err     error
	failing time.Time // when the failures in a row began; zero while it answers
}

// State is what the poller knows of one primary.
type State struct {
	// Load is its load between its last two readings, when HasLoad.
	Load    Load
	HasLoad bool
	// Err is why its last reading failed (it did not answer within Options.Timeout, or
	// answered an error); nil when it answered. Since is when its failures in a row
	// began. A failing primary has no Load: a wedged primary is as much the news as a
	// busy one, and its last load would hide it.
	Err   error
	Since time.Time
}

// New returns a Poller; it reads nothing until Poll or Run.
func New(o Options) (*Poller, error) {
	if o.Primaries == nil || o.Conn == nil {
		return nil, errors.New("nodeload: Options.Primaries and Options.Conn are required")
	}
	if o.Interval < 0 || o.Timeout < 0 {
		return nil, fmt.Errorf("nodeload: interval %v, timeout %v: must not be negative", o.Interval, o.Timeout)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	o.Timeout = min(o.Timeout, o.Interval)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnFailing == nil {
		o.OnFailing = func(string, error) {}
	}
	if o.OnRecovered == nil {
		o.OnRecovered = func(string) {}
	}
	return &Poller{opts: o, nodes: make(map[string]*node)}, nil
}

// Run polls at once and then every Interval until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads every primary once, in parallel. A primary whose reading fails keeps its
// place with the error and no load until it answers twice in a row again; one no longer
// listed is forgotten.
func (p *Poller) Poll(ctx context.Context) {
	addrs := p.opts.Primaries()
	readings := make([]Reading, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { readings[i], errs[i] = p.read(ctx, addr) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // a stop cut the readings short: no news of the primaries
	}

	p.mu.Lock()
	listed := make(map[string]bool, len(addrs))
	failing := make([]bool, len(addrs))   // started failing at this poll
	recovered := make([]bool, len(addrs)) // answered again at this poll
	for i, addr := range addrs {
		listed[addr] = true
		n := p.nodes[addr]
		if n == nil {
			n = &node{}
			p.nodes[addr] = n
		}
		if errs[i] != nil {
			if n.err == nil {
				n.failing, failing[i] = readings[i].At, true
			}
			n.err, n.ok, n.read = errs[i], false, false
			continue
		}
		if n.read {
			n.load, n.ok = Between(n.last, readings[i])
		}
		recovered[i] = n.err != nil
		n.last, n.read, n.err, n.failing = readings[i], true, nil, time.Time{}
	}
	for addr := range p.nodes {
		if !listed[addr] {
			delete(p.nodes, addr)
		}
	}
	p.mu.Unlock()
	for i, addr := range addrs {
		switch {
		case failing[i]:
			p.opts.OnFailing(addr, errs[i])
		case recovered[i]:
			p.opts.OnRecovered(addr)
		}
	}
}

// read takes one node's reading: INFO stats, cpu and server, each asked alone, since
// Redis before 7.0 takes one section per INFO. A failed reading still carries its time.
func (p *Poller) read(ctx context.Context, addr string) (Reading, error) {
	at := p.opts.Now()
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	var text []byte
	for _, section := range []string{"stats", "cpu", "server"} {
		v, err := p.opts.Conn.NodeDo(ctx, addr, "INFO", section)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v (down, or busy: a long script or command?)", p.opts.Timeout)
		}
		if err != nil {
			return Reading{At: at}, fmt.Errorf("INFO %s: %w", section, err)
		}
		s, ok := v.(string)
		if !ok {
			return Reading{At: at}, fmt.Errorf("INFO %s: a %T reply; want text", section, v)
		}
		text = append(append(text, s...), '\n')
	}
	r, err := ParseInfo(string(text), at)
	if err != nil {
		return Reading{At: at}, err
	}
	return r, nil
}

// Nodes returns what the poller knows of each primary it has tried to read, by address.
func (p *Poller) Nodes() map[string]State {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]State, len(p.nodes))
	for addr, n := range p.nodes {
		out[addr] = State{Load: n.load, HasLoad: n.ok, Err: n.err, Since: n.failing}
	}
	return out
}

// reading is a primary's last reading for the collector; ok is false while it fails.
type reading struct {
	Reading
	ok bool
}

// readings returns the last reading of every primary tried, by address.
func (p *Poller) readings() map[string]reading {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]reading, len(p.nodes))
	for addr, n := range p.nodes {
		out[addr] = reading{n.last, n.read}
	}
	return out
}

// Collector exports the last readings of the poller that current returns (nil: none, as
// while Redis is not yet reached) as counters per primary, in the way Redis counts them:
// Prometheus's rate() then gives the load, and a node's restart shows as a counter reset.
// hotkeyd_redis_info_up says which primaries answered their last reading; a failing one
// has no counters.
type Collector struct {
	current                          func() *Poller
	up, commands, cpu, main, in, out *prometheus.Desc
}

// NewCollector returns a Collector of current's poller; register it once.
func NewCollector(current func() *Poller) *Collector {
	l := []string{"primary"}
	return &Collector{
		current:  current,
		up:       prometheus.NewDesc("hotkeyd_redis_info_up", "1 if a Redis primary answered the agent's last INFO reading in time, 0 if not (down, or wedged by a long script or command).", l, nil),
		commands: prometheus.NewDesc("hotkeyd_redis_commands_total", "Commands a Redis primary ran since it started (total_commands_processed of its INFO, read every redis.info_interval).", l, nil),
		cpu:      prometheus.NewDesc("hotkeyd_redis_cpu_seconds_total", "CPU time a Redis primary's whole process used since it started (used_cpu_sys + used_cpu_user of its INFO), I/O threads included.", l, nil),
		main:     prometheus.NewDesc("hotkeyd_redis_main_thread_cpu_seconds_total", "CPU time of the thread that runs a Redis primary's commands (used_cpu_sys_main_thread + used_cpu_user_main_thread of its INFO, Redis 6.2 and later); its rate near 1 is a saturated primary.", l, nil),
		in:       prometheus.NewDesc("hotkeyd_redis_net_input_bytes_total", "Bytes a Redis primary read from the network since it started (total_net_input_bytes of its INFO).", l, nil),
		out:      prometheus.NewDesc("hotkeyd_redis_net_output_bytes_total", "Bytes a Redis primary wrote to the network since it started (total_net_output_bytes of its INFO).", l, nil),
	}
}

// Describe sends the series' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.commands, c.cpu, c.main, c.in, c.out} {
		ch <- d
	}
}

// Collect sends each primary's state and counters from its last reading.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	p := c.current()
	if p == nil {
		return
	}
	rs := p.readings()
	for _, addr := range slices.Sorted(maps.Keys(rs)) {
		r := rs[addr]
		up := 0.0
		if r.ok {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, addr)
		if !r.ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(r.Commands), addr)
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, r.CPUSeconds, addr)
		if r.MainThread {
			ch <- prometheus.MustNewConstMetric(c.main, prometheus.CounterValue, r.MainThreadCPUSeconds, addr)
		}
		ch <- prometheus.MustNewConstMetric(c.in, prometheus.CounterValue, float64(r.NetInputBytes), addr)
		ch <- prometheus.MustNewConstMetric(c.out, prometheus.CounterValue, float64(r.NetOutputBytes), addr)
	}
}
