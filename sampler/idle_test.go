package sampler

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdleGate: work made at any moment around the sleeper's going to sleep is either
// found by it or wakes it, and leaves no token behind; done ends the sleep.
func TestIdleGate(t *testing.T) {
	g := newIdleGate()
	var work atomic.Uint64 // what the sleeper would look at: how much work was made
	done := make(chan struct{})
	// sleep runs g.sleep with seen as the work the sleeper has already looked at, and
	// returns what it did; a sleep that does not end fails the test rather than hang it.
	sleep := func(what string, seen uint64) bool {
		t.Helper()
		woke := make(chan bool, 1)
		go func() { woke <- g.sleep(func() bool { return work.Load() != seen }, done) }()
		select {
		case ok := <-woke:
			return ok
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still asleep after 10 s", what)
			return false
		}
	}
	awake := func(what string) {
		t.Helper()
		if g.asleep.Load() || len(g.wake) != 0 {
			t.Fatalf("%s: asleep %v, %d tokens left; want awake and none", what, g.asleep.Load(), len(g.wake))
		}
	}
	makeWork := func() {
		work.Add(1)
		g.touch()
	}

	seen := work.Load()
	makeWork()
	if !sleep("work made since the last look", seen) {
		t.Fatal("work made since the last look: false before done; want true")
	}
	awake("work made since the last look")

	for i := range 20000 {
		seen := work.Load()
		var wg sync.WaitGroup
		wg.Go(makeWork)
		if !sleep("work racing the sleep", seen) {
			t.Fatalf("round %d: false before done; want true", i)
		}
		wg.Wait()
		awake("work racing the sleep")
	}

	g.touch() // with no sleeper: no token
	awake("a touch with nobody asleep")

	go func() {
		for !g.asleep.Load() {
			time.Sleep(time.Millisecond)
		}
		close(done)
	}()
	if sleep("done closed", work.Load()) {
		t.Error("done closed: sleep returned true; want false")
	}
}
