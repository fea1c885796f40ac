package agent

import (
	"fmt"
	"github.com/hotkeyd/hotkeyd/nodeload"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus"
)

// maxSources bounds the source label: sources beyond it are counted as "other", so that a
// misbehaving client cannot blow up the number of series.
const maxSources = 64

// unknownSource is the source of drops whose report names none (sampler's "unknown").
const unknownSource = "unknown"

// dropReasons are the reasons of hotkeyd_samples_dropped_total.
var dropReasons = []string{sampler.DropMalformed, sampler.DropTooLarge, sampler.DropOverload, sampler.DropAuth}

type metrics struct {
	a       *Agent
	samples *prometheus.CounterVec
	drops   *prometheus.CounterVec
	// unauthorized counts requests refused for want of the token or as coming from a web
	// page, by endpoint (a route name from Handler: bounded).
	unauthorized *prometheus.CounterVec
	changes      *prometheus.CounterVec
	delay        prometheus.Histogram
	// surprises counts keys turning hot that no armed registry event predicted.
	surprises prometheus.Counter

	mu      sync.Mutex                    // guards labels and sources
	labels  map[string]bool               // source labels in use, "other" aside (label)
	sources map[string]prometheus.Counter // samples' counter by source label

	keyRate, keyShare, keyHot, keyLevel   *prometheus.Desc
	keyMitigated, keyPrimary              *prometheus.Desc
	traffic, distinct, hot, lag, keysDesc *prometheus.Desc
	mitigations, planVersion, nodeShare   *prometheus.Desc
	planWithheld, buildInfo               *prometheus.Desc
	eventExpected, eventObserved          *prometheus.Desc
}

