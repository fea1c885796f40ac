package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// envMap returns an environment lookup over m, so tests never touch the process
// environment.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// writeFile writes content to a file named name in a fresh directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// flags returns a FlagSet with RegisterFlags' flags, parsed from args.
func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("hotkeyd", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return fs
}

// loadCase is one Load call: a file (when not empty), an environment and flags.
type loadCase struct {
	name string
	file string
	env  map[string]string
	args []string
}

func (lc loadCase) load(t *testing.T) (Config, error) {
	t.Helper()
	opts := LoadOptions{Env: envMap(lc.env), Flags: flags(t, lc.args...)}
	if lc.file != "" {
		opts.File = writeFile(t, "hotkeyd.yaml", lc.file)
	}
	return Load(opts)
}

func TestLoadPrecedence(t *testing.T) {
	const fileListen = "http:\n  listen: 10.0.0.1:1\n"
	tests := []struct {
		loadCase
		want func(*Config) // changes to Default
	}{
		{loadCase{name: "nothing set gives defaults"}, func(*Config) {}},
		{loadCase{name: "empty file gives defaults", file: "# nothing\n"}, func(*Config) {}},
		{loadCase{name: "file overrides default", file: fileListen},
			func(c *Config) { c.HTTP.Listen = "10.0.0.1:1" }},
		{loadCase{name: "env overrides file", file: fileListen,
			env: map[string]string{"HOTKEYD_HTTP_LISTEN": "10.0.0.2:2"}},
			func(c *Config) { c.HTTP.Listen = "10.0.0.2:2" }},
		{loadCase{name: "flag overrides env", file: fileListen,
			env:  map[string]string{"HOTKEYD_HTTP_LISTEN": "10.0.0.2:2"},
			args: []string{"--http-listen", "10.0.0.3:3"}},
			func(c *Config) { c.HTTP.Listen = "10.0.0.3:3" }},
		{loadCase{name: "unset flag does not override env",
			env:  map[string]string{"HOTKEYD_HTTP_LISTEN": "10.0.0.2:2"},
			args: []string{"--topk", "7"}},
			func(c *Config) { c.HTTP.Listen = "10.0.0.2:2"; c.Detector.TopK = 7 }},
		{loadCase{name: "env sets a key the file does not mention", file: fileListen,
			env: map[string]string{"HOTKEYD_DETECTOR_TOPK": "250", "HOTKEYD_HOT_READ_SHARE": "0.1"}},
			func(c *Config) { c.HTTP.Listen = "10.0.0.1:1"; c.Detector.TopK = 250; c.Hot.Read.Share = 0.1 }},
		{loadCase{name: "env of every kind", env: map[string]string{
			"HOTKEYD_DETECTOR_WINDOW":       "2s",
			"HOTKEYD_METRICS_HASH_KEYS":     "true",
			"HOTKEYD_HOT_MIN_RATE":          "12.5",
			"HOTKEYD_LOG_FORMAT":            "json",
			"HOTKEYD_AUTH_TOKEN":            "s3cret",
			"HOTKEYD_PROXY_MULTIPLEX":       "false",
			"HOTKEYD_METRICS_KEY_MIN_RATIO": "0",
		}}, func(c *Config) {
			c.Metrics.KeyMinRatio = 0
			c.Proxy.Multiplex = false
			c.Detector.Window = 2 * time.Second
			c.Metrics.HashKeys = true
			c.Hot.MinRate = 12.5
			c.Log.Format = "json"
			c.Auth.Token = "s3cret"
		}},
		{loadCase{name: "comma-separated HOTKEYD_REDIS_ADDRS",
			env: map[string]string{"HOTKEYD_REDIS_ADDRS": "10.0.0.1:6379, 10.0.0.2:6379,,10.0.0.3:6379"}},
			func(c *Config) { c.Redis.Addrs = []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} }},
		{loadCase{name: "env list replaces file list",
			file: "redis:\n  addrs: [a:1, b:2]\n",
			env:  map[string]string{"HOTKEYD_REDIS_ADDRS": "c:3"}},
			func(c *Config) { c.Redis.Addrs = []string{"c:3"} }},
		{loadCase{name: "--redis-addrs", args: []string{"--redis-addrs", "a:1,b:2"}},
			func(c *Config) { c.Redis.Addrs = []string{"a:1", "b:2"} }},
		{loadCase{name: "file addrs as a comma-separated string", file: "redis:\n  addrs: a:1,b:2\n"},
			func(c *Config) { c.Redis.Addrs = []string{"a:1", "b:2"} }},
		{loadCase{name: "empty HOTKEYD_UDP_LISTEN turns UDP off",
			env: map[string]string{"HOTKEYD_UDP_LISTEN": ""}},
			func(c *Config) { c.UDP.Listen = "" }},
		{loadCase{name: "empty --udp-listen turns UDP off", args: []string{"--udp-listen="}},
			func(c *Config) { c.UDP.Listen = "" }},
		{loadCase{name: "null in the file turns UDP off", file: "udp:\n  listen:\n"},
			func(c *Config) { c.UDP.Listen = "" }},
		{loadCase{name: "empty numeric env is unset",
			env: map[string]string{"HOTKEYD_DETECTOR_TOPK": "", "HOTKEYD_DETECTOR_WINDOW": " "}},
			func(*Config) {}},
		{loadCase{name: "proxy and monitor flags",
			args: []string{"--proxy-listen", ":6380", "--proxy-upstream", "127.0.0.1:6379", "--monitor", "127.0.0.1:6379", "--auth-token", "t0k", "--log-level", "debug"}},
			func(c *Config) {
				c.Proxy.Listen, c.Proxy.Upstream = ":6380", "127.0.0.1:6379"
				c.Monitor.Addr = "127.0.0.1:6379"
				c.Auth.Token = "t0k"
				c.Log.Level = "debug"
			}},
		{loadCase{name: "overrides from the file", file: `
hot:
  read: {rate: 2000}
  overrides:
    - pattern: "score:*"
      read_rate: 5000
    - {pattern: "counter:likes", write_share: 0.01}
`}, func(c *Config) {
			c.Hot.Read.Rate = 2000
			c.Hot.Overrides = []Override{{Pattern: "score:*", ReadRate: 5000}, {Pattern: "counter:likes", WriteShare: 0.01}}
		}},
		{loadCase{name: "overrides from the environment",
			file: "hot:\n  overrides:\n    - {pattern: a, read_rate: 1}\n",
			env:  map[string]string{"HOTKEYD_HOT_OVERRIDES": `[{pattern: "score:*", read_rate: 5000}]`}},
			func(c *Config) { c.Hot.Overrides = []Override{{Pattern: "score:*", ReadRate: 5000}} }},
		{loadCase{name: "empty HOTKEYD_HOT_OVERRIDES clears the file's",
			file: "hot:\n  overrides:\n    - {pattern: a, read_rate: 1}\n",
			env:  map[string]string{"HOTKEYD_HOT_OVERRIDES": ""}},
			func(*Config) {}},
		{loadCase{name: "events from the file", file: finalEventYAML},
			func(c *Config) { c.Registry.Events = []Event{finalEvent()} }},
		{loadCase{name: "event with every field", file: `
registry:
  events:
    - id: match42
      name: "Derby, match 42"
      patterns: ["score:match42", "odds:*", " spaced,key "]
      allow_broad: true
      start: 2026-03-27T19:30:00+01:00
      end: 2026-03-27T21:30:00+01:00
      lead: 30m
      recurrence: daily@19:30
      zone: Europe/Madrid
      expected_read_rate: 50000
      expected_write_rate: 200
      mitigations: [l1, copies]
      owner: sports
      note: read by every open app
`}, func(c *Config) {
			c.Registry.Events = []Event{{
				ID: "match42", Name: "Derby, match 42",
				Patterns:   []string{"score:match42", "odds:*", " spaced,key "},
				AllowBroad: true,
				Start:      "2026-03-27T19:30:00+01:00", End: "2026-03-27T21:30:00+01:00",
				Lead:       30 * time.Minute,
				Recurrence: "daily@19:30", Zone: "Europe/Madrid",
				ExpectedReadRate: 50000, ExpectedWriteRate: 200,
				Mitigations: []string{"l1", "copies"},
				Owner:       "sports", Note: "read by every open app",
			}}
		}},
		{loadCase{name: "events from the environment", file: finalEventYAML,
			env: map[string]string{"HOTKEYD_REGISTRY_EVENTS": `[{id: sale, patterns: ["sale:*"], start: "2026-12-02T12:00:00Z", end: "2026-12-02T13:00:00Z"}]`}},
			func(c *Config) {
				c.Registry.Events = []Event{{ID: "sale", Patterns: []string{"sale:*"}, Start: "2026-12-02T12:00:00Z", End: "2026-12-02T13:00:00Z"}}
			}},
		{loadCase{name: "empty HOTKEYD_REGISTRY_EVENTS clears the file's", file: finalEventYAML,
			env: map[string]string{"HOTKEYD_REGISTRY_EVENTS": ""}},
			func(*Config) {}},
		{loadCase{name: "YAML anchors and aliases", file: "proxy:\n  upstream: &r 127.0.0.1:6379\n  listen: :6380\nmonitor:\n  addr: *r\n"},
			func(c *Config) {
				c.Proxy.Listen, c.Proxy.Upstream = ":6380", "127.0.0.1:6379"
				c.Monitor.Addr = "127.0.0.1:6379"
			}},
		{loadCase{name: "quoted numbers and integral floats", file: "detector:\n  topk: \"50\"\n  width: 1024.0\n  shards: 1.6e1\n"},
			func(c *Config) { c.Detector.TopK = 50; c.Detector.Width = 1024; c.Detector.Shards = 16 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.load(t)
			if err != nil {
				t.Fatalf("Load: got error %v; want none", err)
			}
			want := Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v; want %+v", got, want)
			}
		})
	}
}

