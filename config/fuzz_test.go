package config

import (
	"os"
	"reflect"
	"testing"
)

// FuzzLoad feeds random bytes as the config file, and a random HOTKEYD_HOT_OVERRIDES (the
// one variable that holds YAML) when not empty. Load must never panic; it returns an error
// or a Config that passes Validate and survives a round trip through YAML (but for its
// secrets, which YAML prints as a placeholder that Load refuses).
func FuzzLoad(f *testing.F) {
	if example, err := os.ReadFile("example.yaml"); err == nil {
		f.Add(example, "")
	}
	for _, s := range []string{
		"",
		"http:\n  listen: :1\n",
		"hot:\n  overrides:\n    - {pattern: \"a*\", read_rate: 5}\n",
		"redis: {addrs: [a:1, b:2]}\n",
		"detector: {window: 2s, ticks: 20, width: 1024}\n",
		"a: &x [*x]\n",
		"hot: &h {read: *h}\n",
		"log:\n  <<: {level: info}\n",
		"udp: {listen: ~}\nauth: {token: abc}\n",
		"- 1\n",
		"--- \n...\n---\n",
		"hot: {min_rate: .nan, read: {share: 1e-300}}\n",
		"registry:\n  events:\n    - {id: a, patterns: [\"a:*\"], start: \"2026-12-01T19:30:00+01:00\", end: \"2026-12-01T21:30:00+01:00\", lead: 10m}\n",
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte("hot:\n  overrides: [{pattern: a, read_rate: 1}]\n"), `[{pattern: "score:*", read_share: 0.5}]`)
	f.Add([]byte(""), "[{pattern: a, rate: 1}]")
	f.Add([]byte(""), "{")
	f.Fuzz(func(t *testing.T, data []byte, overrides string) {
		file := func(string) ([]byte, error) { return data, nil }
		env := map[string]string{}
		if overrides != "" {
			env["HOTKEYD_HOT_OVERRIDES"] = overrides
		}
		c, err := load(LoadOptions{File: "fuzz.yaml", Env: envMap(env)}, file)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load returned a Config that fails Validate: %v", err)
		}
		y, err := c.YAML()
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		if c.Auth.Token != "" || c.Proxy.UpstreamPassword != "" {
			// Secrets print as the placeholder, which Load refuses; the rest round-trips.
			if _, err := load(LoadOptions{File: "printed.yaml", Env: envMap(nil)}, func(string) ([]byte, error) { return y, nil }); err == nil {
				t.Fatalf("Load of YAML output with a secret's placeholder\n%s\ngot no error; want one", y)
			}
			c.Auth.Token, c.Proxy.UpstreamPassword, c.Proxy.UpstreamUsername = "", "", ""
			if y, err = c.YAML(); err != nil {
				t.Fatalf("YAML: %v", err)
			}
		}
		again, err := load(LoadOptions{File: "printed.yaml", Env: envMap(nil)}, func(string) ([]byte, error) { return y, nil })
		if err != nil {
			t.Fatalf("Load of YAML output\n%s\ngot error %v", y, err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip of\n%s\ngot %+v; want %+v", y, again, c)
		}
	})
}
