package topk

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

func TestNewValidates(t *testing.T) {
	for _, k := range []int{-1, MaxK + 1} {
		if _, err := New(Options{K: k}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("k %d", k)) {
			t.Errorf("New(K: %d): %v; want an error naming k", k, err)
		}
	}
	tk, err := New(Options{})
	if err != nil || tk.K() != DefaultK {
		t.Errorf("New(zero): K %d, %v; want %d", tk.K(), err, DefaultK)
	}
}

// check verifies the heap order and that the index points at every slot.
func check(t *testing.T, tk *TopK) {
	t.Helper()
	for i := range tk.heap {
		if p := (i - 1) / 2; i > 0 && tk.heap[p].count > tk.heap[i].count {
			t.Fatalf("heap order broken at %d: parent %d > child %d", i, tk.heap[p].count, tk.heap[i].count)
		}
		if got := tk.index.get(tk.heap[i].hash); got != i {
			t.Fatalf("index of slot %d says %d", i, got)
		}
	}
}

// TestExactCounts offers exact running counts of a skewed stream: the TopK must then hold
// exactly the k heaviest keys.
func TestExactCounts(t *testing.T) {
	const k = 50
	tk, _ := New(Options{K: k})
	r := rand.New(rand.NewPCG(1, 1))
	z := rand.NewZipf(r, 1.3, 1, 10_000)
	counts := map[uint64]uint64{}
	for i := 0; i < 200_000; i++ {
		h := z.Uint64()
		counts[h]++
		tk.Offer(h, []byte(fmt.Sprint("key", h)), counts[h], 0, 0)
	}
	check(t, tk)
	type kc struct{ h, c uint64 }
	var all []kc
	for h, c := range counts {
		all = append(all, kc{h, c})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].c > all[j].c })
	got := tk.AppendEntries(nil)
	if len(got) != k {
		t.Fatalf("%d entries; want %d", len(got), k)
	}
	for i, e := range got {
		if e.Count != all[i].c {
			t.Errorf("rank %d: count %d; want %d", i, e.Count, all[i].c)
		}
		if e.Key != fmt.Sprint("key", e.Hash) {
			t.Errorf("rank %d: key %q for hash %d", i, e.Key, e.Hash)
		}
	}
}

func TestOfferDownAndRefresh(t *testing.T) {
	tk, _ := New(Options{K: 3})
	for i, c := range []uint64{10, 20, 30} {
		tk.Offer(uint64(i), []byte{byte('a' + i)}, c, 1<<i, 0)
	}
	tk.Offer(9, []byte("z"), 5, 0, 0) // too small to enter
	if tk.Contains(9) || tk.Min() != 10 {
		t.Fatalf("a key below the minimum entered (min %d)", tk.Min())
	}
	tk.Offer(2, []byte("c"), 1, 0, 0) // a held key falls
	check(t, tk)
	if tk.Min() != 1 {
		t.Errorf("min after a fall: %d; want 1", tk.Min())
	}
	tk.Offer(9, []byte("z"), 5, 0, 0) // now it displaces c
	if tk.Contains(2) || !tk.Contains(9) {
		t.Errorf("z did not displace c")
	}
	tk.Refresh(func(h uint64) uint64 {
		if h == 0 {
			return 0
		}
		return h * 100
	})
	check(t, tk)
	got := tk.AppendEntries(nil)
	if len(got) != 2 || got[0].Key != "z" || got[0].Count != 900 || got[1].Key != "b" || got[1].Flags != 2 {
		t.Errorf("after refresh: %+v; want z 900, then b with flags 2", got)
	}
	tk.Reset()
	if tk.Len() != 0 {
		t.Errorf("Len after Reset: %d; want 0", tk.Len())
	}
}

// TestIndex drives the index with random puts and deletes against a map.
func TestIndex(t *testing.T) {
	x := newIndex(64)
	want := map[uint64]int{}
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 100_000; i++ {
		h := r.Uint64N(200) << 40 // many collide in the low bits
		if len(want) < 64 && r.IntN(2) == 0 {
			x.put(h, i)
			want[h] = i
		} else {
			x.del(h)
			delete(want, h)
		}
		if i%97 == 0 {
			for h := uint64(0); h < 200; h++ {
				w, ok := want[h<<40]
				if !ok {
					w = -1
				}
				if got := x.get(h << 40); got != w {
					t.Fatalf("step %d: get(%d) = %d; want %d", i, h, got, w)
				}
			}
		}
	}
}

func TestOfferAllocs(t *testing.T) {
	tk, _ := New(Options{K: 100})
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("user:%06d", i))
	}
	r := rand.New(rand.NewPCG(1, 2))
	offer := func() {
		i := r.IntN(len(keys))
		tk.Offer(uint64(i)*0x9e3779b97f4a7c15, keys[i], r.Uint64N(1000), 0, 0)
	}
	for i := 0; i < 10_000; i++ { // let key buffers grow
		offer()
	}
	if n := testing.AllocsPerRun(10_000, offer); n != 0 {
		t.Errorf("Offer: %v allocs; want 0", n)
	}
}

// TestWeight: an entry keeps the largest weight offered in this epoch and the one before,
// and a key that takes over a slot starts from its own.
func TestWeight(t *testing.T) {
	tk, _ := New(Options{K: 1})
	tk.Offer(1, []byte("a"), 10, 0, 100)
	tk.Offer(1, []byte("a"), 11, 0, 10_000)
	tk.Offer(1, []byte("a"), 12, 0, 1)
	if e := tk.AppendEntries(nil); e[0].Weight != 10_000 {
		t.Errorf("a's weight %d; want the largest offered, 10000", e[0].Weight)
	}
	tk.Offer(2, []byte("b"), 50, 0, 7) // takes a's slot
	if e := tk.AppendEntries(nil); e[0].Key != "b" || e[0].Weight != 7 {
		t.Errorf("entry %+v; want b with weight 7", e[0])
	}

	tk, _ = New(Options{K: 1})
	tk.Offer(1, []byte("a"), 10, 0, 10_000)
	tk.AgeWeights()
	tk.Offer(1, []byte("a"), 11, 0, 10)
	if e := tk.AppendEntries(nil); e[0].Weight != 10_000 {
		t.Errorf("a's weight %d one epoch on; want the epoch before's, 10000", e[0].Weight)
	}
	tk.AgeWeights()
	if e := tk.AppendEntries(nil); e[0].Weight != 10 {
		t.Errorf("a's weight %d two epochs on; want the last epoch's, 10", e[0].Weight)
	}
	tk.AgeWeights()
	tk.AgeWeights()
	if e := tk.AppendEntries(nil); e[0].Weight != 10 {
		t.Errorf("a's weight %d after epochs without samples; want the last it had, 10", e[0].Weight)
	}
	tk.Offer(1, []byte("a"), 12, 0, 10_000)
	tk.AgeWeights()
	tk.Offer(2, []byte("b"), 50, 0, 7) // takes a's slot: none of a's weight carries over
	if e := tk.AppendEntries(nil); e[0].Key != "b" || e[0].Weight != 7 {
		t.Errorf("entry %+v after an epoch; want b with weight 7", e[0])
	}
}
