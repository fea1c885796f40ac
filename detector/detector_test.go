package detector

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/dataset"
)

var t0 = time.Date(2026, 11, 29, 19, 30, 0, 0, time.UTC)

func TestOptions(t *testing.T) {
	tests := []struct {
		o   Options
		err string
	}{
		{Options{}, ""},
		{Options{Shards: 3}, "shards 3"},
		{Options{Shards: 512}, "shards 512"},
		{Options{Width: 1000}, "width 1000"},
		{Options{Width: 128, Shards: 4}, "width 128"},
		{Options{Tick: time.Microsecond}, "tick 1µs"},
		{Options{Ticks: 2000}, "ticks 2000"},
		{Options{K: -1}, "k -1"},
		{Options{Depth: 20}, "depth 20"},
	}
	for _, tt := range tests {
		_, err := New(tt.o)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("New(%+v): %v; want error containing %q", tt.o, err, tt.err)
		}
	}
}

func TestRankingsAndRates(t *testing.T) {
	d, _ := New(Options{})
	d.Advance(t0)
	for i := 0; i < 300; i++ {
		d.Add([]byte("score:match42"), false, 0, 10, 0) // 3,000 reads
	}
	for i := 0; i < 100; i++ {
		d.Add([]byte("counter:likes"), true, FlagCounter, 10, 0) // 1,000 writes
		d.Add([]byte("score:match42"), true, 0, 1, 0)            // 100 writes
	}
	for i := 0; i < 50; i++ {
		d.Add([]byte(fmt.Sprint("cold:", i)), false, 0, 1, 0)
	}
	now := t0.Add(999 * time.Millisecond)
	d.Advance(now)
	all := d.Snapshot(now, All, 2)
	if len(all.Keys) != 2 || all.Keys[0].Key != "score:match42" || all.Keys[1].Key != "counter:likes" {
		t.Fatalf("combined ranking %+v; want score:match42 then counter:likes", all.Keys)
	}
	if k := all.Keys[0]; k.Reads != 3000 || k.Writes != 100 {
		t.Errorf("score:match42 reads %d writes %d; want 3000, 100", k.Reads, k.Writes)
	}
	if all.Keys[1].Flags&FlagCounter == 0 {
		t.Errorf("counter:likes lost its counter flag")
	}
	if all.Reads != 3050 || all.Writes != 1100 {
		t.Errorf("totals %d reads, %d writes; want 3050, 1100", all.Reads, all.Writes)
	}
	if all.Distinct < 50 || all.Distinct > 54 {
		t.Errorf("distinct %d; want 52 ± 2", all.Distinct)
	}
	// The traffic came within the window: the rate is the count per second over the
	// 900 ms of full ticks plus 99 ms of the current one.
	if all.Covered != 999*time.Millisecond {
		t.Errorf("covered %v; want 999ms", all.Covered)
	}
	if r := all.Rate(all.Keys[0].Reads); math.Abs(r-3000/0.999) > 1e-9 {
		t.Errorf("read rate %v; want 3003/s", r)
	}
	w := d.Snapshot(now, Writes, 0)
	if w.Keys[0].Key != "counter:likes" || w.Keys[1].Key != "score:match42" {
		t.Errorf("write ranking %+v; want counter:likes then score:match42", w.Keys[:2])
	}
	if r := d.Snapshot(now, Reads, 1); r.Keys[0].Key != "score:match42" {
		t.Errorf("read ranking starts with %q; want score:match42", r.Keys[0].Key)
	}
	// Ranked is Snapshot without the distinct count.
	for _, r := range []int{All, Reads, Writes} {
		for _, n := range []int{1, 0} {
			got, want := d.Ranked(now, r, n), d.Snapshot(now, r, n)
			if !slices.Equal(got.Keys, want.Keys) || got.Reads != want.Reads || got.Writes != want.Writes || got.Covered != want.Covered || got.Distinct != 0 {
				t.Errorf("Ranked(ranking %d, n %d) = %+v; want Snapshot's %+v with Distinct 0", r, n, got, want)
			}
		}
	}
}

func TestWindowSlides(t *testing.T) {
	d, _ := New(Options{Tick: 100 * time.Millisecond, Ticks: 10})
	d.Advance(t0)
	d.Add([]byte("flash"), false, 0, 500, 0)
	for i := 1; i <= 9; i++ {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		d.Advance(now)
		if s := d.Snapshot(now, All, 0); len(s.Keys) != 1 || s.Keys[0].Reads != 500 {
			t.Fatalf("after %d ticks: %+v; want flash with 500 reads", i, s.Keys)
		}
	}
	now := t0.Add(time.Second)
	d.Advance(now)
	if s := d.Snapshot(now, All, 0); len(s.Keys) != 0 || s.Reads != 0 {
		t.Errorf("a full window later: %+v, %d reads; want nothing", s.Keys, s.Reads)
	}
	// A long pause clears the window at once.
	d.Add([]byte("flash"), false, 0, 5, 0)
	now = now.Add(time.Hour)
	d.Advance(now)
	if r, _ := d.Estimate([]byte("flash")); r != 0 {
		t.Errorf("an hour later: %d reads; want 0", r)
	}
}