func newMetrics(a *Agent, reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		a: a,
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotkeyd_samples_received_total",
			Help: "Samples accepted into the detector, by source.",
		}, []string{"source"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotkeyd_samples_dropped_total",
			Help: "Samples or reports dropped before the detector, by source and reason (malformed, too_large, overload, auth).",
		}, []string{"source", "reason"}),
		unauthorized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotkeyd_http_unauthorized_total",
			Help: "HTTP requests that change something refused, by endpoint: 401 for a missing or wrong token, or 403 for coming from a web page (refused sample reports also count in hotkeyd_samples_dropped_total).",
		}, []string{"endpoint"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotkeyd_hot_key_transitions_total",
			Help: "Keys turning hot or cooling down.",
		}, []string{"to"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hotkeyd_detection_delay_seconds",
			Help:    "Time from the first tick a key's rate was over its threshold to the key being flagged hot.",
			Buckets: []float64{0, .05, .1, .15, .2, .25, .3, .4, .5, .75, 1, 2, 5},
		}),
		surprises: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotkeyd_surprise_hot_keys_total",
			Help: "Keys that turned hot while no armed registry event predicted them; a key counts again only after 5 minutes without being hot and unpredicted.",
		}),
		labels:   map[string]bool{},
		sources:  map[string]prometheus.Counter{},
		keyRate:  prometheus.NewDesc("hotkeyd_key_rate", "Estimated requests per second of a key in the top-k, full traffic, by operation.", []string{"key", "op"}, nil),
		keyShare: prometheus.NewDesc("hotkeyd_key_share", "A top-k key's share of all traffic (0 to 1).", []string{"key"}, nil),
		keyHot:   prometheus.NewDesc("hotkeyd_key_hot", "1 while a top-k key is hot, else 0.", []string{"key"}, nil),
		keyLevel: prometheus.NewDesc("hotkeyd_key_threshold_ratio", "A top-k key's rate over its hot threshold (1 = at the threshold); reads or writes seen in fewer than hot.min_samples samples count as 0 until the key is hot.", []string{"key"}, nil),
		keyPrimary: prometheus.NewDesc("hotkeyd_key_primary",
			"1, labelled with the Redis primary that owns a top-k key (with redis.addrs; none for a truncated key whose slot is unknown): join it to the other per-key series on key.", []string{"key", "primary"}, nil),
		keyMitigated: prometheus.NewDesc("hotkeyd_key_mitigated",
			"1 for each mitigation kind enforced for a top-k key (withheld and observe-only ones aside); no series for a key without one.", []string{"key", "kind"}, nil),
		traffic:  prometheus.NewDesc("hotkeyd_traffic_rate", "Estimated requests per second of all sampled traffic, by operation.", []string{"op"}, nil),
		distinct: prometheus.NewDesc("hotkeyd_distinct_keys", "Estimated distinct keys in the window (HyperLogLog).", nil, nil),
		hot:      prometheus.NewDesc("hotkeyd_hot_keys", "Keys currently hot.", nil, nil),
		lag:      prometheus.NewDesc("hotkeyd_ingest_lag_seconds", "Age of the newest evaluated window: how far what the agent shows trails the samples it has taken.", nil, nil),
		keysDesc: prometheus.NewDesc("hotkeyd_topk_keys", "Keys evaluated: the combined top-k ranking and the keys of the read and write rankings it lacks (per-key series are shown for those hot, mitigated, predicted or at metrics.key_min_ratio of their threshold).", nil, nil),

		mitigations: prometheus.NewDesc("hotkeyd_mitigations", "Active mitigations by kind and mode (observe ones included; withheld: left out of the plan at its size bound).", []string{"kind", "mode"}, nil),
		planVersion: prometheus.NewDesc("hotkeyd_plan_version", "Version of the current mitigation plan.", nil, nil),
		buildInfo: prometheus.NewDesc("hotkeyd_build_info", "1, labelled with the build's version and Go version.",
			nil, prometheus.Labels{"version": a.opts.Version, "goversion": runtime.Version()}),
		planWithheld: prometheus.NewDesc("hotkeyd_plan_withheld_entries",
			"Mitigation entries left out of the plan because it would exceed mitigate.MaxPlanBytes (the least busy keys' first); 0 normally.", nil, nil),
		eventExpected: prometheus.NewDesc("hotkeyd_event_expected_rate", "An armed registry event's expected peak rate on one key, requests/s.", []string{"event", "op"}, nil),
		eventObserved: prometheus.NewDesc("hotkeyd_event_observed_rate", "The peak rate one key under an armed registry event has reached in this occurrence, requests/s.", []string{"event", "op"}, nil),
		nodeShare:     prometheus.NewDesc("hotkeyd_node_share", "A primary's share of the load of the ranked keys, from sampled rates and the slot map.", []string{"primary"}, nil),
	}
	redisLoad := nodeload.NewCollector(func() *nodeload.Poller {
		if st := a.redis.Load(); st != nil {
			return st.load
		}
		return nil
	})
	for _, c := range []prometheus.Collector{m.samples, m.drops, m.unauthorized, m.changes, m.delay, m.surprises, m, redisLoad} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("agent: metrics: %w", err)
		}
	}
	// The series whose label values are known in advance exist at 0 from the start, so
	// that rate() and increase() see their first increment (a series born at 1 shows none).
	// Sources that clients name cannot be known; "unknown" (a report refused before its
	// source is read, a datagram shed under load) can.
	for _, to := range []string{"hot", "cool"} {
		m.changes.WithLabelValues(to)
	}
	for _, reason := range dropReasons {
		m.drops.WithLabelValues(unknownSource, reason)
	}
	return m, nil
}

// received counts n samples from source.
func (m *metrics) received(source string, n int) {
	m.mu.Lock()
	l := m.label(source)
	c := m.sources[l]
	if c == nil {
		c = m.samples.WithLabelValues(l)
		m.sources[l] = c
	}
	m.mu.Unlock()
	c.Add(float64(n))
}

func (m *metrics) dropped(source, reason string, n int) {
	m.mu.Lock()
	l := m.label(source)
	m.mu.Unlock()
	m.drops.WithLabelValues(l, reason).Add(float64(n))
}

// label returns the label of source in both samples counters: source itself while fewer
// than maxSources names are in use, received and dropped together, else "other". "other"
// and "unknown" (the agent's own, made at start) do not count against maxSources. m.mu
// must be held.
func (m *metrics) label(source string) string {
	if source == "other" || source == unknownSource || m.labels[source] {
		return source
	}
	if len(m.labels) >= maxSources {
		return "other"
	}
	m.labels[source] = true
	return source
}

func (m *metrics) change(c detector.Change) {
	if c.Hot {
		m.changes.WithLabelValues("hot").Inc()
		m.delay.Observe(c.Delay.Seconds())
	} else {
		m.changes.WithLabelValues("cool").Inc()
	}
}

