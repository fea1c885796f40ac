package mitigate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSlotTags(t *testing.T) {
	for s := range SlotCount {
		tag := slotTag(s)
		if got := Slot(tag + "anything"); got != s {
			t.Fatalf("Slot(%q + key): got %d; want %d", tag, got, s)
		}
	}
	for _, key := range []string{"likes:post:9", "{user1}likes", "x"} {
		for _, sub := range []string{"{hk:sub1:40916}" + key, "{hk:sub2:7}" + key} {
			st := stashName(sub)
			if Slot(st) != Slot(sub) {
				t.Errorf("stash %q: slot %d; want the sub-counter's %d", st, Slot(st), Slot(sub))
			}
			if got, ok := stashSub(st); !ok || got != sub {
				t.Errorf("stashSub(%q): got %q, %v; want %q, true", st, got, ok, sub)
			}
			if _, _, _, ok := ParseName(st); ok {
				t.Errorf("ParseName(%q): ok; a stash must never read as a copy or sub-counter", st)
			}
		}
		id := "0123456789abcdef0123456789abcdef"
		for _, n := range []string{doneName(key, id), genName(key)} {
			if Slot(n) != Slot(key) {
				t.Errorf("%q: slot %d; want the key's %d", n, Slot(n), Slot(key))
			}
			if _, _, _, ok := ParseName(n); ok {
				t.Errorf("ParseName(%q): ok; want false", n)
			}
		}
	}
	for _, n := range []string{"{hk:sub1:5}k", "{hk:t3}stash:", "{hk:t3}gen:k", "stash:{hk:sub1:5}k"} {
		if sub, ok := stashSub(n); ok {
			t.Errorf("stashSub(%q): got %q, true; want false", n, sub)
		}
	}
}

// testCounterExact is the proof: writers increment a counter while the test turns
// its sharding on and off (the executor folding each time); concurrent readers never see
// more than was started nor less than was acknowledged before they read, and the final
// value is exact with no sub-counter left.
func testCounterExact(t *testing.T, b backend) {
	const (
		key     = "cx:likes:post:9"
		writers = 8
		each    = 2000
		readers = 2
		flips   = 8 // on → off, at most this many times
	)
	ctx := context.Background()
	subs3 := b.names(t, key, 3, ShardedCounter)
	subs2 := subs3[:2] // the second time on, fewer sub-counters
	e := newTestExecutor(t, b, 50*time.Millisecond, 200*time.Millisecond)
	stop := e.run(t)
	defer stop()

	var cur atomic.Pointer[[]Node] // the sub-counters writers use now; nil: not sharded
	var started, acked atomic.Int64
	var wg, rwg sync.WaitGroup
	writeErr := make(chan error, writers+readers)
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range each {
				var subs []Node
				if p := cur.Load(); p != nil {
					subs = *p
				}
				started.Add(1)
				if err := IncrCounterRand(ctx, b.rdb, r, key, subs, 1); err != nil {
					writeErr <- err
					return
				}
				acked.Add(1)
			}
		})
	}
	var reads, bad atomic.Int64
	readersDone := make(chan struct{})
	for range readers {
		rwg.Go(func() {
			for {
				select {
				case <-readersDone:
					return
				default:
				}
				lo := acked.Load()
				v, err := ReadCounter(ctx, b.rdb, key, subs3)
				hi := started.Load()
				if err != nil {
					writeErr <- fmt.Errorf("ReadCounter: %w", err)
					return
				}
				reads.Add(1)
				if v < lo || v > hi {
					if bad.Add(1) <= 5 {
						t.Errorf("ReadCounter: got %d; want within [%d acknowledged before, %d started after]", v, lo, hi)
					}
				}
			}
		})
	}

	// Flip while the writers run.
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	on := 0
flipping:
	for i := 0; i < flips; i++ {
		subs := subs3
		if i%2 == 1 {
			subs = subs2
		}
		if err := e.Apply(ctx, execPlan(execEntry(key, ShardedCounter, Enforce, subs))); err != nil {
			t.Errorf("Apply on: %v", err)
		}
		cur.Store(&subs)
		on++
		select {
		case <-writersDone:
			cur.Store(nil)
			break flipping
		case <-time.After(60 * time.Millisecond):
		}
		cur.Store(nil)
		if err := e.Apply(ctx, execPlan()); err != nil {
			t.Errorf("Apply off: %v", err)
		}
		select {
		case <-writersDone:
			break flipping
		case <-time.After(60 * time.Millisecond):
		}
	}
	<-writersDone
	close(readersDone)
	rwg.Wait()
	close(writeErr)
	for err := range writeErr {
		t.Fatal(err)
	}
	// The last off, and one more round for increments of writers that had not heard it.
	if err := e.Apply(ctx, execPlan()); err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	want := int64(writers * each)
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != want {
		t.Errorf("GET %s after the last fold: got %d, %v; want %d", key, got, err, want)
	}
	if got, err := ReadCounter(ctx, b.rdb, key, subs3); err != nil || got != want {
		t.Errorf("ReadCounter after the last fold: got %d, %v; want %d", got, err, want)
	}
	b.noneLeft(t, "{hk:sub*", "{hk:t*}stash:*")
	folds := e.count(ShardedCounter, ActionCounterFold)
	t.Logf("%d increments, %d times on, %d reads (%d out of bounds), %v folds", want, on, reads.Load(), bad.Load(), folds)
	if on < 2 || folds < 2 {
		t.Errorf("sharding on %d times with %v folds; want the writers to span at least two on → off transitions", on, folds)
	}
}

