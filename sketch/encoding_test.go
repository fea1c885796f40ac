package sketch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func TestEncodingRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 100_000} {
		s, _ := New(Options{Width: 1024, Depth: 3})
		keys, _ := zipfStream(n, 1.1, 10_000)
		for _, h := range keys {
			s.Add(h, 1)
		}
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b, 0)
		if err != nil {
			t.Fatalf("%d keys: %v", n, err)
		}
		if got.Width() != s.Width() || got.Depth() != s.Depth() || !equalCells(got.cells, s.cells) {
			t.Errorf("%d keys: decoded sketch differs from the original", n)
		}
		if n == 0 && len(b) > 16 {
			t.Errorf("empty 3×1024 sketch encodes to %d bytes; want a few", len(b))
		}
	}
}

func equalCells(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDecodeDamaged(t *testing.T) {
	s, _ := New(Options{Width: 64, Depth: 2})
	s.Add(1, 300)
	good, _ := s.MarshalBinary()
	flip := bytes.Clone(good)
	flip[5] ^= 0x40
	version := bytes.Clone(good)
	version[0] = 9
	tests := map[string][]byte{
		"empty":      nil,
		"short":      good[:5],
		"truncated":  good[:len(good)-1],
		"bit flip":   flip,
		"version":    version,
		"extra byte": append(bytes.Clone(good), 0),
	}
	for name, b := range tests {
		if _, err := Decode(b, 0); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", name, err)
		}
	}
	big, _ := New(Options{Width: 1 << 20, Depth: 4})
	b, _ := big.MarshalBinary()
	if _, err := Decode(b, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Errorf("16 MiB sketch with a 1 MiB limit: %v; want ErrCorrupt", err)
	}
}

func FuzzDecode(f *testing.F) {
	s, _ := New(Options{Width: 64, Depth: 2})
	s.Add(42, 7)
	b, _ := s.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 1, 6, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// Random bytes almost never carry a right checksum; try them again with one, so
		// that the fuzzer reaches the cells.
		if len(data) >= 7 {
			body := bytes.Clone(data[:len(data)-4])
			checkDecode(t, binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli)))
		}
	})
}

// checkDecode checks what Decode makes of data: an error wrapping ErrCorrupt, or a sketch
// that re-encodes canonically.
func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	got, err := Decode(data, 1<<20)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode(%x): error %v does not wrap ErrCorrupt", data, err)
		}
		return
	}
	// The header is what was decoded.
	if got.Depth() != int(data[1]) || got.Width() != 1<<data[2] || len(got.cells) != got.Depth()*got.Width() {
		t.Fatalf("header depth %d, log2 width %d decode to %d×%d with %d cells", data[1], data[2], got.Depth(), got.Width(), len(got.cells))
	}
	// Whatever decodes re-encodes to the canonical form: never longer (zero runs merged,
	// uvarints minimal), decoding to the same sketch, and a fixed point.
	again, err := got.MarshalBinary()
	if err != nil {
		t.Fatalf("re-encoding a decoded sketch: %v", err)
	}
	if len(again) > len(data) {
		t.Fatalf("re-encoded %d bytes from %d; the canonical encoding is never longer", len(again), len(data))
	}
	back, err := Decode(again, 1<<20)
	if err != nil {
		t.Fatalf("decoding a re-encoded sketch: %v", err)
	}
	if back.Width() != got.Width() || back.Depth() != got.Depth() || !equalCells(back.cells, got.cells) {
		t.Fatalf("re-encoding of a decoded sketch does not round-trip")
	}
	if third, _ := back.MarshalBinary(); !bytes.Equal(third, again) {
		t.Fatalf("canonical encoding is not a fixed point:\n%x\n%x", again, third)
	}
}
