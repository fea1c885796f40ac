package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/redis/go-redis/v9"
)

// The demo's story, in numbers.
const (
	demoKeys       = 1_000_000 // background key space
	demoBackground = 20_000    // background requests per second
	demoEvery      = 10        // the demo apps report 1 request in 10
	demoFlashKey   = "sale:sku:4711"
	demoRedisRate  = 2_000           // GETs per second through the proxy tap, when redis-server exists
	demoAfterSpike = 2 * time.Second // the least time the demo runs after the spike starts
)

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("demo", args, stdout, stderr)
	duration := fs.Duration("duration", 12*time.Second, "how long the demo runs")
	spikeAt := fs.Duration("spike-at", 4*time.Second, "when the flash sale starts")
	noRedis := fs.Bool("no-redis", false, "skip the real Redis part even if redis-server is installed")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: hotkeyd demo [flags]\n\n"+
			"The whole story on one machine, no set-up: an agent on loopback ports, generated traffic\n"+
			"with a flash-sale spike, its detection and mitigation, printed live. Ctrl-C stops it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo takes no arguments, got %q", fs.Args())
	}
	if *spikeAt < 0 {
		return fmt.Errorf("demo: --spike-at %v: want a duration of 0 or more", *spikeAt)
	}
	if *duration < *spikeAt+demoAfterSpike {
		return fmt.Errorf("demo: --duration %v: want at least %v after --spike-at %v, for the spike to be flagged", *duration, demoAfterSpike, *spikeAt)
	}
	interrupted := ctx // Ctrl-C or SIGTERM, as opposed to the demo's end
	defer func() {
		if interrupted.Err() != nil {
			err = nil // whatever failed, failed because the demo was stopped
			fmt.Fprintln(stdout, "\ndemo interrupted; everything it started is stopped")
		}
	}()
	// The agent outlives the traffic by a little, so that the report can be read.
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	redis.SetLogger(goRedisLogger{log})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go ignoreHangups(agentCtx, hup, log)

	rules := detector.DefaultRules()
	flashRate := 20 * rules.Read.Rate
	var proxy *sampler.Proxy
	var redisAddr string
	opts := agent.Options{
		HTTPListen: "127.0.0.1:0",
		UDPListen:  "127.0.0.1:0",
		Rules:      &rules,
		Logger:     log,
	}
	if bin, err := exec.LookPath("redis-server"); err == nil && !*noRedis {
		stop, addr, err := startRedis(ctx, bin)
		if err != nil {
			fmt.Fprintf(stdout, "redis: %v; going on without it\n", err)
		} else {
			defer stop()
			redisAddr = addr
			opts.Sources = append(opts.Sources, func(sink sampler.Sink) (agent.Source, error) {
				p, err := sampler.NewProxy(sampler.ProxyOptions{Upstream: addr, SampleEvery: demoEvery, Sink: sink})
				proxy = p
				return p, err
			})
		}
	}
	a, err := agent.New(opts)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer func() {
		cancel()
		stopAgent()
		wg.Wait()
	}()
	wg.Go(func() { _ = a.Run(agentCtx) })
	base := "http://" + a.HTTPAddr().String()

	fmt.Fprintf(stdout, "hotkeyd demo: agent at %s, samples over UDP at %s\n", base, a.UDPAddr())
	fmt.Fprintf(stdout, "  window %v; a key is hot at %s reads/s or %.0f%% of traffic\n", a.Detector().Options().Window(), human(rules.Read.Rate), 100*rules.Read.Share)
	fmt.Fprintf(stdout, "  traffic: Zipf background over %s keys at %s req/s, reported 1 in %d over UDP\n", group(demoKeys), human(demoBackground), demoEvery)
	fmt.Fprintf(stdout, "  flash sale: %q jumps to %s reads/s (20× the threshold) at t=%v\n", demoFlashKey, human(flashRate), *spikeAt)
	if proxy != nil {
		fmt.Fprintf(stdout, "  redis: real redis-server at %s behind the proxy tap at %s, %s GET/s through it, sampled 1 in %d\n", redisAddr, proxy.Addr(), human(demoRedisRate), demoEvery)
	} else {
		fmt.Fprintln(stdout, "  redis: redis-server not found (or --no-redis): UDP reports only")
	}
	fmt.Fprintln(stdout)

	start := time.Now()
	if err := registerFlashSale(ctx, base, start.Add(*spikeAt), flashRate); err != nil {
		return fmt.Errorf("registering the flash sale: %w", err)
	}
	fmt.Fprintf(stdout, "registry: event %q predicts %s at t=%v with a lead of %v: its mitigation is armed before the spike\n\n",
		demoEventID, demoFlashKey, *spikeAt, demoLead)
	wg.Go(func() {
		if err := generate(ctx, a.UDPAddr().String(), start, *spikeAt, flashRate); err != nil {
			fmt.Fprintln(stderr, "demo traffic:", err)
		}
	})
	if proxy != nil {
		wg.Go(func() { driveRedis(ctx, proxy.Addr().String(), start, *spikeAt) })
	}
	if err := watch(ctx, stdout, base, start, *spikeAt); err != nil {
		return err
	}
	return printReport(stdout, base)
}

