package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// minTick is the shortest detector tick: Detector.Window / Detector.Ticks.
const minTick = 10 * time.Millisecond

// Validate checks every setting and returns all problems at once, joined with
// errors.Join, or nil. Each problem names the key, the value and what is allowed, as in
//
//	detector.width: 1000 is not a power of two; use a power of two between 64 and 16777216
//
// The values of auth.token, proxy.upstream_password and redis.password are never shown.
func (c Config) Validate() error {
	var v validator

	v.listenAddr("http.listen", c.HTTP.Listen, true)
	v.intRange("http.max_body_bytes", c.HTTP.MaxBodyBytes, 1024, 1<<30)

	v.listenAddr("udp.listen", c.UDP.Listen, false)
	v.intRange("udp.readers", c.UDP.Readers, 1, 64)

	seen := make(map[string]int, len(c.Redis.Addrs))
	for i, a := range c.Redis.Addrs {
		key := fmt.Sprintf("redis.addrs[%d]", i)
		v.dialAddr(key, a, true)
		if j, dup := seen[a]; dup {
			v.add(key, a, fmt.Sprintf("is listed twice (also redis.addrs[%d])", j), "list each address once")
		}
		seen[a] = i
	}

	if strings.ContainsFunc(c.Redis.Password, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		v.add("redis.password", secret{}, "contains a control character (a trailing newline?)", "remove it")
	}
	if c.Redis.Username != "" && c.Redis.Password == "" {
		v.add("redis.username", c.Redis.Username, "is set while redis.password is empty",
			"set HOTKEYD_REDIS_PASSWORD too, or leave both empty for a Redis without AUTH")
	}
	if c.Redis.InfoInterval != 0 {
		// Up to a minute: HotkeydPrimaryCPUSaturated takes rates over 2 minutes, which
		// need two readings in them.
		if d := c.Redis.InfoInterval; d < time.Second || d > time.Minute {
			v.add("redis.info_interval", d, "is out of range", "use 0 (never) or a duration from 1s to 1m, such as 10s")
		}
	}

	v.listenAddr("proxy.listen", c.Proxy.Listen, false)
	v.dialAddr("proxy.upstream", c.Proxy.Upstream, false)
	switch {
	case c.Proxy.Listen != "" && c.Proxy.Upstream == "":
		v.add("proxy.upstream", "", "is empty while proxy.listen is set", "set both proxy.listen and proxy.upstream, or neither")
	case c.Proxy.Listen == "" && c.Proxy.Upstream != "":
		v.add("proxy.listen", "", "is empty while proxy.upstream is set", "set both proxy.listen and proxy.upstream, or neither")
	}
	// Port 0 asks the system for a free port: two such listeners never clash.
	if c.Proxy.Listen != "" && c.Proxy.Listen == c.HTTP.Listen && !strings.HasSuffix(c.Proxy.Listen, ":0") {
		v.add("proxy.listen", c.Proxy.Listen, "is also http.listen", "use a TCP address of its own")
	}
	// Such a tap dials itself for each client, and each of those connections dials again,
	// until it runs out of file descriptors.
	if ownListener(c.Proxy.Listen, c.Proxy.Upstream) {
		v.add("proxy.upstream", c.Proxy.Upstream, fmt.Sprintf("is the proxy tap's own listener (proxy.listen %q)", c.Proxy.Listen),
			"use the address of Redis (or of a proxy in front of it) that the tap forwards to")
	}
	v.intRange("proxy.sample_every", c.Proxy.SampleEvery, 1, 1_000_000)
	v.intRange("proxy.max_output_bytes", c.Proxy.MaxOutputBytes, 1<<20, 1<<30)
	v.duration("proxy.access_check_ttl", c.Proxy.AccessCheckTTL, 0, time.Minute)
	// A password read from a file or a Secret often ends with a newline, which Redis
	// would take as part of it.
	if strings.ContainsFunc(c.Proxy.UpstreamPassword, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		v.add("proxy.upstream_password", secret{}, "contains a control character (a trailing newline?)", "remove it")
	}
	if c.Proxy.UpstreamUsername != "" && c.Proxy.UpstreamPassword == "" {
		v.add("proxy.upstream_username", c.Proxy.UpstreamUsername, "is set while proxy.upstream_password is empty",
			"set the user's password too (HOTKEYD_PROXY_UPSTREAM_PASSWORD), or neither")
	}
	if strings.ContainsFunc(c.Proxy.UpstreamUsername, func(r rune) bool { return r <= 0x20 || r == 0x7f }) {
		v.add("proxy.upstream_username", c.Proxy.UpstreamUsername, "contains a space or a control character", "use the ACL user's name")
	}

	v.dialAddr("monitor.addr", c.Monitor.Addr, false)
	v.intRange("monitor.sample_every", c.Monitor.SampleEvery, 1, 1_000_000)

	v.placeholders(c)
	if strings.ContainsFunc(c.Auth.Token, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		v.add("auth.token", secret{}, "contains a space, a control character or non-ASCII", "use printable ASCII without spaces")
	}
	if n := len(c.Auth.Token); n > maxTokenBytes {
		v.add("auth.token", secret{}, fmt.Sprintf("is %d bytes long", n), fmt.Sprintf("use at most %d (a UDP report carries its length in one byte)", maxTokenBytes))
	}

	d := c.Detector
	if d.Window < minTick || d.Window > time.Hour {
		v.add("detector.window", d.Window, "is out of range", "use a duration between 10ms and 1h")
	}
	v.intRange("detector.ticks", d.Ticks, 1, 1000)
	if d.Ticks >= 1 && d.Window >= minTick && d.Window/time.Duration(d.Ticks) < minTick {
		v.add("detector.ticks", d.Ticks,
			fmt.Sprintf("makes ticks of %v (detector.window %v / %d)", d.Window/time.Duration(d.Ticks), d.Window, d.Ticks),
			fmt.Sprintf("use at most %d ticks, so that each tick lasts at least %v", d.Window/minTick, minTick))
	}
	v.intRange("detector.topk", d.TopK, 1, 10000)
	widthOK := v.powerOfTwo("detector.width", d.Width, 64, 1<<24)
	v.intRange("detector.depth", d.Depth, 1, 16)
	shardsOK := v.powerOfTwo("detector.shards", d.Shards, 1, 256)
	if widthOK && shardsOK && d.Width < 64*d.Shards {
		v.add("detector.width", d.Width,
			fmt.Sprintf("leaves fewer than 64 counters to each of the %d detector.shards", d.Shards),
			fmt.Sprintf("use a power of two between %d and 16777216, or fewer shards", 64*d.Shards))
	}

	v.intRange("limits.max_key_bytes", c.Limits.MaxKeyBytes, 8, 65536)
	v.intRange("limits.max_samples_per_report", c.Limits.MaxSamplesPerReport, 1, 1_000_000)

	h := c.Hot
	v.rate("hot.read.rate", h.Read.Rate, false)
	v.share("hot.read.share", h.Read.Share, false)
	v.rate("hot.write.rate", h.Write.Rate, false)
	v.share("hot.write.share", h.Write.Share, false)
	if !(h.MinRate >= 0) || math.IsInf(h.MinRate, 0) {
		v.add("hot.min_rate", h.MinRate, "is out of range", "use a rate in requests per second ≥ 0")
	}
	v.intRange("hot.min_samples", h.MinSamples, 0, 1_000_000)
	if !(h.CoolRatio > 0 && h.CoolRatio < 1) {
		v.add("hot.cool_ratio", h.CoolRatio, "is out of range", "use a fraction in (0, 1)")
	}
	v.intRange("hot.cool_ticks", h.CoolTicks, 1, 10000)
	if r := c.Metrics.KeyMinRatio; !(r >= 0 && r <= 1) {
		v.add("metrics.key_min_ratio", r, "is out of range", "use a fraction of the hot threshold in [0, 1]; 0 exports every top-k key")
	}
	patterns := make(map[string]int, len(h.Overrides))
	for i, o := range h.Overrides {
		key := fmt.Sprintf("hot.overrides[%d]", i)
		switch star := strings.IndexByte(o.Pattern, '*'); {
		case o.Pattern == "":
			v.add(key+".pattern", "", "is empty", `use an exact key, or a prefix ending in "*" like "score:*"`)
		case star >= 0 && star != len(o.Pattern)-1:
			v.add(key+".pattern", o.Pattern, `has a "*" before its end`, `use an exact key, or a prefix ending in "*" like "score:*"`)
		}
		if j, dup := patterns[o.Pattern]; dup && o.Pattern != "" {
			v.add(key+".pattern", o.Pattern, fmt.Sprintf("is also the pattern of hot.overrides[%d]", j), "give each pattern one override")
		}
		patterns[o.Pattern] = i
		v.rate(key+".read_rate", o.ReadRate, true)
		v.share(key+".read_share", o.ReadShare, true)
		v.rate(key+".write_rate", o.WriteRate, true)
		v.share(key+".write_share", o.WriteShare, true)
		if o.ReadRate == 0 && o.ReadShare == 0 && o.WriteRate == 0 && o.WriteShare == 0 {
			v.add(key, o.Pattern, "sets no threshold", "set at least one of read_rate, read_share, write_rate, write_share")
		}
	}

	m := c.Mitigate
	modes := []string{"observe", "recommend", "enforce"}
	v.oneOf("mitigate.modes.l1", m.Modes.L1, modes...)
	v.oneOf("mitigate.modes.copies", m.Modes.Copies, modes...)
	v.oneOf("mitigate.modes.sharded_counter", m.Modes.ShardedCounter, modes...)
	v.oneOf("mitigate.modes.batched_counter", m.Modes.BatchedCounter, modes...)
	v.duration("mitigate.l1_ttl", m.L1TTL, 10*time.Millisecond, time.Hour)
	v.rate("mitigate.node_capacity", m.NodeCapacity, false)
	v.share("mitigate.headroom", m.Headroom, false)
	v.duration("mitigate.flush_interval", m.FlushInterval, time.Millisecond, time.Minute)
	v.duration("mitigate.min_active", m.MinActive, time.Second, 24*time.Hour)
	v.duration("mitigate.cool_down", m.CoolDown, time.Second, 24*time.Hour)
	v.duration("mitigate.lease", m.Lease, 2*time.Second, mitigate.MaxLease)
	v.duration("mitigate.copy_refresh", m.CopyRefresh, 10*time.Millisecond, time.Minute)
	if m.Lease >= 2*time.Second && m.CopyRefresh > m.Lease/4 {
		// Copy claims (several agents on one cluster) last one lease and are renewed at the
		// first round after half of it: a round period near lease/2 lets them lapse.
		v.add("mitigate.copy_refresh", m.CopyRefresh, fmt.Sprintf("is too long for mitigate.lease %v", m.Lease),
			fmt.Sprintf("use at most a quarter of the lease (%v), so that the agent's copy claims are renewed in time", m.Lease/4))
	}

	v.events(c.Registry.Events)

	v.oneOf("proxy.sched_policy", c.Proxy.SchedPolicy, "auto", "batch", "off")
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, "text", "json")

	return errors.Join(v.errs...)
}

