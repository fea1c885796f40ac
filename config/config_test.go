package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestExampleFileIsDefault keeps config/example.yaml in step with Default: it must load
// to Default and mention every key.
func TestExampleFileIsDefault(t *testing.T) {
	data, err := os.ReadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, _, err := parseFile("example.yaml", data)
	if err != nil {
		t.Fatalf("parse example.yaml: %v", err)
	}
	for _, f := range fields() {
		if _, ok := set[f.key]; !ok {
			t.Errorf("example.yaml: got no %s; want every key listed", f.key)
		}
	}
	got, err := Load(LoadOptions{File: "example.yaml", Env: envMap(nil)})
	if err != nil {
		t.Fatalf("Load(example.yaml): %v", err)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Load(example.yaml): got %+v; want Default() %+v", got, want)
	}
}

// TestDocListsEveryKey keeps the key table of doc.go complete.
func TestDocListsEveryKey(t *testing.T) {
	data, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, f := range fields() {
		if !strings.Contains(doc, "//\t"+f.key+" ") {
			t.Errorf("doc.go: got no row for %s; want one in the key table", f.key)
		}
	}
}

func TestFields(t *testing.T) {
	envs := map[string]string{}
	for _, f := range fields() {
		if other, dup := envs[f.env]; dup {
			t.Errorf("%s and %s: both got environment variable %s; want one each", f.key, other, f.env)
		}
		envs[f.env] = f.key
	}
	// The outside contract of DESIGN.md.
	contract := map[string]string{
		"http.listen":           "HOTKEYD_HTTP_LISTEN",
		"udp.listen":            "HOTKEYD_UDP_LISTEN",
		"redis.addrs":           "HOTKEYD_REDIS_ADDRS",
		"proxy.listen":          "HOTKEYD_PROXY_LISTEN",
		"proxy.upstream":        "HOTKEYD_PROXY_UPSTREAM",
		"auth.token":            "HOTKEYD_AUTH_TOKEN",
		"metrics.key_min_ratio": "HOTKEYD_METRICS_KEY_MIN_RATIO",
	}
	for key, env := range contract {
		if got := envs[env]; got != key {
			t.Errorf("%s: got key %q; want %q", env, got, key)
		}
	}
	if got, want := len(fields()), 57; got != want {
		t.Errorf("got %d keys; want %d (update the doc.go table, example.yaml and this count)", got, want)
	}
}

func TestClosest(t *testing.T) {
	names := []string{"listen", "max_body_bytes"}
	tests := []struct{ in, want string }{
		{"listn", "listen"},
		{"max_body_byte", "max_body_bytes"},
		{"zzzzzzzz", ""},
	}
	for _, tt := range tests {
		if got := closest(tt.in, names); got != tt.want {
			t.Errorf("closest(%q): got %q; want %q", tt.in, got, tt.want)
		}
	}
}
