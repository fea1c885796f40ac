package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// LoadOptions says where Load reads settings from. The zero value reads the process
// environment only.
type LoadOptions struct {
	// File is the YAML file to read. Empty means: the value of --config when that flag was
	// set, else $HOTKEYD_CONFIG when set, else no file.
	File string
	// Env looks up an environment variable. Default (nil) is os.LookupEnv, and then a
	// HOTKEYD_ variable that names no key (a typo) is an error, as an unknown key in the
	// file is; tests pass a map lookup so that they do not touch the process environment.
	Env func(name string) (value string, ok bool)
	// Flags holds the flags registered by RegisterFlags, after parsing. Only flags the
	// user set override other sources. Default (nil): no flags.
	Flags *pflag.FlagSet
}

// Load builds the configuration from, lowest precedence first: Default, the YAML file,
// the HOTKEYD_* environment and the flags that were set; then validates it. Problems in
// the file or the environment are reported all together, each naming where it is (file
// and line, or variable) and the key; then Validate's problems, if any, each after the
// source of the value it refuses (file and line, variable or flag) when that is not the
// default. On error the Config is the zero value.
func Load(opts LoadOptions) (Config, error) {
	return load(opts, os.ReadFile)
}

// load is Load with the file reader injected, for the fuzz test.
func load(opts LoadOptions, readFile func(string) ([]byte, error)) (Config, error) {
	lookup := opts.Env
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v := viper.New()
	def := reflect.ValueOf(Default())
	for _, f := range fields() {
		v.SetDefault(f.key, def.FieldByIndex(f.index).Interface())
	}

	var errs []error
	src := sources{} // where each key was set, last source first
	if name := configFile(opts, lookup); name != "" {
		data, err := readFile(name)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		m, lines, err := parseFile(name, data)
		if err != nil {
			errs = append(errs, err)
		} else if err := v.MergeConfigMap(nest(m)); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", name, err)
		}
		for key, line := range lines {
			src[key] = fmt.Sprintf("config file %s:%d", name, line)
		}
	}

	if opts.Env == nil {
		if err := unknownEnv(os.Environ()); err != nil {
			errs = append(errs, err)
		}
	}
	env, err := parseEnv(lookup)
	if err != nil {
		errs = append(errs, err)
	} else if err := v.MergeConfigMap(nest(env)); err != nil {
		return Config{}, fmt.Errorf("environment: %w", err)
	}
	for key := range env {
		src[key] = "environment " + envName(key)
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}

	if opts.Flags != nil {
		for _, fk := range flagKeys {
			if f := opts.Flags.Lookup(fk.flag); f != nil {
				if err := v.BindPFlag(fk.key, f); err != nil {
					return Config{}, fmt.Errorf("flag --%s: %w", fk.flag, err)
				}
				if f.Changed {
					src[fk.key] = "flag --" + fk.flag
				}
			}
		}
	}

	var c Config
	if err := v.UnmarshalExact(&c, func(dc *mapstructure.DecoderConfig) { dc.TagName = "yaml" }); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c.normalize()
	if err := c.Validate(); err != nil {
		return Config{}, src.name(err)
	}
	return c, nil
}

// sources maps a key to where its value was set: "config file hotkeyd.yaml:12",
// "environment HOTKEYD_DETECTOR_TOPK" or "flag --topk". Keys left at their default are
// not in it.
type sources map[string]string

// name puts before each of Validate's problems (joined in err) the source of its key,
// as problems found while parsing name theirs.
func (s sources) name(err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	errs := joined.Unwrap()
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		var ke keyError
		if !errors.As(e, &ke) {
			continue
		}
		key, _, _ := strings.Cut(ke.key, "[") // redis.addrs[1] was set as redis.addrs
		if where, ok := s[key]; ok {
			out[i] = fmt.Errorf("%s: %w", where, e)
		}
	}
	return errors.Join(out...)
}

// FileName returns the name of the config file Load reads with opts: opts.File, else the
// value of --config, else $HOTKEYD_CONFIG; empty when there is none.
func FileName(opts LoadOptions) string {
	lookup := opts.Env
	if lookup == nil {
		lookup = os.LookupEnv
	}
	return configFile(opts, lookup)
}

// configFile picks the file to read: opts.File, else --config, else $HOTKEYD_CONFIG.
func configFile(opts LoadOptions, lookup func(string) (string, bool)) string {
	if opts.File != "" {
		return opts.File
	}
	if opts.Flags != nil {
		if f := opts.Flags.Lookup(flagConfig); f != nil && f.Changed {
			return f.Value.String()
		}
	}
	name, _ := lookup(envConfig)
	return name
}

// envConfig names the config file when neither LoadOptions.File nor --config does.
const envConfig = envPrefix + "CONFIG"