// Describe sends the descriptions of the per-key and window series.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.keyRate, m.keyShare, m.keyHot, m.keyLevel, m.keyMitigated, m.keyPrimary, m.traffic, m.distinct, m.hot, m.lag, m.keysDesc, m.mitigations, m.planVersion, m.planWithheld, m.buildInfo, m.nodeShare, m.eventExpected, m.eventObserved} {
		ch <- d
	}
}

// Collect reads the latest view. Per-key series exist for the keys of the current top-k
// only, and among them for those that matter (exported): so a key that leaves it, or stops
// mattering, loses its series at the next scrape.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	v := m.a.view.Load()
	gauge := func(d *prometheus.Desc, val float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, val, labels...)
	}
	gauge(m.traffic, v.reads, "read")
	gauge(m.traffic, v.writes, "write")
	gauge(m.distinct, float64(v.distinct))
	gauge(m.hot, float64(v.hot))
	gauge(m.keysDesc, float64(len(v.levels)))
	lag := 0.0
	if !v.at.IsZero() {
		lag = max(0, m.a.now().Sub(v.at).Seconds())
	}
	gauge(m.lag, lag)
	gauge(m.planVersion, float64(v.planVersion))
	gauge(m.planWithheld, float64(m.a.planner.Withheld()))
	gauge(m.buildInfo, 1)
	counts := map[[2]string]int{}
	enforced := map[string][]string{} // kinds enforced, by key as clients name it
	for _, e := range m.a.planner.Active() {
		mode := activeMode(e)
		counts[[2]string{string(e.Kind), mode}]++
		if mode == string(mitigate.Enforce) && !slices.Contains(enforced[e.Key], string(e.Kind)) {
			enforced[e.Key] = append(enforced[e.Key], string(e.Kind))
		}
	}
	for km, n := range counts {
		gauge(m.mitigations, float64(n), km[0], km[1])
	}
	for _, r := range v.reports { // armed events only: series go when an event disarms
		gauge(m.eventExpected, r.ExpectedReadRate, r.ID, "read")
		gauge(m.eventExpected, r.ExpectedWriteRate, r.ID, "write")
		gauge(m.eventObserved, r.ObservedPeakReadRate, r.ID, "read")
		gauge(m.eventObserved, r.ObservedPeakWriteRate, r.ID, "write")
	}
	for _, n := range v.nodes {
		if n.Primary != "" {
			gauge(m.nodeShare, n.Share, n.Primary)
		}
	}
	seen := make(map[string]bool, len(v.levels))
	for _, l := range v.levels {
		if !m.exported(v, l) {
			continue
		}
		k := labelValue(m.a.display(l.Key.Key))
		if seen[k] { // two keys shown alike: short hashes that collide (metrics.hash_keys)
			continue
		}
		seen[k] = true
		gauge(m.keyRate, l.ReadRate, k, "read")
		gauge(m.keyRate, l.WriteRate, k, "write")
		gauge(m.keyShare, l.Share, k)
		gauge(m.keyLevel, l.Level, k)
		hot := 0.0
		if l.Hot {
			hot = 1
		}
		gauge(m.keyHot, hot, k)
		for _, kind := range enforced[l.Key.Key] {
			gauge(m.keyMitigated, 1, k, kind)
		}
		if _, primary := m.a.placement(l.Key.Key, l.Key.Flags); primary != "" {
			gauge(m.keyPrimary, 1, k, primary)
		}
	}
}

// exported reports whether a ranked key has per-key series (Options.KeyMinRatio): it is
// hot, has an active mitigation (any mode), is predicted by an armed registry event, or
// its level (its read or write rate over the threshold the tracker holds it to, overrides
// included) is at least the ratio. The rest of the top-k is mostly keys seen in one sample,
// whose series would come and go at every scrape.
func (m *metrics) exported(v *view, l detector.Level) bool {
	return l.Hot || l.Level >= m.a.opts.KeyMinRatio ||
		v.mitigations[l.Key.Key] != nil || v.predicted[l.Key.Key] != nil
}

