package topk

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkOffer offers skewed counts of 10,000 keys to a top-100.
func BenchmarkOffer(b *testing.B) {
	tk, _ := New(Options{K: 100})
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 9_999)
	keys := make([][]byte, 10_000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key:%05d", i))
	}
	seq := make([]uint64, 1<<16)
	for i := range seq {
		seq[i] = z.Uint64()
	}
	counts := make([]uint64, len(keys))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := seq[i&(len(seq)-1)]
		counts[k]++
		tk.Offer(k*0x9e3779b97f4a7c15, keys[k], counts[k], 0, 0)
	}
}
