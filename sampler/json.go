package sampler

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/internal/jsontext"
)

// ErrTooLarge is wrapped by the errors of a report, body or key over its limit, so that a
// caller can answer 413 rather than 400: errors.Is(err, ErrTooLarge).
var ErrTooLarge = errors.New("over the limit")

// tooLargeError is an error message that matches ErrTooLarge.
type tooLargeError string

func (e tooLargeError) Error() string        { return string(e) }
func (e tooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Defaults of JSONOptions and HTTPOptions.
const (
	DefaultMaxBodyBytes = 1 << 20 // 1 MiB
	DefaultMaxSamples   = 10000
)

// JSONOptions limits what DecodeJSONReport accepts. The zero value works.
type JSONOptions struct {
	// MaxSamples bounds the samples in one report. Zero or less means DefaultMaxSamples
	// (10,000).
	MaxSamples int
}

// DecodeJSONReport decodes the JSON body of POST /v1/samples into b:
//
//	{"source":"app-1","sample_rate":0.01,"samples":[{"key":"k","op":"read","count":1,"bytes":512}]}
//
// source (1 to 64 bytes of printable UTF-8) is required; sample_rate is in (0, 1] and
// defaults to 1; samples is required and may be empty. Each sample has exactly one of key
// (a JSON string) or key_b64 (standard base64, for binary keys), op "read" or "write",
// count (a whole number ≥ 1, default 1), bytes (a whole number ≥ 0, default 0), and the
// extension counter (true marks a write of the INCR family; default false). Unknown
// fields, duplicate fields, null values and data after the object are errors.
//
// b.Samples is reused; its keys point into memory that DecodeJSONReport allocates. The
// error names the field, with the sample's index, and what is allowed there, as in
// `samples[3].op: "delete" is not allowed; use "read" or "write"`. Over the sample limit
// it wraps ErrTooLarge. On error, b.Samples is empty and b.Source is the source when it
// had been read, else "".
func DecodeJSONReport(b *Batch, body []byte, opts JSONOptions) error {
	maxSamples := opts.MaxSamples
	if maxSamples <= 0 {
		maxSamples = DefaultMaxSamples
	}
	b.Source, b.Rate, b.Samples = "", 1, b.Samples[:0]
	d := jsonDecoder{body: body, dec: json.NewDecoder(bytes.NewReader(body))}
	d.dec.UseNumber()
	err := d.report(b, maxSamples)
	if err != nil {
		b.Samples = b.Samples[:0]
	}
	return err
}

type jsonDecoder struct {
	body  []byte // what dec reads
	dec   *json.Decoder
	arena []byte // the keys, back to back
	ends  []int  // ends[i] is where sample i's key ends in arena
}

func (d *jsonDecoder) report(b *Batch, maxSamples int) error {
	if err := d.delim('{', "body", "a JSON object"); err != nil {
		return err
	}
	var haveSource, haveRate, haveSamples bool
	for d.dec.More() {
		name, err := d.name("body")
		if err != nil {
			return err
		}
		switch name {
		case "source":
			if haveSource {
				return errors.New("source: given twice")
			}
			haveSource = true
			tok, err := d.value("source")
			if err != nil {
				return err
			}
			s, ok := tok.(string)
			if !ok {
				return fmt.Errorf("source: %s is not allowed; use a string of 1 to %d bytes", kind(tok), MaxSourceLen)
			}
			if err := checkSource(s); err != nil {
				return err
			}
			b.Source = s
		case "sample_rate":
			if haveRate {
				return errors.New("sample_rate: given twice")
			}
			haveRate = true
			tok, err := d.value("sample_rate")
			if err != nil {
				return err
			}
			num, ok := tok.(json.Number)
			if !ok {
				return fmt.Errorf("sample_rate: %s is not allowed; use a number in (0, 1]", kind(tok))
			}
			r, err := strconv.ParseFloat(string(num), 64)
			if err != nil || !(r > 0 && r <= 1) {
				return fmt.Errorf("sample_rate: %s is not allowed; use a number in (0, 1]", num)
			}
			b.Rate = r
		case "samples":
			if haveSamples {
				return errors.New("samples: given twice")
			}
			haveSamples = true
			if err := d.samples(b, maxSamples); err != nil {
				return err
			}
		default:
			return fmt.Errorf("body: unknown field %q; allowed: source, sample_rate, samples", name)
		}
	}
	if _, err := d.token("body"); err != nil { // the closing brace
		return err
	}
	if tok, err := d.dec.Token(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("body: after the JSON object: %v", err)
		}
		return fmt.Errorf("body: %s after the JSON object; send one object", kind(tok))
	}
	if !haveSource {
		return fmt.Errorf("source: missing; use a string of 1 to %d bytes", MaxSourceLen)
	}
	if !haveSamples {
		return errors.New("samples: missing; use an array of samples, which may be empty")
	}
	start := 0
	for i, end := range d.ends {
		b.Samples[i].Key = d.arena[start:end:end]
		start = end
	}
	return nil
}

