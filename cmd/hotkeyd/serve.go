package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/config"
	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
)

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// From the start: a SIGHUP while the configuration loads is logged once there is a log.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

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
	redis.SetLogger(goRedisLogger{log})
	go ignoreHangups(ctx, hup, log)
	regFile, err := checkRegistryFile(cfg, log)
	if err != nil {
		return err
	}
	opts, err := agentOptions(cfg, log)
	if err != nil {
		return err
	}
	var closeEvents func()
	if opts.Events, closeEvents, err = eventStore(ctx, cfg, log); err != nil {
		return err
	}
	defer closeEvents() // releases registry.file's lock
	a, err := agent.New(opts)
	if err != nil {
		return err
	}
	// Logged once nothing can fail at start any more, so that a failure is one line.
	logFiles(config.FileName(config.LoadOptions{Flags: fs}), regFile, storeKind(opts.Events), log)
	warnUnauthenticated(cfg, log)
	return a.Run(ctx)
}

// keyMinRatio is metrics.key_min_ratio as agent.Options takes it: 0 (every top-k key)
// is negative there, where 0 picks the default.
func keyMinRatio(r float64) float64 {
	if r == 0 {
		return -1
	}
	return r
}

// agentOptions turns the configuration into the agent's options, sources included.
func agentOptions(cfg config.Config, log *slog.Logger) (agent.Options, error) {
	rules := detector.Rules{
		Read:       detector.Threshold(cfg.Hot.Read),
		Write:      detector.Threshold(cfg.Hot.Write),
		MinRate:    cfg.Hot.MinRate,
		MinSamples: cfg.Hot.MinSamples,
		CoolRatio:  cfg.Hot.CoolRatio,
		CoolTicks:  cfg.Hot.CoolTicks,
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
		KeyMinRatio:         keyMinRatio(cfg.Metrics.KeyMinRatio),
		RedisAddrs:          cfg.Redis.Addrs,
		RedisUsername:       cfg.Redis.Username,
		RedisPassword:       cfg.Redis.Password,
		RedisInfo:           infoInterval(cfg.Redis.InfoInterval),
		Planner:             plannerOptions(cfg.Mitigate),
		CopyRefresh:         cfg.Mitigate.CopyRefresh,
		Logger:              log,
		Registry:            processRegistry(),
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
				MaxOutputBytes:   cfg.Proxy.MaxOutputBytes,
				AccessCheckTTL:   cfg.Proxy.AccessCheckTTL,
				NoIOUring:        !cfg.Proxy.IOUring,
				MaxKeyBytes:      cfg.Limits.MaxKeyBytes,
				Sink:             sink,
				Logger:           log,
			})
			if err != nil {
				return nil, fmt.Errorf("proxy.listen %q: %w", cfg.Proxy.Listen, err)
			}
			log.Info("proxy tap listening", "listen", p.Addr(), "upstream", cfg.Proxy.Upstream, "multiplex", cfg.Proxy.Multiplex,
				"upstream_auth", cfg.Proxy.UpstreamPassword != "", "access_check_ttl", cfg.Proxy.AccessCheckTTL, "io_uring", cfg.Proxy.IOUring)
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

// ignoreHangups logs each SIGHUP that arrives on hup until ctx ends. Operators send it
// expecting a reload, and closing the terminal of a foreground hotkeyd sends it too:
// neither should stop the agent without a drain, as the default action would.
func ignoreHangups(ctx context.Context, hup <-chan os.Signal, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Warn("SIGHUP ignored: hotkeyd does not reload its configuration; restart it to apply changes")
		}
	}
}

// goRedisLogger sends go-redis's own log lines (a pool that cannot dial, twice a second
// while Redis is down) to the process's log, at debug level: the agent logs its own
// warning about an unreachable Redis, and a plain-text line would break a JSON log.
type goRedisLogger struct {
	log *slog.Logger
}

func (l goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	l.log.Log(ctx, slog.LevelDebug, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
}

// warnUnauthenticated warns when a listener that the auth token guards is reachable from
// other hosts while no token is set. A host that is empty, unspecified (0.0.0.0, ::) or
// anything but localhost and a loopback IP counts as reachable.
func warnUnauthenticated(cfg config.Config, log *slog.Logger) {
	if cfg.Auth.Token != "" {
		return
	}
	if !loopback(cfg.HTTP.Listen) {
		log.Warn("http.listen is not a loopback address and auth.token is not set: the mutating endpoints (registry, overrides, sample ingest) "+
			"are unauthenticated and open to the network; set auth.token (HOTKEYD_AUTH_TOKEN)", "listen", cfg.HTTP.Listen)
	}
	if cfg.UDP.Listen != "" && !loopback(cfg.UDP.Listen) {
		log.Warn("udp.listen is not a loopback address and auth.token is not set: anyone who reaches it can send sample reports; "+
			"set auth.token (HOTKEYD_AUTH_TOKEN), which every report must then carry", "listen", cfg.UDP.Listen)
	}
}

// loopback reports whether the host of addr is localhost or a loopback IP.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
}

// checkRegistryFile returns registry.file as an absolute path ("" when empty), and fails
// when its directory takes no new files, which the store's atomic writes need, so that
// this is told at start rather than at the first change. With redis.addrs the events live
// in Redis and the file is written only while Redis does not answer: that is a warning.
func checkRegistryFile(cfg config.Config, log *slog.Logger) (string, error) {
	if cfg.Registry.File == "" {
		return "", nil
	}
	abs, err := filepath.Abs(cfg.Registry.File)
	if err != nil {
		return "", fmt.Errorf("registry.file %q: %w", cfg.Registry.File, err)
	}
	if err := writableDir(abs); err != nil {
		if len(cfg.Redis.Addrs) == 0 {
			return "", fmt.Errorf("registry.file %q: %w; use a directory hotkeyd can write to, or registry.file \"\" to keep the events in memory only", abs, err)
		}
		log.Warn("registry.file: its directory takes no new files; the events this agent keeps while Redis does not answer cannot be saved",
			"registry_file", abs, "err", err)
	}
	return abs, nil
}

// logFiles logs the config file read (cfgFile; none when empty), the registry file
// (regFile, absolute), and where the registry keeps its events (store, see storeKind).
func logFiles(cfgFile, regFile, store string, log *slog.Logger) {
	if cfgFile == "" {
		cfgFile = "none"
	} else if abs, err := filepath.Abs(cfgFile); err == nil {
		cfgFile = abs
	}
	if regFile == "" {
		regFile = "none (events in memory only)"
	}
	log.Info("configuration", "config_file", cfgFile, "registry_file", regFile, "registry_store", store)
}

// writableDir checks that a file can be created beside path, as the registry's atomic
// writes do. The probe's name starts as theirs do, so that the store removes it at its
// next start if it is ever left behind.
func writableDir(path string) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-probe-")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot create files in %s: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
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

// processRegistry returns a metrics registry holding the Go runtime's and the process's
// metrics (go_goroutines, go_memstats_*, process_resident_memory_bytes,
// process_open_fds, …), so that an SRE can trend the daemon's memory, goroutines and file
// descriptors beside its own metrics.
func processRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// infoInterval maps redis.info_interval, where 0 is never, to agent.Options.RedisInfo,
// where it is negative.
func infoInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
