package sampler

import "sync/atomic"

// idleGate lets a goroutine that wakes on a timer sleep while it has nothing to do, and
// wakes it when there is: the goroutines that make its work call touch once the work is
// in place. SchedAuto's check sleeps on one (Proxy.sleepUntilRead).
//
// sleep sets asleep before it looks for work, and touch is called after the work is in
// place and only then looks at asleep. Go's atomics are sequentially consistent, so one
// of the two sides sees the other's store: the work is either found by sleep or wakes
// it, never lost between them.
type idleGate struct {
	asleep atomic.Bool
	wake   chan struct{} // capacity 1: the token of the touch that took asleep
}

func newIdleGate() idleGate {
	return idleGate{wake: make(chan struct{}, 1)}
}

// touch wakes the sleeper, if it sleeps. A single atomic load when it does not.
func (g *idleGate) touch() {
	if g.asleep.Load() && g.asleep.CompareAndSwap(true, false) {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// sleep parks until a touch, unless busy reports work already; true when there is work,
// false when done closed first.
func (g *idleGate) sleep(busy func() bool, done <-chan struct{}) bool {
	g.asleep.Store(true)
	if busy() {
		if !g.asleep.CompareAndSwap(true, false) {
			<-g.wake // the touch that took the flag sends its token
		}
		return true
	}
	select {
	case <-g.wake:
		return true
	case <-done:
		g.asleep.Store(false)
		return false
	}
}
