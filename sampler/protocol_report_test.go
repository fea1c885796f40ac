package sampler

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// TestDecodeReportAtTheLimits checks docs/protocol.md's bounds from both sides: a datagram
// of exactly MaxReportSize bytes (one key filling it) decodes and one byte more does not;
// keys of 0 bytes; sample-every 1 and 2³²−1; sources of 1 and 64 bytes, C1 controls and
// non-UTF-8 refused, other non-ASCII allowed; tokens of 1 and 255 bytes.
func TestDecodeReportAtTheLimits(t *testing.T) {
	header := ReportHeaderSize("app", nil)
	// A sample of a key of K bytes takes 1 + 1 + 1 + uvarintLen(K) + K bytes.
	k := MaxReportSize - header - 3 - 3
	full, err := AppendReport(nil, Batch{Source: "app", Rate: 1, Samples: []Sample{{Key: bytes.Repeat([]byte{'k'}, k), Op: OpRead}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != MaxReportSize {
		t.Fatalf("built %d bytes; want %d", len(full), MaxReportSize)
	}
	var b Batch
	if _, err := DecodeReport(&b, full); err != nil || len(b.Samples) != 1 || len(b.Samples[0].Key) != k {
		t.Fatalf("a datagram of exactly %d bytes: %v, %d samples; want its one key of %d bytes", MaxReportSize, err, len(b.Samples), k)
	}
	over, err := AppendReport(nil, Batch{Source: "appx", Rate: 1, Samples: []Sample{{Key: bytes.Repeat([]byte{'k'}, k), Op: OpRead}}}, nil)
	if err == nil {
		t.Fatalf("AppendReport of %d bytes: no error", len(over))
	}
	over = append(bytes.Clone(full), 0)
	if _, err := DecodeReport(&b, over); err == nil || err.Error() != "report: 65,508 bytes: must be at most 65,507" {
		t.Errorf("one byte over: %v", err)
	}

	ok := []struct {
		name  string
		batch Batch
		token string
	}{
		{"empty keys", Batch{Source: "a", Rate: 1, Samples: []Sample{{Op: OpRead}, {Op: OpWrite, Counter: true}}}, ""},
		{"every 1", Batch{Source: "a", Rate: 1}, ""},
		{"every max", Batch{Source: "a", Rate: 1 / float64(math.MaxUint32)}, ""},
		{"source 64", Batch{Source: strings.Repeat("s", 64), Rate: 1}, ""},
		{"source non-ASCII", Batch{Source: "\u00a0é€😀\ufffd", Rate: 1}, ""},
		{"token 1", Batch{Source: "a", Rate: 1}, "t"},
		{"token 255", Batch{Source: "a", Rate: 1}, strings.Repeat("t", 255)},
	}
	for _, tt := range ok {
		var token []byte
		if tt.token != "" {
			token = []byte(tt.token)
		}
		data, err := AppendReport(nil, tt.batch, token)
		if err != nil {
			t.Errorf("%s: AppendReport: %v", tt.name, err)
			continue
		}
		var got Batch
		gotToken, err := DecodeReport(&got, data)
		if err != nil {
			t.Errorf("%s: DecodeReport: %v", tt.name, err)
			continue
		}
		if string(gotToken) != tt.token || got.Source != tt.batch.Source || len(got.Samples) != len(tt.batch.Samples) {
			t.Errorf("%s: got source %q token %q %d samples", tt.name, got.Source, gotToken, len(got.Samples))
		}
		if !(got.Rate > 0 && got.Rate <= 1) || math.IsInf(1/got.Rate, 0) {
			t.Errorf("%s: rate %v; want in (0, 1] with a finite scale", tt.name, got.Rate)
		}
	}

	bad := []struct {
		name string
		src  []byte
	}{
		{"C1 control U+0085", []byte("a\u0085")},
		{"DEL", []byte("a\x7f")},
		{"lone continuation byte", []byte("a\x80")},
		{"truncated rune", []byte("a\xe2\x82")},
		{"surrogate", []byte("a\xed\xa0\x80")},
		{"overlong NUL", []byte("a\xc0\x80")},
	}
	for _, tt := range bad {
		d := []byte{ReportMagic, ReportVersion, 0, 0, 0, 0, 1, byte(len(tt.src))}
		d = append(d, tt.src...)
		d = append(d, 0, 0)
		var got Batch
		if _, err := DecodeReport(&got, d); err == nil {
			t.Errorf("source %s %q: no error", tt.name, tt.src)
		} else if got.Source != "" {
			t.Errorf("source %s: error %v with Source %q; want \"\" (the drop is labelled unknown)", tt.name, err, got.Source)
		}
	}
}

// TestDecodeReportTruncatedAnywhere cuts a valid datagram at every length: each prefix is
// refused with an error and no samples, and so is each datagram with bytes appended.
func TestDecodeReportTruncatedAnywhere(t *testing.T) {
	b := reportBatch("checkout", 0.01, 7)
	b.Samples = append(b.Samples, Sample{Key: bytes.Repeat([]byte{'x'}, 300), Op: OpWrite, Count: 1 << 31, Bytes: 1 << 20})
	data, err := AppendReport(nil, b, []byte("tok"))
	if err != nil {
		t.Fatal(err)
	}
	var got Batch
	for n := range len(data) {
		if _, err := DecodeReport(&got, data[:n]); err == nil || len(got.Samples) != 0 {
			t.Fatalf("the first %d of %d bytes: error %v, %d samples; want an error and none", n, len(data), err, len(got.Samples))
		}
	}
	for _, extra := range [][]byte{{0}, {1, 1, 0, 0}, {0x80}} {
		if _, err := DecodeReport(&got, append(bytes.Clone(data), extra...)); err == nil || len(got.Samples) != 0 {
			t.Errorf("with % x appended: error %v, %d samples; want an error and none", extra, err, len(got.Samples))
		}
	}
	// The sample count says more than there are, and fewer.
	at := ReportHeaderSize("checkout", []byte("tok")) - 2
	for _, c := range []uint16{7, 9, 0} {
		d := bytes.Clone(data)
		binary.BigEndian.PutUint16(d[at:], c)
		if _, err := DecodeReport(&got, d); err == nil {
			t.Errorf("sample count %d for 8 samples: no error", c)
		}
	}
}
