package sampler

import "sync"

// probeGate lets clients that connect together share one check that Redis still lets a
// new connection in without AUTH, or with the configured credentials (muxLoop), instead of each dialling Redis in turn. A
// client passes only on a check that started after it came, since Redis may have begun
// to want a password just before: a client that comes while a check runs waits for the
// next one, which every client that came meanwhile shares. Fifty clients connecting at
// once cost two checks rather than fifty: redis-benchmark set up its 50 connections
// through the tap in 24–27 ms with a check each, one at a time under a mutex, and in
// 12.5–13 ms with shared checks; 11.5 ms directly (docs/BENCHMARKS.md).
type probeGate struct {
	mu      sync.Mutex
	running *probeRun // the check under way; nil when none is
	queued  *probeRun // the next check, which clients that came during running wait for
}

// probeRun is one check.
type probeRun struct {
	done    chan struct{} // closed when err is set
	err     error
	waiting int // clients waiting for it besides the one that runs it (tests wait on it)
}

// pass waits for a check that starts after the call, running it with check when no
// other client is to, and returns its error; ran reports whether this client ran it, and
// so is the one to act on a failure.
func (g *probeGate) pass(check func() error) (ran bool, err error) {
	g.mu.Lock()
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
	err := check()
	g.mu.Lock()
	r.err = err
	g.running, g.queued = g.queued, nil
	g.mu.Unlock()
	close(r.done)
	return err
}
