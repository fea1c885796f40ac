package sampler

import "time"

// SchedAsleep reports whether p's SchedAuto check sleeps until a client reads, for the
// tests of package sampler_test.
func SchedAsleep(p *Proxy) bool { return p.stats.schedIdle.asleep.Load() }

// SetSharedRetry sets how long p gives new clients connections of their own after a
// shared connection failed (10 s otherwise).
func SetSharedRetry(p *Proxy, d time.Duration) {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	p.muxRetry = d
}
