package detector

import (
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/dataset"
)

var sink uint64

func benchKeys(b *testing.B) [][]byte {
	b.Helper()
	tr, err := dataset.Load("war_and_peace.txt")
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, len(tr.Keys))
	for i, k := range tr.Keys {
		keys[i] = []byte(k)
	}
	return keys
}

// BenchmarkUpdate is the per-sample core: sketch update, estimate of the other op, two
// top-k offers and a distinct insert, on pre-hashed keys, single-threaded, no lock.
func BenchmarkUpdate(b *testing.B) {
	keys := benchKeys(b)
	hashes := make([]uint64, len(keys))
	for i, k := range keys {
		hashes[i] = Hash(k)
	}
	d, _ := New(Options{Shards: 1})
	s := &d.shards[0]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % len(keys)
		s.add(hashes[j], keys[j], i&7 == 0, 0, 1, 0, 1)
	}
	sink += s.totals[s.cur][0]
}

// BenchmarkAdd is Detector.Add: hashing, shard lock and the core update.
func BenchmarkAdd(b *testing.B) {
	keys := benchKeys(b)
	d, _ := New(Options{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.Add(keys[i%len(keys)], i&7 == 0, 0, 1, 0)
	}
}

// BenchmarkNaiveMap is the baseline: exact counting in a map (memory grows with the key
// space, and a window would need one map a tick).
func BenchmarkNaiveMap(b *testing.B) {
	keys := benchKeys(b)
	counts := make(map[string]uint64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		counts[string(keys[i%len(keys)])]++
	}
	sink += uint64(len(counts))
}

// BenchmarkAddParallel is Detector.Add from GOMAXPROCS goroutines over sharded locks,
// with the window advancing every tick as in the agent.
func BenchmarkAddParallel(b *testing.B) {
	keys := benchKeys(b)
	d, _ := New(Options{})
	start := time.Now()
	d.Advance(start)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			d.Add(keys[i%len(keys)], i&7 == 0, 0, 1, 0)
			i += 7919
			if i%1_000_003 == 0 {
				d.Advance(time.Now())
			}
		}
	})
}

// BenchmarkAddBatch is AddBatch with batches of 50, as UDP reports bring them: one lock
// per shard per batch.
func BenchmarkAddBatch(b *testing.B) {
	keys := benchKeys(b)
	d, _ := New(Options{})
	items := make([]Item, 50)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(items) {
		for j := range items {
			k := (i + j) % len(keys)
			items[j] = Item{Key: keys[k], Write: k&7 == 0, N: 1}
		}
		d.AddBatch(items)
	}
}

// benchFilled returns a Detector whose whole window (every tick of every shard) has
// seen traffic, as under steady load.
func benchFilled(b *testing.B) (*Detector, time.Time) {
	b.Helper()
	keys := benchKeys(b)
	d, _ := New(Options{})
	now := time.Unix(1_700_000_000, 0)
	for t := 0; t < d.opts.Ticks; t++ {
		for i, k := range keys {
			d.Add(k, i&7 == 0, 0, 1, 0)
		}
		now = now.Add(d.opts.Tick)
		d.Advance(now)
	}
	for i, k := range keys {
		d.Add(k, i&7 == 0, 0, 1, 0)
	}
	return d, now
}

// BenchmarkSnapshot is one full snapshot of a busy window: every shard's ranking
// copied, and every tick's HyperLogLog sketch merged for the distinct count.
func BenchmarkSnapshot(b *testing.B) {
	d, now := benchFilled(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sink += d.Snapshot(now, All, 0).Distinct
	}
}

// BenchmarkRanked is a snapshot without the distinct count: what the agent asks
// twice more each tick, for the read and the write rankings.
func BenchmarkRanked(b *testing.B) {
	d, now := benchFilled(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sink += uint64(len(d.Ranked(now, Reads, 0).Keys))
	}
}
