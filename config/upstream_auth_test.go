package config

import (
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
