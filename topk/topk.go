package topk

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// DefaultK is the number of keys kept when Options.K is 0.
const DefaultK = 100

// MaxK bounds Options.K.
const MaxK = 1 << 16

// Options configure a TopK.
type Options struct {
	// K is the number of keys kept, in [1, 65536]. Default: 100.
	K int
}

// Entry is one of the heaviest keys.
type Entry struct {
	Key   string
	Hash  uint64
	Count uint64 // the estimate last offered or refreshed
	Flags uint8  // the union of the flags offered with the key since it entered
	// Weight is the largest weight of one sample (how many requests it stands for)
	// offered with the key in this epoch or the one before, or the last it had (see
	// AgeWeights): Count ÷ Weight is at least about how many samples the count rests on.
	Weight uint32
}

// slot is a heap element. key is a buffer reused when the slot takes another key.
type slot struct {
	hash   uint64
	count  uint64
	flags  uint8
	weight uint32 // the largest offered in this epoch (see AgeWeights)
	prev   uint32 // the largest offered in the epoch before (the last with any)
	key    []byte
}

// TopK is a min-heap of the k keys with the largest estimates, indexed by hash.
type TopK struct {
	k     int
	heap  []slot // heap[0] has the smallest count; len(heap) ≤ k
	spare [][]byte
	index index
}

// New returns an empty TopK.
func New(o Options) (*TopK, error) {
	k := o.K
	if k == 0 {
		k = DefaultK
	}
	if k < 1 || k > MaxK {
		return nil, fmt.Errorf("topk: k %d: must be in [1, %d]", k, MaxK)
	}
	return &TopK{k: k, heap: make([]slot, 0, k), index: newIndex(k)}, nil
}

// K returns the capacity.
func (t *TopK) K() int { return t.k }

// Len returns the number of keys held.
func (t *TopK) Len() int { return len(t.heap) }

// Min returns the smallest count held when the heap is full, else 0: a key must beat it
// to enter.
func (t *TopK) Min() uint64 {
	if len(t.heap) < t.k {
		return 0
	}
	return t.heap[0].count
}

// Offer tells the TopK that the key with hash h and bytes key now has estimate count. A
// key already held takes the new count (up or down); a new key enters if there is room or
// its count beats the smallest held, which it replaces. flags are OR-ed into the entry, and
// the entry keeps the largest weight (requests per sample) offered in this epoch; 0 when
// unknown. key is copied only when the key enters.
func (t *TopK) Offer(h uint64, key []byte, count uint64, flags uint8, weight uint32) {
	if i := t.index.get(h); i >= 0 {
		s := &t.heap[i]
		s.flags |= flags
		s.weight = max(s.weight, weight)
		old := s.count
		s.count = count
		if count > old {
			t.down(i)
		} else if count < old {
			t.up(i)
		}
		return
	}
	if len(t.heap) < t.k {
		var buf []byte
		if n := len(t.spare); n > 0 {
			buf, t.spare = t.spare[n-1], t.spare[:n-1]
		}
		t.heap = append(t.heap, slot{hash: h, count: count, flags: flags, weight: weight, key: append(buf[:0], key...)})
		i := len(t.heap) - 1
		t.index.put(h, i)
		t.up(i)
		return
	}
	if count <= t.heap[0].count {
		return
	}
	root := &t.heap[0]
	t.index.del(root.hash)
	root.hash, root.count, root.flags, root.weight, root.prev = h, count, flags, weight, 0
	root.key = append(root.key[:0], key...)
	t.index.put(h, 0)
	t.down(0)
}

// Contains reports whether the key with hash h is held.
func (t *TopK) Contains(h uint64) bool { return t.index.get(h) >= 0 }

// Count returns the count held for the key with hash h, 0 when it is not held.
func (t *TopK) Count(h uint64) uint64 {
	if i := t.index.get(h); i >= 0 {
		return t.heap[i].count
	}
	return 0
}

