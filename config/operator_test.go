package config

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestValidateProxyUpstreamIsItself: a proxy tap whose upstream is its own listener
// dials itself for every client until it runs out of file descriptors; Validate refuses
// it, naming both keys, and accepts the addresses that are another listener.
func TestValidateProxyUpstreamIsItself(t *testing.T) {
	tests := []struct {
		listen, upstream string
		self             bool
	}{
		{"127.0.0.1:7441", "127.0.0.1:7441", true},
		{"localhost:7441", "LOCALHOST:7441", true},
		{"[::1]:7441", "[0:0:0:0:0:0:0:1]:7441", true},
		{":7441", "127.0.0.1:7441", true},
		{":7441", "localhost:7441", true},
		{":7441", "[::1]:7441", true},
		{":7441", "0.0.0.0:7441", true},
		{"0.0.0.0:7441", "127.0.0.1:7441", true},
		{"0.0.0.0:7441", "127.0.0.2:7441", true},
		{"[::]:7441", "localhost:7441", true},
		{"[::]:7441", "[::]:7441", true},
		{"127.0.0.1:7441", "localhost:7441", true},
		{"localhost:7441", "127.0.0.1:7441", true},
		{"127.0.0.1:7441", "0.0.0.0:7441", true},
		{"127.0.0.1:7441", "127.0.0.1:6379", false},
		{":7441", "redis:7441", false},
		{":7441", "10.0.0.5:7441", false},
		{"127.0.0.1:7441", "127.0.0.2:7441", false},
		{"localhost:7441", "127.0.0.2:7441", false},
		{"127.0.0.1:7441", "[::1]:7441", false},
		{"10.0.0.5:7441", "127.0.0.1:7441", false},
		{"127.0.0.1:0", "127.0.0.1:6379", false},
	}
	for _, tt := range tests {
		t.Run(tt.listen+"→"+tt.upstream, func(t *testing.T) {
			c := Default()
			c.Proxy.Listen, c.Proxy.Upstream = tt.listen, tt.upstream
			err := c.Validate()
			if !tt.self {
				if err != nil {
					t.Errorf("got %v; want nil", err)
				}
				return
			}
			want := "proxy.upstream: " + strconv.Quote(tt.upstream) + " is the proxy tap's own listener (proxy.listen " + strconv.Quote(tt.listen) + ")"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "use the address of Redis") {
				t.Errorf("got %v; want an error containing %q and what to use", err, want)
			}
		})
	}
}

// TestLoadRefusesRedactedSecret: --print-config prints every set secret as "***";
// loading that output back must not make "***" the secret.
func TestLoadRefusesRedactedSecret(t *testing.T) {
	tests := []struct {
		file, key, env string
	}{
		{"auth:\n  token: '***'\n", "auth.token", "HOTKEYD_AUTH_TOKEN"},
		{"proxy:\n  listen: 127.0.0.1:6380\n  upstream: 127.0.0.1:6379\n  upstream_password: '***'\n", "proxy.upstream_password", "HOTKEYD_PROXY_UPSTREAM_PASSWORD"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			_, err := loadCase{file: tt.file}.load(t)
			if err == nil {
				t.Fatalf("got nil; want an error naming %s", tt.key)
			}
			for _, w := range []string{tt.key + ": ***", "placeholder", "--print-config", tt.env} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestLoadLogLevelAnyCase: log.level and log.format are accepted in any case and kept
// lower-case.
func TestLoadLogLevelAnyCase(t *testing.T) {
	c, err := loadCase{file: "log:\n  level: INFO\n  format: JSON\n", env: map[string]string{"HOTKEYD_LOG_LEVEL": "Warn"}}.load(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "warn" || c.Log.Format != "json" {
		t.Errorf("log: got %+v; want level warn, format json", c.Log)
	}
}

// TestLoadIntegerOutOfRange: an integer too large for the type is out of range, not
// "not an integer".
func TestLoadIntegerOutOfRange(t *testing.T) {
	want := "is out of range; use a whole number between " + strconv.Itoa(math.MinInt) + " and " + strconv.Itoa(math.MaxInt)
	for _, v := range []string{"99999999999999999999", "-99999999999999999999", "1e30"} {
		_, err := loadCase{env: map[string]string{"HOTKEYD_DETECTOR_TOPK": v}}.load(t)
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(v)+" "+want) {
			t.Errorf("HOTKEYD_DETECTOR_TOPK=%s: got %v; want %q", v, err, want)
		}
	}
}

// TestLoadInvalidValueNamesSource: a value that parses but Validate refuses names where
// it was set, as a problem of parsing does: the variable, the file and line, or the flag.
func TestLoadInvalidValueNamesSource(t *testing.T) {
	tests := []struct {
		loadCase
		want string
	}{
		{loadCase{env: map[string]string{"HOTKEYD_DETECTOR_TOPK": "20000"}},
			"environment HOTKEYD_DETECTOR_TOPK: detector.topk: 20000 is out of range"},
		{loadCase{file: "log:\n  level: info\ndetector:\n  topk: 20000\n"},
			"hotkeyd.yaml:4: detector.topk: 20000 is out of range"},
		{loadCase{args: []string{"--topk", "20000"}},
			"flag --topk: detector.topk: 20000 is out of range"},
		{loadCase{file: "detector:\n  topk: 5\n", env: map[string]string{"HOTKEYD_DETECTOR_TOPK": "20000"}},
			"environment HOTKEYD_DETECTOR_TOPK: detector.topk: 20000"},
		{loadCase{file: "hot:\n  overrides:\n    - pattern: 'a*b'\n      read_rate: 5\n"},
			"hotkeyd.yaml:2: hot.overrides[0].pattern"},
		{loadCase{env: map[string]string{"HOTKEYD_REDIS_ADDRS": "a:1,nohost"}},
			`environment HOTKEYD_REDIS_ADDRS: redis.addrs[1]: "nohost" is not host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := tt.load(t)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v; want it to contain %q", err, tt.want)
			}
		})
	}
	// Values from the defaults have no source to name.
	c := Default()
	c.Detector.TopK = 0
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "detector.topk: 0") {
		t.Errorf("Validate: got %v; want it to start with the key", err)
	}
}

// TestAuthTokenLength: a UDP report carries the token after a one-byte length, so a
// longer token is refused at load, naming the key, not later by the UDP server.
func TestAuthTokenLength(t *testing.T) {
	c := Default()
	c.Auth.Token = strings.Repeat("t", 255)
	if err := c.Validate(); err != nil {
		t.Fatalf("255-byte token: %v; want it accepted", err)
	}
	c.Auth.Token += "t"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "auth.token: *** is 256 bytes long") || strings.Contains(err.Error(), c.Auth.Token) {
		t.Fatalf("256-byte token: %v; want an error naming auth.token and the length, not the token", err)
	}
}
