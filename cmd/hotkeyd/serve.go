package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/config"
	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
)

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", args, stdout, stderr)
	config.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: hotkeyd serve [--config FILE] [flags]\n\nEvery config key can also be set as HOTKEYD_<KEY> (see config/example.yaml).\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// Most often a config file given without its flag; running on the defaults
		// instead would hide that.
		return fmt.Errorf("serve takes no arguments, got %q; to read a config file use --config %s", fs.Args(), fs.Arg(0))
	}
	cfg, err := config.Load(config.LoadOptions{Flags: fs})
	if err != nil {
		return err
	}
	if config.PrintConfig(fs) {
		b, err := cfg.YAML()
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	log := newLogger(cfg.Log, stderr)
	opts, err := agentOptions(cfg, log)
	if err != nil {
		return err
	}
	if opts.Events, err = eventStore(ctx, cfg, log); err != nil {
		return err
	}
	a, err := agent.New(opts)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// agentOptions turns the configuration into the agent's options, sources included.
func agentOptions(cfg config.Config, log *slog.Logger) (agent.Options, error) {
	rules := detector.Rules{
		Read:      detector.Threshold(cfg.Hot.Read),
		Write:     detector.Threshold(cfg.Hot.Write),
		MinRate:   cfg.Hot.MinRate,
		CoolRatio: cfg.Hot.CoolRatio,
		CoolTicks: cfg.Hot.CoolTicks,
	}
	for _, o := range cfg.Hot.Overrides {
		rules.Overrides = append(rules.Overrides, detector.Override{
			Pattern: o.Pattern,
			Read:    detector.Threshold{Rate: o.ReadRate, Share: o.ReadShare},
			Write:   detector.Threshold{Rate: o.WriteRate, Share: o.WriteShare},
		})
	}
	d := cfg.Detector
	opts := agent.Options{
		Version: versionString(),
		Detector: detector.Options{
			Width:  d.Width,
			Depth:  d.Depth,
			Tick:   d.Window / time.Duration(d.Ticks),
			Ticks:  d.Ticks,
			K:      d.TopK,
			Shards: d.Shards,
			Bytes:  d.Bytes,
		},
		Rules:               &rules,
		HTTPListen:          cfg.HTTP.Listen,
		UDPListen:           cfg.UDP.Listen,
		UDPReaders:          cfg.UDP.Readers,
		AuthToken:           cfg.Auth.Token,
		MaxKeyBytes:         cfg.Limits.MaxKeyBytes,
		MaxBodyBytes:        int64(cfg.HTTP.MaxBodyBytes),
		MaxSamplesPerReport: cfg.Limits.MaxSamplesPerReport,
		HashKeys:            cfg.Metrics.HashKeys,
		RedisAddrs:          cfg.Redis.Addrs,
		Planner:             plannerOptions(cfg.Mitigate),
		CopyRefresh:         cfg.Mitigate.CopyRefresh,
		Logger:              log,
	}
	if cfg.Proxy.Listen != "" {
		sched, err := sampler.ParseSchedPolicy(cfg.Proxy.SchedPolicy)
		if err != nil {
			return opts, err // config validation has refused it already
		}
		opts.Sources = append(opts.Sources, func(sink sampler.Sink) (agent.Source, error) {
			p, err := sampler.NewProxy(sampler.ProxyOptions{
				Listen:           cfg.Proxy.Listen,
				Upstream:         cfg.Proxy.Upstream,
				UpstreamUsername: cfg.Proxy.UpstreamUsername,
				UpstreamPassword: cfg.Proxy.UpstreamPassword,
				SampleEvery:      cfg.Proxy.SampleEvery,
				ConnPerClient:    !cfg.Proxy.Multiplex,
				SchedPolicy:      sched,
				MaxKeyBytes:      cfg.Limits.MaxKeyBytes,
				Sink:             sink,
				Logger:           log,
			})
			if err != nil {
				return nil, fmt.Errorf("proxy.listen %q: %w", cfg.Proxy.Listen, err)
			}
			log.Info("proxy tap listening", "listen", p.Addr(), "upstream", cfg.Proxy.Upstream, "multiplex", cfg.Proxy.Multiplex,
				"upstream_auth", cfg.Proxy.UpstreamPassword != "")
			if err := checkUpstream(cfg.Proxy.Upstream); err != nil {
				log.Warn("proxy.upstream does not answer; its clients get errors until it does (check the address if Redis is up)",
					"upstream", cfg.Proxy.Upstream, "err", err)
			}
			return p, nil
		})
	}
	if cfg.Monitor.Addr != "" {
		log.Warn("MONITOR source on: it costs the Redis server much of its throughput; use it in development only", "addr", cfg.Monitor.Addr)
		opts.Sources = append(opts.Sources, func(sink sampler.Sink) (agent.Source, error) {
			return sampler.NewMonitor(sampler.MonitorOptions{
				Addr:        cfg.Monitor.Addr,
				SampleEvery: cfg.Monitor.SampleEvery,
				MaxKeyBytes: cfg.Limits.MaxKeyBytes,
				Sink:        sink,
				Logger:      log,
			})
		})
	}
	return opts, nil
}

// upstreamTimeout bounds checkUpstream's dial.
const upstreamTimeout = 5 * time.Second

// checkUpstream dials the proxy tap's upstream once at start, so that a wrong address is
// told at once. The tap starts either way, as it rides out upstream outages and restarts:
// a tap in the apps' path to Redis must not refuse to start while Redis restarts.
func checkUpstream(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, upstreamTimeout)
	if err != nil {
		return err
	}
	return conn.Close()
}

func plannerOptions(m config.Mitigate) mitigate.PlannerOptions {
	return mitigate.PlannerOptions{
		Rules: mitigate.Rules{
			L1TTL:         m.L1TTL,
			NodeCapacity:  m.NodeCapacity,
			Headroom:      m.Headroom,
			FlushInterval: m.FlushInterval,
			Modes: map[mitigate.Kind]mitigate.Mode{
				mitigate.L1:             mitigate.Mode(m.Modes.L1),
				mitigate.Copies:         mitigate.Mode(m.Modes.Copies),
				mitigate.ShardedCounter: mitigate.Mode(m.Modes.ShardedCounter),
				mitigate.BatchedCounter: mitigate.Mode(m.Modes.BatchedCounter),
			},
		},
		MinActive: m.MinActive,
		CoolDown:  m.CoolDown,
		Lease:     m.Lease,
	}
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	ho := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, ho)
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, ho)
	}
	return slog.New(h)
}
