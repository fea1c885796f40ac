package config

import (
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
)

// Config is hotkeyd's whole configuration. Its zero value is not useful; start from
// Default or Load. The yaml tags are the key names of the file; the environment variable
// of a key is HOTKEYD_ followed by its path in upper case with dots as underscores.
type Config struct {
	HTTP     HTTP     `yaml:"http"`
	UDP      UDP      `yaml:"udp"`
	Redis    Redis    `yaml:"redis"`
	Proxy    Proxy    `yaml:"proxy"`
	Monitor  Monitor  `yaml:"monitor"`
	Auth     Auth     `yaml:"auth"`
	Detector Detector `yaml:"detector"`
	Limits   Limits   `yaml:"limits"`
	Hot      Hot      `yaml:"hot"`
	Metrics  Metrics  `yaml:"metrics"`
	Mitigate Mitigate `yaml:"mitigate"`
	Registry Registry `yaml:"registry"`
	Log      Log      `yaml:"log"`
}

// HTTP configures the HTTP API: samples, top-k, plan, registry, metrics.
type HTTP struct {
	// Listen is the TCP address of the HTTP API, host:port. Default "127.0.0.1:9736".
	Listen string `yaml:"listen"`
	// MaxBodyBytes caps the size of a body of POST /v1/samples; registry events (1 MiB)
	// and plan overrides (64 KiB) have fixed limits of their own. Default 1048576
	// (1 MiB); allowed 1024..1073741824.
	MaxBodyBytes int `yaml:"max_body_bytes"`
}

// UDP configures the datagram listener of the sample protocol.
type UDP struct {
	// Listen is the UDP address for sample datagrams, host:port; empty disables UDP.
	// Default "127.0.0.1:9736".
	Listen string `yaml:"listen"`
	// Readers is how many goroutines read datagrams. Default 2; allowed 1..64.
	Readers int `yaml:"readers"`
}

// Redis names the Redis deployment that mitigations act on.
type Redis struct {
	// Addrs are the host:port addresses of Redis; a cluster is detected from them. Empty
	// means detection only: nothing is written to Redis. In the environment they are
	// comma-separated. Default empty.
	Addrs []string `yaml:"addrs"`
	// Username and Password are the credentials of a Redis that wants AUTH (requirepass,
	// or an ACL user, which needs the commands mitigations run and +info): every
	// connection the agent opens to redis.addrs authenticates with them — the topology,
	// the executor, INFO readings, the registry's store. An empty username is Redis's
	// user "default". No flag: set the password with HOTKEYD_REDIS_PASSWORD. Default
	// empty. The password is never shown.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// InfoInterval is how often the agent reads each primary's INFO (commands, CPU,
	// network bytes) for hotkeyd_redis_*_total and GET /v1/nodes; 0 never. Three small
	// INFO sections per primary each time. Default 10s.
	InfoInterval time.Duration `yaml:"info_interval"`
}

// Proxy configures the RESP proxy tap. Listen and Upstream are both set or both empty.
type Proxy struct {
	// Listen is the TCP address clients connect to instead of Redis. Default empty (no proxy).
	Listen string `yaml:"listen"`
	// Upstream is the host:port of the Redis that the proxy forwards to. Default empty.
	Upstream string `yaml:"upstream"`
	// UpstreamUsername and UpstreamPassword are the credentials of a Redis that wants
	// AUTH (requirepass, or an ACL user): the proxy's shared connections authenticate
	// with them, and a client shares those connections only once it has authenticated
	// with exactly these; any other client gets a connection of its own. An empty
	// username is Redis's user "default". No flag: set the password with
	// HOTKEYD_PROXY_UPSTREAM_PASSWORD. Default empty (a Redis that wants AUTH is not
	// shared). The password is never shown.
	UpstreamUsername string `yaml:"upstream_username"`
	UpstreamPassword string `yaml:"upstream_password"`
	// SampleEvery samples one command in SampleEvery. Default 100; allowed 1..1000000.
	SampleEvery int `yaml:"sample_every"`
	// Multiplex carries clients' plain commands over shared connections to Upstream
	// (Linux only), and gives a client its own connection from its first command that
	// keeps state on a connection or blocks (AUTH, but with the configured credentials,
	// SELECT, MULTI, BLPOP, SUBSCRIBE, …).
	// false makes the proxy a plain relay with one upstream connection per client.
	// Default true.
	Multiplex bool `yaml:"multiplex"`
	// SchedPolicy is what the proxy does with the scheduling policy of hotkeyd's threads
	// (Linux): "auto" runs them as SCHED_BATCH while the multiplexed clients pipeline
	// deeply and as SCHED_OTHER otherwise, "batch" always as SCHED_BATCH, "off" leaves
	// the policy alone. Default "auto".
	SchedPolicy string `yaml:"sched_policy"`
	// MaxOutputBytes bounds the reply bytes the proxy holds for its multiplexed clients
	// together, replies Redis sent that a client has not read yet: past it the proxy
	// stops reading Redis's replies until the clients have read half, and if that takes
	// a second, the clients holding the most are disconnected, each with a warning naming
	// it. Default 16 MiB; allowed 1 MiB..1 GiB. The process's memory can reach about
	// twice as much while the budget is full.
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// AccessCheckTTL is how long a check that Redis lets a new connection in without
	// AUTH (or with the configured credentials) lets new clients onto the shared
	// connections without another. Such a check dials Redis: with 0, every client that
	// connects (clients that connect together share one) costs Redis a connection and
	// the client a round trip, as without the tap. With a TTL, a Redis that begins to
	// want a password can get new clients over the shared connections for up to the
	// TTL after, as it keeps serving the connections opened before. Default 1s; allowed
	// 0..1m.
	AccessCheckTTL time.Duration `yaml:"access_check_ttl"`
	// IOUring makes the multiplexed clients' event loop (Linux) read the clients that
	// are ready, and write the replies one read from Redis carried, with one io_uring
	// system call each, where the kernel allows it (5.19 or later, io_uring not
	// disabled, nor blocked by seccomp as Docker's default profile does); elsewhere, and
	// with false, it makes one system call for each read and write. Default true.
	IOUring bool `yaml:"io_uring"`
}

