package sketch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
)

// encodingVersion is the first byte of every encoded CountMin.
const encodingVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The encoding of a CountMin, version 1:
//
//	byte 0      version (1)
//	byte 1      depth, 1..16
//	byte 2      log2(width), 6..24
//	bytes 3…    the cells, row after row, as a stream of uvarints: a non-zero counter c
//	            is uvarint(c<<1); a run of r ≥ 1 zero counters is uvarint(r<<1 | 1)
//	last 4      CRC-32C (Castagnoli) of every byte before it, little-endian
//
// Sparse sketches (most counters zero) shrink to a few bytes per non-zero counter.

// AppendBinary appends the encoding of s to b.
func (s *CountMin) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, encodingVersion, byte(s.depth), byte(bits.TrailingZeros(uint(s.width))))
	for i := 0; i < len(s.cells); {
		if s.cells[i] != 0 {
			b = binary.AppendUvarint(b, uint64(s.cells[i])<<1)
			i++
			continue
		}
		run := 0
		for i < len(s.cells) && s.cells[i] == 0 {
			run++
			i++
		}
		b = binary.AppendUvarint(b, uint64(run)<<1|1)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// MarshalBinary returns the encoding of s.
func (s *CountMin) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// ErrCorrupt wraps every decoding error.
var ErrCorrupt = errors.New("sketch: corrupt encoding")

// DefaultDecodeLimit is the largest sketch Decode builds when given no limit: 64 MiB.
const DefaultDecodeLimit = 64 << 20

// Decode returns the CountMin encoded in data. Damaged or truncated bytes give an error
// wrapping ErrCorrupt, never a panic. maxBytes bounds the memory of the decoded counters
// (a few bytes of zero runs can describe a huge sketch); 0 means DefaultDecodeLimit.
func Decode(data []byte, maxBytes int) (*CountMin, error) {
	const header, trailer = 3, 4
	if len(data) < header+trailer {
		return nil, fmt.Errorf("%w: %d bytes, need at least %d", ErrCorrupt, len(data), header+trailer)
	}
	if data[0] != encodingVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, data[0], encodingVersion)
	}
	body, sum := data[:len(data)-trailer], binary.LittleEndian.Uint32(data[len(data)-trailer:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, sum)
	}
	depth, logw := int(data[1]), int(data[2])
	if depth < 1 || depth > MaxDepth {
		return nil, fmt.Errorf("%w: depth %d, must be in [1, %d]", ErrCorrupt, depth, MaxDepth)
	}
	if logw < bits.TrailingZeros(MinWidth) || logw > bits.TrailingZeros(MaxWidth) {
		return nil, fmt.Errorf("%w: log2 width %d, must be in [6, 24]", ErrCorrupt, logw)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultDecodeLimit
	}
	if size := 4 * depth << logw; size > maxBytes {
		return nil, fmt.Errorf("%w: %d×%d counters take %d bytes, over the limit of %d", ErrCorrupt, depth, 1<<logw, size, maxBytes)
	}
	s := newCountMin(1<<logw, depth)
	p := body[header:]
	for i := 0; i < len(s.cells); {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return nil, fmt.Errorf("%w: cell %d: bad uvarint", ErrCorrupt, i)
		}
		p = p[n:]
		if v&1 == 0 {
			if v>>1 > math.MaxUint32 {
				return nil, fmt.Errorf("%w: cell %d: counter %d overflows 32 bits", ErrCorrupt, i, v>>1)
			}
			s.cells[i] = uint32(v >> 1)
			i++
			continue
		}
		run := v >> 1
		if run == 0 || run > uint64(len(s.cells)-i) {
			return nil, fmt.Errorf("%w: cell %d: zero run %d, %d cells left", ErrCorrupt, i, run, len(s.cells)-i)
		}
		i += int(run) // cells are already zero
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last cell", ErrCorrupt, len(p))
	}
	return s, nil
}
