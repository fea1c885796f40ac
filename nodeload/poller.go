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
	// OnError receives each failed reading. Default: errors are dropped.
	OnError func(addr string, err error)
	// OnRead receives the address of each node read. Default: nothing.
	OnRead func(addr string)
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
	last Reading
	load Load
	ok   bool // load holds a rate
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
	if o.OnError == nil {
		o.OnError = func(string, error) {}
	}
	if o.OnRead == nil {
		o.OnRead = func(string) {}
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

// Poll reads every primary once, in parallel. A primary that is no longer listed, or
// whose reading fails, is forgotten: its series and rates go until it answers twice again,
// so that a dead node does not show its last load as if current.
func (p *Poller) Poll(ctx context.Context) {
	addrs := p.opts.Primaries()
	readings := make([]Reading, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { readings[i], errs[i] = p.read(ctx, addr) })
	}
	wg.Wait()

	p.mu.Lock()
	listed := make(map[string]bool, len(addrs))
	for i, addr := range addrs {
		listed[addr] = true
		if errs[i] != nil {
			delete(p.nodes, addr)
			continue
		}
		n := p.nodes[addr]
		if n == nil {
			p.nodes[addr] = &node{last: readings[i]}
			continue
		}
		n.load, n.ok = Between(n.last, readings[i])
		n.last = readings[i]
	}
	for addr := range p.nodes {
		if !listed[addr] {
			delete(p.nodes, addr)
		}
	}
	p.mu.Unlock()
	for i, addr := range addrs {
		switch {
		case errs[i] == nil:
			p.opts.OnRead(addr)
		case ctx.Err() == nil: // a stop cutting a reading short is no failure
			p.opts.OnError(addr, errs[i])
		}
	}
}

// read takes one node's reading: INFO stats, cpu and server, each asked alone, since
// Redis before 7.0 takes one section per INFO.
func (p *Poller) read(ctx context.Context, addr string) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	var text []byte
	for _, section := range []string{"stats", "cpu", "server"} {
		v, err := p.opts.Conn.NodeDo(ctx, addr, "INFO", section)
		if err != nil {
			return Reading{}, fmt.Errorf("INFO %s: %w", section, err)
		}
		s, ok := v.(string)
		if !ok {
			return Reading{}, fmt.Errorf("INFO %s: a %T reply; want text", section, v)
		}
		text = append(append(text, s...), '\n')
	}
	return ParseInfo(string(text), p.opts.Now())
}

// Loads returns the load of each primary read twice in a row, by address.
func (p *Poller) Loads() map[string]Load {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Load, len(p.nodes))
	for addr, n := range p.nodes {
		if n.ok {
			out[addr] = n.load
		}
	}
	return out
}

// readings returns the last reading of every primary, by address.
func (p *Poller) readings() map[string]Reading {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Reading, len(p.nodes))
	for addr, n := range p.nodes {
		out[addr] = n.last
	}
	return out
}

// Collector exports the last readings of the poller that current returns (nil: none, as
// while Redis is not yet reached) as counters per primary, in the way Redis counts them:
// Prometheus's rate() then gives the load, and a node's restart shows as a counter reset.
type Collector struct {
	current                func() *Poller
	commands, cpu, in, out *prometheus.Desc
}

// NewCollector returns a Collector of current's poller; register it once.
func NewCollector(current func() *Poller) *Collector {
	l := []string{"primary"}
	return &Collector{
		current:  current,
		commands: prometheus.NewDesc("hotkeyd_redis_commands_total", "Commands a Redis primary ran since it started (total_commands_processed of its INFO, read every redis.info_interval).", l, nil),
		cpu:      prometheus.NewDesc("hotkeyd_redis_cpu_seconds_total", "CPU time a Redis primary's process used since it started (used_cpu_sys + used_cpu_user of its INFO); its rate near 1 is a saturated primary.", l, nil),
		in:       prometheus.NewDesc("hotkeyd_redis_net_input_bytes_total", "Bytes a Redis primary read from the network since it started (total_net_input_bytes of its INFO).", l, nil),
		out:      prometheus.NewDesc("hotkeyd_redis_net_output_bytes_total", "Bytes a Redis primary wrote to the network since it started (total_net_output_bytes of its INFO).", l, nil),
	}
}

// Describe sends the series' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.commands
	ch <- c.cpu
	ch <- c.in
	ch <- c.out
}

// Collect sends each primary's counters from its last reading.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	p := c.current()
	if p == nil {
		return
	}
	rs := p.readings()
	for _, addr := range slices.Sorted(maps.Keys(rs)) {
		r := rs[addr]
		ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(r.Commands), addr)
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, r.CPUSeconds, addr)
		ch <- prometheus.MustNewConstMetric(c.in, prometheus.CounterValue, float64(r.NetInputBytes), addr)
		ch <- prometheus.MustNewConstMetric(c.out, prometheus.CounterValue, float64(r.NetOutputBytes), addr)
	}
}