// redacted stands for the value of a secret key wherever it would be shown.
const redacted = "***"

// maxTokenBytes bounds auth.token: UDP reports carry it after a one-byte length.
const maxTokenBytes = 255

// secretKeys are the keys whose values are never shown: not by YAML, not in errors.
var secretKeys = map[string]bool{"auth.token": true, "proxy.upstream_password": true, "redis.password": true}

// placeholders refuses redacted as the value of a secret key: it is what YAML, and so
// --print-config, writes for a secret, and its output reused as a config file would
// otherwise set the secret to it.
func (v *validator) placeholders(c Config) {
	cv := reflect.ValueOf(c)
	for _, f := range fields() {
		if secretKeys[f.key] && f.kind == kString && cv.FieldByIndex(f.index).String() == redacted {
			v.add(f.key, secret{}, "is the placeholder --print-config prints for a secret",
				fmt.Sprintf("set the real value, for example with the environment variable %s", f.env))
		}
	}
}

// ownListener reports whether a tap listening on listen that dials upstream would reach
// itself: the same host (or IP) and port, or the same port with a listener on every
// interface (":7441", "0.0.0.0:7441", "[::]:7441") and an upstream on this host
// (localhost, a loopback or an unspecified IP), or a listener on loopback and an upstream
// that is localhost or an unspecified IP, which the system connects to on loopback.
// Port 0 (any free port) and addresses that do not parse never match.
func ownListener(listen, upstream string) bool {
	lh, lp, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	uh, up, err := net.SplitHostPort(upstream)
	if err != nil {
		return false
	}
	lport, err1 := strconv.ParseUint(lp, 10, 16)
	uport, err2 := strconv.ParseUint(up, 10, 16)
	if err1 != nil || err2 != nil || lport == 0 || lport != uport {
		return false
	}
	lip, uip := net.ParseIP(lh), net.ParseIP(uh)
	lLocal, uLocal := strings.EqualFold(lh, "localhost"), strings.EqualFold(uh, "localhost")
	uUnspecified := uip != nil && uip.IsUnspecified()
	switch {
	case strings.EqualFold(lh, uh), lip != nil && lip.Equal(uip):
		return true
	case lh == "" || lip != nil && lip.IsUnspecified():
		return uLocal || uUnspecified || uip != nil && uip.IsLoopback()
	case lLocal: // localhost is 127.0.0.1 or ::1, not the rest of 127.0.0.0/8
		return uUnspecified || uip != nil && (uip.Equal(net.IPv4(127, 0, 0, 1)) || uip.Equal(net.IPv6loopback))
	case lip != nil && lip.IsLoopback():
		return uLocal || uUnspecified
	}
	return false
}