// Monitor configures reading samples with Redis MONITOR, which is for development only:
// MONITOR slows Redis down.
type Monitor struct {
	// Addr is the host:port of the Redis to monitor. Default empty (no MONITOR).
	Addr string `yaml:"addr"`
	// SampleEvery samples one monitored command in SampleEvery. Default 1; allowed 1..1000000.
	SampleEvery int `yaml:"sample_every"`
}

// Auth protects the mutating HTTP endpoints.
type Auth struct {
	// Token, when set, is required as "Authorization: Bearer TOKEN" on mutating endpoints.
	// Printable ASCII without spaces. Default empty (no auth).
	Token string `yaml:"token"`
}

// Detector sizes the sliding-window sketch and the top-k.
type Detector struct {
	// Window is how far back rates look. Default 1s; allowed 10ms..1h.
	Window time.Duration `yaml:"window"`
	// Ticks is how many steps the window slides in; Window/Ticks must be at least 10ms.
	// Default 10; allowed 1..1000.
	Ticks int `yaml:"ticks"`
	// TopK is how many of the heaviest keys are tracked. Default 100; allowed 1..10000.
	TopK int `yaml:"topk"`
	// Width is the number of counters per row of the count-min sketch.
	// Default 16384; a power of two in 64..16777216, and at least 64 × Shards.
	Width int `yaml:"width"`
	// Depth is the number of rows (hash functions) of the sketch. Default 4; allowed 1..16.
	Depth int `yaml:"depth"`
	// Shards is the number of independently locked detector shards.
	// Default 4; a power of two in 1..256.
	Shards int `yaml:"shards"`
	// Bytes adds a ranking by bytes moved (GET /v1/topk?op=bytes), for keys hot by value
	// size; it costs one more sketch. Default false.
	Bytes bool `yaml:"bytes"`
}

// Limits bounds what one sample or one report may cost.
type Limits struct {
	// MaxKeyBytes is the longest key kept; longer keys are truncated and marked as such.
	// Default 512; allowed 8..65536.
	MaxKeyBytes int `yaml:"max_key_bytes"`
	// MaxSamplesPerReport caps the samples of one datagram or one POST /v1/samples.
	// Default 10000; allowed 1..1000000.
	MaxSamplesPerReport int `yaml:"max_samples_per_report"`
}

// Threshold makes a key hot when its rate reaches Rate, or its share of the total traffic
// reaches Share (and its rate is at least Hot.MinRate).
type Threshold struct {
	// Rate is in requests per second of the full traffic (samples scaled up by their
	// sample rate); must be > 0.
	Rate float64 `yaml:"rate"`
	// Share is a fraction of all traffic, reads and writes together, in (0, 1].
	Share float64 `yaml:"share"`
}

