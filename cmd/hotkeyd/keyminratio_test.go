package main

import (
	"log/slog"
	"testing"

	"github.com/hotkeyd/hotkeyd/config"
)

// TestAgentOptionsKeyMinRatio: metrics.key_min_ratio reaches the agent, 0 (every top-k
// key) as a negative ratio, since the agent's zero value picks its default.
func TestAgentOptionsKeyMinRatio(t *testing.T) {
	for _, tt := range []struct {
		ratio float64
		want  func(float64) bool
		what  string
	}{
		{0.1, func(r float64) bool { return r == 0.1 }, "0.1"},
		{0, func(r float64) bool { return r < 0 }, "negative (every top-k key)"},
		{0.3, func(r float64) bool { return r == 0.3 }, "0.3"},
	} {
		cfg := config.Default()
		cfg.Metrics.KeyMinRatio = tt.ratio
		opts, err := agentOptions(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if !tt.want(opts.KeyMinRatio) {
			t.Errorf("metrics.key_min_ratio %v: agent KeyMinRatio %v; want %s", tt.ratio, opts.KeyMinRatio, tt.what)
		}
	}
	if r := config.Default().Metrics.KeyMinRatio; r != 0.3 {
		t.Errorf("default metrics.key_min_ratio %v; want 0.3", r)
	}
}
