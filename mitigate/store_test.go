package mitigate

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func entry(key string, expires time.Time) Entry {
	return Entry{Key: key, Kind: L1, Mode: Enforce, Reason: "r", Since: t0, Expires: expires, TTL: Duration(time.Second)}
}

func TestStoreVersions(t *testing.T) {
	s := NewStore(StoreOptions{Now: func() time.Time { return t0 }})
	exp := t0.Add(time.Minute)
	steps := []struct {
		name    string
		publish Plan
		want    uint64
	}{
		{"same empty plan: no bump", Plan{Primaries: 1}, 1},
		{"an entry: bump", Plan{Primaries: 1, Entries: []Entry{entry("a", exp)}}, 2},
		{"same entries, other Generated: no bump", Plan{Generated: t0.Add(time.Hour), Primaries: 1, Entries: []Entry{entry("a", exp)}}, 2},
		{"same instant in another zone: no bump", Plan{Primaries: 1, Entries: []Entry{entry("a", exp.In(time.FixedZone("x", 3600)))}}, 2},
		{"a version given by the caller is ignored", Plan{Version: 99, Primaries: 1, Entries: []Entry{entry("a", exp)}}, 2},
		{"renewed lease: bump", Plan{Primaries: 1, Entries: []Entry{entry("a", exp.Add(time.Second))}}, 3},
		{"other primaries: bump", Plan{Primaries: 3, Entries: []Entry{entry("a", exp.Add(time.Second))}}, 4},
		{"no entries: bump", Plan{Primaries: 3}, 5},
	}
	if got := s.Current(); got.Version != 1 || len(got.Entries) != 0 || got.Entries == nil || !got.Generated.Equal(t0) {
		t.Fatalf("first plan %+v; want version 1, no entries (an empty list), generated now", got)
	}
	for _, st := range steps {
		got := s.Publish(st.publish)
		if got.Version != st.want || s.Current().Version != st.want {
			t.Errorf("%s: Publish gave version %d, Current %d; want %d", st.name, got.Version, s.Current().Version, st.want)
		}
	}
}

// The store keeps its own copy of the entries list.
func TestStorePublishCopies(t *testing.T) {
	s := NewStore(StoreOptions{})
	entries := []Entry{entry("a", t0.Add(time.Minute))}
	s.Publish(Plan{Primaries: 1, Entries: entries})
	entries[0].Key = "changed"
	if got := s.Current().Entries[0].Key; got != "a" {
		t.Fatalf("after the caller changed its slice: key %q; want a", got)
	}
}

func TestStoreWaitAtOnce(t *testing.T) {
	s := NewStore(StoreOptions{})
	s.Publish(Plan{Entries: []Entry{entry("a", t0.Add(time.Minute))}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // proves Wait does not block: a blocking Wait would see the ended ctx and say so
	for _, after := range []uint64{0, 1, 7} {
		p, err := s.Wait(ctx, after)
		if err != nil || p.Version != 2 {
			t.Errorf("Wait(after %d) with version 2 current: got version %d, %v; want version 2 at once", after, p.Version, err)
		}
	}
	p, err := s.Wait(ctx, 2)
	if !errors.Is(err, context.Canceled) || p.Version != 2 {
		t.Errorf("Wait(after 2) with ctx ended: got version %d, %v; want version 2 and context.Canceled", p.Version, err)
	}
}

// A hundred waiters wake on one publish, at once in the bubble's clock; waiters whose
// context ends are released with the same plan; no goroutine is left behind
// (synctest.Test fails if one is).
func TestStoreWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore(StoreOptions{})
		const n = 100
		var woke, timedOut atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range n {
			wg.Go(func() {
				p, err := s.Wait(context.Background(), 1)
				if err != nil || p.Version != 2 {
					t.Errorf("woken waiter: got version %d, %v; want version 2", p.Version, err)
				}
				if d := time.Since(start); d > 0 {
					t.Errorf("woken waiter: woke %v after the publish; want at once", d)
				}
				woke.Add(1)
			})
		}
		synctest.Wait()
		if got := woke.Load(); got != 0 {
			t.Fatalf("%d waiters returned before any publish; want 0", got)
		}
		s.Publish(Plan{Entries: []Entry{entry("a", t0.Add(time.Minute))}})
		synctest.Wait()
		if got := woke.Load(); got != n {
			t.Fatalf("%d of %d waiters woke on the publish; want all", got, n)
		}
		// Waiters that give up: half by deadline, half by cancel.
		cancels := make([]context.CancelFunc, 0, n/2)
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if i%2 == 1 {
				cancels = append(cancels, cancel)
			} else {
				defer cancel()
			}
			wg.Go(func() {
				p, err := s.Wait(ctx, 2)
				if err == nil || p.Version != 2 {
					t.Errorf("released waiter: got version %d, %v; want version 2 and the context's error", p.Version, err)
				}
				timedOut.Add(1)
			})
		}
		synctest.Wait()
		if got := timedOut.Load(); got != 0 {
			t.Fatalf("%d waiters for version 3 returned; want 0", got)
		}
		for _, c := range cancels {
			c()
		}
		synctest.Wait()
		if got := timedOut.Load(); got != n/2 {
			t.Fatalf("%d waiters released by cancel; want %d", got, n/2)
		}
		time.Sleep(30 * time.Second)
		wg.Wait()
		if got := timedOut.Load(); got != n {
			t.Fatalf("%d waiters released after 30s; want %d", got, n)
		}
	})
}

