package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestCleanStopLogsNoWarning: a SIGTERM (Run's context ending) is the normal way to stop;
// with redis.addrs set the agent must not log it as a warning ("mitigation executor
// stopped" err="context canceled"), which an operator would take for a fault.
func TestCleanStopLogsNoWarning(t *testing.T) {
	srv := redistest.Start(t)
	var logs logbuf.Buffer
	a, err := New(Options{
		HTTPListen: "127.0.0.1:0", UDPListen: "127.0.0.1:0",
		RedisAddrs: []string{srv.Addr()},
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFor(t, func() bool { return a.redis.Load() != nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := logs.String()
	if !strings.Contains(out, "hotkeyd agent stopped") {
		t.Fatalf("no \"hotkeyd agent stopped\" line in\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("clean stop logged %q; want no warning or error", line)
		}
	}
}
