// Package agenttest runs a real hotkeyd agent for tests of other packages: on loopback
// ports, quiet, stopped (and its Run error checked) when the test ends.
package agenttest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/hotkeyd/hotkeyd/agent"
)

// Run starts an agent with o, its HTTP API on a free loopback port unless o says
// otherwise, and its logs discarded unless o has a logger. The test fails if the agent
// cannot start or if Run returns an error when the test ends.
func Run(t testing.TB, o agent.Options) *agent.Agent {
	t.Helper()
	if o.HTTPListen == "" {
		o.HTTPListen = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := agent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
	return a
}
