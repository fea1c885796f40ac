package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// The binary report datagram, version 1. docs/protocol.md describes it byte by byte:
//
//	offset  size  field
//	0       1     magic 0x68 ('h')
//	1       1     version 1
//	2       1     flags: bit 0 = a token follows the source; bit 1 = the sender follows the
//	              plan (an SDK client); bits 2–7 are reserved (0)
//	3       4     sample-every N, uint32 big-endian, ≥ 1 (the sample rate is 1/N)
//	7       1     source length S, 1–64
//	8       S     source, UTF-8 without control characters
//	        [1    token length T, 1–255      (only when flag bit 0 is set)
//	        T]    token bytes
//	        2     sample count, uint16 big-endian
//	then, per sample:
//	        1     op byte: bits 0–1 op (1 read, 2 write), bit 2 counter (writes only), bit 3
//	              truncated (the sender cut the key), bits 4–7 reserved (0)
//	        var   count, uvarint ≤ 2³²−1 (0 is read as 1)
//	        var   bytes, uvarint ≤ 2³²−1 (0 when unknown)
//	        var   key length K, uvarint
//	        K     key bytes
const (
	// ReportMagic is the first byte of every report datagram.
	ReportMagic = 0x68
	// ReportVersion is the protocol version this package writes and reads.
	ReportVersion = 1

	// MaxReportSize is the largest datagram the decoder accepts: the largest UDP payload
	// over IPv4 (65,535 − 8-byte UDP header − 20-byte IP header).
	MaxReportSize = 65507
	// SafeReportSize is the size senders should stay within so that a datagram fits one
	// Ethernet frame (MTU 1,500 less IP and UDP headers, with room for tunnels) and is
	// never fragmented.
	SafeReportSize = 1400

	// MaxSourceLen bounds the source name, in bytes.
	MaxSourceLen = 64
	// MaxTokenLen bounds the auth token, in bytes.
	MaxTokenLen = 255
	// MaxReportSamples bounds the samples in one datagram (the count is a uint16).
	MaxReportSamples = math.MaxUint16
	// MaxReportKey is the longest key a sender should put in a sample: it cuts a longer
	// one to this and marks the sample truncated (Sample.Truncated, op bit 3), so that it
	// still fits a datagram of MaxReportSize with the largest header. The agent keeps at
	// most limits.max_key_bytes of it, and shows the key as truncated.
	MaxReportKey = 60000

	flagToken   = 1 << 0
	flagFollows = 1 << 1
	flagsKnown  = flagToken | flagFollows
	opMask      = 0x03
	opCounter   = 1 << 2
	opTruncated = 1 << 3
	opKnown     = opMask | opCounter | opTruncated
	fixedHeader = 8 // magic, version, flags, N (4), source length
)

// ReportHeaderSize returns the encoded size of a report header with this source and token,
// that is, the size of a report with no samples.
func ReportHeaderSize(source string, token []byte) int {
	n := fixedHeader + len(source) + 2
	if len(token) > 0 {
		n += 1 + len(token)
	}
	return n
}

