package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/registry"
)

// TestAgentKeepsEventsWhenRedisLosesThem: Redis loses its data (FLUSHALL: a restart
// without persistence) under an agent whose store does not restore it. The agent reads
// version 0 with no events, which no change produces, and keeps arming what it had,
// instead of disarming every running event; once Redis holds a registry again, the agent
// follows it.
func TestAgentKeepsEventsWhenRedisLosesThem(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	a, c, h, _ := fleetAgent(t, srv.Addr())
	postFleetEvents(t, h, "a")
	a.evaluate()
	if got := indexed(a, "a"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("agent arms %v; want [a]", got)
	}
	if _, err := redistest.Command(srv.Addr(), "", "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	c.add(time.Second)
	a.evaluate()
	if got := indexed(a, "a"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("agent arms %v after Redis lost its data; want [a] kept", got)
	}
	postFleetEvents(t, h, "b")
	c.add(time.Second)
	a.evaluate()
	if got := indexed(a, "a", "b"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("agent arms %v once Redis holds a registry again; want [b], what it holds", got)
	}
}

// TestAgentLogsVersionFailuresOncePerMinute: with Redis down the agent checks the
// registry every second; it logs the first failure, then one line a minute, and one line
// when it reads again, not a warning a second.
func TestAgentLogsVersionFailuresOncePerMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	a, c, h, _ := fleetAgent(t, srv.Addr())
	var logs bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&logs, nil))
	postFleetEvents(t, h, "a")
	a.evaluate()
	srv.Stop()
	for range 150 {
		c.add(time.Second)
		a.evaluate()
	}
	if n := strings.Count(logs.String(), "registry: reading the version"); n != 3 {
		t.Errorf("150 s of Redis down logged %d warnings about the version:\n%s\nwant 3 (the first, then once a minute)", n, logs.String())
	}
	redistest.StartAt(t, srv.Addr())
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !strings.Contains(logs.String(), "reads again"); {
		time.Sleep(100 * time.Millisecond) // the client's pool redials after a pause
		c.add(time.Second)
		a.evaluate()
	}
	if !strings.Contains(logs.String(), "registry: the version reads again") {
		t.Errorf("logs:\n%s\nwant a line when the version reads again", logs.String())
	}
}

// TestRegistryPostPastMaxEvents: POST past registry.MaxEvents answers 400 naming the limit.
func TestRegistryPostPastMaxEvents(t *testing.T) {
	ctx := context.Background()
	store := registry.NewMemory(registry.MemoryOptions{})
	_, _, h := newTestAgent(t, Options{Events: store})
	for i := range registry.MaxEvents {
		w := do(t, h, "POST", "/v1/registry", fleetEvent(fmt.Sprintf("ev%04d", i)))
		if w.Code != http.StatusCreated {
			t.Fatalf("POST #%d: %d %s", i, w.Code, w.Body)
		}
	}
	w := do(t, h, "POST", "/v1/registry", fleetEvent("one-too-many"))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), fmt.Sprint(registry.MaxEvents)) {
		t.Errorf("POST past %d events: %d %s; want 400 naming the limit", registry.MaxEvents, w.Code, w.Body)
	}
	if evs, _ := store.List(ctx); len(evs) != registry.MaxEvents {
		t.Errorf("%d events stored; want %d", len(evs), registry.MaxEvents)
	}
}