// finalEventYAML is the example of issue 6: one event in the config file.
const finalEventYAML = `
registry:
  file: hotkeyd-registry.json
  events:
    - id: final
      name: the final
      patterns: ["score:match42"]
      start: "2026-12-01T19:30:00+01:00"
      end: "2026-12-01T21:30:00+01:00"
      lead: 10m
      expected_read_rate: 200000
`

// finalEvent is the Event of finalEventYAML.
func finalEvent() Event {
	return Event{
		ID:               "final",
		Name:             "the final",
		Patterns:         []string{"score:match42"},
		Start:            "2026-12-01T19:30:00+01:00",
		End:              "2026-12-01T21:30:00+01:00",
		Lead:             10 * time.Minute,
		ExpectedReadRate: 200000,
	}
}

func TestLoadFileLocation(t *testing.T) {
	file := writeFile(t, "a.yaml", "detector:\n  topk: 11\n")
	tests := []struct {
		name string
		opts func() LoadOptions
		want int
	}{
		{"LoadOptions.File", func() LoadOptions {
			return LoadOptions{File: file, Env: envMap(nil)}
		}, 11},
		{"--config", func() LoadOptions {
			return LoadOptions{Env: envMap(nil), Flags: flags(t, "--config", file)}
		}, 11},
		{"HOTKEYD_CONFIG", func() LoadOptions {
			return LoadOptions{Env: envMap(map[string]string{"HOTKEYD_CONFIG": file})}
		}, 11},
		{"no file", func() LoadOptions {
			return LoadOptions{Env: envMap(nil), Flags: flags(t)}
		}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.opts())
			if err != nil {
				t.Fatalf("Load: got error %v; want none", err)
			}
			if got := c.Detector.TopK; got != tt.want {
				t.Errorf("detector.topk: got %d; want %d", got, tt.want)
			}
		})
	}
}

