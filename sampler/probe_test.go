package sampler

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gateCheck is a check for probeGate tests: each call takes its result from results, in
// order, and counts itself in calls; started gets the call's number as it begins.
type gateCheck struct {
	calls   atomic.Int32
	started chan int32
	results chan error
}

func newGateCheck() *gateCheck {
	return &gateCheck{started: make(chan int32, 16), results: make(chan error, 16)}
}

func (c *gateCheck) check() error {
	c.started <- c.calls.Add(1)
	return <-c.results
}

type passResult struct {
	ran bool
	err error
}

// passAsync calls g.pass on a goroutine and returns where its result arrives.
func passAsync(g *probeGate, c *gateCheck) <-chan passResult {
	out := make(chan passResult, 1)
	go func() {
		ran, err := g.pass(c.check)
		out <- passResult{ran, err}
	}()
	return out
}

// waitFor polls cond under g.mu until it holds.
func waitFor(t *testing.T, g *probeGate, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		ok := cond()
		g.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestProbeGateAlone(t *testing.T) {
	var g probeGate
	c := newGateCheck()
	refused := errors.New("NOAUTH")
	c.results <- refused
	c.results <- nil
	if ran, err := g.pass(c.check); !ran || err != refused {
		t.Fatalf("first client: ran %v, err %v; want true, %v", ran, err, refused)
	}
	if ran, err := g.pass(c.check); !ran || err != nil {
		t.Fatalf("second client, later: ran %v, err %v; want true, nil (a check of its own)", ran, err)
	}
	if n := c.calls.Load(); n != 2 {
		t.Fatalf("checks: %d; want 2", n)
	}
}

// TestProbeGateWaitsForALaterCheck: clients that come while a check runs do not take its
// result (Redis may have started to want AUTH after it began); they share the next one.
func TestProbeGateWaitsForALaterCheck(t *testing.T) {
	var g probeGate
	c := newGateCheck()
	a := passAsync(&g, c)
	if n := <-c.started; n != 1 {
		t.Fatalf("first check's number: %d; want 1", n)
	}

	const later = 5
	results := make([]<-chan passResult, later)
	for i := range results {
		results[i] = passAsync(&g, c)
	}
	waitFor(t, &g, "the later clients wait for the next check", func() bool {
		return g.queued != nil && g.queued.waiting == later-1
	})

	c.results <- nil // the first check lets connections in without AUTH...
	if r := <-a; !r.ran || r.err != nil {
		t.Fatalf("first client: ran %v, err %v; want true, nil", r.ran, r.err)
	}
	if n := <-c.started; n != 2 {
		t.Fatalf("next check's number: %d; want 2", n)
	}
	refused := errors.New("NOAUTH")
	c.results <- refused // ...the next, which started after they came, does not

	ran := 0
	for i, ch := range results {
		r := <-ch
		if r.err != refused {
			t.Errorf("later client %d: err %v; want %v, the next check's", i, r.err, refused)
		}
		if r.ran {
			ran++
		}
	}
	if ran != 1 {
		t.Errorf("later clients that ran the check: %d; want 1", ran)
	}
	if n := c.calls.Load(); n != 2 {
		t.Errorf("checks for %d clients: %d; want 2", later+1, n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running != nil || g.queued != nil {
		t.Errorf("after the checks: running %v, queued %v; want none", g.running, g.queued)
	}
}

// TestProbeGateMany runs many clients at once under the race detector: every one gets a
// check's result, and each check is run by exactly one of them.
func TestProbeGateMany(t *testing.T) {
	var g probeGate
	var calls atomic.Int32
	check := func() error {
		calls.Add(1)
		time.Sleep(time.Millisecond)
		return nil
	}
	const clients = 200
	var wg sync.WaitGroup
	var ran atomic.Int32
	for range clients {
		wg.Go(func() {
			r, err := g.pass(check)
			if err != nil {
				t.Errorf("pass: %v", err)
			}
			if r {
				ran.Add(1)
			}
		})
	}
	wg.Wait()
	if n, r := calls.Load(), ran.Load(); n != r || n < 1 || n > clients {
		t.Fatalf("checks %d, clients that ran one %d; want the same, 1..%d", n, r, clients)
	}
}

// TestProbeGateFresh: with fresh, a check that passed lets clients in without another
// until fresh after it started; one that failed lets none in, and the next client runs
// a check again.
func TestProbeGateFresh(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := &probeGate{fresh: time.Second, now: func() time.Time { return now }}
	c := newGateCheck()
	pass := func(what string, wantRan bool, result error) {
		t.Helper()
		if wantRan {
			c.results <- result
		}
		before := c.calls.Load()
		ran, err := g.pass(c.check)
		if ran != wantRan || (c.calls.Load() > before) != wantRan || !errors.Is(err, result) {
			t.Fatalf("%s: ran %v (checks %d → %d), err %v; want ran %v, err %v", what, ran, before, c.calls.Load(), err, wantRan, result)
		}
		if wantRan {
			<-c.started
		}
	}
	pass("first client", true, nil)
	now = now.Add(999 * time.Millisecond)
	pass("a client just within fresh", false, nil)
	now = now.Add(time.Millisecond)
	pass("a client at fresh", true, nil)
	now = now.Add(500 * time.Millisecond)
	failed := errors.New("NOAUTH")
	g.passedAt(now.Add(-2 * time.Second)) // older than the last check: changes nothing
	now = now.Add(600 * time.Millisecond)
	pass("a client after fresh, Redis wanting a password", true, failed)
	pass("the next client", true, nil)
	g.passedAt(now.Add(time.Second)) // the shared connections opened later
	now = now.Add(1500 * time.Millisecond)
	pass("a client within fresh of the shared connections' opening", false, nil)

	// Shared connections that began to open before a check that failed, and were let in,
	// say nothing of Redis after that check (found by a review: they made the failure
	// count for nothing).
	now = now.Add(time.Minute)
	opening := now
	now = now.Add(time.Millisecond)
	pass("a client while the shared connections open, Redis now wanting a password", true, failed)
	g.passedAt(opening)
	pass("the next client", true, nil)

	// Nor shared connections that began to open after such a check began but before it
	// ended: the check may have seen Redis after they did (found by the verifying review).
	now = now.Add(time.Minute)
	r := passAsync(g, c)
	<-c.started // the check began
	now = now.Add(time.Millisecond)
	opening = now // the shared connections begin to open, and are let in
	now = now.Add(time.Millisecond)
	c.results <- failed // the check ends: Redis wants a password
	if res := <-r; !res.ran || !errors.Is(res.err, failed) {
		t.Fatalf("a check that failed: ran %v, err %v; want true, %v", res.ran, res.err, failed)
	}
	g.passedAt(opening)
	pass("a client after the check that failed, the shared connections' opening recorded after it", true, nil)
}