func TestCoveredAtStart(t *testing.T) {
	d, _ := New(Options{})
	d.Advance(t0)
	if c, tick := d.Covered(t0.Add(20 * time.Millisecond)); c != 100*time.Millisecond || tick != 20*time.Millisecond {
		t.Errorf("20 ms after start: covered %v, tick %v; want one tick, 100ms, and 20ms", c, tick)
	}
	if c, _ := d.Covered(t0.Add(450 * time.Millisecond)); c != 450*time.Millisecond {
		t.Errorf("450 ms after start: covered %v; want 450ms", c)
	}
}

// TestWindowedAccuracy slides the default detector over real traces, using the request
// index as time (10,000 requests a tick), and compares each window's top 100 with exact
// counts over the same requests.
func TestWindowedAccuracy(t *testing.T) {
	const perTick = 10_000
	for _, name := range []string{"war_and_peace.txt", "domains.txt"} {
		tr, err := dataset.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := New(Options{})
		now := t0
		d.Advance(now)
		var worst float64 = 1
		for i, k := range tr.Keys {
			if i > 0 && i%perTick == 0 {
				now = now.Add(d.opts.Tick)
				d.Advance(now)
				if i%(5*perTick) == 0 && i >= d.opts.Ticks*perTick {
					// Right after Advance the window holds the Ticks-1 full ticks before
					// the new, empty one.
					exact := dataset.Exact(tr.Keys[i-(d.opts.Ticks-1)*perTick : i])
					snap := d.Snapshot(now, All, 100)
					keys := make([]string, len(snap.Keys))
					for j, k := range snap.Keys {
						keys[j] = k.Key
					}
					recall, _ := dataset.Score(exact, keys, 100)
					worst = min(worst, recall)
				}
			}
			d.Add([]byte(k), false, 0, 1, 0)
		}
		t.Logf("%s: worst windowed top-100 recall %.3f", name, worst)
		if worst < 0.99 {
			t.Errorf("%s: windowed top-100 recall %.3f; want ≥ 0.99", name, worst)
		}
	}
}

// TestNegativeControl: the Corda trace has no key seen more than twice; with the request
// index as time, no key may reach 1 % of a window's traffic.
func TestNegativeControl(t *testing.T) {
	tr, err := dataset.Load(dataset.Negative)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := New(Options{})
	now := t0
	d.Advance(now)
	for i, k := range tr.Keys {
		if i > 0 && i%1000 == 0 {
			now = now.Add(d.opts.Tick)
			d.Advance(now)
			s := d.Snapshot(now, All, 1)
			if len(s.Keys) > 0 && float64(s.Keys[0].Count(All)) >= 0.01*float64(s.Reads+s.Writes) {
				t.Fatalf("request %d: %q has %d of %d requests in the window: over a 1%% share", i, s.Keys[0].Key, s.Keys[0].Count(All), s.Reads+s.Writes)
			}
		}
		d.Add([]byte(k), false, 0, 1, 0)
	}
}

func TestConcurrent(t *testing.T) {
	d, _ := New(Options{Shards: 8})
	d.Advance(t0)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte("key:000")
			for i := 0; i < 20_000; i++ {
				key[4], key[5], key[6] = byte('0'+i%10), byte('0'+i/10%10), byte('0'+g)
				d.Add(key, i%3 == 0, 0, 1, 0)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			d.Advance(now)
			d.Snapshot(now, All, 10)
		}
	}()
	wg.Wait()
	s := d.Snapshot(t0.Add(50*time.Millisecond), All, 0)
	if s.Reads+s.Writes != 80_000 {
		t.Errorf("totals %d; want 80,000", s.Reads+s.Writes)
	}
}

