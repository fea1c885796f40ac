package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate(): got %v; want nil", err)
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{"UDP off", func(c *Config) { c.UDP.Listen = "" }},
		{"listen on all interfaces, any port", func(c *Config) { c.HTTP.Listen = ":0" }},
		{"IPv6 addresses", func(c *Config) { c.HTTP.Listen = "[::1]:9736"; c.Redis.Addrs = []string{"[fe80::1]:6379"} }},
		{"proxy on", func(c *Config) { c.Proxy.Listen, c.Proxy.Upstream = ":6380", "redis:6379" }},
		{"proxy and HTTP on ports the system picks", func(c *Config) {
			c.HTTP.Listen, c.Proxy.Listen, c.Proxy.Upstream = "127.0.0.1:0", "127.0.0.1:0", "redis:6379"
		}},
		{"smallest tick", func(c *Config) { c.Detector.Window = time.Second; c.Detector.Ticks = 100 }},
		{"share of 1", func(c *Config) { c.Hot.Read.Share = 1 }},
		{"override with one field", func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "a*", WriteShare: 0.5}} }},
		{"token", func(c *Config) { c.Auth.Token = "Abc-123_~!" }},
		{"static event", func(c *Config) { c.Registry.Events = []Event{finalEvent()} }},
		{"limits at their bounds", func(c *Config) {
			c.Detector.Width, c.Detector.Shards, c.Detector.Depth, c.Detector.TopK = 1<<24, 256, 16, 10000
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.change(&c)
			if err := c.Validate(); err != nil {
				t.Errorf("got %v; want nil", err)
			}
		})
	}
}