// ReportSampleSize returns the encoded size of one sample.
func ReportSampleSize(s Sample) int {
	return 1 + uvarintLen(uint64(s.Count)) + uvarintLen(uint64(s.Bytes)) +
		uvarintLen(uint64(len(s.Key))) + len(s.Key)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// SampleEvery converts a sample rate in (0, 1] to the protocol's "1 in N", rounding to
// the nearest N. It returns an error for a rate outside (0, 1] or one that rounds to an N
// over 2³²−1.
func SampleEvery(rate float64) (uint32, error) {
	if !(rate > 0 && rate <= 1) { // also rejects NaN
		return 0, fmt.Errorf("sample rate %v: must be in (0, 1]", rate)
	}
	n := math.Round(1 / rate)
	if n > math.MaxUint32 {
		return 0, fmt.Errorf("sample rate %v: must be at least 1/%d", rate, uint32(math.MaxUint32))
	}
	return uint32(n), nil
}

// AppendReport appends b, encoded as one report datagram, to dst and returns the extended
// slice. token, when not empty, is carried for an agent that requires it. b.Rate is
// rounded to the nearest "1 in N". AppendReport does not allocate when dst has room.
//
// It returns dst unchanged and an error when b cannot be encoded: a source that is empty,
// over 64 bytes or not printable UTF-8, a rate outside (0, 1], a token over 255 bytes, more
// than 65,535 samples, a sample with an unknown op or a counter flag on a read, or a
// report over MaxReportSize bytes.
func AppendReport(dst []byte, b Batch, token []byte) ([]byte, error) {
	if err := checkSource(b.Source); err != nil {
		return dst, fmt.Errorf("report: %w", err)
	}
	every, err := SampleEvery(b.Rate)
	if err != nil {
		return dst, fmt.Errorf("report: %w", err)
	}
	if len(token) > MaxTokenLen {
		return dst, fmt.Errorf("report: token of %d bytes: must be at most %d", len(token), MaxTokenLen)
	}
	if len(b.Samples) > MaxReportSamples {
		return dst, fmt.Errorf("report: %d samples: at most %s fit one report", len(b.Samples), group(MaxReportSamples))
	}
	size := ReportHeaderSize(b.Source, token)
	for i, s := range b.Samples {
		if s.Op != OpRead && s.Op != OpWrite {
			return dst, fmt.Errorf("report: sample %d: op %d: must be %d (read) or %d (write)", i, s.Op, OpRead, OpWrite)
		}
		if s.Counter && s.Op != OpWrite {
			return dst, fmt.Errorf("report: sample %d: counter flag on a read: allowed on writes only", i)
		}
		size += ReportSampleSize(s)
	}
	if size > MaxReportSize {
		return dst, fmt.Errorf("report: %s bytes: must be at most %s", group(size), group(MaxReportSize))
	}

	flags := byte(0)
	if len(token) > 0 {
		flags |= flagToken
	}
	if b.FollowsPlan {
		flags |= flagFollows
	}
	dst = append(dst, ReportMagic, ReportVersion, flags)
	dst = binary.BigEndian.AppendUint32(dst, every)
	dst = append(dst, byte(len(b.Source)))
	dst = append(dst, b.Source...)
	if len(token) > 0 {
		dst = append(dst, byte(len(token)))
		dst = append(dst, token...)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(b.Samples)))
	for _, s := range b.Samples {
		op := byte(s.Op)
		if s.Counter {
			op |= opCounter
		}
		if s.Truncated {
			op |= opTruncated
		}
		dst = append(dst, op)
		dst = binary.AppendUvarint(dst, uint64(s.Count))
		dst = binary.AppendUvarint(dst, uint64(s.Bytes))
		dst = binary.AppendUvarint(dst, uint64(len(s.Key)))
		dst = append(dst, s.Key...)
	}
	return dst, nil
}

