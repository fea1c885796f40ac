package sampler

import (
	"sync"
	"time"
)

// probeGate lets clients that connect together share one check that Redis still lets a
// new connection in without AUTH, or with the configured credentials (muxLoop), instead
// of each dialling Redis in turn. A client passes only on a check that started after it
// came, since Redis may have begun to want a password just before: a client that comes
// while a check runs waits for the next one, which every client that came meanwhile
// shares. Fifty clients connecting at once cost two checks rather than fifty:
// redis-benchmark set up its 50 connections through the tap in 24–27 ms with a check
// each, one at a time under a mutex, and in 12.5–13 ms with shared checks; 11.5 ms
// directly (docs/BENCHMARKS.md).
//
// With fresh set, a check that passed lets in the clients that come for fresh after it
// started, without another: a client that connects costs Redis no connection of its own
// then, and waits for no round trip (ProxyOptions.AccessCheckTTL).
type probeGate struct {
	mu      sync.Mutex
	running *probeRun        // the check under way; nil when none is
	queued  *probeRun        // the next check, which clients that came during running wait for
	fresh   time.Duration    // how long a check that passed lets clients in; 0: none but those it started after
	now     func() time.Time // time.Now, or a test's clock; used with fresh
	passed  time.Time        // when the last check started, if it passed; zero otherwise
	failed  time.Time        // when the last check that failed ended: no check that started before counts
}

// probeRun is one check.
type probeRun struct {
	done    chan struct{} // closed when err is set
	err     error
	waiting int // clients waiting for it besides the one that runs it (tests wait on it)
}

// pass waits for a check that starts after the call, running it with check when no
// other client is to, and returns its error; ran reports whether this client ran it, and
// so is the one to act on a failure. With fresh, while the last check passed and started
// less than fresh ago, it returns nil at once.
func (g *probeGate) pass(check func() error) (ran bool, err error) {
	g.mu.Lock()
	if g.fresh > 0 && !g.passed.IsZero() && g.now().Sub(g.passed) < g.fresh {
		g.mu.Unlock()
		return false, nil
	}
	if g.running == nil {
		r := &probeRun{done: make(chan struct{})}
		g.running = r
		g.mu.Unlock()
		return true, g.run(r, check)
	}
	// The check under way started before this client came: wait for the next one,
	// and run it if no one else came first.
	r, cur := g.queued, g.running
	if r != nil {
		r.waiting++
		g.mu.Unlock()
		<-r.done
		return false, r.err
	}
	r = &probeRun{done: make(chan struct{})}
	g.queued = r
	g.mu.Unlock()
	<-cur.done // finishing cur made r the running check
	return true, g.run(r, check)
}

// run runs check as r and, once it is done, makes the queued check the running one.
func (g *probeGate) run(r *probeRun, check func() error) error {
	start := g.start()
	err := check()
	g.mu.Lock()
	r.err = err
	if err != nil {
		g.passed = time.Time{} // Redis may want a password now
		if g.fresh > 0 {
			// Its end, not its start: a check that started before it ended and passed,
			// as the shared connections' opening may (passedAt), may have seen Redis
			// before the change this one saw.
			g.failed = g.now()
		}
	} else if start.After(g.passed) && start.After(g.failed) {
		g.passed = start
	}
	g.running, g.queued = g.queued, nil
	g.mu.Unlock()
	close(r.done)
	return err
}

// start returns the time a check starts at, for passed: zero without fresh.
func (g *probeGate) start() time.Time {
	if g.fresh == 0 {
		return time.Time{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now()
}

// passedAt records that a check that started at start passed outside the gate, as
// opening the shared connections does; one that started before the last check that
// failed ended counts for nothing.
func (g *probeGate) passedAt(start time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fresh > 0 && start.After(g.passed) && start.After(g.failed) {
		g.passed = start
	}
}