func (d *jsonDecoder) samples(b *Batch, maxSamples int) error {
	if err := d.delim('[', "samples", "an array"); err != nil {
		return err
	}
	for i := 0; d.dec.More(); i++ {
		if i == maxSamples {
			return tooLargeError(fmt.Sprintf("samples: more than %s; send at most %s per report", group(maxSamples), group(maxSamples)))
		}
		s, err := d.sample(i)
		if err != nil {
			return err
		}
		b.Samples = append(b.Samples, s)
	}
	_, err := d.token("samples") // the closing bracket
	return err
}

const sampleFields = "key, key_b64, op, count, bytes, counter"

const (
	fKey = 1 << iota
	fKeyB64
	fOp
	fCount
	fBytes
	fCounter
)

func (d *jsonDecoder) sample(i int) (Sample, error) {
	s := Sample{Count: 1}
	at := fmt.Sprintf("samples[%d]", i)
	if err := d.delim('{', at, "an object"); err != nil {
		return s, err
	}
	var seen int
	for d.dec.More() {
		name, err := d.name(at)
		if err != nil {
			return s, err
		}
		var bit int
		switch name {
		case "key":
			bit = fKey
		case "key_b64":
			bit = fKeyB64
		case "op":
			bit = fOp
		case "count":
			bit = fCount
		case "bytes":
			bit = fBytes
		case "counter":
			bit = fCounter
		default:
			return s, fmt.Errorf("%s: unknown field %q; allowed: %s", at, name, sampleFields)
		}
		field := at + "." + name
		if seen&bit != 0 {
			return s, fmt.Errorf("%s: given twice", field)
		}
		seen |= bit
		tok, err := d.value(field)
		if err != nil {
			return s, err
		}
		switch bit {
		case fKey:
			k, ok := tok.(string)
			if !ok {
				return s, fmt.Errorf("%s: %s is not allowed; use a string (or key_b64 for binary keys)", field, kind(tok))
			}
			d.arena = append(d.arena, k...)
		case fKeyB64:
			k, ok := tok.(string)
			if !ok {
				return s, fmt.Errorf("%s: %s is not allowed; use a string in standard base64", field, kind(tok))
			}
			// Decode skips line breaks, which RFC 4648 §4 does not allow.
			if j := strings.IndexAny(k, "\r\n"); j >= 0 {
				return s, fmt.Errorf("%s: not standard base64 (RFC 4648, with padding): line break at byte %d", field, j)
			}
			n := len(d.arena)
			d.arena = slices.Grow(d.arena, base64.StdEncoding.DecodedLen(len(k)))
			d.arena = d.arena[:n+base64.StdEncoding.DecodedLen(len(k))]
			m, err := base64.StdEncoding.Decode(d.arena[n:], []byte(k))
			if err != nil {
				return s, fmt.Errorf("%s: not standard base64 (RFC 4648, with padding): %v", field, err)
			}
			d.arena = d.arena[:n+m]
		case fOp:
			o, ok := tok.(string)
			if !ok {
				return s, fmt.Errorf("%s: %s is not allowed; use \"read\" or \"write\"", field, kind(tok))
			}
			op, err := ParseOp(o)
			if err != nil {
				return s, fmt.Errorf("%s: %q is not allowed; use \"read\" or \"write\"", field, o)
			}
			s.Op = op
		case fCount, fBytes:
			lo := uint64(1)
			if bit == fBytes {
				lo = 0
			}
			num, ok := tok.(json.Number)
			if !ok {
				return s, fmt.Errorf("%s: %s is not allowed; use a whole number from %d to %d", field, kind(tok), lo, uint32(math.MaxUint32))
			}
			v, err := strconv.ParseUint(string(num), 10, 32)
			if err != nil || v < lo {
				return s, fmt.Errorf("%s: %s is not allowed; use a whole number from %d to %d", field, num, lo, uint32(math.MaxUint32))
			}
			if bit == fCount {
				s.Count = uint32(v)
			} else {
				s.Bytes = uint32(v)
			}
		case fCounter:
			c, ok := tok.(bool)
			if !ok {
				return s, fmt.Errorf("%s: %s is not allowed; use true or false", field, kind(tok))
			}
			s.Counter = c
		}
	}
	if _, err := d.token(at); err != nil { // the closing brace
		return s, err
	}
	switch {
	case seen&fKey != 0 && seen&fKeyB64 != 0:
		return s, fmt.Errorf("%s: both key and key_b64 are given; use exactly one", at)
	case seen&(fKey|fKeyB64) == 0:
		return s, fmt.Errorf("%s.key: missing; give key, or key_b64 for a binary key", at)
	case seen&fOp == 0:
		return s, fmt.Errorf("%s.op: missing; use \"read\" or \"write\"", at)
	case s.Counter && s.Op != OpWrite:
		return s, fmt.Errorf("%s.counter: true is allowed only with \"op\": \"write\"", at)
	}
	d.ends = append(d.ends, len(d.arena))
	return s, nil
}

