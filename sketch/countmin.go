package sketch

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Limits on the shape of a sketch.
const (
	MinWidth = 64
	MaxWidth = 1 << 24
	MaxDepth = 16
)

// Default shape: 16,384 counters × 4 rows = 256 KiB.
const (
	DefaultWidth = 16384
	DefaultDepth = 4
)

// Options set the shape of a CountMin. Give Width and Depth directly, or an error bound
// Epsilon and Delta to derive them; the zero value gives the default shape.
type Options struct {
	// Width is the number of counters per row, a power of two in [64, 2^24].
	// Default: derived from Epsilon when set, else 16384.
	Width int
	// Depth is the number of rows, in [1, 16]. Default: derived from Delta when set, else 4.
	Depth int
	// Epsilon is the relative error bound: an estimate exceeds the true count by more
	// than Epsilon × (total count) with probability at most Delta. Width becomes the
	// power of two at or above e/Epsilon. Used only when Width is 0; must be in
	// [e/2^24, 1) (about [1.6e-7, 1)), so that the width is at most MaxWidth.
	Epsilon float64
	// Delta is the failure probability of the bound above. Depth becomes ⌈ln(1/Delta)⌉.
	// Used only when Depth is 0; must be in [e^-16, 1) (about [1.1e-7, 1)), so that the
	// depth is at most MaxDepth.
	Delta float64
}

// shape resolves the options into a validated width and depth.
func (o Options) shape() (width, depth int, err error) {
	width, depth = o.Width, o.Depth
	if width == 0 {
		width = DefaultWidth
		if o.Epsilon != 0 {
			if !(o.Epsilon > 0 && o.Epsilon < 1) {
				return 0, 0, fmt.Errorf("sketch: epsilon %v: must be in (0, 1)", o.Epsilon)
			}
			w := math.Ceil(math.E / o.Epsilon) // compared before its conversion can overflow
			if w > MaxWidth {
				return 0, 0, fmt.Errorf("sketch: epsilon %v: must be at least e/%d = %.3g (a width of at most %d)", o.Epsilon, MaxWidth, math.E/MaxWidth, MaxWidth)
			}
			width = max(1<<bits.Len64(uint64(w)-1), MinWidth)
		}
	}
	if depth == 0 {
		depth = DefaultDepth
		if o.Delta != 0 {
			if !(o.Delta > 0 && o.Delta < 1) {
				return 0, 0, fmt.Errorf("sketch: delta %v: must be in (0, 1)", o.Delta)
			}
			d := math.Ceil(math.Log(1 / o.Delta)) // +Inf for the smallest deltas
			if d > MaxDepth {
				return 0, 0, fmt.Errorf("sketch: delta %v: must be at least e^-%d = %.3g (a depth of at most %d)", o.Delta, MaxDepth, math.Exp(-MaxDepth), MaxDepth)
			}
			depth = max(1, int(d))
		}
	}
	if width < MinWidth || width > MaxWidth || width&(width-1) != 0 {
		return 0, 0, fmt.Errorf("sketch: width %d: must be a power of two in [%d, %d]", width, MinWidth, MaxWidth)
	}
	if depth < 1 || depth > MaxDepth {
		return 0, 0, fmt.Errorf("sketch: depth %d: must be in [1, %d]", depth, MaxDepth)
	}
	return width, depth, nil
}

// seeds are odd 64-bit multipliers, one per row, for multiply-shift row hashes.
var seeds = [MaxDepth]uint64{
	0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0xd6e8feb86659fd93,
	0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3, 0x589965cc75374cc3,
	0x1d8e4e27c47d124f, 0xc2b2ae3d27d4eb4f, 0x165667b19e3779f9, 0x85ebca77c2b2ae63,
	0xff51afd7ed558ccd, 0xc4ceb9fe1a85ec53, 0x2545f4914f6cdd1d, 0x9fb21c651e98df25,
}

// CountMin is a count-min sketch with conservative update over 64-bit key hashes.
// Counters are 32-bit and saturate rather than wrap.
type CountMin struct {
	width, depth int
	shift        uint     // 64 - log2(width): multiply-shift keeps the top bits
	cells        []uint32 // depth rows of width counters, row after row
}

// New returns an empty sketch of the shape the options give.
func New(o Options) (*CountMin, error) {
	w, d, err := o.shape()
	if err != nil {
		return nil, err
	}
	return newCountMin(w, d), nil
}

func newCountMin(width, depth int) *CountMin {
	return &CountMin{
		width: width,
		depth: depth,
		shift: uint(64 - bits.TrailingZeros(uint(width))),
		cells: make([]uint32, width*depth),
	}
}

// Width returns the number of counters per row.
func (s *CountMin) Width() int { return s.width }

// Depth returns the number of rows.
func (s *CountMin) Depth() int { return s.depth }

// SizeBytes returns the memory the counters take.
func (s *CountMin) SizeBytes() int { return 4 * len(s.cells) }

// cell returns the index in cells of the counter of row i for hash h.
func (s *CountMin) cell(i int, h uint64) int {
	return i*s.width + int((h*seeds[i])>>s.shift)
}

// Add counts n more occurrences of the key with hash h, by conservative update, and
// returns the key's new estimate.
func (s *CountMin) Add(h uint64, n uint32) uint32 {
	var idx [MaxDepth]int
	est := uint32(math.MaxUint32)
	for i := 0; i < s.depth; i++ {
		j := s.cell(i, h)
		idx[i] = j
		est = min(est, s.cells[j])
	}
	target := satAdd(est, n)
	for i := 0; i < s.depth; i++ {
		if c := &s.cells[idx[i]]; *c < target {
			*c = target
		}
	}
	return target
}

// Estimate returns the estimated count of the key with hash h: never below the true count.
func (s *CountMin) Estimate(h uint64) uint32 {
	est := uint32(math.MaxUint32)
	for i := 0; i < s.depth; i++ {
		est = min(est, s.cells[s.cell(i, h)])
	}
	return est
}

// Reset sets every counter to zero.
func (s *CountMin) Reset() { clear(s.cells) }

// ErrShape is returned when two sketches of different shapes are combined.
var ErrShape = errors.New("sketch: shapes differ")

// Merge adds o's counters to s's, cell by cell. The result over-estimates every key of
// both streams, as each input did (it is a plain count-min sum, looser than conservative
// update of the joint stream). Both must have the same width and depth.
func (s *CountMin) Merge(o *CountMin) error {
	if s.width != o.width || s.depth != o.depth {
		return fmt.Errorf("%w: %d×%d and %d×%d", ErrShape, s.depth, s.width, o.depth, o.width)
	}
	for i, c := range o.cells {
		s.cells[i] = satAdd(s.cells[i], c)
	}
	return nil
}

func satAdd(a, b uint32) uint32 {
	c := a + b
	if c < a {
		return math.MaxUint32
	}
	return c
}
