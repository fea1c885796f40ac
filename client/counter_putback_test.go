package client

import (
	"math"
	"testing"
	"time"
)

// TestPutBack: a sum whose flush failed goes back to the key's pending sums. Alone, it is
// due after the wait; merged with Adds that came during the flush, it keeps every add,
// the most tries and waits of the two, and the later due time; a merge that would
// overflow an int64 is refused and changes nothing.
func TestPutBack(t *testing.T) {
	k := newCounter(nil)
	now := time.Unix(1_000, 0)
	pending := func(key string) *batch { return k.stripe(key).pending[key] }

	failed := &batch{sum: 5, adds: 2, tries: 2, waits: 1}
	if due, ok := k.putBack("a", failed, now, time.Second); !ok || !due.Equal(now.Add(time.Second)) {
		t.Fatalf("putBack alone = %v, %v; want %v, true", due, ok, now.Add(time.Second))
	}
	if b := pending("a"); b != failed || b.sum != 5 || !b.due.Equal(now.Add(time.Second)) {
		t.Fatalf("pending a = %+v; want the failed batch, due after the wait", b)
	}

	// Adds during the flush made a newer sum, due later than the wait.
	later := now.Add(5 * time.Second)
	k.stripe("b").pending["b"] = &batch{sum: 7, adds: 3, tries: 0, waits: 3, due: later}
	due, ok := k.putBack("b", &batch{sum: -2, adds: 1, tries: 4, waits: 1}, now, time.Second)
	b := pending("b")
	if !ok || !due.Equal(later) || b.sum != 5 || b.adds != 4 || b.tries != 4 || b.waits != 3 || !b.due.Equal(later) {
		t.Errorf("merge into a later sum: due %v, ok %v, pending %+v; want due %v, sum 5, adds 4, tries 4, waits 3", due, ok, b, later)
	}
	// A newer sum due sooner than the wait: the merged sum waits.
	k.stripe("c").pending["c"] = &batch{sum: 1, adds: 1, due: now}
	if due, ok := k.putBack("c", &batch{sum: 1, adds: 1}, now, 2*time.Second); !ok || !due.Equal(now.Add(2*time.Second)) {
		t.Errorf("merge into a sooner sum: due %v, %v; want %v", due, ok, now.Add(2*time.Second))
	}

	k.stripe("d").pending["d"] = &batch{sum: math.MaxInt64 - 1, adds: 1, due: now}
	if _, ok := k.putBack("d", &batch{sum: 2, adds: 1}, now, time.Second); ok {
		t.Error("putBack of a sum that overflows: ok; want refused")
	}
	if b := pending("d"); b.sum != math.MaxInt64-1 || b.adds != 1 {
		t.Errorf("pending d after a refused merge = %+v; want unchanged", b)
	}
}
