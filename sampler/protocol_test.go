package sampler

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// reportBatch builds a batch of n samples with keys "user:<i>" for tests and benchmarks.
func reportBatch(source string, rate float64, n int) Batch {
	b := Batch{Source: source, Rate: rate}
	for i := range n {
		s := Sample{Key: fmt.Appendf(nil, "user:%d", i), Op: OpRead, Count: 1, Bytes: uint32(100 + i)}
		if i%3 == 1 {
			s.Op, s.Counter = OpWrite, i%2 == 0
		}
		b.Samples = append(b.Samples, s)
	}
	return b
}

func sameReportBatch(t *testing.T, got, want Batch) {
	t.Helper()
	if got.Source != want.Source {
		t.Errorf("source %q; want %q", got.Source, want.Source)
	}
	if got.Rate != want.Rate {
		t.Errorf("rate %v; want %v", got.Rate, want.Rate)
	}
	if len(got.Samples) != len(want.Samples) {
		t.Fatalf("%d samples; want %d", len(got.Samples), len(want.Samples))
	}
	for i, g := range got.Samples {
		w := want.Samples[i]
		if !bytes.Equal(g.Key, w.Key) || g.Op != w.Op || g.Counter != w.Counter || g.Count != w.Count || g.Bytes != w.Bytes || g.Truncated != w.Truncated {
			t.Errorf("sample %d: got %+v (key %q); want %+v (key %q)", i, g, g.Key, w, w.Key)
		}
	}
}

func TestReportRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		batch Batch
		token string
	}{
		{"empty", Batch{Source: "a", Rate: 1}, ""},
		{"one read", Batch{Source: "app-1", Rate: 0.01, Samples: []Sample{{Key: []byte("k"), Op: OpRead, Count: 1, Bytes: 512}}}, ""},
		{"token", reportBatch("checkout", 0.001, 5), "s3cret"},
		{"counter and big numbers", Batch{Source: "ü-app", Rate: 1.0 / 3, Samples: []Sample{
			{Key: []byte("n"), Op: OpWrite, Counter: true, Count: 1<<32 - 1, Bytes: 1<<32 - 1},
			{Key: []byte{0, 0xff, '\n'}, Op: OpWrite},
			{Key: []byte{}, Op: OpRead, Count: 300},
		}}, ""},
		{"fifty", reportBatch("svc", 0.5, 50), strings.Repeat("t", MaxTokenLen)},
		{"long source", reportBatch(strings.Repeat("s", MaxSourceLen), 1, 2), ""},
		{"follows the plan", Batch{Source: "sdk", Rate: 0.1, FollowsPlan: true, Samples: []Sample{{Key: []byte("k"), Op: OpRead}}}, "tk"},
		{"truncated keys", Batch{Source: strings.Repeat("s", MaxSourceLen), Rate: 1, Samples: []Sample{
			{Key: bytes.Repeat([]byte("k"), MaxReportKey), Op: OpWrite, Counter: true, Count: 1<<32 - 1, Bytes: 1<<32 - 1, Truncated: true},
		}}, strings.Repeat("t", MaxTokenLen)},
		{"truncated read", Batch{Source: "sdk", Rate: 0.5, Samples: []Sample{{Key: []byte("k"), Op: OpRead, Truncated: true}, {Key: []byte("j"), Op: OpRead}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var token []byte
			if tt.token != "" {
				token = []byte(tt.token)
			}
			data, err := AppendReport(nil, tt.batch, token)
			if err != nil {
				t.Fatalf("AppendReport: %v", err)
			}
			size := ReportHeaderSize(tt.batch.Source, token)
			for _, s := range tt.batch.Samples {
				size += ReportSampleSize(s)
			}
			if len(data) != size {
				t.Errorf("encoded %d bytes; want %d from ReportHeaderSize and ReportSampleSize", len(data), size)
			}
			var got Batch
			gotToken, err := DecodeReport(&got, data)
			if err != nil {
				t.Fatalf("DecodeReport: %v", err)
			}
			if string(gotToken) != tt.token {
				t.Errorf("token %q; want %q", gotToken, tt.token)
			}
			want := tt.batch
			every, _ := SampleEvery(want.Rate)
			want.Rate = 1 / float64(every)
			sameReportBatch(t, got, want)
			if got.FollowsPlan != want.FollowsPlan {
				t.Errorf("FollowsPlan %v; want %v", got.FollowsPlan, want.FollowsPlan)
			}
		})
	}
}

