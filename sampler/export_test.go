package sampler

import "time"

// SchedAsleep reports whether p's SchedAuto check sleeps until a client reads, for the
// tests of package sampler_test.
func SchedAsleep(p *Proxy) bool { return p.stats.schedIdle.asleep.Load() }

// SetPauseLimit sets how long p's clients wait while it holds MaxOutputBytes before it
// cuts those holding the most (a second otherwise). Call it before the first client.
func SetPauseLimit(p *Proxy, d time.Duration) { p.pauseFor = d }

// SetSharedRetry sets how long p gives new clients connections of their own after a
// shared connection failed (10 s otherwise).
func SetSharedRetry(p *Proxy, d time.Duration) {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	p.muxRetry = d
}

// SetAccessClock gives p's check that Redis lets new connections in (AccessCheckTTL) a
// clock of the test's.
func SetAccessClock(p *Proxy, now func() time.Time) {
	p.probes.mu.Lock()
	defer p.probes.mu.Unlock()
	p.probes.now = now
}