// testCounterCrash: a fold interrupted after step a, and another after steps a and b,
// are completed by the next executor's Recover, and the value stays exact throughout.
func testCounterCrash(t *testing.T, b backend) {
	ctx := context.Background()
	const key = "cc:likes:post:3"
	subs := b.names(t, key, 3, ShardedCounter)
	for _, c := range []struct {
		name string
		n    int64
	}{{key, 10}, {subs[0].Name, 5}, {subs[1].Name, 7}, {subs[2].Name, 11}} {
		if err := b.rdb.Do(ctx, "INCRBY", c.name, c.n).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const want = 33
	check := func(when string) {
		t.Helper()
		if got, err := ReadCounter(ctx, b.rdb, key, subs); err != nil || got != want {
			t.Fatalf("ReadCounter %s: got %d, %v; want %d", when, got, err, want)
		}
	}
	check("before")
	// Crash after step a on sub 1.
	if err := foldMove.run(ctx, b.rdb, []string{subs[0].Name, stashName(subs[0].Name)}, "crash-after-a").Err(); err != nil {
		t.Fatal(err)
	}
	check("after step a")
	// Crash after steps a and b on sub 2; then a writer increments sub 2 again.
	if err := foldMove.run(ctx, b.rdb, []string{subs[1].Name, stashName(subs[1].Name)}, "crash-after-b").Err(); err != nil {
		t.Fatal(err)
	}
	if err := foldApply.run(ctx, b.rdb, []string{key, genName(key), doneName(key, "crash-after-b")}, "7", "60000", "0").Err(); err != nil {
		t.Fatal(err)
	}
	check("after steps a and b")
	if err := b.rdb.Do(ctx, "INCRBY", subs[1].Name, 100).Err(); err != nil {
		t.Fatal(err)
	}
	const want2 = want + 100

	// A new agent starts: Recover completes both folds and folds what is left.
	e := newTestExecutor(t, b, time.Hour, time.Hour)
	if err := e.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if got, err := b.rdb.Do(ctx, "GET", key).Int64(); err != nil || got != want2 {
		t.Errorf("GET %s after Recover: got %d, %v; want %d", key, got, err, want2)
	}
	if got, err := ReadCounter(ctx, b.rdb, key, subs); err != nil || got != want2 {
		t.Errorf("ReadCounter after Recover: got %d, %v; want %d", got, err, want2)
	}
	b.noneLeft(t, "{hk:sub*", "{hk:t*}stash:*")
	if got := e.count(ShardedCounter, ActionCounterRecover); got != 2 {
		t.Errorf("counter_recover: got %v; want 2", got)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