// The demo's registered event.
const (
	demoEventID = "flash-sale"
	demoLead    = 2 * time.Second
)

// registerFlashSale registers the flash sale through the API, as an operator would.
func registerFlashSale(ctx context.Context, base string, at time.Time, rate float64) error {
	body, err := json.Marshal(map[string]any{
		"id": demoEventID, "name": "noon flash sale", "patterns": []string{demoFlashKey},
		"start": at.Format(time.RFC3339Nano), "end": at.Add(time.Hour).Format(time.RFC3339Nano),
		"lead": demoLead.String(), "expected_read_rate": rate, "mitigations": []string{"auto"},
		"owner": "shop team", "note": "registered by hotkeyd demo",
	})
	if err != nil {
		return err
	}
	c := &apiClient{http: &http.Client{Timeout: 2 * time.Second}}
	return c.do(ctx, http.MethodPost, base+"/v1/registry", body, nil)
}

// printReport prints the registry's prediction-against-reality report of the event.
func printReport(w io.Writer, base string) error {
	var reply struct {
		Report *struct {
			ExpectedReadRate     float64  `json:"expected_read_rate"`
			ObservedPeakReadRate float64  `json:"observed_peak_read_rate"`
			ReadRatio            *float64 `json:"read_ratio"`
			HotKeysTotal         int      `json:"hot_keys_total"`
			FirstHotAfterStart   *string  `json:"first_hot_after_start"`
		} `json:"report"`
	}
	c := &apiClient{http: &http.Client{Timeout: 2 * time.Second}}
	if err := c.do(context.Background(), http.MethodGet, base+"/v1/registry/"+demoEventID, nil, &reply); err != nil {
		return err
	}
	r := reply.Report
	if r == nil {
		return errors.New("the registry has no report for the demo's event")
	}
	first := "-"
	if r.FirstHotAfterStart != nil {
		first = *r.FirstHotAfterStart
	}
	ratio := 0.0
	if r.ReadRatio != nil {
		ratio = *r.ReadRatio
	}
	fmt.Fprintf(w, "\nregistry report for %q: expected %s reads/s, observed peak %s reads/s (%.2f×); %d hot key(s), the first %s after the start\n",
		demoEventID, human(r.ExpectedReadRate), human(r.ObservedPeakReadRate), ratio, r.HotKeysTotal, first)
	return nil
}

// generate sends the demo's app traffic as report datagrams: the Zipf background, and the
// flash key from spikeAt on.
func generate(ctx context.Context, addr string, start time.Time, spikeAt time.Duration, flashRate float64) error {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(r, 1.05, 10, demoKeys-1)
	keys := make([][]byte, 0, 64)
	var buf []byte
	var samples []sampler.Sample
	send := func() error {
		if len(samples) == 0 {
			return nil
		}
		var err error
		// The demo's apps stand for Go services with the SDK: they follow the plan.
		buf, err = sampler.AppendReport(buf[:0], sampler.Batch{Source: "demo-app", Rate: 1.0 / demoEvery, FollowsPlan: true, Samples: samples}, nil)
		if err != nil {
			return err
		}
		samples, keys = samples[:0], keys[:0]
		_, _ = conn.Write(buf) // a refused datagram is lost, as it would be in production
		return nil
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var bgDue, flashDue float64
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			dt := now.Sub(last).Seconds()
			last = now
			bgDue += dt * demoBackground / demoEvery
			if now.Sub(start) >= spikeAt {
				flashDue += dt * flashRate / demoEvery
			}
			for ; bgDue >= 1; bgDue-- {
				keys = append(keys, strconv.AppendUint([]byte("product:"), zipf.Uint64(), 10))
				samples = append(samples, sampler.Sample{Key: keys[len(keys)-1], Op: sampler.OpRead, Bytes: 700})
				if len(samples) == 40 { // about 1,000 bytes a datagram
					if err := send(); err != nil {
						return err
					}
				}
			}
			if n := int(flashDue); n > 0 {
				flashDue -= float64(n)
				samples = append(samples, sampler.Sample{Key: []byte(demoFlashKey), Op: sampler.OpRead, Count: uint32(n), Bytes: 2048})
			}
			if err := send(); err != nil {
				return err
			}
		}
	}
}

