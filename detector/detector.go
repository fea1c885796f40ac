package detector

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/axiomhq/hyperloglog"
	"github.com/cespare/xxhash/v2"
	"github.com/hotkeyd/hotkeyd/internal/defaults"
	"github.com/hotkeyd/hotkeyd/sketch"
	"github.com/hotkeyd/hotkeyd/topk"
)

// Options configure a Detector. The zero value is the default: a 1 s window of 10 ticks,
// 16,384 × 4 counters per sketch split over 4 shards, top 100 keys.
type Options struct {
	// Width is the number of counters per sketch row, over all shards (each shard gets
	// Width/Shards). A power of two in [64×Shards, 2^24]. Default: 16384.
	Width int
	// Depth is the number of sketch rows, in [1, 16]. Default: 4.
	Depth int
	// Tick is the granularity of the sliding window, at least 1 ms. Default: 100 ms.
	Tick time.Duration
	// Ticks is the number of ticks in the window, in [1, 1024]. Default: 10.
	Ticks int
	// K is the number of keys each ranking keeps, in [1, 65536]. Default: 100.
	K int
	// Shards is the number of independent shards, a power of two in [1, 256]. Default: 4.
	Shards int
	// Bytes adds a ranking by bytes moved (value size × requests), for keys that are hot
	// by size rather than count; it costs one more sketch. Default: off.
	Bytes bool
}

func (o Options) withDefaults() (Options, error) {
	o.Width = defaults.Or(o.Width, sketch.DefaultWidth)
	o.Depth = defaults.Or(o.Depth, sketch.DefaultDepth)
	o.Tick = defaults.Or(o.Tick, 100*time.Millisecond)
	o.Ticks = defaults.Or(o.Ticks, sketch.DefaultTicks)
	o.K = defaults.Or(o.K, topk.DefaultK)
	o.Shards = defaults.Or(o.Shards, 4)
	if o.Shards < 1 || o.Shards > 256 || o.Shards&(o.Shards-1) != 0 {
		return o, fmt.Errorf("detector: shards %d: must be a power of two in [1, 256]", o.Shards)
	}
	if o.Tick < time.Millisecond {
		return o, fmt.Errorf("detector: tick %v: must be at least 1ms", o.Tick)
	}
	if o.Width&(o.Width-1) != 0 || o.Width/o.Shards < sketch.MinWidth || o.Width > sketch.MaxWidth {
		return o, fmt.Errorf("detector: width %d: must be a power of two in [%d × shards (%d), %d]", o.Width, sketch.MinWidth, o.Shards, sketch.MaxWidth)
	}
	return o, nil
}

// Window returns the span of the sliding window.
func (o Options) Window() time.Duration { return o.Tick * time.Duration(o.Ticks) }

// Flags describe a key beyond its counts.
const (
	// FlagCounter marks a key written with the INCR family.
	FlagCounter uint8 = 1 << iota
)

// Rankings.
const (
	All    = iota // by reads + writes
	Reads         // by reads
	Writes        // by writes
	Bytes         // by bytes read and written; empty unless Options.Bytes
	numRankings
)

// Detector counts keys over a sliding window. See the package doc.
type Detector struct {
	opts   Options
	shards []shard
	shift  uint // shard of hash h: h >> shift

	mu        sync.Mutex // guards start and tickStart
	start     time.Time  // the first Advance; zero until then
	tickStart time.Time  // when the current tick began
}

type shard struct {
	mu       sync.Mutex        // guards every field below
	counts   [2]*sketch.Window // reads, writes
	bytes    *sketch.Window    // bytes moved; nil unless Options.Bytes
	rank     [numRankings]*topk.TopK
	distinct *sketch.Distinct
	totals   [][2]uint64 // per tick: reads, writes (weighted)
	cur      int         // current tick in totals
	_        [64]byte    // keep neighbouring shards' locks off one cache line
}