// token reads the next token; at names where the reader is, for the error.
func (d *jsonDecoder) token(at string) (json.Token, error) {
	tok, err := d.dec.Token()
	if err == nil {
		return tok, nil
	}
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return nil, fmt.Errorf("%s: invalid JSON at byte %d: %v", at, syn.Offset, err)
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%s: the JSON ends early", at)
	}
	return nil, fmt.Errorf("%s: invalid JSON: %v", at, err)
}

// value reads the value of the field at; null comes back as a nil token, which each
// field's check refuses with what it allows. A string must be valid UTF-8 as sent, with
// no half of a surrogate pair escaped alone: encoding/json would turn each bad byte, and
// each such escape, into U+FFFD, so that different binary keys would be counted as one.
func (d *jsonDecoder) value(at string) (json.Token, error) {
	start := d.dec.InputOffset()
	tok, err := d.token(at)
	if err != nil {
		return nil, err
	}
	if _, open := tok.(json.Delim); !open {
		// The decoder reads "05" as 0 and fails only at the next token: say what is wrong
		// before checking the 0 it read.
		if i := valueEnd(d.body, int(d.dec.InputOffset())); i >= 0 {
			return nil, fmt.Errorf("%s: invalid JSON at byte %d: %q after a value (a number with a leading zero?)", at, i, d.body[i])
		}
	}
	if _, ok := tok.(string); ok {
		hint := ""
		if strings.HasSuffix(at, ".key") {
			hint = " (send a binary key as key_b64)"
		}
		raw := d.body[start:d.dec.InputOffset()]
		if !utf8.Valid(raw) {
			return nil, fmt.Errorf("%s: the string is not valid UTF-8; JSON text must be UTF-8%s", at, hint)
		}
		if i := jsontext.LoneSurrogate(raw); i >= 0 {
			// encoding/json would read it as U+FFFD, as it does a bad byte.
			return nil, fmt.Errorf("%s: %w%s", at, jsontext.LoneSurrogateError(d.body, int(start)+i), hint)
		}
	}
	return tok, nil
}

// valueEnd returns -1 when the body goes on from end, just after a scalar value, as JSON
// may: with a comma, a closing bracket or brace, or nothing, after any white space; else
// the index of the byte that may not follow.
func valueEnd(body []byte, end int) int {
	for i := end; i < len(body); i++ {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case ',', '}', ']':
			return -1
		}
		return i
	}
	return -1
}

// name reads an object member name.
func (d *jsonDecoder) name(at string) (string, error) {
	tok, err := d.token(at)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok { // the decoder reports this as a syntax error; kept for safety
		return "", fmt.Errorf("%s: %s where a field name belongs", at, kind(tok))
	}
	return s, nil
}

// delim reads an opening delimiter.
func (d *jsonDecoder) delim(want json.Delim, at, what string) error {
	tok, err := d.token(at)
	if err != nil {
		return err
	}
	if tok == nil {
		return fmt.Errorf("%s: null is not allowed; use %s", at, what)
	}
	if got, ok := tok.(json.Delim); !ok || got != want {
		return fmt.Errorf("%s: %s is not allowed; use %s", at, kind(tok), what)
	}
	return nil
}

