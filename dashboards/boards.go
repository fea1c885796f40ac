package dashboards

import (
	"sort"
	"strings"
)

// PendingMetrics names the metrics that panels of the boards' "Pending" row query but the
// agent does not export yet, each with what will add it. The real-Prometheus test skips
// the queries that name them, and fails as soon as the agent exports one of them, so that
// its panels get checked from then on and move out of the Pending row.
func PendingMetrics() map[string]string {
	return map[string]string{} // none: every panel's metric is exported and checked
}

// PendingRow is the title of the collapsed row that holds the panels of PendingMetrics.
const PendingRow = "Pending: executor and registry metrics (no data until the agent exports them)"

// Boards returns the dashboards, in the order docs/dashboards.md describes them.
func Boards() []*Dashboard {
	return []*Dashboard{overview(), keyBoard(), mitigations()}
}

// sel is the label matcher every agent metric is filtered with: the job and instance
// variables.
const sel = `job="$job",instance=~"$instance"`

// m writes metric{sel,extra…}.
func m(name string, extra ...string) string {
	return name + "{" + strings.Join(append([]string{sel}, extra...), ",") + "}"
}

// barInterval is the min interval of the panels that draw a count per bar: each bar counts
// increase(x[$__interval]), the events of its own interval, so that bars do not overlap and
// add up to what happened (with $__rate_interval, four scrapes or more, bars drawn every
// scrape would count each event about four times). One minute is four scrapes at the 15 s
// scrape interval docs/dashboards.md configures: increase needs two samples in a window,
// and more make its extrapolation steadier. A longer dashboard range widens $__interval.
const barInterval = "1m"

// Thresholds shared by several panels.
var (
	shareSteps = []Step{at("orange", 0.05), at("red", 0.2)} // hot.*.share default, and 4×
	nodeSteps  = []Step{at("orange", 0.4), at("red", 0.5)}  // the split target, the alert
	ratioSteps = []Step{at("orange", 0.7), at("red", 1)}    // hot.cool_ratio, the threshold
	rateSteps  = []Step{at("orange", 1000), at("red", 10000)}
	lagSteps   = []Step{at("orange", 0.5), at("red", 2)}
)

func commonVars(extra ...Variable) []Variable {
	return append([]Variable{
		datasourceVar(),
		queryVar("job", "Job", "The Prometheus job that scrapes the agents.", "label_values(hotkeyd_traffic_rate, job)", false),
		queryVar("instance", "Agent", "Agents (scrape targets) to show; All sums or takes the maximum over them, as each panel says.", `label_values(hotkeyd_traffic_rate{job="$job"}, instance)`, true),
	}, extra...)
}

// keyLink opens the key drill-down for the key under the cursor.
var keyLink = []DataLink{{
	Title: "Drill down into ${__field.labels.key}",
	URL:   "/d/hotkeyd-key/hotkeyd-key?var-datasource=${datasource}&var-job=${job}&${instance:queryparam}&var-key=${__field.labels.key:percentencode}&${__url_time_range}",
}}