// driveRedis reads through the proxy tap from a real go-redis client: background keys, and
// the flash key once the sale starts.
func driveRedis(ctx context.Context, addr string, start time.Time, spikeAt time.Duration) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.Set(ctx, demoFlashKey, "price=9.99;stock=500", 0)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pipe := rdb.Pipeline()
		for j := 0; j < demoRedisRate/100; j++ {
			key := fmt.Sprintf("product:%d", (i*31+j*7)%5000)
			if j%2 == 0 && time.Since(start) >= spikeAt {
				key = demoFlashKey
			}
			pipe.Get(ctx, key)
		}
		_, _ = pipe.Exec(ctx) // misses (redis.Nil) are expected
	}
}

// watch prints the top keys every second and the moment the flash key is flagged hot.
func watch(ctx context.Context, w io.Writer, base string, start time.Time, spikeAt time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	u := base + "/v1/topk?n=5"
	poll := time.NewTicker(25 * time.Millisecond)
	defer poll.Stop()
	nextPrint := start.Add(time.Second)
	var flagged bool
	var planVersion uint64
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err() // interrupted, not the demo's end
			}
			if !flagged {
				return errors.New("the flash key was not flagged before the demo ended")
			}
			fmt.Fprintf(w, "\ndone: the flash key was found by sampling alone, within a window of one second.\n")
			fmt.Fprintf(w, "next: run `go run ./cmd/hotkeyd serve` and `go run ./cmd/hotkeyd top` to watch your own traffic.\n")
			return nil
		case now := <-poll.C:
			reply, err := fetchTop(ctx, client, u)
			if err != nil {
				if ctx.Err() != nil {
					continue
				}
				return err
			}
			el := now.Sub(start)
			if p, ok := fetchPlan(ctx, client, base, planVersion); ok {
				if planVersion != 0 || len(p.Entries) > 0 {
					printPlan(w, el, p)
				}
				planVersion = p.Version
			}
			if !flagged {
				for _, k := range reply.Keys {
					if k.Key == demoFlashKey && k.Hot {
						flagged = true
						fmt.Fprintf(w, "t=%-6s ⚡ %s flagged HOT %v after the spike began (%s reads/s, %.0f%% of traffic)\n",
							fmtElapsed(el), demoFlashKey, (el - spikeAt).Round(time.Millisecond), human(k.ReadRate), 100*k.Share)
					}
				}
			}
			if now.Before(nextPrint) {
				continue
			}
			nextPrint = nextPrint.Add(time.Second)
			fmt.Fprintf(w, "t=%-6s traffic %s/s · %s distinct keys · %d hot\n", fmtElapsed(el), human(reply.TotalRate), human(float64(reply.DistinctKeys)), reply.HotKeys)
			for i, k := range reply.Keys {
				mark := ""
				if k.Hot {
					mark = "  HOT"
				}
				fmt.Fprintf(w, "   %d. %-18s %8s/s %5.1f%%%s\n", i+1, k.Key, human(k.Rate), 100*k.Share, mark)
			}
		}
	}
}

// fetchPlan returns the plan if its version differs from after.
func fetchPlan(ctx context.Context, c *http.Client, base string, after uint64) (mitigate.Plan, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/plan?after=%d", base, after), nil)
	if err != nil {
		return mitigate.Plan{}, false
	}
	resp, err := c.Do(req)
	if err != nil {
		return mitigate.Plan{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return mitigate.Plan{}, false
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return mitigate.Plan{}, false
	}
	p, err := mitigate.DecodePlan(b)
	return p, err == nil
}

func printPlan(w io.Writer, el time.Duration, p mitigate.Plan) {
	fmt.Fprintf(w, "t=%-6s plan v%d:", fmtElapsed(el), p.Version)
	if len(p.Entries) == 0 {
		fmt.Fprint(w, " no mitigations\n")
		return
	}
	fmt.Fprintln(w)
	for _, e := range p.Entries {
		fmt.Fprintf(w, "         %s → %s (%s): %s\n", e.Key, e.Kind, e.Mode, e.Reason)
	}
}

func fmtElapsed(d time.Duration) string { return d.Truncate(10 * time.Millisecond).String() }

// group writes n with thousands separators.
func group(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// startRedis runs a throw-away redis-server on a free loopback port and returns the
// function that stops it.
func startRedis(ctx context.Context, bin string) (stop func(), addr string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "hotkeyd-demo-")
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for i := 0; ; i++ {
		if err := rdb.Ping(ctx).Err(); err == nil {
			return stop, addr, nil
		} else if i == 100 {
			stop()
			return nil, "", fmt.Errorf("redis-server on %s did not answer PING: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