// secret is a value that show prints as redacted.
type secret struct{}

// validator collects the problems of one Validate call.
type validator struct {
	errs []error
}

// add records "key: value problem; allowed".
func (v *validator) add(key string, value any, problem, allowed string) {
	v.fail(key, fmt.Errorf("%s: %s %s; %s", key, show(value), problem, allowed))
}

// fail records err, whose text starts with key, as a problem of key.
func (v *validator) fail(key string, err error) {
	v.errs = append(v.errs, keyError{key: key, err: err})
}

// keyError is a problem of one key, such as "redis.addrs[1]" or "hot.overrides[0].pattern",
// for Load to name where the key was set.
type keyError struct {
	key string
	err error
}

func (e keyError) Error() string { return e.err.Error() }
func (e keyError) Unwrap() error { return e.err }

// show formats a value the way a user would write it in the file.
func show(value any) string {
	switch x := value.(type) {
	case secret:
		return redacted
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Duration:
		return x.String()
	}
	return fmt.Sprint(value)
}

func (v *validator) duration(key string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		v.add(key, d, "is out of range", fmt.Sprintf("use a duration between %v and %v", lo, hi))
	}
}

func (v *validator) intRange(key string, n, lo, hi int) {
	if n < lo || n > hi {
		v.add(key, n, "is out of range", fmt.Sprintf("use an integer between %d and %d", lo, hi))
	}
}