// New returns an empty Detector.
func New(o Options) (*Detector, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Detector{opts: o, shards: make([]shard, o.Shards), shift: uint(64 - bits.TrailingZeros(uint(o.Shards)))}
	wo := sketch.WindowOptions{Options: sketch.Options{Width: o.Width / o.Shards, Depth: o.Depth}, Ticks: o.Ticks}
	for i := range d.shards {
		s := &d.shards[i]
		for j := range s.counts {
			if s.counts[j], err = sketch.NewWindow(wo); err != nil {
				return nil, fmt.Errorf("detector: %w", err)
			}
		}
		for j := range s.rank {
			if s.rank[j], err = topk.New(topk.Options{K: o.K}); err != nil {
				return nil, fmt.Errorf("detector: %w", err)
			}
		}
		if o.Bytes {
			if s.bytes, err = sketch.NewWindow(wo); err != nil {
				return nil, fmt.Errorf("detector: %w", err)
			}
		}
		if s.distinct, err = sketch.NewDistinct(o.Ticks); err != nil {
			return nil, fmt.Errorf("detector: %w", err)
		}
		s.totals = make([][2]uint64, o.Ticks)
	}
	return d, nil
}

// Options returns the options in force, defaults filled in.
func (d *Detector) Options() Options { return d.opts }

// Hash is the key hash the detector uses (xxHash64), exported so that other agents and
// tools agree on it.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// Add counts n requests (already scaled to full traffic) on key, one sample, a write when
// write is true, moving size bytes in all (0 when unknown; counted only with
// Options.Bytes). flags are kept with the key while it is ranked. key is copied only if it
// enters a ranking.
func (d *Detector) Add(key []byte, write bool, flags uint8, n, size uint32) {
	h := xxhash.Sum64(key)
	s := &d.shards[h>>d.shift&uint64(len(d.shards)-1)]
	s.mu.Lock()
	s.add(h, key, write, flags, n, size, 1)
	s.mu.Unlock()
}

// Item is one update for AddBatch: the arguments of Add.
type Item struct {
	Key   []byte
	Write bool
	Flags uint8
	N     uint32 // requests, already scaled to full traffic
	Size  uint32 // bytes moved in all, 0 when unknown
	// Samples is how many sampled requests the item stands for, N being their weight in
	// all; 0 is read as 1. Ranked keys keep the weight of one sample (Key.Weight).
	Samples uint32

	hash uint64 // filled by AddBatch
}

// AddBatch adds every item, as Add does, taking each shard's lock once for all the items
// that fall into it. It sets fields of items it uses as scratch; items must not be shared.
func (d *Detector) AddBatch(items []Item) {
	mask := uint64(len(d.shards) - 1)
	var present uint64 // bit i: some item falls into shard i (for up to 64 shards)
	for i := range items {
		it := &items[i]
		it.hash = xxhash.Sum64(it.Key)
		present |= 1 << (it.hash >> d.shift & mask & 63)
	}
	for si := range d.shards {
		if len(d.shards) <= 64 && present&(1<<si) == 0 {
			continue
		}
		s := &d.shards[si]
		s.mu.Lock()
		for i := range items {
			it := &items[i]
			if int(it.hash>>d.shift&mask) != si {
				continue
			}
			s.add(it.hash, it.Key, it.Write, it.Flags, it.N, it.Size, max(it.Samples, 1))
		}
		s.mu.Unlock()
	}
}

// add is the per-sample core, under s.mu.
func (s *shard) add(h uint64, key []byte, write bool, flags uint8, n, size, samples uint32) {
	op, rank, other := 0, Reads, Writes
	if write {
		op, rank, other = 1, Writes, Reads
	}
	w := n // the weight of one sample
	if samples > 1 {
		w = n / samples
	}
	mine := uint64(s.counts[op].Add(h, n))
	s.rank[rank].Offer(h, key, mine, flags, w)
	// The combined ranking takes the other operation's count from its ranking when the key
	// is ranked there, which costs no memory access outside the heaps. Else from its
	// sketch, when the key is held in the combined ranking (so that it is not offered its
	// one-operation count) or this operation's count is at least half the count to beat:
	// a key heavy by reads and writes together but ranked by neither alone is at least
	// that heavy in one of them, so it enters when that one is sampled. The long tail,
	// below half, skips the sketch.
	theirs := s.rank[other].Count(h)
	if theirs == 0 && (2*mine >= s.rank[All].Min() || s.rank[All].Count(h) > 0) {
		theirs = uint64(s.counts[1-op].Estimate(h))
	}
	s.rank[All].Offer(h, key, mine+theirs, flags, w)
	s.distinct.Insert(h)
	s.totals[s.cur][op] += uint64(n)
	if size > 0 && s.bytes != nil {
		s.rank[Bytes].Offer(h, key, uint64(s.bytes.Add(h, size)), flags, w)
	}
}