// nodeShare adds the per-primary load share panels.
func nodeShare(l *layout) {
	l.add(16, 8, panel{typ: "timeseries", title: "Load share per primary",
		desc: "Each Redis primary's share of the load of the ranked (top-k) keys, from their sampled rates and the cluster's slot map (hotkeyd_node_share, highest over the selected agents). " +
			"One primary far above 1/N means its hot keys should be split. Orange from 0.4 (what splitting a key aims for), red above 0.5 (the HotkeydPrimaryOverloaded alert). No data without redis.addrs.",
		unit: "percentunit", steps: nodeSteps, thresholdStyle: "dashed", min: ptr(0.0), max: ptr(1.0),
		targets: []Target{series(`max by (primary) (`+m("hotkeyd_node_share")+`)`, "{{primary}}")}}.build())
	l.add(8, 8, panel{typ: "bargauge", title: "Primaries now",
		desc: "Each primary's current share of the ranked keys' load (hotkeyd_node_share), busiest first. Orange from 0.4, red above 0.5. No data without redis.addrs.",
		unit: "percentunit", steps: nodeSteps, min: ptr(0.0), max: ptr(1.0),
		targets: []Target{instant(`sort_desc(max by (primary) (`+m("hotkeyd_node_share")+`))`, "{{primary}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Commands per primary (INFO)",
		desc: "Commands each Redis primary runs per second, all of its traffic, from its own INFO (rate of hotkeyd_redis_commands_total, read every redis.info_interval, highest over the selected agents). " +
			"The ground truth beside the sampled shares: a hot key's primary stands out here, and a split evens the lines out. No data without redis.addrs, or with redis.info_interval 0.",
		unit:    "cps",
		targets: []Target{series(`max by (primary) (rate(`+m("hotkeyd_redis_commands_total")+`[$__rate_interval]))`, "{{primary}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "CPU per primary (INFO)",
		desc: "How busy each Redis primary's command thread is, 1 = always (rate of hotkeyd_redis_main_thread_cpu_seconds_total from used_cpu_*_main_thread of its INFO; the whole process's hotkeyd_redis_cpu_seconds_total before Redis 6.2). Redis runs commands on that one thread: near 1 a primary is saturated, whatever its share. " +
			"Orange from 0.7, red from 0.9 (the HotkeydPrimaryCPUSaturated alert). A primary that stops answering INFO leaves a gap here: see HotkeydPrimaryUnresponsive and hotkeyd_redis_info_up. No data without redis.addrs, or with redis.info_interval 0.",
		unit: "short", steps: []Step{at("orange", 0.7), at("red", 0.9)}, thresholdStyle: "dashed", min: ptr(0.0),
		targets: []Target{series(`max by (primary) (rate(`+m("hotkeyd_redis_main_thread_cpu_seconds_total")+`[$__rate_interval]) or rate(`+m("hotkeyd_redis_cpu_seconds_total")+`[$__rate_interval]))`, "{{primary}}")}}.build())
}

func overview() *Dashboard {
	l := &layout{}
	l.section("At a glance")
	l.add(4, 4, panel{typ: "stat", title: "Agents up",
		desc: "Selected agents whose last scrape succeeded (Prometheus's up). Red at 0: the HotkeydAgentDown alert fires after 2 minutes.",
		unit: "short", base: "red", steps: []Step{at("green", 1)},
		targets: []Target{instant(`sum(up{`+sel+`})`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Traffic",
		desc: "All requests per second the selected agents see, scaled from samples to full traffic (sum of hotkeyd_traffic_rate over operations and agents).",
		unit: "reqps", base: "blue",
		targets: []Target{instant(`sum(`+m("hotkeyd_traffic_rate")+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Hot keys",
		desc: "Keys hot right now (hotkeyd_hot_keys, summed over agents). Orange from 1, red from 5.",
		unit: "short", steps: []Step{at("orange", 1), at("red", 5)},
		targets: []Target{instant(`sum(`+m("hotkeyd_hot_keys")+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Hottest key's share",
		desc: "The largest share of all traffic that one key takes (hotkeyd_key_share). Orange from 5 % (the default hot share), red from 20 %.",
		unit: "percentunit", steps: shareSteps,
		targets: []Target{instant(`max(`+m("hotkeyd_key_share")+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Busiest primary",
		desc: "The largest share of the ranked keys' load on one Redis primary (hotkeyd_node_share). Orange from 40 %, red above 50 %. No data without redis.addrs.",
		unit: "percentunit", steps: nodeSteps,
		targets: []Target{instant(`max(`+m("hotkeyd_node_share")+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Ingest lag",
		desc: "Age of the newest evaluated window, worst agent (hotkeyd_ingest_lag_seconds): normally under two ticks (0.2 s). Orange from 0.5 s, red from 2 s.",
		unit: "s", steps: lagSteps,
		targets: []Target{instant(`max(`+m("hotkeyd_ingest_lag_seconds")+`)`, "")}}.build())

	l.section("Top keys")
	l.add(12, 9, panel{typ: "timeseries", title: "Top keys by rate",
		desc: "Requests per second of the 10 heaviest keys, reads and writes, summed over agents (hotkeyd_key_rate). Per-key series exist only while a key is in an agent's top-k. Click a series to drill down into the key.",
		unit: "reqps", steps: rateSteps, links: keyLink,
		targets: []Target{series(`topk(10, sum by (key) (`+m("hotkeyd_key_rate")+`))`, "{{key}}")}}.build())
	l.add(12, 9, panel{typ: "bargauge", title: "Top keys now",
		desc: "The 10 heaviest keys now, requests per second (hotkeyd_key_rate summed over operations and agents). Orange from 1,000/s (the default hot.read.rate), red from 10,000/s; per-key thresholds are in \"Closest to hot\". Click a bar to drill down.",
		unit: "reqps", steps: rateSteps, links: keyLink,
		targets: []Target{instant(`sort_desc(topk(10, sum by (key) (`+m("hotkeyd_key_rate")+`)))`, "{{key}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Share of traffic",
		desc: "Each of the 10 largest keys' share of all traffic, highest over the selected agents (hotkeyd_key_share). A key is hot at 5 % by default (hot.read.share, hot.write.share): orange line; red from 20 %.",
		unit: "percentunit", steps: shareSteps, thresholdStyle: "dashed", links: keyLink,
		targets: []Target{series(`topk(10, max by (key) (`+m("hotkeyd_key_share")+`))`, "{{key}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Closest to hot",
		desc: "The 10 keys nearest their hot threshold: rate over threshold (hotkeyd_key_threshold_ratio), per-key overrides applied. 1 is the threshold (red line); a hot key cools below 0.7 (hot.cool_ratio, orange).",
		unit: "short", decimals: ptr(2), steps: ratioSteps, thresholdStyle: "dashed", links: keyLink,
		targets: []Target{series(`topk(10, max by (key) (`+m("hotkeyd_key_threshold_ratio")+`))`, "{{key}}")}}.build())

	l.section("Traffic")
	l.add(8, 8, panel{typ: "timeseries", title: "Reads and writes",
		desc: "All traffic by operation, requests per second of the full traffic, stacked (hotkeyd_traffic_rate).",
		unit: "reqps", stack: true,
		targets: []Target{series(`sum by (op) (`+m("hotkeyd_traffic_rate")+`)`, "{{op}}")}}.build())
	l.add(8, 8, panel{typ: "timeseries", title: "Most written keys",
		desc: "The 5 keys with the most writes per second (hotkeyd_key_rate{op=\"write\"}), among the ranked keys. A write-hot counter is what sharded and batched counters cool.",
		unit: "reqps", steps: []Step{at("orange", 500), at("red", 5000)}, links: keyLink,
		targets: []Target{series(`topk(5, sum by (key) (`+m("hotkeyd_key_rate", `op="write"`)+`))`, "{{key}}")}}.build())
	l.add(8, 8, panel{typ: "timeseries", title: "Distinct keys",
		desc:    "Distinct keys in each agent's window (hotkeyd_distinct_keys, HyperLogLog, about 1 % error). The sketches' memory does not grow with it.",
		unit:    "short",
		targets: []Target{series(m("hotkeyd_distinct_keys"), "{{instance}}")}}.build())

	l.section("Hot keys")
	l.add(8, 8, panel{typ: "timeseries", title: "Hot and ranked keys",
		desc: "Keys hot now (hotkeyd_hot_keys) and keys ranked in the top-k (hotkeyd_topk_keys), summed over agents.",
		unit: "short", steps: []Step{at("orange", 1), at("red", 5)},
		targets: []Target{
			series(`sum(`+m("hotkeyd_hot_keys")+`)`, "hot"),
			series(`sum(`+m("hotkeyd_topk_keys")+`)`, "ranked"),
		}}.build())
	l.add(8, 8, panel{typ: "timeseries", title: "Keys turning hot and cooling",
		desc: "Hot-key events: keys that turned hot (to=hot) and that cooled (to=cool), per bar (increase of hotkeyd_hot_key_transitions_total over each bar's own interval, at least 1 minute: the bars do not overlap, so they add up to the events of the range).",
		unit: "short", bars: true, interval: barInterval,
		targets: []Target{series(`sum by (to) (increase(`+m("hotkeyd_hot_key_transitions_total")+`[$__interval]))`, "{{to}}")}}.build())
	l.add(8, 8, panel{typ: "timeseries", title: "Detection delay",
		desc: "Median and 90th percentile, over the last 10 minutes, of the time from the first tick a key was over its threshold to it being flagged hot (hotkeyd_detection_delay_seconds). Orange from 0.25 s (the aim), red from 1 s (the target). Empty when no key turned hot in 10 minutes.",
		unit: "s", steps: []Step{at("orange", 0.25), at("red", 1)}, thresholdStyle: "dashed",
		targets: []Target{
			series(`histogram_quantile(0.5, sum by (le) (rate(`+m("hotkeyd_detection_delay_seconds_bucket")+`[10m])))`, "p50"),
			series(`histogram_quantile(0.9, sum by (le) (rate(`+m("hotkeyd_detection_delay_seconds_bucket")+`[10m])))`, "p90"),
		}}.build())
	l.add(24, 7, panel{typ: "state-timeline", title: "Hot keys over time",
		desc: "Hot (red) or cool (green) state of every key that was hot in the last hour (hotkeyd_key_hot): when it turned hot, for how long. Gaps: the key was not in the top-k.",
		unit: "short", steps: []Step{at("red", 1)}, mappings: hotMapping(),
		targets: []Target{series(`max by (key) (`+m("hotkeyd_key_hot")+`) and on (key) (max by (key) (max_over_time(`+m("hotkeyd_key_hot")+`[1h])) == 1)`, "{{key}}")}}.build())

	l.section("Redis primaries")
	nodeShare(l)

	l.section("Ingest health")
	l.add(8, 8, panel{typ: "timeseries", title: "Samples received by source",
		desc: "Samples per second taken into the detector, by source (rate of hotkeyd_samples_received_total): app names, proxy, monitor; more than 64 sources are counted as \"other\".",
		unit: "cps", stack: true,
		targets: []Target{series(`sum by (source) (rate(`+m("hotkeyd_samples_received_total")+`[$__rate_interval]))`, "{{source}}")}}.build())
	l.add(8, 8, panel{typ: "timeseries", title: "Samples dropped by source and reason",
		desc: "Samples or reports dropped before the detector, per second (rate of hotkeyd_samples_dropped_total): malformed, too_large, overload (the agent shed load), auth (wrong or missing token). No data means nothing was ever dropped; the HotkeydSamplesDropped alert fires on any sustained drop.",
		unit: "cps", bars: true, steps: []Step{at("red", 0.001)},
		targets: []Target{series(`sum by (source, reason) (rate(`+m("hotkeyd_samples_dropped_total")+`[$__rate_interval]))`, "{{source}} {{reason}}")}}.build())
	l.add(8, 8, panel{typ: "stat", title: "Drops per 100 samples received",
		desc: "Drops over the last 5 minutes for every 100 samples received (100 × rate of hotkeyd_samples_dropped_total / rate of hotkeyd_samples_received_total). Not a share of samples lost, the units differ: a drop counts samples where they are known (a UDP datagram over limits.max_samples_per_report, a monitor or proxy command over its limits, overload shed by the proxy tap) but one per report or datagram where they are not (a malformed or too large HTTP body, a wrong token, a malformed datagram, a datagram shed under load), and such a report may have held many samples. Orange from 0.1, red from 1.",
		unit: "short", decimals: ptr(2), steps: []Step{at("orange", 0.1), at("red", 1)},
		targets: []Target{instant(`100 * (sum(rate(`+m("hotkeyd_samples_dropped_total")+`[5m])) or vector(0)) / sum(rate(`+m("hotkeyd_samples_received_total")+`[5m]))`, "")}}.build())
	l.add(24, 7, panel{typ: "timeseries", title: "Ingest lag",
		desc: "Age of the newest evaluated window per agent (hotkeyd_ingest_lag_seconds): how far what the agent shows trails the samples. Normally under 0.2 s; orange from 0.5 s, red from 2 s (the HotkeydIngestLagHigh alert fires above 1 s for 2 minutes).",
		unit: "s", steps: lagSteps, thresholdStyle: "dashed",
		targets: []Target{series(`max by (instance) (`+m("hotkeyd_ingest_lag_seconds")+`)`, "{{instance}}")}}.build())

	l.section("Proxy tap")
	l.add(12, 8, panel{typ: "timeseries", title: "Proxy clients, shared and own",
		desc: "Clients of the proxy tap (hotkeyd_proxy_clients): on the connections to Redis that all clients share (cheap), or on a connection of their own (about twice the CPU per request). Many own: see why in the next panel.",
		unit: "short", stack: true,
		targets: []Target{series(`sum by (conn) (`+m("hotkeyd_proxy_clients")+`)`, "{{conn}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Clients pinned to their own connection, by reason",
		desc: "Clients per second the proxy tap moved off the shared connections (rate of hotkeyd_proxy_pins_total): command (AUTH, SELECT, MULTI, blocking pops, SUBSCRIBE, scripts…), malformed (bytes that do not parse), too_large (a command larger than the read buffer or than Redis takes), auth (with proxy.upstream_password set: a command before the client authenticated with those credentials, or other credentials). Shared connections that failed or were refused are in hotkeyd_proxy_shared_failures_total.",
		unit: "cps", bars: true,
		targets: []Target{series(`sum by (reason) (rate(`+m("hotkeyd_proxy_pins_total")+`[$__rate_interval]))`, "{{reason}}")}}.build())
	l.add(24, 5, panel{typ: "timeseries", title: "Proxy threads run as SCHED_BATCH",
		desc:    "1 while an agent's proxy tap runs its threads as SCHED_BATCH (hotkeyd_proxy_sched_batch): with proxy.sched_policy auto, while nine in ten of its clients' reads carry a pipeline of 4 commands or more. A woken tap then lets a running client finish its burst first: less CPU per pipelined request, a little more latency for unpipelined clients of the same tap. 0 otherwise, and with sched_policy off.",
		unit:    "short",
		targets: []Target{series(`max by (instance) (`+m("hotkeyd_proxy_sched_batch")+`)`, "{{instance}}")}}.build())

	return dashboard("hotkeyd-overview.json", "hotkeyd-overview", "hotkeyd / Overview",
		"Which keys are hot, how much of the traffic and of each Redis primary they take, and whether the agents see all their samples.",
		commonVars(), l.panels)
}

func keyBoard() *Dashboard {
	k := `key="$key"`
	l := &layout{}
	l.section("$key now")
	l.add(4, 4, panel{typ: "stat", title: "Rate",
		desc: "The key's requests per second, reads and writes, summed over agents (hotkeyd_key_rate). Orange from 1,000/s, red from 10,000/s.",
		unit: "reqps", steps: rateSteps,
		targets: []Target{instant(`sum(`+m("hotkeyd_key_rate", k)+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Reads",
		desc: "The key's reads per second (hotkeyd_key_rate{op=\"read\"}). Orange from 1,000/s (hot.read.rate), red from 10,000/s.",
		unit: "reqps", steps: rateSteps,
		targets: []Target{instant(`sum(`+m("hotkeyd_key_rate", k, `op="read"`)+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Writes",
		desc: "The key's writes per second (hotkeyd_key_rate{op=\"write\"}). Orange from 500/s (hot.write.rate), red from 5,000/s.",
		unit: "reqps", steps: []Step{at("orange", 500), at("red", 5000)},
		targets: []Target{instant(`sum(`+m("hotkeyd_key_rate", k, `op="write"`)+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Share of traffic",
		desc: "The key's share of all traffic, highest over agents (hotkeyd_key_share). Orange from 5 % (hot by share by default), red from 20 %.",
		unit: "percentunit", steps: shareSteps,
		targets: []Target{instant(`max(`+m("hotkeyd_key_share", k)+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Hot",
		desc: "HOT while any selected agent flags the key hot (hotkeyd_key_hot), else cool.",
		unit: "short", steps: []Step{at("red", 1)}, mappings: hotMapping(),
		targets: []Target{instant(`max(`+m("hotkeyd_key_hot", k)+`)`, "")}}.build())
	l.add(4, 4, panel{typ: "stat", title: "Threshold ratio",
		desc: "The key's rate over its hot threshold, overrides applied (hotkeyd_key_threshold_ratio): red from 1 (hot), orange from 0.7 (below it a hot key starts to cool).",
		unit: "short", decimals: ptr(2), steps: ratioSteps,
		targets: []Target{instant(`max(`+m("hotkeyd_key_threshold_ratio", k)+`)`, "")}}.build())

	l.section("History of $key")
	l.add(12, 8, panel{typ: "timeseries", title: "Rate by operation",
		desc: "The key's reads and writes per second, stacked (hotkeyd_key_rate). Gaps: the key was out of every agent's top-k.",
		unit: "reqps", stack: true, steps: rateSteps,
		targets: []Target{series(`sum by (op) (`+m("hotkeyd_key_rate", k)+`)`, "{{op}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Rate by agent",
		desc: "The key's requests per second as each agent sees it (hotkeyd_key_rate by instance): which apps or proxies send the load.",
		unit: "reqps", stack: true,
		targets: []Target{series(`sum by (instance) (`+m("hotkeyd_key_rate", k)+`)`, "{{instance}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Share of traffic",
		desc: "The key's share of all traffic (hotkeyd_key_share). Orange line at 5 %, the default hot share.",
		unit: "percentunit", steps: shareSteps, thresholdStyle: "dashed",
		targets: []Target{series(`max(`+m("hotkeyd_key_share", k)+`)`, "share")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Threshold ratio",
		desc: "Rate over the hot threshold (hotkeyd_key_threshold_ratio): red line at 1, where the key turns hot; orange at 0.7, below which it cools after hot.cool_ticks ticks.",
		unit: "short", decimals: ptr(2), steps: ratioSteps, thresholdStyle: "dashed",
		targets: []Target{series(`max(`+m("hotkeyd_key_threshold_ratio", k)+`)`, "ratio")}}.build())
	l.add(24, 4, panel{typ: "state-timeline", title: "Hot state",
		desc: "When the key was hot (red) or cool (green) (hotkeyd_key_hot): since when it is hot, and how often it flapped.",
		unit: "short", steps: []Step{at("red", 1)}, mappings: hotMapping(),
		targets: []Target{series(`max(`+m("hotkeyd_key_hot", k)+`)`, "$key")}}.build())

	l.section("Mitigations and primaries")
	l.add(4, 8, panel{typ: "stat", title: "Primary of $key",
		desc: "The Redis primary that owns the key's slot, as the agents see it (hotkeyd_key_primary): the node this key loads. Two names during a failover or a slot migration, while agents disagree. No data without redis.addrs, or for a key cut at limits.max_key_bytes before a whole hash tag (its slot is then unknown).",
		unit: "short", showName: true,
		targets: []Target{instant(`max by (primary) (`+m("hotkeyd_key_primary", k)+`)`, "{{primary}}")}}.build())
	l.add(10, 8, panel{typ: "timeseries", title: "Active mitigations, all keys",
		desc: "Mitigations active on the selected agents, by kind and mode (hotkeyd_mitigations). Agent-wide; per key the agent exports only the kinds enforced for a ranked key (hotkeyd_key_mitigated); the key's own in every mode are in GET /v1/keys/{key} (\"mitigations\") and in `hotkeyd top`.",
		unit: "short", stack: true,
		targets: []Target{series(`sum by (kind, mode) (`+m("hotkeyd_mitigations")+`)`, "{{kind}} ({{mode}})")}}.build())
	l.add(10, 8, panel{typ: "timeseries", title: "Load share per primary",
		desc: "Each Redis primary's share of the ranked keys' load, agent-wide (hotkeyd_node_share); a hot key weighs on the primary that owns its slot, named on the left. Orange from 0.4, red above 0.5. No data without redis.addrs.",
		unit: "percentunit", steps: nodeSteps, thresholdStyle: "dashed", min: ptr(0.0), max: ptr(1.0),
		targets: []Target{series(`max by (primary) (`+m("hotkeyd_node_share")+`)`, "{{primary}}")}}.build())

	return dashboard("hotkeyd-key.json", "hotkeyd-key", "hotkeyd / Key",
		"One key: its rate, share and hot state over time, its threshold, and the agent's mitigations and primaries.",
		commonVars(queryVar("key", "Key", "A key in the agents' top-k (keys leave the list when they leave the top-k).",
			`label_values(hotkeyd_key_rate{job="$job",instance=~"$instance"}, key)`, false)),
		l.panels)
}

func mitigations() *Dashboard {
	l := &layout{}
	l.section("Now")
	l.add(6, 4, panel{typ: "stat", title: "Enforced mitigations",
		desc: "Mitigations in enforce mode now: published for SDK clients and carried out in Redis (hotkeyd_mitigations{mode=\"enforce\"}). Orange from 5, red from 20.",
		unit: "short", base: "blue", steps: []Step{at("orange", 5), at("red", 20)},
		targets: []Target{instant(`sum(`+m("hotkeyd_mitigations", `mode="enforce"`)+`) or vector(0)`, "")}}.build())
	l.add(6, 4, panel{typ: "stat", title: "Observed or recommended",
		desc: "Mitigations hotkeyd would apply but does not, by its mitigate.modes (hotkeyd_mitigations with mode observe or recommend). Orange from 1: a candidate to enforce.",
		unit: "short", steps: []Step{at("orange", 1)},
		targets: []Target{instant(`sum(`+m("hotkeyd_mitigations", `mode=~"observe|recommend"`)+`) or vector(0)`, "")}}.build())
	l.add(6, 4, panel{typ: "stat", title: "Hot keys",
		desc: "Keys hot now (hotkeyd_hot_keys). Orange from 1, red from 5.",
		unit: "short", steps: []Step{at("orange", 1), at("red", 5)},
		targets: []Target{instant(`sum(`+m("hotkeyd_hot_keys")+`)`, "")}}.build())
	l.add(6, 4, panel{typ: "stat", title: "Plan version",
		desc: "Version of the current mitigation plan, highest over agents (hotkeyd_plan_version); SDK clients follow it with GET /v1/plan.",
		unit: "short", base: "blue",
		targets: []Target{instant(`max(`+m("hotkeyd_plan_version")+`)`, "")}}.build())

	l.section("Mitigations")
	l.add(12, 8, panel{typ: "timeseries", title: "Active mitigations by kind and mode",
		desc: "Active mitigations over time, stacked, by kind (l1, copies, sharded_counter, batched_counter) and mode (observe, recommend, enforce) (hotkeyd_mitigations).",
		unit: "short", stack: true,
		targets: []Target{series(`sum by (kind, mode) (`+m("hotkeyd_mitigations")+`)`, "{{kind}} ({{mode}})")}}.build())
	l.add(12, 8, panel{typ: "bargauge", title: "Active now",
		desc: "Active mitigations now by kind and mode (hotkeyd_mitigations). Orange from 5, red from 20 of one kind.",
		unit: "short", base: "blue", steps: []Step{at("orange", 5), at("red", 20)},
		targets: []Target{instant(`sort_desc(sum by (kind, mode) (`+m("hotkeyd_mitigations")+`))`, "{{kind}} ({{mode}})")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Hot keys and enforced mitigations",
		desc: "Hot keys (hotkeyd_hot_keys) against enforced mitigations (hotkeyd_mitigations{mode=\"enforce\"}): hot keys that stay without mitigation are what the HotkeydSurpriseHotKey alert reports.",
		unit: "short",
		targets: []Target{
			series(`sum(`+m("hotkeyd_hot_keys")+`)`, "hot keys"),
			series(`sum(`+m("hotkeyd_mitigations", `mode="enforce"`)+`)`, "enforced mitigations"),
		}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Plan changes",
		desc: "New plan versions per bar, per agent (changes of hotkeyd_plan_version within each bar's own interval, at least 1 minute). A new version is made when a mitigation starts, ends or changes its copies, and also when the entries' leases are renewed (every half lease, 30 s by default) with nothing else changed: with any mitigation active, about 2 a minute is the baseline, not churn. Well above that, many in a row: flapping. What changed is in GET /v1/plan.",
		unit: "short", bars: true, interval: barInterval, steps: []Step{at("orange", 5)},
		targets: []Target{series(`sum by (instance) (changes(`+m("hotkeyd_plan_version")+`[$__interval]))`, "{{instance}}")}}.build())

	l.section("Redis primaries")
	nodeShare(l)

	l.section("Executor and registry")
	l.add(12, 8, panel{typ: "timeseries", title: "Mitigation actions",
		desc: "What the agent did in Redis for enforced mitigations, per bar (its own interval, at least 1 minute), by kind and action — copy_write, copy_refresh, copy_delete, copy_kept_claimed (a copy another agent uses), counter_fold, counter_recover, counter_kept_claimed (a sub-counter another agent uses), error (hotkeyd_mitigation_actions_total; exported once the agent has a Redis address).",
		unit: "short", bars: true, interval: barInterval,
		targets: []Target{series(`sum by (kind, action) (increase(`+m("hotkeyd_mitigation_actions_total")+`[$__interval]))`, "{{kind}} {{action}}")}}.build())
	l.add(12, 8, panel{typ: "timeseries", title: "Surprise hot keys",
		desc: "Keys that turned hot while no armed registry event predicted them, per bar (increase of hotkeyd_surprise_hot_keys_total over each bar's own interval, at least 1 minute; the bars do not overlap): candidates for the registry.",
		unit: "short", bars: true, interval: barInterval, steps: []Step{at("red", 1)},
		targets: []Target{series(`sum(increase(`+m("hotkeyd_surprise_hot_keys_total")+`[$__interval]))`, "surprises")}}.build())
	l.add(24, 8, panel{typ: "timeseries", title: "Predicted against observed, per event",
		desc: "For each armed registry event: the peak rate it expected on one key (hotkeyd_event_expected_rate) and the peak one key under its patterns has reached so far (hotkeyd_event_observed_rate), reads and writes. Observed far above expected: the prediction was low.",
		unit: "reqps",
		targets: []Target{
			series(`max by (event, op) (`+m("hotkeyd_event_expected_rate")+`)`, "{{event}} {{op}} expected"),
			series(`max by (event, op) (`+m("hotkeyd_event_observed_rate")+`)`, "{{event}} {{op}} observed"),
		}}.build())

	return dashboard("hotkeyd-mitigations.json", "hotkeyd-mitigations", "hotkeyd / Mitigations",
		"What hotkeyd does about hot keys: active mitigations by kind and mode, plan versions, and the load on each Redis primary.",
		commonVars(), l.panels)
}

// pendingNames returns the names of PendingMetrics, sorted.
func pendingNames() []string {
	var names []string
	for n := range PendingMetrics() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
