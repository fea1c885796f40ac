package sampler

// SchedAsleep reports whether p's SchedAuto check sleeps until a client reads, for the
// tests of package sampler_test.
func SchedAsleep(p *Proxy) bool { return p.stats.schedIdle.asleep.Load() }