// Advance moves the window to now: every tick boundary passed since the last call starts a
// new tick (at most Ticks of them), and the rankings are re-estimated. The first call
// starts the clock. Call it at least once a tick.
func (d *Detector) Advance(now time.Time) {
	d.mu.Lock()
	if d.start.IsZero() {
		d.start, d.tickStart = now, now
	}
	n := 0
	if el := now.Sub(d.tickStart); el >= d.opts.Tick {
		steps := el / d.opts.Tick
		d.tickStart = d.tickStart.Add(steps * d.opts.Tick)
		n = int(min(steps, time.Duration(d.opts.Ticks)))
		if n == d.opts.Ticks {
			// Every tick is cleared, the traffic counted so far with them: the window
			// starts again, so that Covered is the span since now, not a full window of
			// ticks that hold nothing.
			d.start = now
		}
	}
	d.mu.Unlock()
	if n == 0 {
		return
	}
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for range n {
			s.advance()
		}
		s.refresh()
		s.mu.Unlock()
	}
}

func (s *shard) advance() {
	for _, w := range s.counts {
		w.Advance()
	}
	if s.bytes != nil {
		s.bytes.Advance()
	}
	s.distinct.Advance()
	s.cur = (s.cur + 1) % len(s.totals)
	s.totals[s.cur] = [2]uint64{}
	if s.cur == 0 { // a window of ticks since the last epoch: see Key.Weight
		for _, r := range s.rank {
			r.AgeWeights()
		}
	}
}

func (s *shard) refresh() {
	r, w := s.counts[0], s.counts[1]
	s.rank[Reads].Refresh(func(h uint64) uint64 { return uint64(r.Estimate(h)) })
	s.rank[Writes].Refresh(func(h uint64) uint64 { return uint64(w.Estimate(h)) })
	s.rank[All].Refresh(func(h uint64) uint64 { return uint64(r.Estimate(h)) + uint64(w.Estimate(h)) })
	if b := s.bytes; b != nil {
		s.rank[Bytes].Refresh(func(h uint64) uint64 { return uint64(b.Estimate(h)) })
	}
}

// Key is a ranked key with its estimated counts over the window.
type Key struct {
	Key    string
	Hash   uint64
	Reads  uint64 // estimated reads over the window (full traffic)
	Writes uint64 // estimated writes over the window
	Bytes  uint64 // estimated bytes moved over the window; 0 unless Options.Bytes
	Flags  uint8
	// Weight is the largest weight of one sample of the key (the N of "1 in N") offered
	// over the last one to two windows while ranked (the last it had, with no sample in
	// them): Reads ÷ Weight is about how many samples Reads rests on. One sample of a
	// sparser sampler raises it for as long.
	Weight uint32
	// TickReads and TickWrites are the estimates for the current tick alone (see
	// Snapshot.TickSpan): a sharper, noisier view of the key's rate right now.
	TickReads, TickWrites uint64
}

// Count returns the count the ranking orders by.
func (k Key) Count(ranking int) uint64 {
	switch ranking {
	case Reads:
		return k.Reads
	case Writes:
		return k.Writes
	case Bytes:
		return k.Bytes
	}
	return k.Reads + k.Writes
}

// Snapshot is the state of the window at one moment.
type Snapshot struct {
	At       time.Time
	Covered  time.Duration // the span of traffic the counts cover (≤ the window unless Advance is late)
	Reads    uint64        // total reads in the window (exact sum of what was added)
	Writes   uint64        // total writes in the window
	Distinct uint64        // estimated distinct keys in the window
	Keys     []Key         // the ranking's keys, heaviest first
	TickSpan time.Duration // how much of the current tick has passed (> Tick when Advance is late)
}

// Rate returns count per second over the covered span.
func (s *Snapshot) Rate(count uint64) float64 {
	if s.Covered <= 0 {
		return 0
	}
	return float64(count) / s.Covered.Seconds()
}