func TestStoreSubscribe(t *testing.T) {
	s := NewStore(StoreOptions{})
	var mu sync.Mutex // guards seenA and seenB
	var seenA, seenB []uint64
	cancelA := s.Subscribe(func(p Plan) { mu.Lock(); seenA = append(seenA, p.Version); mu.Unlock() })
	s.Subscribe(func(p Plan) {
		if cur := s.Current(); cur.Version != p.Version {
			t.Errorf("hook for version %d: Current is version %d; want the same", p.Version, cur.Version)
		}
		mu.Lock()
		seenB = append(seenB, p.Version)
		mu.Unlock()
	})
	exp := t0.Add(time.Minute)
	s.Publish(Plan{Entries: []Entry{entry("a", exp)}})
	s.Publish(Plan{Entries: []Entry{entry("a", exp)}}) // no change, no call
	cancelA()
	s.Publish(Plan{Entries: []Entry{entry("b", exp)}})
	mu.Lock()
	defer mu.Unlock()
	if len(seenA) != 1 || seenA[0] != 2 {
		t.Errorf("cancelled hook saw versions %v; want [2]", seenA)
	}
	if len(seenB) != 2 || seenB[0] != 2 || seenB[1] != 3 {
		t.Errorf("hook saw versions %v; want [2 3]", seenB)
	}
}

// Publishers and waiters from many goroutines (run with -race): every waiter sees
// versions only grow, and every hook call comes in order.
func TestStoreConcurrent(t *testing.T) {
	s := NewStore(StoreOptions{})
	var last atomic.Uint64
	s.Subscribe(func(p Plan) {
		if prev := last.Swap(p.Version); prev >= p.Version {
			t.Errorf("hook: version %d after %d; want increasing", p.Version, prev)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	const publishes = 200
	for g := range 4 {
		wg.Go(func() {
			for i := range publishes / 4 {
				exp := t0.Add(time.Duration(g*1000+i) * time.Second)
				s.Publish(Plan{Entries: []Entry{entry("k", exp)}})
			}
		})
	}
	for range 8 {
		wg.Go(func() {
			after := uint64(1)
			for after < publishes+1 {
				p, err := s.Wait(ctx, after)
				if err != nil {
					t.Errorf("waiter at %d: %v", after, err)
					return
				}
				if p.Version <= after {
					t.Errorf("waiter: version %d after %d; want a newer one", p.Version, after)
					return
				}
				after = p.Version
			}
		})
	}
	wg.Wait()
	if got := s.Current().Version; got != publishes+1 {
		t.Fatalf("version %d after %d distinct publishes; want %d", got, publishes, publishes+1)
	}
}