// Hot holds the rules that make a key hot and cool it down again.
type Hot struct {
	// Read is the threshold for reads. Default rate 1000, share 0.05.
	Read Threshold `yaml:"read"`
	// Write is the threshold for writes. Default rate 500, share 0.05.
	Write Threshold `yaml:"write"`
	// MinRate is the rate in requests per second below which a key is never hot by share
	// alone, so that a quiet system does not call its busiest key hot. Default 100; ≥ 0.
	MinRate float64 `yaml:"min_rate"`
	// MinSamples is how many samples a key's reads (or writes) in the window must stand
	// for before they count towards a threshold for turning hot, so that a key seen once
	// or twice is not hot: one sample of 1 in 100 reads as 100/s, 5 % of an agent that sees
	// 2,000/s. A hot key cools on its rates as they are.
	// Default 5; allowed 0..1000000, 0 is off.
	MinSamples int `yaml:"min_samples"`
	// CoolRatio: a hot key cools when its rate stays below CoolRatio × its threshold.
	// Default 0.7; allowed (0, 1).
	CoolRatio float64 `yaml:"cool_ratio"`
	// CoolTicks is for how many consecutive detector ticks a key must stay below the
	// cooling line before it stops being hot. Default 10; allowed 1..10000.
	CoolTicks int `yaml:"cool_ticks"`
	// Overrides set other thresholds for some keys. Default none. An exact pattern beats
	// every prefix, a longer prefix a shorter one (detector.Rules applies them).
	Overrides []Override `yaml:"overrides"`
}

// Override sets thresholds for the keys that match Pattern. A zero field is unset and
// inherits the default threshold of Hot.Read or Hot.Write: a zero rate or share is never a
// useful threshold, so zero means "inherit" rather than "always hot".
type Override struct {
	// Pattern is an exact key ("score:match42") or a prefix ending in "*" ("score:*").
	// "*" may appear only at the end. Required.
	Pattern string `yaml:"pattern"`
	// ReadRate replaces Hot.Read.Rate when > 0.
	ReadRate float64 `yaml:"read_rate"`
	// ReadShare replaces Hot.Read.Share when > 0; at most 1.
	ReadShare float64 `yaml:"read_share"`
	// WriteRate replaces Hot.Write.Rate when > 0.
	WriteRate float64 `yaml:"write_rate"`
	// WriteShare replaces Hot.Write.Share when > 0; at most 1.
	WriteShare float64 `yaml:"write_share"`
}

// Mitigate configures the mitigation rules and the plan.
type Mitigate struct {
	// Modes sets how far each kind of mitigation goes: observe (metrics only), recommend
	// (in the plan, marked, not applied) or enforce. Defaults: enforce for l1 and
	// batched_counter, observe for copies and sharded_counter.
	Modes Modes `yaml:"modes"`
	// L1TTL is how long SDK clients cache a hot key. Default 1s; allowed 10ms..1h.
	L1TTL time.Duration `yaml:"l1_ttl"`
	// NodeCapacity is the operations per second one Redis node takes. Default 100000.
	NodeCapacity float64 `yaml:"node_capacity"`
	// Headroom is the share of NodeCapacity one key may use before it is split.
	// Default 0.5; allowed (0, 1].
	Headroom float64 `yaml:"headroom"`
	// FlushInterval is how often SDK clients send a batched counter's increments.
	// Default 100ms; allowed 1ms..1m.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MinActive is the least time a mitigation stays once started. Default 30s.
	MinActive time.Duration `yaml:"min_active"`
	// CoolDown is how long a key must have stopped needing a mitigation before it ends.
	// Default 60s.
	CoolDown time.Duration `yaml:"cool_down"`
	// Lease is how long a plan entry stays valid at a client that lost the agent.
	// Default 60s; at least 2s.
	Lease time.Duration `yaml:"lease"`
	// CopyRefresh is how often the agent rewrites the copies of a split key from the
	// original: how stale a copy gets after a write that bypasses the SDK. Default 1s;
	// allowed 10ms..1m.
	CopyRefresh time.Duration `yaml:"copy_refresh"`
}

// Registry configures where predicted hot-key events are kept.
type Registry struct {
	// File is the JSON document holding the events, written atomically. With redis.addrs
	// the events live in Redis instead (shared by the fleet) and File, if it exists,
	// seeds them. Default "hotkeyd-registry.json"; empty keeps events in memory only.
	File string `yaml:"file"`
	// Events are predicted hot-key events written in the config file. They are read-only
	// in the HTTP API (PUT and DELETE of their ids fail) and shadow any stored event with
	// the same id. Default none.
	Events []Event `yaml:"events"`
}

