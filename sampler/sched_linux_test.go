//go:build linux

package sampler_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/internal/threadsched"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// schedInterval is how often the tests' proxies look at their clients' reads.
const schedInterval = 20 * time.Millisecond

// schedLoad runs conns clients against addr until the returned stop is called, each
// writing depth GETs at a time and reading their replies before the next write.
func schedLoad(t *testing.T, addr string, conns, depth int) (stop func()) {
	t.Helper()
	var req strings.Builder
	for i := range depth {
		req.WriteString(muxCmd("GET", muxKey("sched", i)))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range conns {
		c := muxDial(t, addr)
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := c.Write([]byte(req.String())); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				for range depth {
					if got, err := muxReadReply(c.r); err != nil || got != "$-1\r\n" {
						t.Errorf("GET through the proxy: %q, %v; want a nil bulk", muxShort(got), err)
						return
					}
				}
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// threadsAre reports whether every thread of the test process has policy want.
func threadsAre(t *testing.T, want threadsched.Policy) bool {
	t.Helper()
	got, err := threadsched.Process()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if p != want {
			return false
		}
	}
	return true
}

// schedProxy starts a proxy with policy in front of a Redis of its own.
func schedProxy(t *testing.T, policy sampler.SchedPolicy, log *slog.Logger) *sampler.Proxy {
	t.Helper()
	srv := redistest.Start(t)
	return startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(),
		SchedPolicy: policy, SchedInterval: schedInterval, Logger: log})
}

// closeRestores closes p and checks that the threads run as SCHED_OTHER again.
func closeRestores(t *testing.T, p *sampler.Proxy) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if p.Stats().SchedBatch || !threadsAre(t, threadsched.Normal) {
		t.Error("after Close: threads left as SCHED_BATCH; want SCHED_OTHER")
	}
}

// normalProcess checks that the test process runs as SCHED_OTHER and makes it so again
// when the test ends.
func normalProcess(t *testing.T) {
	t.Helper()
	if !threadsAre(t, threadsched.Normal) {
		t.Fatal("the test process does not run as SCHED_OTHER to begin with")
	}
	t.Cleanup(func() {
		if _, err := threadsched.SetProcess(threadsched.Normal); err != nil {
			t.Error(err)
		}
	})
}

// TestProxySchedAuto: pipelining clients switch the threads to SCHED_BATCH, clients
// that send one command at a time switch them back, and Close leaves them SCHED_OTHER.
func TestProxySchedAuto(t *testing.T) {
	normalProcess(t)
	p := schedProxy(t, sampler.SchedAuto, nil)
	addr := p.Addr().String()

	stop := schedLoad(t, addr, 4, 1)
	time.Sleep(10 * schedInterval)
	if p.Stats().SchedBatch || !threadsAre(t, threadsched.Normal) {
		t.Fatal("clients sending one command at a time: SCHED_BATCH; want SCHED_OTHER")
	}
	stop()

	stop = schedLoad(t, addr, 4, 16)
	waitFor(t, "pipelining clients to switch the proxy to SCHED_BATCH", func() bool { return p.Stats().SchedBatch })
	waitFor(t, "every thread to run as SCHED_BATCH", func() bool { return threadsAre(t, threadsched.Batch) })
	stop()
	time.Sleep(5 * schedInterval) // idle: too few reads to decide anything
	if !p.Stats().SchedBatch {
		t.Error("idle after pipelining: back to SCHED_OTHER; want the policy kept until reads decide")
	}

	stop = schedLoad(t, addr, 4, 1)
	waitFor(t, "unpipelined clients to switch the proxy back", func() bool { return !p.Stats().SchedBatch })
	waitFor(t, "every thread to run as SCHED_OTHER", func() bool { return threadsAre(t, threadsched.Normal) })
	stop()

	stop = schedLoad(t, addr, 4, 16)
	waitFor(t, "pipelining clients to switch the proxy to SCHED_BATCH again", func() bool { return p.Stats().SchedBatch })
	stop()
	closeRestores(t, p)
}

// TestProxySchedSleepsWhileIdle: after a second without client reads, auto's check
// sleeps; the next read wakes it, and it decides as before, in whichever policy it
// slept; Close ends a sleeping check and gives SCHED_OTHER back.
func TestProxySchedSleepsWhileIdle(t *testing.T) {
	normalProcess(t)
	p := schedProxy(t, sampler.SchedAuto, nil)
	addr := p.Addr().String()
	asleep := func() bool { return sampler.SchedAsleep(p) }
	waitFor(t, "the check to sleep before any client came", asleep)

	stop := schedLoad(t, addr, 4, 16)
	waitFor(t, "pipelining clients to wake the check and switch to SCHED_BATCH", func() bool { return p.Stats().SchedBatch })
	if asleep() {
		t.Error("clients reading: the check sleeps; want it awake")
	}
	stop()
	waitFor(t, "the check to sleep in SCHED_BATCH", asleep)
	if !p.Stats().SchedBatch || !threadsAre(t, threadsched.Batch) {
		t.Error("asleep after pipelining: the policy changed; want SCHED_BATCH kept until reads decide")
	}

	stop = schedLoad(t, addr, 4, 1)
	waitFor(t, "unpipelined clients to wake the check and switch back", func() bool { return !p.Stats().SchedBatch })
	stop()
	waitFor(t, "the check to sleep in SCHED_OTHER", asleep)

	stop = schedLoad(t, addr, 4, 16)
	waitFor(t, "pipelining clients to wake it again", func() bool { return p.Stats().SchedBatch })
	stop()
	waitFor(t, "the check to sleep again", asleep)
	closeRestores(t, p)
}

// TestProxySchedBatch: SchedBatch holds the threads at SCHED_BATCH while the proxy
// serves, with no traffic at all, and gives SCHED_OTHER back on Close.
func TestProxySchedBatch(t *testing.T) {
	normalProcess(t)
	p := schedProxy(t, sampler.SchedBatch, nil)
	waitFor(t, "every thread to run as SCHED_BATCH", func() bool { return p.Stats().SchedBatch && threadsAre(t, threadsched.Batch) })
	closeRestores(t, p)
}

// TestProxySchedLeavesChrt: in a process started with another policy (chrt -b), auto
// leaves it alone, whatever the clients do.
func TestProxySchedLeavesChrt(t *testing.T) {
	normalProcess(t)
	if _, err := threadsched.SetProcess(threadsched.Batch); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	p := schedProxy(t, sampler.SchedAuto, slog.New(slog.NewTextHandler(&logs, nil)))
	waitFor(t, "the proxy to log that it leaves the policy alone", func() bool {
		return strings.Contains(logs.String(), "already has a scheduling policy")
	})
	stop := schedLoad(t, p.Addr().String(), 4, 1)
	time.Sleep(10 * schedInterval)
	stop()
	if p.Stats().SchedBatch || !threadsAre(t, threadsched.Batch) {
		t.Errorf("auto in a SCHED_BATCH process: it changed the policy (stats %v); want it left as it was", p.Stats().SchedBatch)
	}
}
