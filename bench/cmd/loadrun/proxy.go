package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// target is one address redis-benchmark is pointed at, and the process behind it whose
// CPU time is counted as the proxy's.
type target struct {
	name  string
	port  int
	proxy *proc // nil for direct Redis
}

// benchResult is one redis-benchmark run: per test, requests/s and latencies; and the CPU
// time each process spent on it.
type benchResult struct {
	rps, p50, p99      map[string]float64 // by test: SET, GET
	cpuBench, cpuRedis time.Duration
	cpuProxy, wall     time.Duration
	requests           int
	redis              redisCounters // how much Redis's counters moved
	pipeline           int
	target             string
}

func runProxy(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(e.log)
	bin, quick := commonFlags(fs)
	rounds := fs.Int("rounds", 3, "interleaved rounds; the tables show medians")
	n1 := fs.Int("n", 100000, "requests per test (-n of redis-benchmark) with -P 1")
	n16 := fs.Int("n16", 500000, "requests per test with -P 16")
	clients := fs.Int("c", 50, "redis-benchmark connections (-c)")
	keyspace := fs.Int("r", 100000, "redis-benchmark key space (-r)")
	tests := fs.String("t", "get,set", "redis-benchmark tests (-t)")
	binB := fs.String("bin-b", "", "a second hotkeyd binary to compare, shown as \"hotkeyd proxy B\" (A/B work on the proxy)")
	pipes := fs.String("pipelines", "1,16", "redis-benchmark -P values, comma-separated")
	onlyHK := fs.Bool("hotkeyd-only", false, "skip twemproxy and the proxy with multiplexing off (for quick A/B work on the proxy)")
	clientCPUs := fs.String("client-cpus", "", "CPUs redis-benchmark runs on (taskset -c list); empty: wherever the scheduler puts it")
	redisCPUs := fs.String("redis-cpus", "", "CPUs redis-server runs on; empty: any")
	proxyCPUs := fs.String("proxy-cpus", "", "CPUs every proxy (hotkeyd, twemproxy) runs on; empty: any")
	if err := fs.Parse(args); err != nil {
		return err
	}
	e.cpus = map[string]string{"redis-benchmark": *clientCPUs, "redis-server": *redisCPUs,
		"hotkeyd": *proxyCPUs, "nutcracker": *proxyCPUs}
	for name, list := range map[string]string{"client-cpus": *clientCPUs, "redis-cpus": *redisCPUs, "proxy-cpus": *proxyCPUs} {
		if err := cpuList(name, list); err != nil {
			return err
		}
	}
	if *quick {
		*rounds, *n1, *n16 = 1, 2000, 4000
	}
	var pipelines []int
	for _, f := range strings.Split(*pipes, ",") {
		pl, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || pl < 1 {
			return fmt.Errorf("-pipelines %q: must be positive integers, comma-separated", *pipes)
		}
		pipelines = append(pipelines, pl)
	}
	tools := []string{"redis-server", "redis-benchmark", "nutcracker"}
	if *clientCPUs != "" || *redisCPUs != "" || *proxyCPUs != "" {
		tools = append(tools, "taskset")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err == nil {
			continue
		}
		if tool == "taskset" {
			return errors.New("taskset not found: -client-cpus, -redis-cpus and -proxy-cpus need it (Debian package util-linux)")
		}
		return fmt.Errorf("%s not found: run scripts/test.sh once, it installs redis-server, redis-tools and nutcracker", tool)
	}
	hk, err := e.binary(ctx, *bin)
	if err != nil {
		return err
	}
	redis, rport, err := e.startRedis(ctx)
	if err != nil {
		return err
	}
	targets := []target{{name: "direct Redis", port: rport}}
	bench := benchSetup{redis: redis, port: rport, cpus: e.cpus["redis-benchmark"],
		clients: *clients, keyspace: *keyspace, tests: *tests}

	startProxy := func(name string, environ []string, hk string) error {
		port, err := freePort()
		if err != nil {
			return err
		}
		a, err := e.startAgent(ctx, hk, false, environ, "--proxy-listen", addr(port), "--proxy-upstream", addr(rport))
		if err != nil {
			return err
		}
		if err := waitTCP(ctx, a.proc, addr(port)); err != nil {
			return err
		}
		targets = append(targets, target{name: name, port: port, proxy: a.proc})
		return nil
	}
	if err := startProxy("hotkeyd proxy", nil, hk); err != nil {
		return err
	}
	if *binB != "" {
		if err := startProxy("hotkeyd proxy B", nil, *binB); err != nil {
			return err
		}
	}
	if !*onlyHK {
		if err := startProxy("hotkeyd proxy, multiplex off", []string{"HOTKEYD_PROXY_MULTIPLEX=false"}, hk); err != nil {
			return err
		}
		nc, port, err := e.startTwemproxy(ctx, rport)
		if err != nil {
			return err
		}
		targets = append(targets, target{name: "twemproxy", port: port, proxy: nc})
	}

	// Warm up every path once (connections, page cache of the binaries, Redis' keys).
	for _, t := range targets {
		if _, err := bench.run(ctx, t, 1, min(*n1, 5000)); err != nil {
			return err
		}
	}
	var results []benchResult
	start := time.Now()
	for r := range *rounds {
		for _, pl := range pipelines {
			n := *n1
			if pl > 1 {
				n = *n16
			}
			// Rotate the order each round so that no target always runs first or last.
			for i := range targets {
				t := targets[(i+r)%len(targets)]
				res, err := bench.run(ctx, t, pl, n)
				if err != nil {
					return err
				}
				res.target = t.name
				results = append(results, res)
				fmt.Fprintf(e.log, "round %d -P %d %-28s %v rps in %v\n", r+1, pl, t.name, res.rps, res.wall.Round(time.Millisecond))
			}
		}
	}
	e.header(fs, "Proxy tap: redis-benchmark through the proxy, ratio to direct Redis")
	fmt.Fprintf(e.out, "redis-benchmark -c %d -r %d -t %s, -n %d with -P 1 and -n %d with a higher -P; "+
		"%d interleaved rounds (order rotated per round), medians; a ratio is the median over rounds of "+
		"(this target ÷ direct Redis in the same round). twemproxy: nutcracker %s. Total %v.\n\n",
		*clients, *keyspace, *tests, *n1, *n16, *rounds, twemproxySettings, time.Since(start).Round(time.Second))
	e.proxyTables(targets, results, pipelines, *rounds, strings.Split(strings.ToUpper(*tests), ","))
	return nil
}