// Event is a predicted hot-key event of the config file, with the fields and names of
// the registry's JSON form (docs/registry.md): Validate checks it as the registry would,
// and JSON gives the document the registry decodes. Unlike the API, ID is required.
type Event struct {
	// ID names the event: 1 to 64 of a-z, 0-9, '.', '_' and '-', unique among the
	// events of the file. Required.
	ID string `yaml:"id"`
	// Name is for people. Optional.
	Name string `yaml:"name"`
	// Patterns are the keys the event makes hot: exact keys, prefixes ("sale:sku:*") or
	// Redis globs. At least one.
	Patterns []string `yaml:"patterns"`
	// AllowBroad allows patterns with no literal character, such as "*".
	AllowBroad bool `yaml:"allow_broad"`
	// Start and End bound the first (or only) occurrence: RFC 3339 times with a zone,
	// "2026-12-01T19:30:00+01:00". Required.
	Start string `yaml:"start"`
	End   string `yaml:"end"`
	// Lead is how long before each start the event arms. 0 to 168h.
	Lead time.Duration `yaml:"lead"`
	// Recurrence repeats the event: "" (once), "daily", "daily@HH:MM", "weekly",
	// "weekly@DAY HH:MM" or "cron:EXPR", in Zone.
	Recurrence string `yaml:"recurrence"`
	// Zone is the IANA time zone recurrences follow; required with a recurrence.
	Zone string `yaml:"zone"`
	// ExpectedReadRate and ExpectedWriteRate are the peak requests/s expected on one
	// key; ≥ 0.
	ExpectedReadRate  float64 `yaml:"expected_read_rate"`
	ExpectedWriteRate float64 `yaml:"expected_write_rate"`
	// Mitigations: "auto" (the default when empty) or any of l1, copies,
	// sharded_counter and batched_counter.
	Mitigations []string `yaml:"mitigations"`
	// Owner and Note are free text for people.
	Owner string `yaml:"owner"`
	Note  string `yaml:"note"`
}

// Modes sets the mode of each kind of mitigation.
type Modes struct {
	L1             string `yaml:"l1"`
	Copies         string `yaml:"copies"`
	ShardedCounter string `yaml:"sharded_counter"`
	BatchedCounter string `yaml:"batched_counter"`
}

// Metrics configures what the metrics and the HTTP API reveal.
type Metrics struct {
	// HashKeys replaces key names by a short hash in metrics and the API, for privacy.
	// Default false.
	HashKeys bool `yaml:"hash_keys"`
	// KeyMinRatio bounds the per-key series (hotkeyd_key_*): a top-k key has them while
	// hot, mitigated, predicted by an armed registry event, or at KeyMinRatio × its hot
	// threshold or more (read or write, overrides included); 0 exports every top-k key.
	// Default 0.1; allowed [0, 1].
	KeyMinRatio float64 `yaml:"key_min_ratio"`
}

// Log configures the daemon's log.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `yaml:"level"`
	// Format is text or json. Default "text".
	Format string `yaml:"format"`
}

// Default returns the configuration hotkeyd runs with when nothing is set. It is valid.
func Default() Config {
	rules := detector.DefaultRules() // the hot-key rules' defaults are the detector's
	return Config{
		HTTP:    HTTP{Listen: "127.0.0.1:9736", MaxBodyBytes: 1 << 20},
		UDP:     UDP{Listen: "127.0.0.1:9736", Readers: 2},
		Redis:   Redis{InfoInterval: 10 * time.Second},
		Proxy:   Proxy{SampleEvery: 100, Multiplex: true, SchedPolicy: "auto", MaxOutputBytes: 16 << 20, AccessCheckTTL: time.Second, IOUring: true},
		Monitor: Monitor{SampleEvery: 1},
		Detector: Detector{
			Window: time.Second,
			Ticks:  10,
			TopK:   100,
			Width:  16384,
			Depth:  4,
			Shards: 4,
		},
		Limits: Limits{MaxKeyBytes: 512, MaxSamplesPerReport: 10000},
		Hot: Hot{
			Read:       Threshold(rules.Read),
			Write:      Threshold(rules.Write),
			MinRate:    rules.MinRate,
			MinSamples: rules.MinSamples,
			CoolRatio:  rules.CoolRatio,
			CoolTicks:  rules.CoolTicks,
		},
		Metrics:  Metrics{KeyMinRatio: 0.3},
		Log:      Log{Level: "info", Format: "text"},
		Registry: Registry{File: "hotkeyd-registry.json"},
		Mitigate: Mitigate{
			Modes:         Modes{L1: "enforce", Copies: "observe", ShardedCounter: "observe", BatchedCounter: "enforce"},
			L1TTL:         time.Second,
			NodeCapacity:  100000,
			Headroom:      0.5,
			FlushInterval: 100 * time.Millisecond,
			MinActive:     30 * time.Second,
			CoolDown:      60 * time.Second,
			Lease:         60 * time.Second,
			CopyRefresh:   time.Second,
		},
	}
}