// TestFixedMemory feeds 10M distinct keys (1M under the race detector or -short): the
// detector's heap does not grow with them.
func TestFixedMemory(t *testing.T) {
	n := 10_000_000
	if testing.Short() || raceEnabled {
		n = 1_000_000
	}
	d, _ := New(Options{})
	d.Advance(t0)
	key := []byte("user:session:0000000000")
	fill := func(from, to int) {
		for i := from; i < to; i++ {
			for j, x := len(key)-1, i; j >= len(key)-10; j-- {
				key[j] = byte('0' + x%10)
				x /= 10
			}
			d.Add(key, i%4 == 0, 0, 1, 0)
		}
	}
	fill(0, 100_000) // let key buffers and heaps reach their size
	before := heapInUse()
	fill(100_000, n)
	after := heapInUse()
	growth := int64(after) - int64(before)
	t.Logf("%d distinct keys: sketches %d KiB, heap %d → %d KiB", n, d.SizeBytes()>>10, before>>10, after>>10)
	if growth > 1<<20 {
		t.Errorf("heap grew by %d KiB over %d distinct keys; want < 1 MiB", growth>>10, n)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestBytesRanking(t *testing.T) {
	d, _ := New(Options{Bytes: true})
	d.Advance(t0)
	for i := 0; i < 100; i++ {
		d.Add([]byte("small:many"), false, 0, 10, 10*100)  // 1,000 reads of 100 B
		d.Add([]byte("big:few"), false, 0, 1, 1*1_000_000) // 100 reads of 1 MB
		d.Add([]byte("unknown:size"), false, 0, 20, 0)     // sizes unknown
	}
	now := t0.Add(500 * time.Millisecond)
	s := d.Snapshot(now, Bytes, 0)
	if len(s.Keys) != 2 || s.Keys[0].Key != "big:few" || s.Keys[0].Bytes != 100_000_000 || s.Keys[1].Bytes != 100_000 {
		t.Errorf("bytes ranking %+v; want big:few (100 MB) then small:many (100 kB)", s.Keys)
	}
	if a := d.Snapshot(now, All, 1); a.Keys[0].Key != "unknown:size" {
		t.Errorf("count ranking starts with %q; want unknown:size", a.Keys[0].Key)
	}
	off, _ := New(Options{})
	off.Add([]byte("big:few"), false, 0, 1, 1_000_000)
	if s := off.Snapshot(now, Bytes, 0); len(s.Keys) != 0 {
		t.Errorf("bytes ranking without Options.Bytes: %+v; want empty", s.Keys)
	}
}

// TestAddBatchMatchesAdd: the same stream through Add and through AddBatch gives the same
// rankings and counts.
func TestAddBatchMatchesAdd(t *testing.T) {
	one, _ := New(Options{Bytes: true})
	batch, _ := New(Options{Bytes: true})
	one.Advance(t0)
	batch.Advance(t0)
	var items []Item
	for i := 0; i < 5000; i++ {
		key := []byte(fmt.Sprintf("k%d", i*i%997))
		write, n, size := i%5 == 0, uint32(1+i%3), uint32(i%7*100)
		one.Add(key, write, FlagCounter, n, size)
		items = append(items, Item{Key: key, Write: write, Flags: FlagCounter, N: n, Size: size})
		if len(items) == 50 {
			batch.AddBatch(items)
			items = items[:0]
		}
	}
	now := t0.Add(500 * time.Millisecond)
	for _, r := range []int{All, Reads, Writes, Bytes} {
		a, b := one.Snapshot(now, r, 0), batch.Snapshot(now, r, 0)
		if fmt.Sprint(a.Keys) != fmt.Sprint(b.Keys) || a.Reads != b.Reads || a.Writes != b.Writes {
			t.Errorf("ranking %d: Add and AddBatch differ:\n%v\n%v", r, a.Keys, b.Keys)
		}
	}
}

// TestCombinedRankingSumsBothOps checks that the combined ranking finds a key that is the
// heaviest by reads and writes together although it leads neither the reads nor the
// writes ranking alone.
func TestCombinedRankingSumsBothOps(t *testing.T) {
	d, err := New(Options{K: 1, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	d.Advance(t0)
	for range 15 {
		d.Add([]byte("reader"), false, 0, 1, 0) // 15 reads
	}
	for range 12 {
		d.Add([]byte("writer"), true, 0, 1, 0) // 12 writes
	}
	for range 10 {
		d.Add([]byte("both"), false, 0, 1, 0) // 10 reads …
	}
	for range 10 {
		d.Add([]byte("both"), true, 0, 1, 0) // … and 10 writes: 20 in all, the heaviest
	}
	for _, now := range []time.Time{t0.Add(50 * time.Millisecond), t0.Add(150 * time.Millisecond)} {
		d.Advance(now)
		s := d.Snapshot(now, All, 1)
		if len(s.Keys) != 1 || s.Keys[0].Key != "both" || s.Keys[0].Reads+s.Keys[0].Writes != 20 {
			t.Errorf("at %v: combined ranking %+v; want both with 20 requests", now.Sub(t0), s.Keys)
		}
	}
}