// parseEnv reads the HOTKEYD_* variable of every key. An empty variable counts as set for
// strings and lists (HOTKEYD_UDP_LISTEN= turns UDP off) and as unset for numbers,
// booleans and durations, which have no empty value.
func parseEnv(lookup func(string) (string, bool)) (map[string]any, error) {
	out := map[string]any{}
	var errs []error
	for _, f := range fields() {
		s, ok := lookup(f.env)
		if !ok {
			continue
		}
		source := fmt.Sprintf("environment %s (%s)", f.env, f.key)
		switch f.kind {
		case kString, kStrings:
		case kOverrides, kEvents:
			list, err := parseList(source, f.key, f.kind, s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[f.key] = list
			continue
		default:
			if strings.TrimSpace(s) == "" {
				continue
			}
		}
		val, err := parseText(f.kind, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		out[f.key] = val
	}
	return out, errors.Join(errs...)
}

// unknownEnv reports every HOTKEYD_ variable of environ (NAME=VALUE strings) that is
// neither a key's variable nor HOTKEYD_CONFIG, with the nearest known name as a hint. The
// value is never shown: it may be a token.
func unknownEnv(environ []string) error {
	known := []string{envConfig}
	for _, f := range fields() {
		known = append(known, f.env)
	}
	suffixes := make([]string, len(known)) // the names without HOTKEYD_, for the hint
	for i, k := range known {
		suffixes[i] = strings.TrimPrefix(k, envPrefix)
	}
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || slices.Contains(known, name) || serviceLink(name) {
			continue
		}
		hint := "each key's variable is HOTKEYD_ and its path in upper case with dots as underscores (config/example.yaml)"
		if c := closest(strings.TrimPrefix(name, envPrefix), suffixes); c != "" {
			hint = "did you mean " + envPrefix + c + "?"
		}
		errs = append(errs, fmt.Errorf("environment %s: not a hotkeyd setting; %s", name, hint))
	}
	return errors.Join(errs...)
}

// serviceLink reports whether name is one of the variables Kubernetes sets in every pod
// for a Service named hotkeyd in its namespace: HOTKEYD_SERVICE_HOST,
// HOTKEYD_SERVICE_PORT[_NAME], HOTKEYD_PORT and HOTKEYD_PORT_<port>_<TCP|UDP|SCTP>
// [_PROTO|_PORT|_ADDR]. No key's variable has these forms.
func serviceLink(name string) bool {
	rest := strings.TrimPrefix(name, envPrefix)
	if rest == "SERVICE_HOST" || rest == "SERVICE_PORT" || strings.HasPrefix(rest, "SERVICE_PORT_") || rest == "PORT" {
		return true
	}
	f := strings.Split(rest, "_")
	if len(f) < 3 || len(f) > 4 || f[0] != "PORT" || f[1] == "" || strings.Trim(f[1], "0123456789") != "" {
		return false
	}
	if f[2] != "TCP" && f[2] != "UDP" && f[2] != "SCTP" {
		return false
	}
	return len(f) == 3 || f[3] == "PROTO" || f[3] == "PORT" || f[3] == "ADDR"
}

// normalize gives equal configurations one form: empty lists are nil, addresses trimmed.
func (c *Config) normalize() {
	var addrs []string
	for _, a := range c.Redis.Addrs {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	c.Redis.Addrs = addrs
	if len(c.Hot.Overrides) == 0 {
		c.Hot.Overrides = nil
	}
	if len(c.Registry.Events) == 0 {
		c.Registry.Events = nil
	}
	// Levels and formats are names, whatever their case: "INFO" is info.
	c.Log.Level = strings.ToLower(c.Log.Level)
	c.Log.Format = strings.ToLower(c.Log.Format)
}

// Names of the flags that are not keys.
const (
	flagConfig      = "config"
	flagPrintConfig = "print-config"
)

// flagKeys maps the flags of RegisterFlags onto keys.
var flagKeys = []struct{ flag, key string }{
	{"http-listen", "http.listen"},
	{"udp-listen", "udp.listen"},
	{"redis-addrs", "redis.addrs"},
	{"proxy-listen", "proxy.listen"},
	{"proxy-upstream", "proxy.upstream"},
	{"monitor", "monitor.addr"},
	{"auth-token", "auth.token"},
	{"topk", "detector.topk"},
	{"log-level", "log.level"},
}

// RegisterFlags registers hotkeyd's configuration flags on fs:
//
//	--config FILE          the YAML file (LoadOptions.File)
//	--http-listen ADDR     http.listen
//	--udp-listen ADDR      udp.listen ("" turns UDP off)
//	--redis-addrs A,B      redis.addrs
//	--proxy-listen ADDR    proxy.listen
//	--proxy-upstream ADDR  proxy.upstream
//	--monitor ADDR         monitor.addr
//	--auth-token TOKEN     auth.token
//	--topk N               detector.topk
//	--log-level LEVEL      log.level
//	--print-config         print the effective configuration and exit (read by the caller
//	                       with PrintConfig)
//
// The defaults shown in help are Default's; a flag overrides the other sources only when
// it is set. Call it once per FlagSet: pflag panics on a flag defined twice.
func RegisterFlags(fs *pflag.FlagSet) {
	d := Default()
	fs.String(flagConfig, "", "YAML config `file` (else $"+envConfig+")")
	fs.String("http-listen", d.HTTP.Listen, "HTTP API `address` (http.listen)")
	fs.String("udp-listen", d.UDP.Listen, "UDP sample `address`, empty to turn UDP off (udp.listen)")
	fs.StringSlice("redis-addrs", nil, "Redis `addresses`, comma-separated; none means detection only (redis.addrs)")
	fs.String("proxy-listen", "", "RESP proxy tap listen `address` (proxy.listen)")
	fs.String("proxy-upstream", "", "Redis `address` the proxy forwards to (proxy.upstream)")
	fs.String("monitor", "", "Redis `address` to sample with MONITOR, for development only (monitor.addr)")
	fs.String("auth-token", "", "bearer `token` for mutating endpoints; prefer $HOTKEYD_AUTH_TOKEN, flags show in ps (auth.token)")
	fs.Int("topk", d.Detector.TopK, "how many heaviest keys to track (detector.topk)")
	fs.String("log-level", d.Log.Level, "log `level`: debug, info, warn or error (log.level)")
	fs.Bool(flagPrintConfig, false, "print the effective configuration as YAML and exit")
}

// PrintConfig reports whether --print-config was set on fs.
func PrintConfig(fs *pflag.FlagSet) bool {
	if fs == nil {
		return false
	}
	f := fs.Lookup(flagPrintConfig)
	return f != nil && f.Changed && f.Value.String() == "true"
}