// proxyTables prints the throughput and the CPU tables.
func (e *env) proxyTables(targets []target, results []benchResult, pipelines []int, rounds int, tests []string) {
	find := func(round, pl int, name string) *benchResult {
		k := 0
		for i := range results {
			if results[i].pipeline == pl && results[i].target == name {
				if k == round {
					return &results[i]
				}
				k++
			}
		}
		return nil
	}
	var rows [][]string
	for _, pl := range pipelines {
		for _, t := range targets {
			for _, test := range tests {
				var rps, ratio, p50, p99 []float64
				for r := range rounds {
					res, base := find(r, pl, t.name), find(r, pl, targets[0].name)
					if res == nil || base == nil {
						continue
					}
					rps = append(rps, res.rps[test])
					p50 = append(p50, res.p50[test])
					p99 = append(p99, res.p99[test])
					if base.rps[test] > 0 {
						ratio = append(ratio, res.rps[test]/base.rps[test])
					}
				}
				rows = append(rows, []string{t.name, strconv.Itoa(pl), test, thousands(median(rps)),
					"**" + f2(median(ratio)) + "×**", fmt.Sprintf("%.2f–%.2f", quantile(ratio, 0), quantile(ratio, 1)),
					f3(median(p50)), f3(median(p99))})
			}
		}
	}
	e.table([]string{"target", "-P", "test", "req/s", "ratio to direct", "ratio range", "p50 ms", "p99 ms"}, rows)

	fmt.Fprintf(e.out, "CPU time per request (µs, user+system from /proc/PID/stat and rusage, median over rounds; "+
		"both tests together). On 2 cores the three processes share 2 s of CPU per second, so "+
		"the total bounds the throughput when the machine is otherwise idle. The last column is "+
		"Redis's batch: total_commands_processed ÷ total_reads_processed from INFO stats, median.\n\n")
	rows = nil
	for _, pl := range pipelines {
		for _, t := range targets {
			var cb, cr, cp, tot, ratio, batch []float64
			for r := range rounds {
				res, base := find(r, pl, t.name), find(r, pl, targets[0].name)
				if res == nil || base == nil {
					continue
				}
				per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(res.requests) }
				cb = append(cb, per(res.cpuBench))
				cr = append(cr, per(res.cpuRedis))
				cp = append(cp, per(res.cpuProxy))
				total := per(res.cpuBench + res.cpuRedis + res.cpuProxy)
				tot = append(tot, total)
				bt := float64((base.cpuBench + base.cpuRedis).Microseconds()) / float64(base.requests)
				ratio = append(ratio, total/bt)
				if res.redis.reads > 0 {
					batch = append(batch, float64(res.redis.commands)/float64(res.redis.reads))
				}
			}
			proxy := f2(median(cp))
			if t.proxy == nil {
				proxy = "–"
			}
			rows = append(rows, []string{t.name, strconv.Itoa(pl), f2(median(cb)), f2(median(cr)), proxy, f2(median(tot)), f2(median(ratio)) + "×", f1(median(batch))})
		}
	}
	e.table([]string{"target", "-P", "redis-benchmark", "redis-server", "proxy", "total", "total vs direct", "Redis's commands per read"}, rows)
}

