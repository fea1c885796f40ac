package config

import (
	"os"
	"strings"
	"testing"
)

// TestProxyUpstreamCredentials: proxy.upstream_username and proxy.upstream_password come
// from the environment (there is no flag: flags show in ps), --print-config shows the
// password as "***" and the username as is, and no validation error shows the password.
func TestProxyUpstreamCredentials(t *testing.T) {
	const pw = "hunter2-upstream"
	c, err := Load(LoadOptions{Env: envMap(map[string]string{
		"HOTKEYD_PROXY_LISTEN":            "127.0.0.1:6380",
		"HOTKEYD_PROXY_UPSTREAM":          "127.0.0.1:6379",
		"HOTKEYD_PROXY_UPSTREAM_USERNAME": "tap",
		"HOTKEYD_PROXY_UPSTREAM_PASSWORD": pw,
	})})
	if err != nil {
		t.Fatal(err)
	}
	if c.Proxy.UpstreamUsername != "tap" || c.Proxy.UpstreamPassword != pw {
		t.Fatalf("got username %q, password set %v; want tap and the password", c.Proxy.UpstreamUsername, c.Proxy.UpstreamPassword == pw)
	}
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), pw) || !strings.Contains(string(y), "upstream_password: '***'") ||
		!strings.Contains(string(y), "upstream_username: tap") {
		t.Errorf("YAML: got\n%s\nwant upstream_username: tap and upstream_password: '***'", y)
	}
	if f := flags(t); f.Lookup("proxy-upstream-password") != nil || f.Lookup("proxy-upstream-username") != nil {
		t.Error("a flag for the upstream credentials exists; want none (flags show in ps)")
	}

	c.Proxy.UpstreamPassword = ""
	if y, _ = c.YAML(); !strings.Contains(string(y), `upstream_password: ""`) {
		t.Errorf("YAML of no password: got\n%s\nwant upstream_password: \"\"", y)
	}

	bad := Default()
	bad.Proxy.UpstreamPassword = pw + "\n"
	bad.Proxy.UpstreamUsername = "tap"
	if err := bad.Validate(); err == nil || strings.Contains(err.Error(), pw) ||
		!strings.Contains(err.Error(), "proxy.upstream_password: *** contains a control character") {
		t.Errorf("password with a newline: got %v; want an error naming proxy.upstream_password without the password", err)
	}
	bad.Proxy.UpstreamPassword = ""
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "proxy.upstream_username: \"tap\" is set while proxy.upstream_password is empty") {
		t.Errorf("username without a password: got %v; want an error", err)
	}
	if _, err := Load(LoadOptions{Env: envMap(map[string]string{"HOTKEYD_PROXY_UPSTREAM_PASSWRD": pw})}); err != nil {
		t.Fatalf("a test's Env is not checked for unknown names: %v", err)
	}
	t.Setenv("HOTKEYD_PROXY_UPSTREAM_PASSWRD", pw)
	if _, err := Load(LoadOptions{}); err == nil || strings.Contains(err.Error(), pw) ||
		!strings.Contains(err.Error(), "did you mean HOTKEYD_PROXY_UPSTREAM_PASSWORD?") {
		t.Errorf("misspelt variable: got %v; want an error with the hint, without the value", err)
	}
}

// TestRedisCredentials: redis.username and redis.password, for every connection to
// redis.addrs, come from the environment with no flag, show as "***" in --print-config,
// and no validation error shows the password.
func TestRedisCredentials(t *testing.T) {
	const pw = "hunter2-cluster"
	c, err := Load(LoadOptions{Env: envMap(map[string]string{
		"HOTKEYD_REDIS_ADDRS":    "127.0.0.1:7001",
		"HOTKEYD_REDIS_USERNAME": "hotkeyd",
		"HOTKEYD_REDIS_PASSWORD": pw,
	})})
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Username != "hotkeyd" || c.Redis.Password != pw {
		t.Fatalf("got username %q, password set %v; want hotkeyd and the password", c.Redis.Username, c.Redis.Password == pw)
	}
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), pw) || !strings.Contains(string(y), "password: '***'") || !strings.Contains(string(y), "username: hotkeyd") {
		t.Errorf("YAML: got\n%s\nwant username: hotkeyd and password: '***'", y)
	}
	if f := flags(t); f.Lookup("redis-password") != nil || f.Lookup("redis-username") != nil {
		t.Error("a flag for the Redis credentials exists; want none (flags show in ps)")
	}
	file := t.TempDir() + "/printed.yaml"
	if err := os.WriteFile(file, y, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(LoadOptions{File: file, Env: envMap(nil)}); err == nil || !strings.Contains(err.Error(), "redis.password") {
		t.Errorf("--print-config output loaded back with the password as ***: %v; want an error naming redis.password", err)
	}
	bad := Default()
	bad.Redis.Password, bad.Redis.Username = pw+"\n", "hotkeyd"
	if err := bad.Validate(); err == nil || strings.Contains(err.Error(), pw) ||
		!strings.Contains(err.Error(), "redis.password: *** contains a control character") {
		t.Errorf("password with a newline: got %v; want an error naming redis.password without the password", err)
	}
	bad.Redis.Password = ""
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `redis.username: "hotkeyd" is set while redis.password is empty`) {
		t.Errorf("username without a password: got %v; want an error", err)
	}
}
