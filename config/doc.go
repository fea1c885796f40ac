// Package config builds hotkeyd's one validated Config from defaults, an optional YAML
// file, HOTKEYD_* environment variables and command-line flags. It is the only package,
// with cmd/hotkeyd, that reads the environment or flags; everything else is handed the
// parts of Config it needs. Config is a plain value, safe to copy and to share read-only.
//
// # Precedence
//
// Load starts from Default, then applies, each over the one before:
//
//  1. the YAML file: LoadOptions.File, else --config, else $HOTKEYD_CONFIG, else none;
//  2. the environment: HOTKEYD_ followed by the key's path in upper case with dots as
//     underscores, so http.listen is HOTKEYD_HTTP_LISTEN and hot.read.rate is
//     HOTKEYD_HOT_READ_RATE;
//  3. the flags of RegisterFlags that were set on the command line.
//
// Every key can be set in the environment, whether or not the file mentions it. Lists
// (redis.addrs) are comma-separated there; hot.overrides and registry.events are YAML
// flow lists:
//
//	HOTKEYD_REDIS_ADDRS=10.0.0.1:6379,10.0.0.2:6379
//	HOTKEYD_HOT_OVERRIDES='[{pattern: "score:*", read_rate: 5000}]'
//	HOTKEYD_REGISTRY_EVENTS='[{id: final, patterns: ["score:match42"], start: "2026-12-01T19:30:00+01:00", end: "2026-12-01T21:30:00+01:00"}]'
//
// An empty variable counts as set for strings and lists, so HOTKEYD_UDP_LISTEN= turns UDP
// off, and as unset for numbers, booleans and durations.
// A HOTKEYD_ variable of the process environment that names no key (HOTKEYD_AUTH_TOKN) is
// an error naming it and the nearest known variable. HOTKEYD_CONFIG names the file, and
// the variables Kubernetes sets for a Service named hotkeyd (HOTKEYD_SERVICE_HOST,
// HOTKEYD_PORT, HOTKEYD_PORT_9736_TCP_ADDR, …) are let through.
//
// The file is strict: an unknown key (a typo), a key set twice or a value of the wrong
// kind is an error naming the file, the line and the key, with the nearest known key as a
// hint. Every problem is reported, not only the first. Then Validate checks the values
// and reports, again all at once, each bad key with its value and what is allowed; Load
// puts before each where the value was set (file and line, variable or flag).
//
// Config.YAML prints the effective configuration (hotkeyd serve --print-config) with
// auth.token, proxy.upstream_password and redis.password shown as "***"; loading that output gives the
// same Config back once the secrets are set again: "***" as a secret is an error. The file
// config/example.yaml lists every key with its default and a comment.
//
// # Keys
//
// Key (environment variable is HOTKEYD_ + upper-snake key), default, allowed values:
//
//	http.listen                    127.0.0.1:9736  host:port of the HTTP API (flag --http-listen)
//	http.max_body_bytes            1048576         1024..1073741824
//	udp.listen                     127.0.0.1:9736  host:port for sample datagrams; empty turns UDP off (--udp-listen)
//	udp.readers                    2               1..64 reading goroutines
//	redis.addrs                    (none)          host:port list; none means detection only (--redis-addrs)
//	redis.username                 (none)          ACL user of every connection to redis.addrs; empty: "default"
//	redis.password                 (none)          password of those connections (requirepass or the user's); no flag, shown as ***
//	redis.info_interval            10s             0 (never) or 1s..1m: how often each primary's INFO is read (hotkeyd_redis_*_total, /v1/nodes)
//	proxy.listen                   (none)          host:port of the RESP proxy tap; set with proxy.upstream (--proxy-listen)
//	proxy.upstream                 (none)          host:port of the Redis behind the proxy (--proxy-upstream)
//	proxy.upstream_username        (none)          ACL user of the shared upstream connections; empty is user default
//	proxy.upstream_password        (none)          password of the shared upstream connections (requirepass or the user's); no flag, shown as ***
//	proxy.sample_every             100             1..1000000: sample one command in N
//	proxy.multiplex                true            share one upstream connection among clients' plain commands (Linux)
//	proxy.max_output_bytes         16777216        1048576..1073741824: replies held for multiplexed clients, together, before Redis is left to keep them
//	proxy.sched_policy             auto            auto, batch or off: SCHED_BATCH threads while clients pipeline (Linux)
//	proxy.access_check_ttl         1s              0..1m: how long a check that Redis lets new connections in without AUTH admits new clients
//	proxy.io_uring                 true            batch the multiplexed clients' reads and writes through io_uring where the kernel allows it (Linux)
//	monitor.addr                   (none)          host:port of a Redis to read with MONITOR, development only (--monitor)
//	monitor.sample_every           1               1..1000000
//	auth.token                     (none)          bearer token for mutating endpoints and UDP reports; printable ASCII, no spaces, at most 255 bytes (--auth-token)
//	detector.window                1s              10ms..1h: how far back rates look
//	detector.ticks                 10              1..1000, and window/ticks ≥ 10ms
//	detector.topk                  100             1..10000 (--topk)
//	detector.width                 16384           power of two, 64..16777216 counters per sketch row, ≥ 64 × detector.shards
//	detector.depth                 4               1..16 sketch rows
//	detector.shards                4               power of two, 1..256
//	detector.bytes                 false           true adds a ranking by bytes moved (/v1/topk?op=bytes)
//	limits.max_key_bytes           512             8..65536; longer keys are truncated and marked
//	limits.max_samples_per_report  10000           1..1000000
//	hot.read.rate                  1000            > 0 requests/s of full traffic
//	hot.read.share                 0.05            (0, 1] share of all traffic (reads and writes)
//	hot.write.rate                 500             > 0 requests/s
//	hot.write.share                0.05            (0, 1] share of all traffic
//	hot.min_rate                   100             ≥ 0: below it a key is never hot by share alone
//	hot.min_samples                5               0..1000000: a key's reads or writes count only once they stand for this many samples; 0: off
//	hot.cool_ratio                 0.7             (0, 1): a hot key cools below ratio × threshold
//	hot.cool_ticks                 10              1..10000 consecutive ticks below that line
//	hot.overrides                  (none)          list of {pattern, read_rate, read_share, write_rate, write_share}
//	metrics.hash_keys              false           true replaces key names by a short hash in metrics and the API
//	metrics.key_min_ratio          0.3             [0, 1]: per-key series only for keys hot, mitigated, predicted, or at ratio × threshold; 0: every top-k key
//	mitigate.modes.l1              enforce         observe, recommend or enforce (also for the three below)
//	mitigate.modes.copies          observe
//	mitigate.modes.sharded_counter observe
//	mitigate.modes.batched_counter enforce
//	mitigate.l1_ttl                1s              10ms..1h: how long SDK clients cache a hot key
//	mitigate.node_capacity         100000          > 0 operations/s one Redis node takes
//	mitigate.headroom              0.5             (0, 1]: share of a node one key may use before it is split
//	mitigate.flush_interval        100ms           1ms..1m: how often SDK clients send batched increments
//	mitigate.min_active            30s             1s..24h: least time a mitigation stays
//	mitigate.cool_down             60s             1s..24h: how long a key must stay cool before it ends
//	mitigate.lease                 60s             2s..1h: how long a plan entry lives at a client that lost the agent
//	mitigate.copy_refresh          1s              10ms..1m, ≤ mitigate.lease / 4: how often copies of a split key are rewritten from the original
//	registry.file                  hotkeyd-registry.json  predicted events (atomic JSON file); with redis.addrs it seeds the Redis store; empty: memory only
//	registry.events                (none)          list of predicted events, read-only in the API; fields as in docs/registry.md, id required
//	log.level                      info            debug, info, warn, error, in any case (--log-level)
//	log.format                     text            text, json
//
// In hot.overrides, pattern is an exact key or a prefix ending in "*"; a threshold left
// out or set to 0 inherits hot.read or hot.write. An exact pattern beats every prefix,
// and a longer prefix beats a shorter one.
//
// In registry.events, each event has the fields of the registry's JSON form
// (docs/registry.md), with start and end as RFC 3339 strings and lead as a Go duration:
//
//	registry:
//	  events:
//	    - id: final
//	      name: the final
//	      patterns: ["score:match42"]
//	      start: "2026-12-01T19:30:00+01:00"
//	      end: "2026-12-01T21:30:00+01:00"
//	      lead: 10m
//	      expected_read_rate: 200000
//
// An unknown field is an error like any unknown key; Validate checks each event as the
// registry would and names the problem registry.events[i].field. The API lists these
// events with the stored ones but refuses to change or delete them (409), and an event
// stored under the same id is hidden by the config file's.
package config
