package client

import "github.com/prometheus/client_golang/prometheus"

// collector exports a Client's Stats as hotkeyd_client_* metrics, read at scrape time.
type collector struct {
	c     *Client
	descs []*prometheus.Desc
}

type metric struct {
	name, help string
	typ        prometheus.ValueType
	labels     []string
}

var clientMetrics = []metric{
	{"hotkeyd_client_cache_hits_total", "Reads answered from the cache with a fresh value, by cache (l1: the plan's keys, aside: Get).", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_stale_total", "Reads answered with a value past its soft TTL while a refresh ran, by cache.", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_misses_total", "Reads that waited for a load, by cache.", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_loads_total", "Loads run (reads of Redis for l1), by cache.", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_load_errors_total", "Loads that failed, by cache.", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_refreshes_total", "Background refreshes started (after the soft TTL or early), by cache.", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_evictions_total", "Entries evicted to stay within the size bounds, by cache.", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_invalidations_total", "Entries dropped because their key was written or invalidated, by cache.", prometheus.CounterValue, []string{"cache"}},
	{"hotkeyd_client_cache_entries", "Entries in the cache, by cache.", prometheus.GaugeValue, []string{"cache"}},
	{"hotkeyd_client_cache_bytes", "Bytes of keys, values and bookkeeping in the cache, by cache.", prometheus.GaugeValue, []string{"cache"}},
	{"hotkeyd_client_plan_version", "Version of the plan the client holds; 0 before the first.", prometheus.GaugeValue, nil},
	{"hotkeyd_client_plan_entries", "Enforced plan entries whose lease has not run out.", prometheus.GaugeValue, nil},
	{"hotkeyd_client_plan_fetch_errors_total", "Failed fetches of the plan.", prometheus.CounterValue, nil},
	{"hotkeyd_client_copy_reads_total", "Reads sent to a copy of a split key.", prometheus.CounterValue, nil},
	{"hotkeyd_client_copy_fallbacks_total", "Copy reads repeated on the original.", prometheus.CounterValue, nil},
	{"hotkeyd_client_copy_mirrors_total", "Writes of a split key copied to its copies.", prometheus.CounterValue, nil},
	{"hotkeyd_client_copy_mirror_errors_total", "Writes of a split key whose copying failed.", prometheus.CounterValue, nil},
	{"hotkeyd_client_copy_unmirrored_total", "Writes of a split key the client could not mirror.", prometheus.CounterValue, nil},
	{"hotkeyd_client_copy_repairs_total", "Copies of a split key brought up to date in the background after a mirror error.", prometheus.CounterValue, nil},
}

func newCollector(c *Client) *collector {
	col := &collector{c: c}
	for _, m := range clientMetrics {
		col.descs = append(col.descs, prometheus.NewDesc(m.name, m.help, m.labels, nil))
	}
	return col
}

// Describe sends the descriptions of every metric.
func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range col.descs {
		ch <- d
	}
}

// Collect reads the client's Stats.
func (col *collector) Collect(ch chan<- prometheus.Metric) {
	st := col.c.Stats()
	i := 0
	emit := func(v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(col.descs[i], clientMetrics[i].typ, v, labels...)
	}
	caches := []struct {
		name string
		st   CacheStats
	}{{"l1", st.L1}, {"aside", st.Aside}}
	for _, f := range []func(CacheStats) float64{
		func(s CacheStats) float64 { return float64(s.Hits) },
		func(s CacheStats) float64 { return float64(s.Stale) },
		func(s CacheStats) float64 { return float64(s.Misses) },
		func(s CacheStats) float64 { return float64(s.Loads) },
		func(s CacheStats) float64 { return float64(s.LoadErrors) },
		func(s CacheStats) float64 { return float64(s.Refreshes) },
		func(s CacheStats) float64 { return float64(s.Evictions) },
		func(s CacheStats) float64 { return float64(s.Invalidations) },
		func(s CacheStats) float64 { return float64(s.Entries) },
		func(s CacheStats) float64 { return float64(s.Bytes) },
	} {
		for _, c := range caches {
			emit(f(c.st), c.name)
		}
		i++
	}
	for _, v := range []float64{float64(st.Plan.Version), float64(st.Plan.Entries), float64(st.Plan.Errors),
		float64(st.Copies.Reads), float64(st.Copies.Fallbacks), float64(st.Copies.Mirrors),
		float64(st.Copies.MirrorErrors), float64(st.Copies.Unmirrored), float64(st.Copies.Repairs)} {
		emit(v)
		i++
	}
}