// kind describes a JSON token for an error message.
func kind(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return "the number " + string(v)
	case string:
		if len(v) > 32 {
			v = v[:32] + "…"
		}
		return "the string " + strconv.Quote(v)
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "the delimiter " + v.String()
	}
	return fmt.Sprintf("%v", tok)
}

// HTTPOptions configures HTTPHandler. The zero value works.
type HTTPOptions struct {
	// MaxBodyBytes bounds the request body. Zero or less means DefaultMaxBodyBytes
	// (1 MiB); a larger body is answered 413.
	MaxBodyBytes int64
	// MaxSamples bounds the samples in one report. Zero or less means DefaultMaxSamples
	// (10,000); more are answered 413.
	MaxSamples int
	// Logger receives, at warn level, the first report refused as malformed or too
	// large, with the client's address (Request.RemoteAddr), the source when it had been
	// read, and the error; then at most one such line a minute, with the number of
	// reports refused since the line before. With its debug level on, every other
	// refused report is logged at debug level. Default: none.
	Logger *slog.Logger
}

// HTTPHandler returns the handler of POST /v1/samples. It decodes the body with
// DecodeJSONReport, hands the batch to sink.Accept and answers 202 {"accepted":N}; a
// malformed body is answered 400, an oversized one 413 and one in a Content-Encoding
// other than identity 415, all with {"error":"…"}, and counted with sink.Drop (source, or
// "unknown" before it is read; DropMalformed or DropTooLarge; n = 1). Methods other than
// POST are answered 405. It does not check authorization: the agent wraps it. It is safe
// for concurrent use.
func HTTPHandler(sink Sink, opts HTTPOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &httpHandler{sink: sink, opts: opts, dropLog: newDropLog(opts.Logger, "http")}
}

type httpHandler struct {
	sink    Sink
	opts    HTTPOptions
	dropLog dropLog // logs refused reports, a line a minute at most
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		WriteJSONError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed; use POST", r.Method))
		return
	}
	if err := CheckContentEncoding(r.Header); err != nil {
		h.refuse(w, r, http.StatusUnsupportedMediaType, "unknown", DropMalformed, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, "unknown", DropTooLarge,
				fmt.Errorf("body: more than %s bytes; send at most %s per request", group(int(tooBig.Limit)), group(int(tooBig.Limit))))
			return
		}
		h.refuse(w, r, http.StatusBadRequest, "unknown", DropMalformed, fmt.Errorf("body: reading it failed: %w", err))
		return
	}
	var b Batch
	if err := DecodeJSONReport(&b, body, JSONOptions{MaxSamples: h.opts.MaxSamples}); err != nil {
		src := b.Source
		if src == "" {
			src = "unknown"
		}
		status, reason := http.StatusBadRequest, DropMalformed
		if errors.Is(err, ErrTooLarge) {
			status, reason = http.StatusRequestEntityTooLarge, DropTooLarge
		}
		h.refuse(w, r, status, src, reason, err)
		return
	}
	h.sink.Accept(b)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "{\"accepted\":%d}\n", len(b.Samples))
}

// refuse answers a report it does not take with status and err, and counts and logs it.
func (h *httpHandler) refuse(w http.ResponseWriter, r *http.Request, status int, source, reason string, err error) {
	h.sink.Drop(source, reason, 1)
	if line, ok := h.dropLog.due(); ok {
		h.dropLog.warn(line, r.RemoteAddr, source, reason, err)
	}
	WriteJSONError(w, status, err.Error())
}

// CheckContentEncoding returns an error, for a 415 answer, when the header names a
// Content-Encoding other than identity: the API reads bodies as they are sent, and a
// compressed body read as JSON would give a puzzling error, or a body labelled with an
// encoding it does not have would be taken. Absent, empty and "identity" (any case) pass.
func CheckContentEncoding(h http.Header) error {
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return fmt.Errorf("body: Content-Encoding %q is not supported; only identity is accepted: send the body uncompressed", strings.TrimSpace(v))
			}
		}
	}
	return nil
}

// WriteJSONError answers status with the body {"error":"msg"} (msg trimmed), compact and
// ending in a newline: every error of the agent's HTTP API has this one format.
func WriteJSONError(w http.ResponseWriter, status int, msg string) {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{strings.TrimSpace(msg)})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
