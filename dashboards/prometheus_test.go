package dashboards

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/internal/agenttest"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/redis/go-redis/v9"
)

// Keys the test traffic makes hot.
const (
	hotKey   = "score:match42" // read-hot from the start, mitigations pinned on it
	writeKey = "counter:likes" // write-hot counter
	flashKey = "flash:sale"    // turns hot only once Prometheus scrapes, so that the detection delay moves
)

// Grafana's interval variables, as the test substitutes them: Prometheus scrapes every
// second here, so 5 s spans about five scrapes (Grafana's $__rate_interval is at least
// four scrape intervals).
var intervals = map[string]string{"__rate_interval": "5s", "__interval": "5s", "__range": "1m"}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// TestPanelsAgainstPrometheus is the real check of the dashboards: a real agent, fed with
// traffic (a read-hot key with pinned mitigations, a write-hot counter, a key that turns
// hot while watched, dropped reports) and connected to a real 3-primary Redis Cluster, is
// scraped every second by a real Prometheus; then every panel's query, with the template
// variables resolved through Prometheus as Grafana would, must return at least one finite
// value. A query naming a metric the agent does not export fails, as does a metric of
// PendingMetrics that the agent now exports. The same Prometheus loads alerts.yml, whose
// rules must evaluate without error.
func TestPanelsAgainstPrometheus(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: run ./scripts/test.sh, which installs Debian's prometheus package (/usr/bin/prometheus)")
	}
	boards := loadBoards(t)

	cluster := redistest.StartCluster(t, 3)
	// The hot key exists in Redis, so that the executor writes its pinned copies (and
	// counts the actions).
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	if err := rdb.Set(context.Background(), hotKey, "3-1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	owner, err := rdb.MasterForKey(context.Background(), hotKey)
	if err != nil {
		t.Fatal(err)
	}
	hotOwner := owner.Options().Addr
	rdb.Close()
	a := startAgent(t, cluster.Addrs())
	base := "http://" + a.HTTPAddr().String()
	var flash atomic.Bool
	startTraffic(t, a, base, &flash)
	for _, body := range []string{
		`{"key":"` + hotKey + `","kind":"l1","action":"pin","mode":"enforce"}`,
		`{"key":"` + hotKey + `","kind":"copies","action":"pin","mode":"enforce"}`,
		`{"key":"` + writeKey + `","kind":"batched_counter","action":"pin","mode":"recommend"}`,
	} {
		resp, err := httpClient.Post(base+"/v1/plan/overrides", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /v1/plan/overrides %s: %d %s; want 201", body, resp.StatusCode, b)
		}
	}
	// A registry event armed now for the hot key, so the per-event series exist.
	now := time.Now()
	event := fmt.Sprintf(`{"id":"final","patterns":[%q],"start":%q,"end":%q,"lead":"1m","expected_read_rate":100000}`,
		hotKey, now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	resp, err := httpClient.Post(base+"/v1/registry", "application/json", strings.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/registry: %d %s; want 201", resp.StatusCode, b)
	}
	// Every family the boards query exists at the agent before Prometheus starts.
	waitUntil(t, 15*time.Second, "the agent to export node shares, mitigations, actions, drops and event rates", func() bool {
		names := agentMetricNames(t, base)
		return names["hotkeyd_node_share"] && names["hotkeyd_redis_commands_total"] && names["hotkeyd_redis_main_thread_cpu_seconds_total"] && names["hotkeyd_mitigations"] && names["hotkeyd_samples_dropped_total"] &&
			names["hotkeyd_proxy_clients"] && names["hotkeyd_proxy_pins_total"] &&
			names["hotkeyd_key_rate"] && names["hotkeyd_mitigation_actions_total"] && names["hotkeyd_event_expected_rate"]
	})

	prom := startPrometheus(t, promBin, a.HTTPAddr().String())
	waitUntil(t, 20*time.Second, "Prometheus to scrape the agent 3 times", func() bool {
		r, err := prom.query(`count_over_time(up{job="hotkeyd"}[1m]) >= 3 and up{job="hotkeyd"} == 1`)
		return err == nil && len(r) > 0
	})
	flash.Store(true) // a key turns hot while Prometheus watches

	exported := agentMetricNames(t, base)
	for name, why := range PendingMetrics() {
		if exported[name] {
			t.Errorf("the agent now exports %s (pending because: %s): remove it from PendingMetrics and move its panels out of the row %q, so that the test checks them", name, why, PendingRow)
		}
	}

	deadline := time.Now().Add(20 * time.Second)
	var checked, skipped int
	for _, b := range boards {
		vals := resolveVariables(t, prom, b)
		for _, pr := range allPanels(b.m) {
			for i, tg := range list(pr.p["targets"]) {
				expr := str(tg.(map[string]any)["expr"])
				where := fmt.Sprintf("%s: panel %q target %d", filepath.Base(b.file), pr.p["title"], i)
				names := metricNames(expr)
				if slices.ContainsFunc(names, func(n string) bool { _, ok := PendingMetrics()[n]; return ok }) {
					t.Logf("%s: skipped, it names a pending metric: %s", where, expr)
					skipped++
					continue
				}
				missing := false
				for _, n := range names {
					if !exported[n] && prometheusSeries[n] == "" {
						t.Errorf("%s: metric %s is not exported by the agent (GET /metrics): %s", where, n, expr)
						missing = true
					}
				}
				if missing {
					continue
				}
				q := substitute(t, expr, vals)
				// "or vector(0)" shows 0 instead of "No data" on a board; the test wants the
				// metric's own data, so it runs the query without it.
				q = strings.ReplaceAll(q, " or vector(0)", "")
				checked++
				var got []sample
				var qerr error
				for {
					got, qerr = prom.query(q)
					if qerr == nil && hasFinite(got) || time.Now().After(deadline) {
						break
					}
					time.Sleep(250 * time.Millisecond)
				}
				switch {
				case qerr != nil:
					t.Errorf("%s: %s: %v", where, q, qerr)
				case !hasFinite(got):
					t.Errorf("%s: %s: got %v; want at least one finite value", where, q, got)
				}
			}
		}
	}
	t.Logf("%d panel queries returned data; %d skipped (pending metrics %v)", checked, skipped, pendingNames())
	if checked < 40 {
		t.Errorf("checked %d queries; want every panel's (over 40)", checked)
	}
	checkKeyPrimary(t, prom, boards, hotOwner)
	checkRulesLoaded(t, prom, exported)
	checkBarsAddUp(t, prom, `sum(increase($m[$__interval]))`, 4*time.Second)
}

// checkKeyPrimary checks that the key board's "Primary of $key" stat names the primary
// that owns the hot key's slot, as its legend: the label, not the value, is what it shows.
func checkKeyPrimary(t *testing.T, prom *prometheus, boards []board, owner string) {
	t.Helper()
	for _, b := range boards {
		if str(b.m["uid"]) != "hotkeyd-key" {
			continue
		}
		for _, pr := range allPanels(b.m) {
			if str(pr.p["title"]) != "Primary of $key" {
				continue
			}
			tg := list(pr.p["targets"])[0].(map[string]any)
			legend := str(tg["legendFormat"])
			label := strings.TrimSuffix(strings.TrimPrefix(legend, "{{"), "}}")
			q := substitute(t, str(tg["expr"]), resolveVariables(t, prom, b))
			got, err := prom.query(q)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if len(got) != 1 || got[0].Metric[label] != owner {
				t.Errorf("%s: got %v; want one series whose %s (the legend %s) is %s, the primary that owns %s", q, got, label, legend, owner, hotKey)
			}
			return
		}
	}
	t.Error(`the key board has no panel "Primary of $key"`)
}

// startAgent runs an agent on loopback ports with the given Redis, and a proxy tap in
// front of its first node, until the test ends.
func startAgent(t *testing.T, redisAddrs []string) *agent.Agent {
	t.Helper()
	return agenttest.Run(t, agent.Options{UDPListen: "127.0.0.1:0", RedisAddrs: redisAddrs,
		Sources: []agent.NewSource{func(sink sampler.Sink) (agent.Source, error) {
			return sampler.NewProxy(sampler.ProxyOptions{Upstream: redisAddrs[0], Sink: sink})
		}}})
}

// startTraffic feeds the agent until the test ends: every 10 ms, 50 reads over 1,000
// background keys, the read-hot key from a proxy, the write-hot counter from an SDK
// client, and, once flash is set, the flash key; every half second a malformed report.
// Samples are 1 in 100, so the hot key runs at about 100,000 requests/s.
func startTraffic(t *testing.T, a *agent.Agent, base string, flash *atomic.Bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		rng := rand.New(rand.NewPCG(1, 2))
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			bg := make([]sampler.Sample, 50)
			for i := range bg {
				bg[i] = sampler.Sample{Key: []byte("user:" + strconv.Itoa(rng.IntN(1000))), Op: sampler.OpRead, Count: 1}
			}
			a.Accept(sampler.Batch{Source: "app-1", Rate: 0.01, Samples: bg})
			a.Accept(sampler.Batch{Source: "proxy", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte(hotKey), Op: sampler.OpRead, Count: 10}}})
			a.Accept(sampler.Batch{Source: "app-1", Rate: 0.01, FollowsPlan: true, Samples: []sampler.Sample{{Key: []byte(writeKey), Op: sampler.OpWrite, Count: 2, Counter: true}}})
			if flash.Load() {
				a.Accept(sampler.Batch{Source: "proxy", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte(flashKey), Op: sampler.OpRead, Count: 5}}})
			}
			if n%50 == 0 { // a malformed report, counted as dropped
				if resp, err := httpClient.Post(base+"/v1/samples", "application/json", strings.NewReader("not json")); err == nil {
					resp.Body.Close()
				}
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// agentMetricNames returns the names of the series the agent's /metrics shows.
func agentMetricNames(t *testing.T, base string) map[string]bool {
	t.Helper()
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// prometheus is a running Prometheus.
type prometheus struct {
	base string
}

// startPrometheus starts Prometheus on a free loopback port, scraping target every second
// as job "hotkeyd" and loading alerts.yml, with its storage in a temporary directory; it
// stops when the test ends.
func startPrometheus(t *testing.T, bin, target string) *prometheus {
	t.Helper()
	rules, err := filepath.Abs("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: hotkeyd
    static_configs:
      - targets: [%q]
`, rules, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p, err := launchPrometheus(t, bin, cfg, filepath.Join(dir, fmt.Sprintf("data%d", attempt)), filepath.Join(dir, fmt.Sprintf("prometheus%d.log", attempt)))
		if err == nil {
			return p
		}
		lastErr = err
	}
	t.Fatalf("starting prometheus: %v", lastErr)
	return nil
}

func launchPrometheus(t *testing.T, bin, cfg, data, logPath string) (*prometheus, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+data,
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	p := &prometheus{base: "http://" + addr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("prometheus exited on start: %s", tail(b))
		default:
		}
		if resp, err := httpClient.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(stop)
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("prometheus not ready after 20 s: %s", tail(b))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// sample is one series of a query result: its labels and its values (one for a vector).
type sample struct {
	Metric map[string]string
	Values []float64
}

// api calls a Prometheus HTTP API endpoint and decodes its data.
func (p *prometheus) api(path string, params url.Values, data any) error {
	resp, err := httpClient.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: status %d: %w", path, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", path, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// query runs an instant query.
func (p *prometheus) query(q string) ([]sample, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {q}}, &d); err != nil {
		return nil, err
	}
	value := func(v []any) float64 {
		s, _ := v[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return f
	}
	switch d.ResultType {
	case "vector":
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &vs); err != nil {
			return nil, err
		}
		out := make([]sample, len(vs))
		for i, v := range vs {
			out[i] = sample{Metric: v.Metric, Values: []float64{value(v.Value)}}
		}
		return out, nil
	case "scalar":
		var v []any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{Values: []float64{value(v)}}}, nil
	}
	return nil, fmt.Errorf("result type %q; want vector or scalar", d.ResultType)
}

func hasFinite(ss []sample) bool {
	for _, s := range ss {
		for _, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				return true
			}
		}
	}
	return false
}

// resolveVariables resolves a board's query variables in order, through Prometheus's
// series API as Grafana's label_values does, and picks the value the test uses: job
// "hotkeyd", every instance (All, the default: ".*"), and the key with pinned
// mitigations. Each variable must list values, and the expected ones.
func resolveVariables(t *testing.T, p *prometheus, b board) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for k, v := range intervals {
		vals[k] = v
	}
	want := map[string]string{"job": "hotkeyd", "key": hotKey}
	tmpl, _ := b.m["templating"].(map[string]any)
	for _, v := range list(tmpl["list"]) {
		v := v.(map[string]any)
		name := str(v["name"])
		if v["type"] != "query" {
			continue
		}
		mm := labelValues.FindStringSubmatch(str(v["definition"]))
		if mm == nil {
			t.Fatalf("%s: variable %s: %q is not label_values(selector, label)", b.file, name, v["definition"])
		}
		selector := substitute(t, mm[1], vals)
		var series []map[string]string
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := p.api("/api/v1/series", url.Values{"match[]": {selector}, "start": {strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)}}, &series)
			if err != nil {
				t.Fatalf("%s: variable %s: series %s: %v", b.file, name, selector, err)
			}
			if values := labelSet(series, mm[2]); want[name] == "" && len(values) > 0 || slices.Contains(values, want[name]) || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		values := labelSet(series, mm[2])
		switch {
		case len(values) == 0:
			t.Errorf("%s: variable %s: label_values(%s, %s) is empty", b.file, name, selector, mm[2])
		case want[name] != "" && !slices.Contains(values, want[name]):
			t.Errorf("%s: variable %s: values %v; want %q among them", b.file, name, values, want[name])
		}
		switch {
		case v["includeAll"] == true:
			vals[name] = str(v["allValue"])
		case want[name] != "":
			vals[name] = want[name]
		case len(values) > 0:
			vals[name] = values[0]
		}
	}
	return vals
}

func labelSet(series []map[string]string, label string) []string {
	var out []string
	for _, s := range series {
		if v, ok := s[label]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// substitute replaces $name and ${name} by vals, failing on an unknown variable.
func substitute(t *testing.T, s string, vals map[string]string) string {
	t.Helper()
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := strings.TrimLeft(ref, "${")
		v, ok := vals[name]
		if !ok {
			t.Errorf("%q: variable $%s has no value", s, name)
		}
		return v
	})
}

// checkRulesLoaded checks that Prometheus loaded every rule of alerts.yml and evaluates it
// without error, and that the rules name only exported metrics.
func checkRulesLoaded(t *testing.T, p *prometheus, exported map[string]bool) {
	t.Helper()
	var file rules
	readYAML(t, "alerts.yml", &file)
	want := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			want++
			for _, n := range metricNames(r.Expr) {
				if !exported[n] && prometheusSeries[n] == "" {
					t.Errorf("alert %s: metric %s is not exported by the agent", r.Alert, n)
				}
			}
		}
	}
	var got struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	var problems []string
	waitUntil(t, 10*time.Second, "Prometheus to evaluate every alerting rule", func() bool {
		if err := p.api("/api/v1/rules", url.Values{"type": {"alert"}}, &got); err != nil {
			t.Fatal(err)
		}
		problems = problems[:0]
		n := 0
		for _, g := range got.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					problems = append(problems, fmt.Sprintf("%s: health %q %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		if n != want {
			problems = append(problems, fmt.Sprintf("%d rules loaded; want %d", n, want))
		}
		return len(problems) == 0
	}, func() string { return strings.Join(problems, "; ") })
}

// waitUntil polls cond every 100 ms until it holds, failing after d; detail, if given,
// explains the failure.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("waited %v for %s", d, what)
			for _, f := range detail {
				msg += ": " + f()
			}
			t.Fatal(msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
