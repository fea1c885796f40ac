package sketch

import (
	"fmt"
	"math"
	"math/bits"
)

// DefaultTicks is the number of ticks in a window when WindowOptions.Ticks is 0.
const DefaultTicks = 10

// MaxTicks bounds the ticks of a window.
const MaxTicks = 1024

// WindowOptions set the shape of a Window.
type WindowOptions struct {
	// Options set the shape of the window's sketch.
	Options
	// Ticks is the number of ticks the window spans, in [1, 1024]. Default: 10.
	Ticks int
}

// Window is a count-min sketch over a sliding window of ticks. Each cell holds a counter
// per tick, updated conservatively, and their sum. A key's window count is read from the
// sums, one read per row; Advance starts a new tick and forgets the oldest.
//
// The counters of one cell sit side by side: the sum, then one counter per tick, padded to
// a power of two (16 counters, one 64-byte cache line, for up to 15 ticks). An update thus
// touches one cache line per row, as a plain CountMin does, instead of two.
//
// Each tick also has a bitmap of the cells whose counter it set, one bit a cell, so that
// Advance visits only those: it costs what the forgotten tick held, not the whole sketch.
// Scanning all of an agent's 8 MiB of counters ten times a second was 42 % of its CPU
// when idle (docs/BENCHMARKS.md). The bitmaps take ticks bits a cell against the
// counters' 32 × stride, so less than 1/32 of their memory.
//
// The caller decides what a tick is (the agent uses 100 ms); Window keeps no clock.
type Window struct {
	width, depth int
	shift        uint     // 64 - log2(width), as in CountMin
	stride       int      // counters per cell: a power of two ≥ ticks + 1
	strideShift  uint     // log2(stride)
	ticks        int      // ticks in the window
	cur          int      // the current tick, 0 ≤ cur < ticks
	cells        []uint32 // depth × width groups of stride counters: sum, tick 0, tick 1, …
	words        int      // bitmap words per tick
	set          []uint64 // ticks × words: bit c of tick k is set when cell c has a count in k
}

// NewWindow returns an empty window.
func NewWindow(o WindowOptions) (*Window, error) {
	w, d, err := o.shape()
	if err != nil {
		return nil, err
	}
	n := o.Ticks
	if n == 0 {
		n = DefaultTicks
	}
	if n < 1 || n > MaxTicks {
		return nil, fmt.Errorf("sketch: ticks %d: must be in [1, %d]", n, MaxTicks)
	}
	stride := 1 << bits.Len(uint(n)) // power of two > n
	words := (w*d + 63) / 64
	return &Window{
		width:       w,
		depth:       d,
		shift:       uint(64 - bits.TrailingZeros(uint(w))),
		stride:      stride,
		strideShift: uint(bits.TrailingZeros(uint(stride))),
		ticks:       n,
		cells:       make([]uint32, w*d*stride),
		words:       words,
		set:         make([]uint64, n*words),
	}, nil
}

// Ticks returns the number of ticks in the window.
func (w *Window) Ticks() int { return w.ticks }

// SizeBytes returns the memory the counters and the ticks' bitmaps take.
func (w *Window) SizeBytes() int { return 4*len(w.cells) + 8*len(w.set) }

// group returns the index in cells of the counter group of row i for hash h.
func (w *Window) group(i int, h uint64) int {
	return (i*w.width + int((h*seeds[i])>>w.shift)) * w.stride
}

// Add counts n more occurrences of the key with hash h in the current tick and returns the
// key's estimated count over the window.
func (w *Window) Add(h uint64, n uint32) uint32 {
	var idx [MaxDepth]int
	est := uint32(math.MaxUint32)
	t := 1 + w.cur
	for i := 0; i < w.depth; i++ {
		g := w.group(i, h)
		idx[i] = g
		est = min(est, w.cells[g+t])
	}
	target := satAdd(est, n)
	windowEst := uint32(math.MaxUint32)
	for i := 0; i < w.depth; i++ {
		g := idx[i]
		if c := w.cells[g+t]; c < target {
			if c == 0 {
				cell := g >> w.strideShift
				w.set[w.cur*w.words+cell>>6] |= 1 << (cell & 63)
			}
			w.cells[g+t] = target
			w.cells[g] = satAdd(w.cells[g], target-c)
		}
		windowEst = min(windowEst, w.cells[g])
	}
	return windowEst
}

// Estimate returns the estimated count over the window of the key with hash h.
func (w *Window) Estimate(h uint64) uint32 {
	est := uint32(math.MaxUint32)
	for i := 0; i < w.depth; i++ {
		est = min(est, w.cells[w.group(i, h)])
	}
	return est
}

// EstimateTick returns the estimated count of the key in the current tick alone.
func (w *Window) EstimateTick(h uint64) uint32 {
	est := uint32(math.MaxUint32)
	for i := 0; i < w.depth; i++ {
		est = min(est, w.cells[w.group(i, h)+1+w.cur])
	}
	return est
}

// Advance starts a new tick: the oldest tick's counts leave the window.
func (w *Window) Advance() {
	w.cur++
	if w.cur == w.ticks {
		w.cur = 0
	}
	t := 1 + w.cur
	set := w.set[w.cur*w.words : (w.cur+1)*w.words]
	for i, word := range set {
		for ; word != 0; word &= word - 1 {
			g := (i<<6 + bits.TrailingZeros64(word)) << w.strideShift
			c := w.cells[g+t]
			w.cells[g+t] = 0
			if w.cells[g] == math.MaxUint32 {
				// A saturated sum no longer says what the other ticks hold: add them up.
				w.cells[g] = w.sumTicks(g)
			} else {
				w.cells[g] -= c
			}
		}
		set[i] = 0
	}
}

// sumTicks returns the sum of the tick counters of the group at g, saturated.
func (w *Window) sumTicks(g int) uint32 {
	var sum uint32
	for _, c := range w.cells[g+1 : g+1+w.ticks] {
		sum = satAdd(sum, c)
	}
	return sum
}

// Reset empties the window.
func (w *Window) Reset() {
	clear(w.cells)
	clear(w.set)
}

// Sum returns a copy of the window's sums as a CountMin of the same width and depth, whose
// estimates are the window's; use it to merge or encode a window's counts.
func (w *Window) Sum() *CountMin {
	s := newCountMin(w.width, w.depth)
	for j := range s.cells {
		s.cells[j] = w.cells[j*w.stride]
	}
	return s
}