// benchSetup is what every redis-benchmark of a run shares.
type benchSetup struct {
	redis             *proc  // the Redis behind every target
	port              int    // its port, for INFO stats
	cpus              string // redis-benchmark's CPUs (taskset -c); empty: any
	clients, keyspace int
	tests             string
}

// run runs one redis-benchmark against t with -P pipeline and -n n, and measures the CPU
// time of the benchmark, of Redis and of the proxy, and how many commands Redis read per
// read(2) (its batches).
func (b benchSetup) run(ctx context.Context, t target, pipeline, n int) (benchResult, error) {
	res := benchResult{rps: map[string]float64{}, p50: map[string]float64{}, p99: map[string]float64{},
		pipeline: pipeline, target: t.name}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	argv := pinned(b.cpus, []string{"redis-benchmark", "-h", "127.0.0.1", "-p", strconv.Itoa(t.port),
		"-c", strconv.Itoa(b.clients), "-n", strconv.Itoa(n), "-r", strconv.Itoa(b.keyspace),
		"-t", b.tests, "-P", strconv.Itoa(pipeline), "--csv", "-q"})
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	c0, err := readRedisCounters(addr(b.port))
	if err != nil {
		return res, err
	}
	r0, err := cpuTime(b.redis.Pid())
	if err != nil {
		return res, err
	}
	var p0 time.Duration
	if t.proxy != nil {
		if p0, err = cpuTime(t.proxy.Pid()); err != nil {
			return res, err
		}
	}
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("redis-benchmark against %s: %v: %s", t.name, err, errb.String())
	}
	res.wall = time.Since(start)
	r1, err := cpuTime(b.redis.Pid())
	if err != nil {
		return res, err
	}
	res.cpuRedis = r1 - r0
	if t.proxy != nil {
		p1, err := cpuTime(t.proxy.Pid())
		if err != nil {
			return res, err
		}
		res.cpuProxy = p1 - p0
	}
	res.cpuBench = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	c1, err := readRedisCounters(addr(b.port))
	if err != nil {
		return res, err
	}
	res.redis = c1.sub(c0)
	recs, err := csv.NewReader(&out).ReadAll()
	if err != nil || len(recs) < 2 {
		return res, fmt.Errorf("redis-benchmark against %s: CSV %q: %v", t.name, out.String(), err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, need := range []string{"test", "rps", "p50_latency_ms", "p99_latency_ms"} {
		if _, ok := col[need]; !ok {
			return res, fmt.Errorf("redis-benchmark CSV has no %q column (redis-benchmark 7 or later needed): %q", need, recs[0])
		}
	}
	for _, rec := range recs[1:] {
		test := rec[col["test"]]
		res.rps[test], _ = strconv.ParseFloat(rec[col["rps"]], 64)
		res.p50[test], _ = strconv.ParseFloat(rec[col["p50_latency_ms"]], 64)
		res.p99[test], _ = strconv.ParseFloat(rec[col["p99_latency_ms"]], 64)
		res.requests += n
	}
	return res, nil
}

// twemproxySettings describes the pool loadrun gives twemproxy: one server connection
// that every client's requests are pipelined onto (twemproxy's design and its fastest
// setting against one Redis), connected before the first client, no timeouts, no
// ejection, default 16 KiB mbufs.
const twemproxySettings = "`redis: true`, `server_connections: 1`, `preconnect: true`, `auto_eject_hosts: false`, no `timeout`, default mbuf size (16 KiB)"

// startTwemproxy starts nutcracker in front of the Redis on rport.
func (e *env) startTwemproxy(ctx context.Context, rport int) (*proc, int, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, 0, err
	}
	d, err := e.dir()
	if err != nil {
		return nil, 0, err
	}
	conf := filepath.Join(d, "nutcracker.yml")
	yml := fmt.Sprintf(`bench:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  servers:
   - %s:1
`, addr(ports[0]), addr(rport))
	if err := os.WriteFile(conf, []byte(yml), 0o644); err != nil {
		return nil, 0, err
	}
	p, err := e.start("nutcracker", nil, "nutcracker", "-c", conf, "-s", strconv.Itoa(ports[1]), "-a", "127.0.0.1",
		"-o", filepath.Join(d, "nutcracker.out"), "-v", "4")
	if err != nil {
		return nil, 0, err
	}
	return p, ports[0], waitTCP(ctx, p, addr(ports[0]))
}
