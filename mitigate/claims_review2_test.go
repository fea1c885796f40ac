package mitigate

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestSweepTurnRefusedReview2: a Redis user that may use the claims but not SweepKey (an
// ACL written from ExecutorOptions.ID's list) must not turn the periodic scan off in
// silence: the failed SET is counted and logged, and the scan runs all the same, so a
// copy nobody claims is deleted.
func TestSweepTurnRefusedReview2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer admin.Close()
	mustDo(t, admin, "ACL", "SETUSER", "hk", "on", ">pw", "~{hk:*", "~{hotkeyd}claims", "~rv2:*", "+@all")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "hk", Password: "pw"})
	defer rdb.Close()
	b := backend{rdb: admin, topo: StandaloneTopology(s.Addr()), addrs: []string{s.Addr()}}

	stray := b.names(t, "rv2:stray", 2, Copies)
	for _, n := range stray {
		mustDo(t, admin, "SET", n.Name, "old")
	}
	clock := &execClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	buf := &logbuf.Buffer{}
	const grace = time.Minute
	e, err := NewExecutor(ExecutorOptions{Redis: rdb, RefreshPeriod: time.Hour, GracePeriod: grace,
		RescanPeriod: 10 * grace, Now: clock.Now, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(buf, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatalf("NewExecutor: %v", err)
	}
	ex := testExec{e, reg}
	defer e.Close(ctx)
	_ = e.Refresh(ctx) // schedules the sweep
	clock.Add(10*grace + 10*grace/4 + time.Second)
	_ = e.Refresh(ctx) // the sweep is due
	if got := ex.count("", ActionError) + ex.count(Copies, ActionError); got < 1 {
		t.Errorf("error actions after a refused SET %s: got %v; want ≥ 1 (counted and logged)", SweepKey, got)
	}
	if !strings.Contains(buf.String(), "sweep") {
		t.Errorf("log after a refused SET %s does not mention it:\n%s", SweepKey, buf.String())
	}
	b.absent(t, "copy nobody claims, after the due sweep whose turn could not be taken", stray)
}