func TestReportLayout(t *testing.T) {
	// The example of docs/protocol.md, byte by byte.
	b := Batch{Source: "app", Rate: 0.01, Samples: []Sample{
		{Key: []byte("k1"), Op: OpRead, Count: 1, Bytes: 300},
		{Key: []byte("n"), Op: OpWrite, Counter: true, Count: 1},
	}}
	got, err := AppendReport(nil, b, []byte("tk"))
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0x68, 0x01, 0x01, // magic, version, flags (token)
		0x00, 0x00, 0x00, 0x64, // 1 in 100
		0x03, 'a', 'p', 'p', // source
		0x02, 't', 'k', // token
		0x00, 0x02, // 2 samples
		0x01, 0x01, 0xac, 0x02, 0x02, 'k', '1', // read, count 1, bytes 300, key "k1"
		0x06, 0x01, 0x00, 0x01, 'n', // write+counter, count 1, bytes 0, key "n"
	}
	if !bytes.Equal(got, want) {
		t.Errorf("got % x; want % x", got, want)
	}
}

func TestDecodeReportErrors(t *testing.T) {
	valid, err := AppendReport(nil, Batch{Source: "app", Rate: 1, Samples: []Sample{
		{Key: []byte("k"), Op: OpRead},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	header := valid[:len(valid)-5-2] // up to the sample count
	withCount := func(n uint16, rest ...byte) []byte {
		d := binary.BigEndian.AppendUint16(bytes.Clone(header), n)
		return append(d, rest...)
	}
	bigKey := withCount(1, 0x01, 0x01, 0x00)
	bigKey = binary.AppendUvarint(bigKey, 70000)
	bigKey = append(bigKey, make([]byte, 1400)...)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "report: 0 bytes: a header takes at least 11"},
		{"magic", []byte("GET / HTTP/1.1\r\n"), "report: magic byte 0x47: must be 0x68"},
		{"version", []byte{0x68, 2, 0, 0, 0, 0, 1, 1, 'a', 0, 0}, "report: version 2 is not supported; this decoder reads version 1"},
		{"flags", []byte{0x68, 1, 0x82, 0, 0, 0, 1, 1, 'a', 0, 0}, "report: flags 0x82: only bits 0 (token) and 1 (follows the plan) may be set"},
		{"every zero", []byte{0x68, 1, 0, 0, 0, 0, 0, 1, 'a', 0, 0}, "report: sample-every 0: must be at least 1"},
		{"source zero", []byte{0x68, 1, 0, 0, 0, 0, 1, 0, 0, 0}, "report: source length 0: must be 1 to 64 bytes"},
		{"source long", append([]byte{0x68, 1, 0, 0, 0, 0, 1, 65}, make([]byte, 70)...), "report: source length 65: must be 1 to 64 bytes"},
		{"source short", []byte{0x68, 1, 0, 0, 0, 0, 1, 9, 'a', 'b'}, "report: source length 9 exceeds the 2 bytes left in the datagram"},
		{"source control", []byte{0x68, 1, 0, 0, 0, 0, 1, 2, 'a', '\n', 0, 0}, `report: source "a\n": control character at byte 1; use printable UTF-8`},
		{"source utf8", []byte{0x68, 1, 0, 0, 0, 0, 1, 2, 'a', 0xff, 0, 0}, `report: source "a\xff": invalid UTF-8 at byte 1`},
		{"token missing", []byte{0x68, 1, 1, 0, 0, 0, 1, 1, 'a'}, "report: token length: missing, the datagram ends after the source"},
		{"token zero", []byte{0x68, 1, 1, 0, 0, 0, 1, 1, 'a', 0, 0, 0}, "report: token length 0: must be 1 to 255 when the token flag is set"},
		{"token short", []byte{0x68, 1, 1, 0, 0, 0, 1, 1, 'a', 5, 't'}, "report: token length 5 exceeds the 1 bytes left in the datagram"},
		{"count missing", []byte{0x68, 1, 0, 0, 0, 0, 1, 1, 'a', 0}, "report: sample count: needs 2 bytes, 1 left in the datagram"},
		{"count too big", withCount(3, 1, 0, 0, 1, 'k'), "report: sample count 3: the 5 bytes left hold at most 1 samples of 4 bytes or more"},
		{"op reserved", withCount(1, 0x11, 0, 0, 0), "report: sample 0: op byte 0x11: only bits 0-1 (op), 2 (counter) and 3 (truncated) may be set"},
		{"op zero", withCount(1, 0x00, 0, 0, 0), "report: sample 0: op 0: must be 1 (read) or 2 (write)"},
		{"op three", withCount(1, 0x03, 0, 0, 0), "report: sample 0: op 3: must be 1 (read) or 2 (write)"},
		{"counter read", withCount(1, 0x05, 0, 0, 0), "report: sample 0: counter flag on a read: allowed on writes only"},
		{"count over", withCount(1, 0x01, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0), "report: sample 0: count 4294967296: must be at most 4294967295"},
		{"count overflow", withCount(1, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "report: sample 0: count: uvarint longer than 10 bytes or over 2⁶⁴−1"},
		{"bytes truncated", withCount(1, 0x01, 0x01, 0x80, 0x80), "report: sample 0: bytes: the datagram ends inside the uvarint"},
		{"key length", bigKey, "report: sample 0: key length 70000 exceeds the 1,400 bytes left in the datagram"},
		{"second sample", withCount(2, 0x01, 0, 0, 1, 'k', 0x02, 0, 0, 5, 'x', 'y'), "report: sample 1: key length 5 exceeds the 2 bytes left in the datagram"},
		{"trailing", withCount(1, 0x01, 0, 0, 1, 'k', 'z'), "report: 1 bytes after sample 0: the sample count says 1 samples"},
		{"trailing, no samples", withCount(0, 'z'), "report: 1 bytes after the sample count: the sample count says 0 samples"},
		{"too big", make([]byte, MaxReportSize+1), "report: 65,508 bytes: must be at most 65,507"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Batch{Samples: make([]Sample, 3)}
			_, err := DecodeReport(&b, tt.data)
			if err == nil {
				t.Fatalf("got no error; want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("got %q; want %q", err, tt.want)
			}
			if len(b.Samples) != 0 {
				t.Errorf("got %d samples after an error; want 0", len(b.Samples))
			}
		})
	}
}

func TestAppendReportErrors(t *testing.T) {
	ok := []Sample{{Key: []byte("k"), Op: OpRead}}
	tests := []struct {
		name  string
		batch Batch
		token []byte
		want  string
	}{
		{"no source", Batch{Rate: 1}, nil, "report: source of 0 bytes: must be 1 to 64 bytes"},
		{"long source", Batch{Source: strings.Repeat("x", 65), Rate: 1}, nil, "report: source of 65 bytes: must be 1 to 64 bytes"},
		{"control source", Batch{Source: "a\tb", Rate: 1}, nil, `report: source "a\tb": control character at byte 1; use printable UTF-8`},
		{"rate zero", Batch{Source: "a"}, nil, "report: sample rate 0: must be in (0, 1]"},
		{"rate over", Batch{Source: "a", Rate: 1.5}, nil, "report: sample rate 1.5: must be in (0, 1]"},
		{"long token", Batch{Source: "a", Rate: 1, Samples: ok}, make([]byte, 256), "report: token of 256 bytes: must be at most 255"},
		{"op", Batch{Source: "a", Rate: 1, Samples: []Sample{{Op: 7}}}, nil, "report: sample 0: op 7: must be 1 (read) or 2 (write)"},
		{"counter read", Batch{Source: "a", Rate: 1, Samples: []Sample{{Op: OpRead, Counter: true}}}, nil, "report: sample 0: counter flag on a read: allowed on writes only"},
		{"too big", Batch{Source: "a", Rate: 1, Samples: []Sample{{Op: OpRead, Key: make([]byte, MaxReportSize)}}}, nil, "report: 65,524 bytes: must be at most 65,507"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("prefix")
			got, err := AppendReport(dst, tt.batch, tt.token)
			if err == nil || err.Error() != tt.want {
				t.Errorf("got error %v; want %q", err, tt.want)
			}
			if string(got) != "prefix" {
				t.Errorf("got dst %q after an error; want it unchanged", got)
			}
		})
	}
}

func TestReportAllocs(t *testing.T) {
	b := reportBatch("app-1", 0.01, 50)
	buf := make([]byte, 0, SafeReportSize*2)
	data, err := AppendReport(buf, b, []byte("tok"))
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendReport(buf[:0], b, []byte("tok")) }); n != 0 {
		t.Errorf("AppendReport: got %v allocs per run; want 0", n)
	}
	var dst Batch
	if _, err := DecodeReport(&dst, data); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeReport(&dst, data) }); n != 0 {
		t.Errorf("DecodeReport into a reused Batch: got %v allocs per run; want 0", n)
	}
}