// TestLoadProcessEnvironment checks that the default lookup is the process environment.
func TestLoadProcessEnvironment(t *testing.T) {
	t.Setenv("HOTKEYD_DETECTOR_DEPTH", "8")
	c, err := Load(LoadOptions{})
	if err != nil {
		t.Fatalf("Load: got error %v; want none", err)
	}
	if got := c.Detector.Depth; got != 8 {
		t.Errorf("detector.depth: got %d; want 8", got)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		loadCase
		want []string // each must appear in the error
	}{
		{loadCase{name: "unknown top-level key", file: "htp:\n  listen: x\n"},
			[]string{"hotkeyd.yaml:1:", `unknown key "htp"`, `did you mean "http"`}},
		{loadCase{name: "unknown nested key", file: "http:\n  listen: :1\n  listn: :2\n"},
			[]string{"hotkeyd.yaml:3:", `unknown key "http.listn"`, `did you mean "http.listen"`}},
		{loadCase{name: "unknown key in an override", file: "hot:\n  overrides:\n    - pattern: a\n      read_rat: 5\n"},
			[]string{"hotkeyd.yaml:4:", `unknown key "hot.overrides[0].read_rat"`, `"hot.overrides[0].read_rate"`}},
		{loadCase{name: "every unknown key is reported", file: "foo: 1\nlog:\n  levl: info\n"},
			[]string{`unknown key "foo"`, `unknown key "log.levl"`}},
		{loadCase{name: "key set twice", file: "log:\n  level: info\n  level: debug\n"},
			[]string{"hotkeyd.yaml:3:", `"log.level" is set twice`}},
		{loadCase{name: "not YAML", file: "http:\n  listen: [\n"},
			[]string{"hotkeyd.yaml", "line"}},
		{loadCase{name: "bad indentation", file: "http:\n  listen: a\n bad: b\n"},
			[]string{"hotkeyd.yaml", "line 2"}},
		{loadCase{name: "top level is a list", file: "- a\n- b\n"},
			[]string{"hotkeyd.yaml:1:", "must be a mapping"}},
		{loadCase{name: "two documents", file: "log: {level: info}\n---\nlog: {level: debug}\n"},
			[]string{"hotkeyd.yaml:2:", "second YAML document"}},
		{loadCase{name: "section given a value", file: "http: 5\n"},
			[]string{"hotkeyd.yaml:1:", "http must be a mapping"}},
		{loadCase{name: "leaf given a mapping", file: "http:\n  listen: {a: b}\n"},
			[]string{"hotkeyd.yaml:2:", "http.listen must be a single value"}},
		{loadCase{name: "not an integer", file: "detector:\n  topk: abc\n"},
			[]string{"hotkeyd.yaml:2:", `detector.topk: "abc" is not an integer`}},
		{loadCase{name: "fraction for an integer", file: "detector:\n  topk: 1.5\n"},
			[]string{`detector.topk: "1.5" is not an integer`}},
		{loadCase{name: "duration without unit", file: "detector:\n  window: 5\n"},
			[]string{`detector.window: "5" is not a duration`}},
		{loadCase{name: "not a boolean", file: "metrics:\n  hash_keys: maybe\n"},
			[]string{`metrics.hash_keys: "maybe" is not a boolean`}},
		{loadCase{name: "overrides not a list", file: "hot:\n  overrides: {pattern: a}\n"},
			[]string{"hot.overrides must be a list"}},
		{loadCase{name: "merge key", file: "base: &b {level: info}\nlog:\n  <<: *b\n"},
			[]string{`unknown key "base"`, "merge keys (<<) are not supported in log"}},
		{loadCase{name: "bad integer in env", env: map[string]string{"HOTKEYD_DETECTOR_TOPK": "abc"}},
			[]string{"HOTKEYD_DETECTOR_TOPK", "detector.topk", `"abc" is not an integer`}},
		{loadCase{name: "size with a unit in env", env: map[string]string{"HOTKEYD_PROXY_MAX_OUTPUT_BYTES": "16MiB"}},
			[]string{"HOTKEYD_PROXY_MAX_OUTPUT_BYTES", "proxy.max_output_bytes", `"16MiB" is not an integer`, "without a unit"}},
		{loadCase{name: "bad duration in env", env: map[string]string{"HOTKEYD_DETECTOR_WINDOW": "soon"}},
			[]string{"HOTKEYD_DETECTOR_WINDOW", `"soon" is not a duration`}},
		{loadCase{name: "bad overrides in env", env: map[string]string{"HOTKEYD_HOT_OVERRIDES": "[{pattern: a, rate: 1}]"}},
			[]string{"HOTKEYD_HOT_OVERRIDES", `unknown key "hot.overrides[0].rate"`}},
		{loadCase{name: "unknown field in an event", file: "registry:\n  events:\n    - id: a\n      patterns: [a]\n      nmae: x\n"},
			[]string{"hotkeyd.yaml:5:", `unknown key "registry.events[0].nmae"`, `did you mean "registry.events[0].name"`}},
		{loadCase{name: "unknown field in a later event", file: "registry:\n  events:\n    - {id: a}\n    - {id: b, pattern: [b]}\n"},
			[]string{"hotkeyd.yaml:4:", `unknown key "registry.events[1].pattern"`, `"registry.events[1].patterns"`}},
		{loadCase{name: "events not a list", file: "registry:\n  events: {id: a}\n"},
			[]string{"hotkeyd.yaml:2:", "registry.events must be a list of events"}},
		{loadCase{name: "event not a mapping", file: "registry:\n  events: [final]\n"},
			[]string{"hotkeyd.yaml:2:", "registry.events[0] must be a mapping"}},
		{loadCase{name: "patterns not a list", file: "registry:\n  events:\n    - {id: a, patterns: \"a,b\"}\n"},
			[]string{"hotkeyd.yaml:3:", "registry.events[0].patterns must be a list of strings"}},
		{loadCase{name: "address list item not a string", file: "redis:\n  addrs:\n    - 127.0.0.1:6379\n    - {host: a}\n"},
			[]string{"hotkeyd.yaml:4:", `redis.addrs[1] must be a string like "127.0.0.1:6379", got`}},
		{loadCase{name: "pattern not a string", file: "registry:\n  events:\n    - id: a\n      patterns: [a, [b]]\n"},
			[]string{"hotkeyd.yaml:4:", "registry.events[0].patterns[1] must be a string, got"}},
		{loadCase{name: "lead not a duration", file: "registry:\n  events:\n    - id: a\n      lead: soon\n"},
			[]string{"hotkeyd.yaml:4:", `registry.events[0].lead: "soon" is not a duration`}},
		{loadCase{name: "bad time", file: strings.Replace(finalEventYAML, `start: "2026-12-01T19:30:00+01:00"`, "start: 2026-12-01 19:30", 1)},
			[]string{`registry.events[0].start: "2026-12-01 19:30" is not an RFC 3339 time with a zone`}},
		{loadCase{name: "time without a zone", file: strings.Replace(finalEventYAML, `end: "2026-12-01T21:30:00+01:00"`, "end: 2026-12-01T21:30:00", 1)},
			[]string{`registry.events[0].end: "2026-12-01T21:30:00" is not an RFC 3339 time`}},
		{loadCase{name: "missing times", file: "registry:\n  events:\n    - {id: a, patterns: [a]}\n"},
			[]string{`registry.events[0].start: "" is empty`, `registry.events[0].end: "" is empty`}},
		{loadCase{name: "bad pattern", file: strings.Replace(finalEventYAML, `["score:match42"]`, `["*"]`, 1)},
			[]string{`registry.events[0].patterns[0]: "*" has no literal character`, "allow_broad"}},
		{loadCase{name: "pattern listed twice", file: strings.Replace(finalEventYAML, `["score:match42"]`, `[a, a]`, 1)},
			[]string{`registry.events[0].patterns[1]: "a" is listed twice`}},
		{loadCase{name: "empty pattern is not dropped", file: strings.Replace(finalEventYAML, `["score:match42"]`, `[a, ""]`, 1)},
			[]string{`registry.events[0].patterns[1]: empty`}},
		{loadCase{name: "no patterns", file: strings.Replace(finalEventYAML, `["score:match42"]`, `[]`, 1)},
			[]string{`registry.events[0].patterns: empty`}},
		{loadCase{name: "end before start", file: strings.Replace(finalEventYAML, "21:30", "18:30", 1)},
			[]string{`registry.events[0].end: 2026-12-01T18:30:00+01:00 is not after start`}},
		{loadCase{name: "lead too long", file: strings.Replace(finalEventYAML, "lead: 10m", "lead: 200h", 1)},
			[]string{`registry.events[0].lead: 200h0m0s: want from 0s to 168h0m0s`}},
		{loadCase{name: "recurrence without zone", file: strings.Replace(finalEventYAML, "lead: 10m", "recurrence: daily", 1)},
			[]string{`registry.events[0].zone: required with a recurrence`}},
		{loadCase{name: "bad mitigation and rate", file: strings.Replace(finalEventYAML, "expected_read_rate: 200000", "expected_read_rate: -1\n      mitigations: [cache]", 1)},
			[]string{`registry.events[0].expected_read_rate: -1: want a number ≥ 0`, `registry.events[0].mitigations[0]: "cache": want auto, l1`}},
		{loadCase{name: "rate not a number", file: strings.Replace(finalEventYAML, "expected_read_rate: 200000", "expected_read_rate: .inf", 1)},
			[]string{`registry.events[0].expected_read_rate: ".inf" is not a number`}},
		{loadCase{name: "bad id", file: strings.Replace(finalEventYAML, "id: final", "id: The Final", 1)},
			[]string{`registry.events[0].id: "The Final": want 1 to 64 characters`}},
		{loadCase{name: "missing id", file: strings.Replace(finalEventYAML, "- id: final\n      name", "- name", 1)},
			[]string{`registry.events[0].id: "" is empty; give every event of the config file an id`}},
		{loadCase{name: "id used twice", file: "registry:\n  events:\n" +
			"    - {id: a, patterns: [a], start: \"2026-12-01T19:30:00Z\", end: \"2026-12-01T20:30:00Z\"}\n" +
			"    - {id: a, patterns: [b], start: \"2026-12-01T19:30:00Z\", end: \"2026-12-01T20:30:00Z\"}\n"},
			[]string{`registry.events[1].id: "a" is also the id of registry.events[0]`}},
		{loadCase{name: "bad events in env", env: map[string]string{"HOTKEYD_REGISTRY_EVENTS": "[{id: a, when: now}]"}},
			[]string{"HOTKEYD_REGISTRY_EVENTS", `unknown key "registry.events[0].when"`}},
		{loadCase{name: "env events not YAML", env: map[string]string{"HOTKEYD_REGISTRY_EVENTS": "[{id: a"}},
			[]string{"HOTKEYD_REGISTRY_EVENTS"}},
		{loadCase{name: "invalid event from env", env: map[string]string{"HOTKEYD_REGISTRY_EVENTS": `[{id: a, patterns: ["*"], start: "2026-12-01T19:30:00Z", end: "2026-12-01T20:30:00Z"}]`}},
			[]string{`registry.events[0].patterns[0]: "*" has no literal character`}},
		{loadCase{name: "file and env problems together", file: "nope: 1\n",
			env: map[string]string{"HOTKEYD_UDP_READERS": "two"}},
			[]string{`unknown key "nope"`, "HOTKEYD_UDP_READERS"}},
		{loadCase{name: "invalid value from the file", file: "detector:\n  width: 1000\n"},
			[]string{"detector.width: 1000 is not a power of two; use a power of two between 64 and 16777216"}},
		{loadCase{name: "invalid value from env", env: map[string]string{"HOTKEYD_HOT_READ_SHARE": "1.5"}},
			[]string{"hot.read.share: 1.5 is out of range; use a fraction in (0, 1]"}},
		{loadCase{name: "invalid value from a flag", args: []string{"--http-listen", "localhost"}},
			[]string{`http.listen: "localhost" is not host:port`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.load(t)
			if err == nil {
				t.Fatalf("Load: got no error and %+v; want an error", c)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error: got %q; want it to contain %q", err, w)
				}
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Errorf("config on error: got %+v; want the zero Config", c)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(LoadOptions{File: name, Env: envMap(nil)})
	if err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("got error %v; want one naming %s", err, name)
	}
}

// TestPrintConfigRoundTrip checks that the output of --print-config loads back to the
// same Config.
func TestPrintConfigRoundTrip(t *testing.T) {
	custom := Default()
	custom.HTTP.Listen = ":8080"
	custom.UDP.Listen = ""
	custom.Redis.Addrs = []string{"10.0.0.1:6379", "redis-2:6379"}
	custom.Proxy = Proxy{Listen: ":6380", Upstream: "10.0.0.1:6379", SampleEvery: 7, SchedPolicy: "batch", MaxOutputBytes: 5 << 20}
	custom.Monitor.Addr = "[::1]:6379"
	custom.Detector.Window = 1500 * time.Millisecond
	custom.Hot.Read.Share = 0.125
	custom.Hot.MinRate = 0
	custom.Hot.Overrides = []Override{
		{Pattern: "score:*", ReadRate: 5000, ReadShare: 0.2},
		{Pattern: "yes", WriteRate: 1e9},
		{Pattern: "123", WriteShare: 1},
	}
	custom.Metrics.HashKeys = true
	custom.Metrics.KeyMinRatio = 0.25
	custom.Log = Log{Level: "warn", Format: "json"}
	custom.Registry.Events = []Event{
		finalEvent(),
		{
			ID: "match42", Name: "Derby: 42 # no comment", Patterns: []string{"score:match42", "odds:[ab]*", "true", " a,b ", "*"},
			AllowBroad: true, Start: "2026-03-27T19:30:00+01:00", End: "2026-03-27T21:30:00.5+01:00",
			Lead: 90 * time.Second, Recurrence: "weekly@FRI 19:30", Zone: "Europe/Madrid",
			ExpectedReadRate: 1.5e6, ExpectedWriteRate: 0.25, Mitigations: []string{"auto"},
			Owner: "sports", Note: "line one\nline two",
		},
		{ID: "sale", Patterns: []string{"sale:*"}, Start: "2026-12-02T12:00:00Z", End: "2026-12-02T13:00:00Z", Recurrence: "cron:0 12 * * *", Zone: "UTC"},
	}

	for _, tt := range []struct {
		name string
		c    Config
	}{
		{"default", Default()},
		{"custom", custom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			y, err := tt.c.YAML()
			if err != nil {
				t.Fatalf("YAML: %v", err)
			}
			got, err := Load(LoadOptions{File: writeFile(t, "printed.yaml", string(y)), Env: envMap(nil)})
			if err != nil {
				t.Fatalf("Load of\n%s\ngot error %v; want none", y, err)
			}
			if !reflect.DeepEqual(got, tt.c) {
				t.Errorf("round trip of\n%s\ngot %+v; want %+v", y, got, tt.c)
			}
		})
	}
}

func TestYAMLRedactsToken(t *testing.T) {
	c := Default()
	c.Auth.Token = "hunter2-secret"
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), "hunter2") {
		t.Errorf("YAML shows the token:\n%s", y)
	}
	// Loaded back, the placeholder is refused rather than taken for the token.
	if _, err := Load(LoadOptions{File: writeFile(t, "printed.yaml", string(y)), Env: envMap(nil)}); err == nil || !strings.Contains(err.Error(), "auth.token: *** is the placeholder") {
		t.Errorf("Load of the YAML: got %v; want an error that auth.token is the placeholder", err)
	}

	c.Auth.Token = ""
	y, err = c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), `token: ""`) {
		t.Errorf("YAML of an empty token: got\n%s\nwant it to contain token: \"\"", y)
	}
}

func TestPrintConfigFlag(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--print-config"}, true},
		{[]string{"--print-config=false"}, false},
	}
	for _, tt := range tests {
		if got := PrintConfig(flags(t, tt.args...)); got != tt.want {
			t.Errorf("PrintConfig(%q): got %v; want %v", tt.args, got, tt.want)
		}
	}
	if PrintConfig(nil) {
		t.Errorf("PrintConfig(nil): got true; want false")
	}
}
