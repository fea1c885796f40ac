package sketch

import (
	"fmt"
	"testing"
)

var sink uint32

// benchHashes is a skewed stream of hashes, as real keys give.
func benchHashes() []uint64 {
	keys, _ := zipfStream(1<<20, 1.1, 1_000_000)
	return keys
}

func BenchmarkCountMinAdd(b *testing.B) {
	h := benchHashes()
	s, _ := New(Options{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sink += s.Add(h[i&(len(h)-1)], 1)
	}
}

func BenchmarkWindowAdd(b *testing.B) {
	h := benchHashes()
	w, _ := NewWindow(WindowOptions{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sink += w.Add(h[i&(len(h)-1)], 1)
		if i&0xfffff == 0 {
			w.Advance()
		}
	}
}

// BenchmarkMapAdd is the naive baseline: exact counts in a map keyed by hash.
func BenchmarkMapAdd(b *testing.B) {
	h := benchHashes()
	m := make(map[uint64]uint32)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := h[i&(len(h)-1)]
		m[k]++
		sink += m[k]
	}
}

// BenchmarkWindowTick is one tick of a detector shard's window (4,096 × 4 cells, 10
// ticks): adds of a given number of samples from a skewed stream, then Advance. 0 is an
// idle agent, 100 the proxy tap's sampled load at -P 1, 10,000 a busy ingest tick.
func BenchmarkWindowTick(b *testing.B) {
	h := benchHashes()
	for _, adds := range []int{0, 100, 10_000} {
		b.Run(fmt.Sprintf("adds=%d", adds), func(b *testing.B) {
			w, _ := NewWindow(WindowOptions{Options: Options{Width: 4096, Depth: 4}, Ticks: 10})
			j := 0
			b.ReportAllocs()
			for range b.N {
				for range adds {
					sink += w.Add(h[j&(len(h)-1)], 1)
					j++
				}
				w.Advance()
			}
		})
	}
}

// BenchmarkDistinctTick is one tick of a detector shard's distinct counter: Advance, then
// the window's estimate, after a given number of inserts.
func BenchmarkDistinctTick(b *testing.B) {
	h := benchHashes()
	for _, inserts := range []int{0, 100} {
		b.Run(fmt.Sprintf("inserts=%d", inserts), func(b *testing.B) {
			d, _ := NewDistinct(10)
			j := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for range inserts {
					d.Insert(h[j&(len(h)-1)])
					j++
				}
				d.Advance()
				sink += uint32(d.Estimate())
			}
		})
	}
}
