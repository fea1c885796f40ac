package sketch

import "testing"

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