// labelValue makes a key a valid label value: Prometheus labels are UTF-8, keys are any
// bytes (binary keys, or keys cut inside a character at limits.max_key_bytes), so each
// byte that is not part of valid UTF-8 is written as \xNN; so is each byte of a control
// character (C0, DEL, C1: NUL, tab and the like), which would otherwise reach the
// exposition raw. A backslash is written as \\, so that no two keys share a label: the
// binary key "bin:" 0xff and the text key bin:\xff are bin:\xff and bin:\\xff.
func labelValue(key string) string {
	clean := true
	for _, r := range key {
		if r == utf8.RuneError || r == '\\' || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return key
	}
	var b strings.Builder
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		switch {
		case (r == utf8.RuneError && size == 1) || unicode.IsControl(r):
			for _, c := range []byte(key[i : i+size]) {
				fmt.Fprintf(&b, "\\x%02x", c)
			}
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(key[i : i+size])
		}
		i += size
	}
	return b.String()
}

// proxyStatser is a source that counts what it does with its clients: the proxy tap.
type proxyStatser interface {
	Stats() sampler.ProxyStats
}

// proxyCollector exports a proxy tap's client counters.
type proxyCollector struct {
	src                              proxyStatser
	clients, pins, sharedFail, batch *prometheus.Desc
	outputCuts, outputBytes          *prometheus.Desc
}

func newProxyCollector(src proxyStatser) *proxyCollector {
	return &proxyCollector{
		src:         src,
		clients:     prometheus.NewDesc("hotkeyd_proxy_clients", "Clients of the proxy tap now, by upstream connection: shared (multiplexed) or own.", []string{"conn"}, nil),
		pins:        prometheus.NewDesc("hotkeyd_proxy_pins_total", "Clients the proxy tap moved from the shared upstream connection to their own, by reason (command, malformed, too_large, auth, backlog).", []string{"reason"}, nil),
		sharedFail:  prometheus.NewDesc("hotkeyd_proxy_shared_failures_total", "Shared upstream connections that failed or could not be opened (Redis down, wanting AUTH, or refusing proxy.upstream_password); not those Redis closed while idle (its timeout setting).", nil, nil),
		batch:       prometheus.NewDesc("hotkeyd_proxy_sched_batch", "1 while the proxy tap runs hotkeyd's threads as SCHED_BATCH (proxy.sched_policy), 0 otherwise.", nil, nil),
		outputCuts:  prometheus.NewDesc("hotkeyd_proxy_output_cuts_total", "Multiplexed clients the proxy tap disconnected because the replies waiting for its clients stayed past proxy.max_output_bytes for a second, while every client of the shared connections waited: those holding the most.", nil, nil),
		outputBytes: prometheus.NewDesc("hotkeyd_proxy_output_bytes", "Replies the proxy tap holds for multiplexed clients that have not read them yet, in bytes (about proxy.max_output_bytes at most: past it the tap stops reading Redis), and those that clients pinned for their backlog took along.", nil, nil),
	}
}

func (c *proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.clients
	ch <- c.pins
	ch <- c.sharedFail
	ch <- c.batch
	ch <- c.outputCuts
	ch <- c.outputBytes
}

func (c *proxyCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	ch <- prometheus.MustNewConstMetric(c.clients, prometheus.GaugeValue, float64(s.SharedClients), "shared")
	ch <- prometheus.MustNewConstMetric(c.clients, prometheus.GaugeValue, float64(s.OwnClients), "own")
	for _, reason := range []string{sampler.PinCommand, sampler.PinMalformed, sampler.PinTooLarge, sampler.PinAuth, sampler.PinBacklog} {
		ch <- prometheus.MustNewConstMetric(c.pins, prometheus.CounterValue, float64(s.Pins[reason]), reason)
	}
	ch <- prometheus.MustNewConstMetric(c.sharedFail, prometheus.CounterValue, float64(s.SharedFailures))
	ch <- prometheus.MustNewConstMetric(c.outputCuts, prometheus.CounterValue, float64(s.OutputCuts))
	ch <- prometheus.MustNewConstMetric(c.outputBytes, prometheus.GaugeValue, float64(s.OutputBytes))
	batch := 0.0
	if s.SchedBatch {
		batch = 1
	}
	ch <- prometheus.MustNewConstMetric(c.batch, prometheus.GaugeValue, batch)
}