// powerOfTwo checks that n is a power of two in lo..hi and reports whether it is.
func (v *validator) powerOfTwo(key string, n, lo, hi int) (ok bool) {
	allowed := fmt.Sprintf("use a power of two between %d and %d", lo, hi)
	switch {
	case n <= 0 || n&(n-1) != 0:
		v.add(key, n, "is not a power of two", allowed)
	case n < lo || n > hi:
		v.add(key, n, "is out of range", allowed)
	default:
		return true
	}
	return false
}

// rate checks a rate in requests per second: > 0, or also 0 when zero means "inherit".
func (v *validator) rate(key string, r float64, zeroInherits bool) {
	if zeroInherits && r == 0 {
		return
	}
	if !(r > 0) || math.IsInf(r, 0) {
		allowed := "use a rate in requests per second > 0"
		if zeroInherits {
			allowed += ", or 0 to inherit the default"
		}
		v.add(key, r, "is out of range", allowed)
	}
}

// share checks a fraction of the traffic in (0, 1], or also 0 when zero means "inherit".
func (v *validator) share(key string, s float64, zeroInherits bool) {
	if zeroInherits && s == 0 {
		return
	}
	if !(s > 0 && s <= 1) {
		allowed := "use a fraction in (0, 1]"
		if zeroInherits {
			allowed += ", or 0 to inherit the default"
		}
		v.add(key, s, "is out of range", allowed)
	}
}

func (v *validator) oneOf(key, s string, allowed ...string) {
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	v.add(key, s, "is not allowed", "use one of "+strings.Join(allowed, ", "))
}

// listenAddr checks an address to listen on: host:port with an empty host meaning all
// interfaces and port 0 meaning any free port. Empty is allowed unless required.
func (v *validator) listenAddr(key, addr string, required bool) {
	v.hostPort(key, addr, required, false)
}

// dialAddr checks an address to connect to: host:port with a host and a port 1..65535.
// Empty is allowed unless required.
func (v *validator) dialAddr(key, addr string, required bool) {
	v.hostPort(key, addr, required, true)
}

func (v *validator) hostPort(key, addr string, required, dial bool) {
	allowed := "use host:port, like 127.0.0.1:9736 or :9736"
	if dial {
		allowed = "use host:port, like 127.0.0.1:6379"
	}
	if addr == "" {
		if required {
			v.add(key, addr, "is empty", allowed)
		}
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(key, addr, "is not host:port", allowed)
		return
	}
	p, err := strconv.ParseUint(port, 10, 16)
	switch {
	case err != nil || (dial && p == 0):
		low := "0"
		if dial {
			low = "1"
		}
		v.add(key, addr, "has no valid port", fmt.Sprintf("use a port between %s and 65535", low))
	case dial && host == "":
		v.add(key, addr, "has no host", allowed)
	case strings.ContainsAny(host, " \t\r\n/"):
		v.add(key, addr, "has an invalid host", allowed)
	}
}