// DecodeReport decodes one report datagram into b, reusing b.Samples' backing array, and
// returns the token the datagram carries (nil when none). The keys in b.Samples and the
// token alias data, so they are valid only as long as data is unchanged. With a reused
// Batch, a datagram from the same source as the one before decodes without allocating.
//
// It returns an error naming the first field that is wrong and what is allowed there;
// b.Samples is then empty, and b.Source holds the source when the datagram got that far,
// or "" before it. Samples are numbered from 0.
func DecodeReport(b *Batch, data []byte) (token []byte, err error) {
	b.Samples = b.Samples[:0]
	if len(data) > MaxReportSize {
		b.Source = ""
		return nil, fmt.Errorf("report: %s bytes: must be at most %s", group(len(data)), group(MaxReportSize))
	}
	if len(data) < fixedHeader {
		b.Source = ""
		return nil, fmt.Errorf("report: %d bytes: a header takes at least %d", len(data), fixedHeader+1+2)
	}
	if data[0] != ReportMagic {
		b.Source = ""
		return nil, fmt.Errorf("report: magic byte 0x%02x: must be 0x%02x", data[0], ReportMagic)
	}
	if data[1] != ReportVersion {
		b.Source = ""
		return nil, fmt.Errorf("report: version %d is not supported; this decoder reads version %d", data[1], ReportVersion)
	}
	flags := data[2]
	if flags&^flagsKnown != 0 {
		b.Source = ""
		return nil, fmt.Errorf("report: flags 0x%02x: only bits 0 (token) and 1 (follows the plan) may be set", flags)
	}
	every := binary.BigEndian.Uint32(data[3:7])
	if every == 0 {
		b.Source = ""
		return nil, errors.New("report: sample-every 0: must be at least 1")
	}
	srcLen := int(data[7])
	p := data[fixedHeader:]
	if srcLen == 0 || srcLen > MaxSourceLen {
		b.Source = ""
		return nil, fmt.Errorf("report: source length %d: must be 1 to %d bytes", srcLen, MaxSourceLen)
	}
	if srcLen > len(p) {
		b.Source = ""
		return nil, fmt.Errorf("report: source length %d exceeds the %d bytes left in the datagram", srcLen, len(p))
	}
	src := p[:srcLen]
	p = p[srcLen:]
	if err := checkSourceBytes(src); err != nil {
		b.Source = ""
		return nil, fmt.Errorf("report: %w", err)
	}
	if b.Source != string(src) { // the comparison does not allocate; a new source does, once
		b.Source = string(src)
	}
	b.Rate = 1 / float64(every)
	b.FollowsPlan = flags&flagFollows != 0
	if flags&flagToken != 0 {
		if len(p) < 1 {
			return nil, errors.New("report: token length: missing, the datagram ends after the source")
		}
		n := int(p[0])
		p = p[1:]
		if n == 0 {
			return nil, errors.New("report: token length 0: must be 1 to 255 when the token flag is set")
		}
		if n > len(p) {
			return nil, fmt.Errorf("report: token length %d exceeds the %s bytes left in the datagram", n, group(len(p)))
		}
		token, p = p[:n], p[n:]
	}
	if len(p) < 2 {
		return nil, fmt.Errorf("report: sample count: needs 2 bytes, %d left in the datagram", len(p))
	}
	count := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	if count > len(p)/4 { // a sample takes at least 4 bytes
		return nil, fmt.Errorf("report: sample count %d: the %s bytes left hold at most %d samples of 4 bytes or more",
			count, group(len(p)), len(p)/4)
	}
	if cap(b.Samples) < count {
		b.Samples = make([]Sample, 0, max(count, 64))
	}
	b.Samples = b.Samples[:count]
	for i := range b.Samples {
		n, err := decodeSample(&b.Samples[i], p, i)
		if err != nil {
			b.Samples = b.Samples[:0]
			return nil, err
		}
		p = p[n:]
	}
	if len(p) != 0 {
		b.Samples = b.Samples[:0]
		after := fmt.Sprintf("sample %d", count-1)
		if count == 0 {
			after = "the sample count"
		}
		return nil, fmt.Errorf("report: %s bytes after %s: the sample count says %d samples", group(len(p)), after, count)
	}
	return token, nil
}