// TestValidateRejects has a failing row for every rule; each error must name the key.
func TestValidateRejects(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"http.listen empty", func(c *Config) { c.HTTP.Listen = "" }, `http.listen: "" is empty`},
		{"http.listen no port", func(c *Config) { c.HTTP.Listen = "localhost" }, `http.listen: "localhost" is not host:port`},
		{"http.listen bad port", func(c *Config) { c.HTTP.Listen = "localhost:http" }, `http.listen: "localhost:http" has no valid port; use a port between 0 and 65535`},
		{"http.listen port too big", func(c *Config) { c.HTTP.Listen = ":65536" }, `http.listen: ":65536" has no valid port`},
		{"http.listen host with space", func(c *Config) { c.HTTP.Listen = "a b:1" }, `http.listen: "a b:1" has an invalid host`},
		{"http.max_body_bytes", func(c *Config) { c.HTTP.MaxBodyBytes = 10 }, "http.max_body_bytes: 10 is out of range; use an integer between 1024 and 1073741824"},
		{"udp.listen", func(c *Config) { c.UDP.Listen = "9736" }, `udp.listen: "9736" is not host:port`},
		{"udp.readers", func(c *Config) { c.UDP.Readers = 0 }, "udp.readers: 0 is out of range"},
		{"redis.addrs bad", func(c *Config) { c.Redis.Addrs = []string{"a:1", "nohost"} }, `redis.addrs[1]: "nohost" is not host:port`},
		{"redis.addrs no host", func(c *Config) { c.Redis.Addrs = []string{":6379"} }, `redis.addrs[0]: ":6379" has no host`},
		{"redis.addrs port 0", func(c *Config) { c.Redis.Addrs = []string{"r:0"} }, `redis.addrs[0]: "r:0" has no valid port; use a port between 1 and 65535`},
		{"redis.addrs twice", func(c *Config) { c.Redis.Addrs = []string{"a:1", "a:1"} }, `redis.addrs[1]: "a:1" is listed twice (also redis.addrs[0])`},
		{"proxy.listen without upstream", func(c *Config) { c.Proxy.Listen = ":6380" }, "proxy.upstream: \"\" is empty while proxy.listen is set"},
		{"proxy.upstream without listen", func(c *Config) { c.Proxy.Upstream = "r:6379" }, "proxy.listen: \"\" is empty while proxy.upstream is set"},
		{"proxy.listen bad", func(c *Config) { c.Proxy.Listen, c.Proxy.Upstream = "x", "r:6379" }, `proxy.listen: "x" is not host:port`},
		{"proxy.upstream bad", func(c *Config) { c.Proxy.Listen, c.Proxy.Upstream = ":6380", "r" }, `proxy.upstream: "r" is not host:port`},
		{"proxy.listen same as http", func(c *Config) { c.Proxy.Listen, c.Proxy.Upstream = c.HTTP.Listen, "r:6379" }, `proxy.listen: "127.0.0.1:9736" is also http.listen`},
		{"proxy.sample_every", func(c *Config) { c.Proxy.SampleEvery = 0 }, "proxy.sample_every: 0 is out of range; use an integer between 1 and 1000000"},
		{"proxy.max_output_bytes", func(c *Config) { c.Proxy.MaxOutputBytes = 65536 }, "proxy.max_output_bytes: 65536 is out of range; use an integer between 1048576 and 1073741824"},
		{"monitor.addr", func(c *Config) { c.Monitor.Addr = "redis" }, `monitor.addr: "redis" is not host:port`},
		{"monitor.sample_every", func(c *Config) { c.Monitor.SampleEvery = -1 }, "monitor.sample_every: -1 is out of range"},
		{"auth.token", func(c *Config) { c.Auth.Token = "two words" }, "auth.token: *** contains a space"},
		{"detector.window short", func(c *Config) { c.Detector.Window = time.Millisecond }, "detector.window: 1ms is out of range; use a duration between 10ms and 1h"},
		{"detector.window long", func(c *Config) { c.Detector.Window = 2 * time.Hour }, "detector.window: 2h0m0s is out of range"},
		{"detector.ticks", func(c *Config) { c.Detector.Ticks = 0 }, "detector.ticks: 0 is out of range; use an integer between 1 and 1000"},
		{"detector.ticks too short", func(c *Config) { c.Detector.Ticks = 1000 }, "detector.ticks: 1000 makes ticks of 1ms (detector.window 1s / 1000); use at most 100 ticks"},
		{"detector.topk", func(c *Config) { c.Detector.TopK = 10001 }, "detector.topk: 10001 is out of range; use an integer between 1 and 10000"},
		{"detector.width not power of two", func(c *Config) { c.Detector.Width = 1000 }, "detector.width: 1000 is not a power of two; use a power of two between 64 and 16777216"},
		{"detector.width too small", func(c *Config) { c.Detector.Width = 32 }, "detector.width: 32 is out of range; use a power of two between 64 and 16777216"},
		{"detector.width zero", func(c *Config) { c.Detector.Width = 0 }, "detector.width: 0 is not a power of two"},
		{"detector.depth", func(c *Config) { c.Detector.Depth = 17 }, "detector.depth: 17 is out of range; use an integer between 1 and 16"},
		{"detector.shards", func(c *Config) { c.Detector.Shards = 3 }, "detector.shards: 3 is not a power of two; use a power of two between 1 and 256"},
		{"limits.max_key_bytes", func(c *Config) { c.Limits.MaxKeyBytes = 0 }, "limits.max_key_bytes: 0 is out of range"},
		{"limits.max_samples_per_report", func(c *Config) { c.Limits.MaxSamplesPerReport = 2_000_000 }, "limits.max_samples_per_report: 2000000 is out of range"},
		{"hot.read.rate", func(c *Config) { c.Hot.Read.Rate = 0 }, "hot.read.rate: 0 is out of range; use a rate in requests per second > 0"},
		{"hot.read.rate NaN", func(c *Config) { c.Hot.Read.Rate = nan }, "hot.read.rate: NaN is out of range"},
		{"hot.read.rate Inf", func(c *Config) { c.Hot.Read.Rate = math.Inf(1) }, "hot.read.rate: +Inf is out of range"},
		{"hot.read.share", func(c *Config) { c.Hot.Read.Share = 1.5 }, "hot.read.share: 1.5 is out of range; use a fraction in (0, 1]"},
		{"hot.write.rate", func(c *Config) { c.Hot.Write.Rate = -1 }, "hot.write.rate: -1 is out of range"},
		{"hot.write.share", func(c *Config) { c.Hot.Write.Share = 0 }, "hot.write.share: 0 is out of range; use a fraction in (0, 1]"},
		{"hot.min_rate", func(c *Config) { c.Hot.MinRate = -5 }, "hot.min_rate: -5 is out of range"},
		{"hot.min_rate NaN", func(c *Config) { c.Hot.MinRate = nan }, "hot.min_rate: NaN is out of range"},
		{"hot.min_samples", func(c *Config) { c.Hot.MinSamples = -1 }, "hot.min_samples: -1 is out of range"},
		{"hot.cool_ratio", func(c *Config) { c.Hot.CoolRatio = 1 }, "hot.cool_ratio: 1 is out of range; use a fraction in (0, 1)"},
		{"hot.cool_ticks", func(c *Config) { c.Hot.CoolTicks = 0 }, "hot.cool_ticks: 0 is out of range"},
		{"metrics.key_min_ratio", func(c *Config) { c.Metrics.KeyMinRatio = 1.5 }, "metrics.key_min_ratio: 1.5 is out of range; use a fraction of the hot threshold in [0, 1]"},
		{"metrics.key_min_ratio negative", func(c *Config) { c.Metrics.KeyMinRatio = -0.1 }, "metrics.key_min_ratio: -0.1 is out of range"},
		{"metrics.key_min_ratio NaN", func(c *Config) { c.Metrics.KeyMinRatio = nan }, "metrics.key_min_ratio: NaN is out of range"},
		{"override pattern empty", func(c *Config) { c.Hot.Overrides = []Override{{ReadRate: 1}} }, `hot.overrides[0].pattern: "" is empty`},
		{"override pattern star inside", func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "a*b", ReadRate: 1}} }, `hot.overrides[0].pattern: "a*b" has a "*" before its end`},
		{"override pattern twice", func(c *Config) {
			c.Hot.Overrides = []Override{{Pattern: "a", ReadRate: 1}, {Pattern: "a", WriteRate: 1}}
		}, `hot.overrides[1].pattern: "a" is also the pattern of hot.overrides[0]`},
		{"override read_rate", func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "a", ReadRate: -1}} }, "hot.overrides[0].read_rate: -1 is out of range; use a rate in requests per second > 0, or 0 to inherit the default"},
		{"override read_share", func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "a", ReadShare: 2}} }, "hot.overrides[0].read_share: 2 is out of range"},
		{"override write_rate", func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "a", WriteRate: nan}} }, "hot.overrides[0].write_rate: NaN is out of range"},
		{"override write_share", func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "a", WriteShare: -0.1}} }, "hot.overrides[0].write_share: -0.1 is out of range"},
		{"override sets nothing", func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "a"}} }, `hot.overrides[0]: "a" sets no threshold`},
		{"event rate NaN", func(c *Config) {
			e := finalEvent()
			e.ExpectedWriteRate = nan
			c.Registry.Events = []Event{e}
		}, "registry.events[0].expected_write_rate: NaN is out of range"},
		{"event lead negative", func(c *Config) {
			e := finalEvent()
			e.Lead = -time.Minute
			c.Registry.Events = []Event{e}
		}, "registry.events[0].lead: -1m0s: want from 0s"},
		{"second event bad zone", func(c *Config) {
			e := finalEvent()
			e.ID, e.Recurrence, e.Zone = "again", "daily", "Mars/Olympus"
			c.Registry.Events = []Event{finalEvent(), e}
		}, `registry.events[1].zone: "Mars/Olympus": not a known IANA zone`},
		{"proxy.sched_policy", func(c *Config) { c.Proxy.SchedPolicy = "normal" }, `proxy.sched_policy: "normal" is not allowed; use one of auto, batch, off`},
		{"proxy.access_check_ttl", func(c *Config) { c.Proxy.AccessCheckTTL = -time.Second }, `proxy.access_check_ttl: -1s is out of range; use a duration between 0s and 1m0s`},
		{"log.level", func(c *Config) { c.Log.Level = "verbose" }, `log.level: "verbose" is not allowed; use one of debug, info, warn, error`},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }, `log.format: "xml" is not allowed; use one of text, json`},
		{"mitigate.modes.copies", func(c *Config) { c.Mitigate.Modes.Copies = "yes" }, `mitigate.modes.copies: "yes" is not allowed; use one of observe, recommend, enforce`},
		{"mitigate.l1_ttl", func(c *Config) { c.Mitigate.L1TTL = 0 }, `mitigate.l1_ttl: 0s is out of range; use a duration between 10ms and 1h0m0s`},
		{"mitigate.headroom", func(c *Config) { c.Mitigate.Headroom = 2 }, `mitigate.headroom: 2`},
		{"mitigate.node_capacity", func(c *Config) { c.Mitigate.NodeCapacity = -1 }, `mitigate.node_capacity: -1`},
		{"mitigate.lease", func(c *Config) { c.Mitigate.Lease = time.Second }, `mitigate.lease: 1s is out of range`},
		{"redis.info_interval", func(c *Config) { c.Redis.InfoInterval = 500 * time.Millisecond }, `redis.info_interval: 500ms is out of range; use 0 (never) or a duration from 1s to 1m, such as 10s`},
		{"redis.info_interval too long", func(c *Config) { c.Redis.InfoInterval = 90 * time.Second }, `redis.info_interval: 1m30s is out of range`},
		{"redis.info_interval negative", func(c *Config) { c.Redis.InfoInterval = -time.Second }, `redis.info_interval: -1s is out of range`},
		// copy claims last one lease and are renewed at the first round after half of it
		{"mitigate.copy_refresh vs lease", func(c *Config) { c.Mitigate.Lease, c.Mitigate.CopyRefresh = 4*time.Second, 2*time.Second },
			`mitigate.copy_refresh: 2s is too long for mitigate.lease 4s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.change(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("got nil; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	c := Default()
	c.Detector.Width = 1000
	c.Hot.Read.Share = 1.5
	c.Log.Level = "loud"
	err := c.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("got %v; want errors joined with errors.Join", err)
	}
	if got := len(joined.Unwrap()); got != 3 {
		t.Errorf("got %d errors (%v); want 3", got, err)
	}
}

func TestValidateNeverShowsToken(t *testing.T) {
	c := Default()
	c.Auth.Token = "top secret"
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("got %v; want an error that does not show the token", err)
	}
}