func TestSampleEvery(t *testing.T) {
	tests := []struct {
		rate float64
		want uint32
	}{{1, 1}, {0.5, 2}, {0.01, 100}, {0.001, 1000}, {0.3, 3}, {1.0 / 7, 7}, {1.0 / 4294967295, 4294967295}}
	for _, tt := range tests {
		if got, err := SampleEvery(tt.rate); err != nil || got != tt.want {
			t.Errorf("SampleEvery(%v): got %d, %v; want %d", tt.rate, got, err, tt.want)
		}
	}
}

var reportBenchSink int

// BenchmarkDecodeReport decodes a 50-sample datagram: into a reused Batch (the UDP
// server's way) and, as the naive baseline, into a new Batch each time.
func BenchmarkDecodeReport(b *testing.B) {
	data, err := AppendReport(nil, reportBatch("app-1", 0.01, 50), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		var batch Batch
		for b.Loop() {
			if _, err := DecodeReport(&batch, data); err != nil {
				b.Fatal(err)
			}
			reportBenchSink += len(batch.Samples)
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			batch := new(Batch)
			if _, err := DecodeReport(batch, data); err != nil {
				b.Fatal(err)
			}
			reportBenchSink += len(batch.Samples)
		}
	})
}

var reportBenchBytes []byte