// Snapshot returns the top n keys (n ≤ 0: all K) of a ranking (All, Reads, Writes or
// Bytes) with their read, write and byte estimates, the totals and the distinct count. Each shard is locked
// only while its entries are copied and its HyperLogLog sketches merged.
func (d *Detector) Snapshot(now time.Time, ranking, n int) Snapshot {
	return d.snapshot(now, ranking, n, true)
}

// Ranked returns Snapshot without the distinct count (Distinct is 0): that merges every
// tick's HyperLogLog sketch of every shard, the largest part of a snapshot's cost, while
// each shard's lock holds its writers back.
func (d *Detector) Ranked(now time.Time, ranking, n int) Snapshot {
	return d.snapshot(now, ranking, n, false)
}

func (d *Detector) snapshot(now time.Time, ranking, n int, distinct bool) Snapshot {
	if ranking < 0 || ranking >= numRankings {
		ranking = All
	}
	snap := Snapshot{At: now}
	snap.Covered, snap.TickSpan = d.Covered(now)
	var hll *hyperloglog.Sketch // nil while every shard's window is empty
	var entries []topk.Entry
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		entries = s.rank[ranking].AppendEntries(entries[:0])
		for _, e := range entries {
			snap.Keys = append(snap.Keys, Key{
				Key:    e.Key,
				Hash:   e.Hash,
				Reads:  uint64(s.counts[0].Estimate(e.Hash)),
				Writes: uint64(s.counts[1].Estimate(e.Hash)),
				Flags:  e.Flags,
				Weight: e.Weight,

				TickReads:  uint64(s.counts[0].EstimateTick(e.Hash)),
				TickWrites: uint64(s.counts[1].EstimateTick(e.Hash)),
			})
			if s.bytes != nil {
				snap.Keys[len(snap.Keys)-1].Bytes = uint64(s.bytes.Estimate(e.Hash))
			}
		}
		for _, t := range s.totals {
			snap.Reads += t[0]
			snap.Writes += t[1]
		}
		if distinct && !s.distinct.Empty() {
			if hll == nil {
				hll = hyperloglog.NewNoSparse()
			}
			_ = s.distinct.MergeInto(hll) // same precision everywhere: cannot fail
		}
		s.mu.Unlock()
	}
	if hll != nil {
		snap.Distinct = hll.Estimate()
	}
	slices.SortFunc(snap.Keys, func(a, b Key) int {
		ca, cb := a.Count(ranking), b.Count(ranking)
		switch {
		case ca > cb:
			return -1
		case ca < cb:
			return 1
		}
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	if n <= 0 {
		n = d.opts.K
	}
	if len(snap.Keys) > n {
		snap.Keys = snap.Keys[:n]
	}
	return snap
}

// Estimate returns the estimated reads and writes of one key over the window, ranked or not.
func (d *Detector) Estimate(key []byte) (reads, writes uint64) {
	h := xxhash.Sum64(key)
	s := &d.shards[h>>d.shift&uint64(len(d.shards)-1)]
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(s.counts[0].Estimate(h)), uint64(s.counts[1].Estimate(h))
}

// Covered returns the span of traffic the window holds at now: the full ticks before the
// current one plus the current one so far, no more than since the window started, and at
// least one tick so that rates right after a start are not inflated; and how much of the
// current tick has passed. When Advance runs late (the caller's loop lags), the current
// tick holds everything since it began, so both spans are longer than Tick and the window:
// rates stay rates over the time the counts really cover.
func (d *Detector) Covered(now time.Time) (window, tick time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.start.IsZero() {
		return d.opts.Tick, d.opts.Tick
	}
	tick = max(now.Sub(d.tickStart), 0)
	window = time.Duration(d.opts.Ticks-1)*d.opts.Tick + tick
	window = min(window, now.Sub(d.start))
	return max(window, d.opts.Tick), tick
}

// SizeBytes returns the memory of the sketches and distinct counters, which the options
// fix: it does not grow with the key space.
func (d *Detector) SizeBytes() int {
	n := 0
	for i := range d.shards {
		s := &d.shards[i]
		n += s.counts[0].SizeBytes() + s.counts[1].SizeBytes() + d.opts.Ticks*(1<<14)
		if s.bytes != nil {
			n += s.bytes.SizeBytes()
		}
	}
	return n
}