// decodeSample decodes sample i from the start of p into s and returns its size.
func decodeSample(s *Sample, p []byte, i int) (int, error) {
	if len(p) < 1 {
		return 0, fmt.Errorf("report: sample %d: op byte: missing, the datagram ends", i)
	}
	op := p[0]
	if op&^opKnown != 0 {
		return 0, fmt.Errorf("report: sample %d: op byte 0x%02x: only bits 0-1 (op), 2 (counter) and 3 (truncated) may be set", i, op)
	}
	s.Op = Op(op & opMask)
	if s.Op != OpRead && s.Op != OpWrite {
		return 0, fmt.Errorf("report: sample %d: op %d: must be 1 (read) or 2 (write)", i, s.Op)
	}
	s.Counter = op&opCounter != 0
	s.Truncated = op&opTruncated != 0
	if s.Counter && s.Op != OpWrite {
		return 0, fmt.Errorf("report: sample %d: counter flag on a read: allowed on writes only", i)
	}
	n := 1
	v, m, err := uvarint(p[n:], i, "count")
	if err != nil {
		return 0, err
	}
	s.Count, n = uint32(v), n+m
	v, m, err = uvarint(p[n:], i, "bytes")
	if err != nil {
		return 0, err
	}
	s.Bytes, n = uint32(v), n+m
	// The key length is read as a uvarint of any size, then compared with what is left.
	var kl uint64
	if n < len(p) && p[n] < 0x80 { // the common one-byte case, inlined
		kl, m = uint64(p[n]), 1
	} else if kl, m = binary.Uvarint(p[n:]); m <= 0 {
		return 0, varintErr(i, "key length", m)
	}
	n += m
	if left := uint64(len(p) - n); kl > left {
		return 0, fmt.Errorf("report: sample %d: key length %d exceeds the %s bytes left in the datagram", i, kl, group(int(left)))
	}
	s.Key = p[n : n+int(kl) : n+int(kl)]
	return n + int(kl), nil
}

// maxUint32Varint is the most bytes a uvarint of a uint32 takes (count and bytes).
const maxUint32Varint = 5

// uvarint reads a uvarint that must fit a uint32 and take at most 5 bytes.
func uvarint(p []byte, i int, field string) (uint64, int, error) {
	if len(p) > 0 && p[0] < 0x80 { // the common one-byte case
		return uint64(p[0]), 1, nil
	}
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, 0, varintErr(i, field, n)
	}
	if n > maxUint32Varint {
		return 0, 0, fmt.Errorf("report: sample %d: %s: uvarint of %d bytes: must take at most %d", i, field, n, maxUint32Varint)
	}
	if v > math.MaxUint32 {
		return 0, 0, fmt.Errorf("report: sample %d: %s %d: must be at most %d", i, field, v, uint32(math.MaxUint32))
	}
	return v, n, nil
}

func varintErr(i int, field string, n int) error {
	if n == 0 {
		return fmt.Errorf("report: sample %d: %s: the datagram ends inside the uvarint", i, field)
	}
	return fmt.Errorf("report: sample %d: %s: uvarint longer than 10 bytes or over 2⁶⁴−1", i, field)
}

// checkSource reports whether s is a valid source name: 1 to 64 bytes of UTF-8 without
// control characters (it is a metric label and appears in logs).
func checkSource(s string) error {
	if len(s) == 0 || len(s) > MaxSourceLen {
		return fmt.Errorf("source of %d bytes: must be 1 to %d bytes", len(s), MaxSourceLen)
	}
	for i, r := range s {
		if err := sourceRune(r, i, r == utf8.RuneError && isInvalid(s[i:])); err != nil {
			return fmt.Errorf("source %q: %w", s, err)
		}
	}
	return nil
}

// checkSourceBytes checks the characters of a source as checkSource does, without
// allocating when src is valid.
func checkSourceBytes(src []byte) error {
	for i, r := range string(src) { // does not allocate
		invalid := false
		if r == utf8.RuneError {
			_, size := utf8.DecodeRune(src[i:])
			invalid = size <= 1
		}
		if err := sourceRune(r, i, invalid); err != nil {
			return fmt.Errorf("source %q: %w", src, err)
		}
	}
	return nil
}

func isInvalid(s string) bool {
	_, size := utf8.DecodeRuneInString(s)
	return size <= 1
}

func sourceRune(r rune, i int, invalid bool) error {
	switch {
	case invalid:
		return fmt.Errorf("invalid UTF-8 at byte %d", i)
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return fmt.Errorf("control character at byte %d; use printable UTF-8", i)
	}
	return nil
}

// group formats n with thousands separators: 65507 → "65,507".
func group(n int) string {
	s := strconv.Itoa(n)
	neg := ""
	if n < 0 {
		neg, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return neg + s
}
