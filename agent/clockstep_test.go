package agent

import (
	"log/slog"
	"net/http"
	"testing"
	"time"
	"unsafe"
)

// stepWall returns t, which must carry a monotonic reading, with its wall clock moved by
// d (whole seconds) and its monotonic reading kept: what time.Now returns after NTP steps
// the clock. No exported API builds such a time, so it edits time.Time's representation
// (wall: hasMonotonic bit, 33 bits of seconds since 1885, 30 bits of nanoseconds).
func stepWall(t *testing.T, tm time.Time, d time.Duration) time.Time {
	t.Helper()
	type rep struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if unsafe.Sizeof(tm) != unsafe.Sizeof(rep{}) || tm.Round(0) == tm {
		t.Fatal("stepWall: want a time.Time from time.Now, with a monotonic reading")
	}
	r := (*rep)(unsafe.Pointer(&tm))
	r.wall += uint64(int64(d/time.Second) << 30)
	return tm
}

func TestStepWall(t *testing.T) {
	now := time.Now()
	back := stepWall(t, now, -time.Minute)
	if got := back.Sub(now); got != 0 {
		t.Errorf("monotonic difference %v; want 0", got)
	}
	if got := back.Round(0).Sub(now.Round(0)); got != -time.Minute {
		t.Errorf("wall difference %v; want -1m", got)
	}
}

// TestHealthzClockStepsBack: the evaluation loop stalls 10 s while the wall clock steps
// back a minute. /healthz measures the stall on the monotonic clock and fails; on the wall
// clock the last evaluation would look 50 s in the future and the stall would be hidden.
func TestHealthzClockStepsBack(t *testing.T) {
	c := &clock{t: time.Now()}
	a, err := New(Options{Now: c.now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.det.Advance(c.now())
	a.evaluate()
	c.mu.Lock()
	c.t = stepWall(t, c.t, -time.Minute).Add(10 * time.Second)
	c.mu.Unlock()
	if w := do(t, a.Handler(), "GET", "/healthz", ""); w.Code != http.StatusServiceUnavailable {
		t.Errorf("/healthz 10 s after the last evaluation, clock stepped back 1m: %d %s; want 503", w.Code, w.Body)
	}
}