// Refresh sets every held key's count to estimate(hash), drops the keys whose new count is
// 0, and restores the heap order. Call it when a window tick ends.
func (t *TopK) Refresh(estimate func(h uint64) uint64) {
	kept := t.heap[:0]
	for _, s := range t.heap {
		s.count = estimate(s.hash)
		if s.count == 0 {
			t.spare = append(t.spare, s.key)
			continue
		}
		kept = append(kept, s)
	}
	clear(t.heap[len(kept):]) // drop stale key references
	t.heap = kept
	t.index.reset()
	for i := range t.heap {
		t.index.put(t.heap[i].hash, i)
	}
	for i := len(t.heap)/2 - 1; i >= 0; i-- {
		t.down(i)
	}
}

// AgeWeights starts a new epoch for the weights: each entry's Weight is from then on the
// largest offered in the new epoch or the one that just ended, or in the last epoch that
// had any when that one had none. Called once a window, it keeps Weight to the samples of
// the last one to two windows, so that one sample of a sparser sampler does not hold a
// key's weight for as long as the key stays held; and a key held on a count with no
// sample behind it (a sketch's collisions) keeps the weight it last had.
func (t *TopK) AgeWeights() {
	for i := range t.heap {
		s := &t.heap[i]
		if s.weight > 0 {
			s.prev = s.weight
		}
		s.weight = 0
	}
}

// Reset removes every key.
func (t *TopK) Reset() { t.Refresh(func(uint64) uint64 { return 0 }) }

// AppendEntries appends the held keys to dst, heaviest first (ties by key), and returns it.
func (t *TopK) AppendEntries(dst []Entry) []Entry {
	start := len(dst)
	for _, s := range t.heap {
		dst = append(dst, Entry{Key: string(s.key), Hash: s.hash, Count: s.count, Flags: s.flags, Weight: max(s.weight, s.prev)})
	}
	SortEntries(dst[start:])
	return dst
}

// SortEntries sorts entries heaviest first, ties by key.
func SortEntries(e []Entry) {
	slices.SortFunc(e, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

func (t *TopK) less(i, j int) bool { return t.heap[i].count < t.heap[j].count }

func (t *TopK) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.index.put(t.heap[i].hash, i)
	t.index.put(t.heap[j].hash, j)
}

func (t *TopK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *TopK) down(i int) {
	n := len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && t.less(r, l) {
			c = r
		}
		if !t.less(c, i) {
			return
		}
		t.swap(i, c)
		i = c
	}
}

// index maps key hashes to heap positions: open addressing with linear probing and
// backward-shift deletion, at most half full, so it never grows and never allocates.
type index struct {
	hashes []uint64
	pos    []int32 // heap position + 1; 0 marks an empty bucket
	mask   uint64
}

func newIndex(k int) index {
	n := 1 << bits.Len(uint(2*k-1)) // power of two ≥ 2k
	return index{hashes: make([]uint64, n), pos: make([]int32, n), mask: uint64(n - 1)}
}

// bucket spreads h over the table (h is already a good hash, but sketches and shards use
// its bits too, so mix before masking).
func (x *index) bucket(h uint64) uint64 { return (h * 0x9e3779b97f4a7c15 >> 32) & x.mask }

func (x *index) get(h uint64) int {
	for b := x.bucket(h); ; b = (b + 1) & x.mask {
		if x.pos[b] == 0 {
			return -1
		}
		if x.hashes[b] == h {
			return int(x.pos[b] - 1)
		}
	}
}

// put sets the position of h, adding it when absent.
func (x *index) put(h uint64, i int) {
	b := x.bucket(h)
	for x.pos[b] != 0 && x.hashes[b] != h {
		b = (b + 1) & x.mask
	}
	x.hashes[b], x.pos[b] = h, int32(i+1)
}

func (x *index) del(h uint64) {
	b := x.bucket(h)
	for {
		if x.pos[b] == 0 {
			return
		}
		if x.hashes[b] == h {
			break
		}
		b = (b + 1) & x.mask
	}
	// Backward-shift: move later entries of the probe run into the hole.
	hole := b
	for j := (hole + 1) & x.mask; x.pos[j] != 0; j = (j + 1) & x.mask {
		home := x.bucket(x.hashes[j])
		// Move j to hole unless its home lies cyclically in (hole, j].
		if (j-home)&x.mask >= (j-hole)&x.mask {
			x.hashes[hole], x.pos[hole] = x.hashes[j], x.pos[j]
			hole = j
		}
	}
	x.pos[hole] = 0
}

func (x *index) reset() { clear(x.pos) }