func BenchmarkAppendReport(b *testing.B) {
	batch := reportBatch("app-1", 0.01, 50)
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			reportBenchBytes, _ = AppendReport(buf[:0], batch, nil)
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			reportBenchBytes, _ = AppendReport(nil, batch, nil)
		}
	})
}

func FuzzDecodeReport(f *testing.F) {
	for _, tt := range []struct {
		b     Batch
		token string
	}{
		{reportBatch("app-1", 0.01, 3), ""},
		{reportBatch("checkout", 1, 1), "secret"},
		{Batch{Source: "x", Rate: 0.5}, ""},
		{Batch{Source: "c", Rate: 1, Samples: []Sample{{Key: []byte("n"), Op: OpWrite, Counter: true, Count: 1 << 20}}}, ""},
	} {
		var token []byte
		if tt.token != "" {
			token = []byte(tt.token)
		}
		data, err := AppendReport(nil, tt.b, token)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{0x68, 1, 0, 0, 0, 0, 1, 1, 'a', 0, 1, 1, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		token, err := DecodeReport(&b, data)
		if err != nil {
			if len(b.Samples) != 0 {
				t.Fatalf("error %v with %d samples; want 0", err, len(b.Samples))
			}
			return
		}
		// What decodes re-encodes, and decodes to the same batch and token.
		again, err := AppendReport(nil, b, token)
		if err != nil {
			t.Fatalf("re-encoding a decoded report: %v", err)
		}
		if len(again) > len(data) {
			t.Fatalf("re-encoded %d bytes from %d; canonical encoding is never longer", len(again), len(data))
		}
		var b2 Batch
		token2, err := DecodeReport(&b2, again)
		if err != nil {
			t.Fatalf("decoding a re-encoded report: %v", err)
		}
		if !bytes.Equal(token, token2) {
			t.Fatalf("token %q; want %q", token2, token)
		}
		sameReportBatch(t, b2, b)
	})
}

// TestDecodeReportOverlongVarint checks that count and bytes, which docs/protocol.md sizes
// at 1 to 5 bytes, are rejected when a sender pads their uvarint to more bytes.
func TestDecodeReportOverlongVarint(t *testing.T) {
	valid, err := AppendReport(nil, Batch{Source: "app", Rate: 1, Samples: []Sample{{Key: []byte("k"), Op: OpRead}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	header := valid[:len(valid)-5-2]
	tests := []struct {
		name   string
		sample []byte
		want   string
	}{
		{"count of 6 bytes", []byte{0x01, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00, 0x01, 'k'},
			"report: sample 0: count: uvarint of 6 bytes: must take at most 5"},
		{"bytes of 10 bytes", []byte{0x01, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 'k'},
			"report: sample 0: bytes: uvarint of 10 bytes: must take at most 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := binary.BigEndian.AppendUint16(bytes.Clone(header), 1)
			data = append(data, tt.sample...)
			var b Batch
			_, err := DecodeReport(&b, data)
			if err == nil {
				t.Fatalf("got no error and %+v; want %q", b.Samples, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("got %q; want %q", err, tt.want)
			}
		})
	}
}
