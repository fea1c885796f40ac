package config

import (
	"strings"
	"testing"
)

// TestLoadUnknownEnvironmentVariable: a misspelt HOTKEYD_ variable in the process
// environment is an error naming it and the nearest real one, as an unknown key in the
// file is. Ignoring it would start an agent without, say, its token (HOTKEYD_AUTH_TOKN).
func TestLoadUnknownEnvironmentVariable(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // each must appear in the error; none means no error
		not  string   // must not appear in the error
	}{
		{"typo with a hint", map[string]string{"HOTKEYD_AUTH_TOKN": "s3cret"},
			[]string{"environment HOTKEYD_AUTH_TOKN", "not a hotkeyd setting", "did you mean HOTKEYD_AUTH_TOKEN?"}, "s3cret"},
		{"far from every name", map[string]string{"HOTKEYD_FOO": "1"},
			[]string{"environment HOTKEYD_FOO", "not a hotkeyd setting", "config/example.yaml"}, "did you mean"},
		{"every unknown one is reported", map[string]string{"HOTKEYD_HTTP_LISTN": ":1", "HOTKEYD_UDP_LISTN": ":2"},
			[]string{"HOTKEYD_HTTP_LISTN", "did you mean HOTKEYD_HTTP_LISTEN?", "HOTKEYD_UDP_LISTN"}, ""},
		// Kubernetes gives every pod these for a Service named hotkeyd in its namespace
		// (enableServiceLinks, on by default): refusing them would stop the agent there.
		{"kubernetes service links pass", map[string]string{
			"HOTKEYD_SERVICE_HOST": "10.0.0.1", "HOTKEYD_SERVICE_PORT": "9736",
			"HOTKEYD_SERVICE_PORT_HTTP": "9736", "HOTKEYD_PORT": "tcp://10.0.0.1:9736",
			"HOTKEYD_PORT_9736_TCP": "tcp://10.0.0.1:9736", "HOTKEYD_PORT_9736_TCP_PROTO": "tcp",
			"HOTKEYD_PORT_9736_TCP_PORT": "9736", "HOTKEYD_PORT_9736_TCP_ADDR": "10.0.0.1",
			"HOTKEYD_PORT_9736_UDP": "udp://10.0.0.1:9736", "HOTKEYD_PORT_80_SCTP_ADDR": "10.0.0.1",
		}, nil, ""},
		{"near a service link is still refused", map[string]string{"HOTKEYD_PORT_9736_TCP_HOST": "x"},
			[]string{"environment HOTKEYD_PORT_9736_TCP_HOST", "not a hotkeyd setting"}, ""},
		{"known names and the config file pass", map[string]string{"HOTKEYD_HTTP_LISTEN": "127.0.0.1:1", "HOTKEYD_CONFIG": "", "HOTKEYD_HOT_OVERRIDES": "[]"},
			nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := Load(LoadOptions{})
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("got %v; want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error; want one containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q; want it to contain %q", err, w)
				}
			}
			if tt.not != "" && strings.Contains(err.Error(), tt.not) {
				t.Errorf("got %q; want it not to contain %q", err, tt.not)
			}
		})
	}
}
