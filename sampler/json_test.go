package sampler

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestDecodeJSONReport(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Batch
	}{
		{"design example", `{"source":"app-1","sample_rate":0.01,"samples":[{"key":"k","op":"read","count":1,"bytes":512}]}`,
			Batch{Source: "app-1", Rate: 0.01, Samples: []Sample{{Key: []byte("k"), Op: OpRead, Count: 1, Bytes: 512}}}},
		{"defaults", `{"source":"a","samples":[{"key":"k","op":"write"}]}`,
			Batch{Source: "a", Rate: 1, Samples: []Sample{{Key: []byte("k"), Op: OpWrite, Count: 1}}}},
		{"empty samples", `{"samples":[],"source":"a"}`, Batch{Source: "a", Rate: 1}},
		{"key_b64 and counter", `{"source":"a","samples":[{"key_b64":"AP8K","op":"write","counter":true,"count":7},{"key":"","op":"read"}]}`,
			Batch{Source: "a", Rate: 1, Samples: []Sample{
				{Key: []byte{0, 0xff, '\n'}, Op: OpWrite, Counter: true, Count: 7},
				{Key: []byte{}, Op: OpRead, Count: 1},
			}}},
		{"unicode key, whitespace", " {\n\"source\" : \"ü\", \"sample_rate\": 1e-2, \"samples\": [ {\"key\": \"caf\\u00e9\", \"op\": \"read\", \"counter\": false} ] }\n",
			Batch{Source: "ü", Rate: 0.01, Samples: []Sample{{Key: []byte("café"), Op: OpRead, Count: 1}}}},
		{"many keys share one arena", `{"source":"a","samples":[{"key":"one","op":"read"},{"key_b64":"dHdv","op":"read"},{"key":"three","op":"read","bytes":4294967295}]}`,
			Batch{Source: "a", Rate: 1, Samples: []Sample{
				{Key: []byte("one"), Op: OpRead, Count: 1},
				{Key: []byte("two"), Op: OpRead, Count: 1},
				{Key: []byte("three"), Op: OpRead, Count: 1, Bytes: 1<<32 - 1},
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Batch
			if err := DecodeJSONReport(&b, []byte(tt.body), JSONOptions{}); err != nil {
				t.Fatalf("got error %v; want none", err)
			}
			sameReportBatch(t, b, tt.want)
		})
	}
}

func TestDecodeJSONReportErrors(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"op delete", `{"source":"a","samples":[{"key":"a","op":"read"},{"key":"b","op":"read"},{"key":"c","op":"read"},{"key":"d","op":"delete"}]}`,
			`samples[3].op: "delete" is not allowed; use "read" or "write"`},
		{"op number", `{"source":"a","samples":[{"key":"a","op":1}]}`, `samples[0].op: the number 1 is not allowed; use "read" or "write"`},
		{"op missing", `{"source":"a","samples":[{"key":"a"}]}`, `samples[0].op: missing; use "read" or "write"`},
		{"unknown top", `{"source":"a","samples":[],"rate":1}`, `body: unknown field "rate"; allowed: source, sample_rate, samples`},
		{"unknown sample field", `{"source":"a","samples":[{"kye":"a","op":"read"}]}`, `samples[0]: unknown field "kye"; allowed: key, key_b64, op, count, bytes, counter`},
		{"both keys", `{"source":"a","samples":[{"key":"a","key_b64":"YQ==","op":"read"}]}`, `samples[0]: both key and key_b64 are given; use exactly one`},
		{"no key", `{"source":"a","samples":[{"op":"read"}]}`, `samples[0].key: missing; give key, or key_b64 for a binary key`},
		{"bad base64", `{"source":"a","samples":[{"key_b64":"a$==","op":"read"}]}`, `samples[0].key_b64: not standard base64 (RFC 4648, with padding): illegal base64 data at input byte 1`},
		{"key number", `{"source":"a","samples":[{"key":5,"op":"read"}]}`, `samples[0].key: the number 5 is not allowed; use a string (or key_b64 for binary keys)`},
		{"count zero", `{"source":"a","samples":[{"key":"a","op":"read","count":0}]}`, `samples[0].count: 0 is not allowed; use a whole number from 1 to 4294967295`},
		{"count fraction", `{"source":"a","samples":[{"key":"a","op":"read","count":1.5}]}`, `samples[0].count: 1.5 is not allowed; use a whole number from 1 to 4294967295`},
		{"count string", `{"source":"a","samples":[{"key":"a","op":"read","count":"2"}]}`, `samples[0].count: the string "2" is not allowed; use a whole number from 1 to 4294967295`},
		{"bytes negative", `{"source":"a","samples":[{"key":"a","op":"read","bytes":-1}]}`, `samples[0].bytes: -1 is not allowed; use a whole number from 0 to 4294967295`},
		{"bytes huge", `{"source":"a","samples":[{"key":"a","op":"read","bytes":4294967296}]}`, `samples[0].bytes: 4294967296 is not allowed; use a whole number from 0 to 4294967295`},
		{"counter on read", `{"source":"a","samples":[{"key":"a","op":"read","counter":true}]}`, `samples[0].counter: true is allowed only with "op": "write"`},
		{"counter string", `{"source":"a","samples":[{"key":"a","op":"write","counter":"yes"}]}`, `samples[0].counter: the string "yes" is not allowed; use true or false`},
		{"null", `{"source":"a","samples":[{"key":"a","op":"read","count":null}]}`, `samples[0].count: null is not allowed; use a whole number from 1 to 4294967295`},
		{"null key", `{"source":"a","samples":[{"key":null,"op":"read"}]}`, `samples[0].key: null is not allowed; use a string (or key_b64 for binary keys)`},
		{"null op", `{"source":"a","samples":[{"key":"a","op":null}]}`, `samples[0].op: null is not allowed; use "read" or "write"`},
		{"null source", `{"source":null,"samples":[]}`, `source: null is not allowed; use a string of 1 to 64 bytes`},
		{"null sample_rate", `{"source":"a","sample_rate":null,"samples":[]}`, `sample_rate: null is not allowed; use a number in (0, 1]`},
		{"duplicate", `{"source":"a","samples":[{"key":"a","op":"read","op":"write"}]}`, `samples[0].op: given twice`},
		{"sample not object", `{"source":"a","samples":["k"]}`, `samples[0]: the string "k" is not allowed; use an object`},
		{"samples not array", `{"source":"a","samples":{}}`, `samples: an object is not allowed; use an array`},
		{"samples missing", `{"source":"a"}`, `samples: missing; use an array of samples, which may be empty`},
		{"source missing", `{"samples":[]}`, `source: missing; use a string of 1 to 64 bytes`},
		{"source empty", `{"source":"","samples":[]}`, `source of 0 bytes: must be 1 to 64 bytes`},
		{"source long", `{"source":"` + strings.Repeat("s", 65) + `","samples":[]}`, `source of 65 bytes: must be 1 to 64 bytes`},
		{"source control", `{"source":"a\tb","samples":[]}`, `source "a\tb": control character at byte 1; use printable UTF-8`},
		{"source number", `{"source":1,"samples":[]}`, `source: the number 1 is not allowed; use a string of 1 to 64 bytes`},
		{"rate zero", `{"source":"a","sample_rate":0,"samples":[]}`, `sample_rate: 0 is not allowed; use a number in (0, 1]`},
		{"rate over", `{"source":"a","sample_rate":1.01,"samples":[]}`, `sample_rate: 1.01 is not allowed; use a number in (0, 1]`},
		{"rate string", `{"source":"a","sample_rate":"0.1","samples":[]}`, `sample_rate: the string "0.1" is not allowed; use a number in (0, 1]`},
		{"not object", `[1]`, `body: an array is not allowed; use a JSON object`},
		{"empty body", ``, `body: the JSON ends early`},
		{"truncated", `{"source":"a","samples":[{"key":"a"`, `samples[0]: the JSON ends early`},
		{"syntax", `{"source":"a",,}`, `body: invalid JSON at byte 14: invalid character ',' looking for beginning of object key string`},
		{"count leading zero", `{"source":"a","samples":[{"key":"a","op":"read","count":05}]}`,
			`samples[0].count: invalid JSON at byte 57: '5' after a value (a number with a leading zero?)`},
		{"rate leading zero", `{"source":"a","sample_rate":00.5,"samples":[]}`,
			`sample_rate: invalid JSON at byte 29: '0' after a value (a number with a leading zero?)`},
		{"string then number", `{"source":"a" 1,"samples":[]}`,
			`source: invalid JSON at byte 14: '1' after a value (a number with a leading zero?)`},
		{"trailing", `{"source":"a","samples":[]} {}`, `body: an object after the JSON object; send one object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Batch
			err := DecodeJSONReport(&b, []byte(tt.body), JSONOptions{})
			if err == nil {
				t.Fatalf("got no error; want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("got  %q;\nwant %q", err, tt.want)
			}
			if errors.Is(err, ErrTooLarge) {
				t.Errorf("got an ErrTooLarge; want a malformed-body error")
			}
			if len(b.Samples) != 0 {
				t.Errorf("got %d samples after an error; want 0", len(b.Samples))
			}
		})
	}
}

func TestDecodeJSONReportMaxSamples(t *testing.T) {
	body := jsonTestBody("a", 4)
	var b Batch
	if err := DecodeJSONReport(&b, body, JSONOptions{MaxSamples: 4}); err != nil {
		t.Fatalf("4 samples with MaxSamples 4: got %v; want no error", err)
	}
	err := DecodeJSONReport(&b, jsonTestBody("a", 5), JSONOptions{MaxSamples: 4})
	if want := "samples: more than 4; send at most 4 per report"; err == nil || err.Error() != want {
		t.Fatalf("5 samples with MaxSamples 4: got %v; want %q", err, want)
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("errors.Is(%v, ErrTooLarge) = false; want true", err)
	}
	if err := DecodeJSONReport(&b, jsonTestBody("a", DefaultMaxSamples+1), JSONOptions{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d samples with the default limit: got %v; want ErrTooLarge", DefaultMaxSamples+1, err)
	}
}

// jsonTestBody is a valid body of n read samples.
func jsonTestBody(source string, n int) []byte {
	var sb strings.Builder
	fmt.Fprintf(&sb, `{"source":%q,"sample_rate":0.5,"samples":[`, source)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"key":"key:%d","op":"read","bytes":%d}`, i, i)
	}
	sb.WriteString("]}")
	return []byte(sb.String())
}

// jsonTestSink records what an HTTP handler or UDP server hands it.
type jsonTestSink struct {
	mu      sync.Mutex // guards the fields below
	samples []string
	drops   []string
}

func (s *jsonTestSink) Accept(b Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range b.Samples {
		s.samples = append(s.samples, fmt.Sprintf("%s %s %s", b.Source, x.Op, x.Key))
	}
}

func (s *jsonTestSink) Drop(source, reason string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops = append(s.drops, fmt.Sprintf("%s %s %d", source, reason, n))
}

func TestHTTPHandler(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		body     string
		status   int
		response string
		samples  string
		drops    string
	}{
		{"accepted", "POST", `{"source":"app-1","sample_rate":0.01,"samples":[{"key":"k","op":"read"},{"key":"n","op":"write"}]}`,
			202, `{"accepted":2}`, "app-1 read k,app-1 write n", ""},
		{"malformed", "POST", `{"source":"app-1","samples":[{"key":"k","op":"delete"}]}`,
			400, `{"error":"samples[0].op: \"delete\" is not allowed; use \"read\" or \"write\""}`, "", "app-1 malformed 1"},
		{"malformed before source", "POST", `{"samples":[{"op":"read"}],"source":"app-1"}`,
			400, `{"error":"samples[0].key: missing; give key, or key_b64 for a binary key"}`, "", "unknown malformed 1"},
		{"too many samples", "POST", string(jsonTestBody("big", 11)),
			413, `{"error":"samples: more than 10; send at most 10 per report"}`, "", "big too_large 1"},
		{"body too large", "POST", `{"source":"` + strings.Repeat("x", 2000) + `"}`,
			413, `{"error":"body: more than 1,024 bytes; send at most 1,024 per request"}`, "", "unknown too_large 1"},
		{"get", "GET", ``, 405, `{"error":"method GET is not allowed; use POST"}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &jsonTestSink{}
			h := HTTPHandler(sink, HTTPOptions{MaxBodyBytes: 1024, MaxSamples: 10})
			srv := httptest.NewServer(h)
			defer srv.Close()
			req, err := http.NewRequest(tt.method, srv.URL+"/v1/samples", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d; want %d", resp.StatusCode, tt.status)
			}
			if got := strings.TrimSpace(string(body)); got != tt.response {
				t.Errorf("body %s; want %s", got, tt.response)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q; want application/json", ct)
			}
			if !json.Valid(body) {
				t.Errorf("body %q is not valid JSON", body)
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if got := strings.Join(sink.samples, ","); got != tt.samples {
				t.Errorf("accepted %q; want %q", got, tt.samples)
			}
			if got := strings.Join(sink.drops, ","); got != tt.drops {
				t.Errorf("dropped %q; want %q", got, tt.drops)
			}
		})
	}
}

func BenchmarkDecodeJSONReport(b *testing.B) {
	body := jsonTestBody("app-1", 50)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var batch Batch
	for b.Loop() {
		if err := DecodeJSONReport(&batch, body, JSONOptions{}); err != nil {
			b.Fatal(err)
		}
		reportBenchSink += len(batch.Samples)
	}
}

// jsonSampleOut is the JSON form of a sample, for re-encoding in the fuzz test.
type jsonSampleOut struct {
	KeyB64  string `json:"key_b64"`
	Op      string `json:"op"`
	Count   uint32 `json:"count"`
	Bytes   uint32 `json:"bytes"`
	Counter bool   `json:"counter"`
}

func FuzzDecodeJSONReport(f *testing.F) {
	f.Add([]byte(`{"source":"app-1","sample_rate":0.01,"samples":[{"key":"k","op":"read","count":1,"bytes":512}]}`))
	f.Add([]byte(`{"source":"a","samples":[{"key_b64":"AP8K","op":"write","counter":true}]}`))
	f.Add(jsonTestBody("x", 3))
	f.Add([]byte(`{"source":"a","samples":[{"key":"a","op":"read","count":null}]}`))
	f.Add([]byte(`{"source":"a","samples":[{"key":"\u00e9\ud800","op":"read"}]} x`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var b Batch
		err := DecodeJSONReport(&b, body, JSONOptions{MaxSamples: 100})
		if err != nil {
			if len(b.Samples) != 0 {
				t.Fatalf("error %v with %d samples; want 0", err, len(b.Samples))
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted %q, which is not one JSON value", body)
		}
		if checkSource(b.Source) != nil || !(b.Rate > 0 && b.Rate <= 1) {
			t.Fatalf("accepted source %q rate %v", b.Source, b.Rate)
		}
		out := struct {
			Source  string          `json:"source"`
			Rate    float64         `json:"sample_rate"`
			Samples []jsonSampleOut `json:"samples"`
		}{b.Source, b.Rate, []jsonSampleOut{}}
		for _, s := range b.Samples {
			if s.Op != OpRead && s.Op != OpWrite || s.Count == 0 || s.Counter && s.Op != OpWrite {
				t.Fatalf("accepted sample %+v", s)
			}
			out.Samples = append(out.Samples, jsonSampleOut{base64.StdEncoding.EncodeToString(s.Key), s.Op.String(), s.Count, s.Bytes, s.Counter})
		}
		again, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var b2 Batch
		if err := DecodeJSONReport(&b2, again, JSONOptions{MaxSamples: 100}); err != nil {
			t.Fatalf("re-encoded body %s: %v", again, err)
		}
		sameReportBatch(t, b2, b)
		// Whatever JSON accepts, the binary protocol carries when it fits.
		if data, err := AppendReport(nil, b, nil); err == nil {
			var b3 Batch
			if _, err := DecodeReport(&b3, data); err != nil {
				t.Fatalf("binary round trip: %v", err)
			}
			if !bytes.Equal([]byte(b3.Source), []byte(b.Source)) || len(b3.Samples) != len(b.Samples) {
				t.Fatalf("binary round trip: got %q with %d samples; want %q with %d", b3.Source, len(b3.Samples), b.Source, len(b.Samples))
			}
		}
	})
}

// TestDecodeJSONReportRejectsMangledKeys checks bodies whose keys encoding/json would
// silently change: bytes that are not UTF-8 and escapes of half a surrogate pair (each
// becomes U+FFFD, so different binary keys would be counted as one) and base64 with line breaks, which RFC 4648 §4 does not allow.
func TestDecodeJSONReportRejectsMangledKeys(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"key not utf8", "{\"source\":\"a\",\"samples\":[{\"key\":\"ok\",\"op\":\"read\"},{\"key\":\"caf\xe9\",\"op\":\"read\"}]}",
			`samples[1].key: the string is not valid UTF-8; JSON text must be UTF-8 (send a binary key as key_b64)`},
		{"source not utf8", "{\"source\":\"a\xff\",\"samples\":[]}",
			`source: the string is not valid UTF-8; JSON text must be UTF-8`},
		{"key lone surrogate", `{"source":"a","samples":[{"key":"\ud83d\ude00","op":"read"},{"key":"id:\ud800","op":"read"}]}`,
			`samples[1].key: \ud800 at byte 71 is half of a UTF-16 surrogate pair, which names no character (send a binary key as key_b64)`},
		{"base64 newline", `{"source":"a","samples":[{"key_b64":"YQ\n==","op":"read"}]}`,
			`samples[0].key_b64: not standard base64 (RFC 4648, with padding): line break at byte 2`},
		{"base64 carriage return", `{"source":"a","samples":[{"key_b64":"\rYQ==","op":"read"}]}`,
			`samples[0].key_b64: not standard base64 (RFC 4648, with padding): line break at byte 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Batch
			err := DecodeJSONReport(&b, []byte(tt.body), JSONOptions{})
			if err == nil {
				t.Fatalf("got no error and samples %+v; want %q", b.Samples, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("got  %q;\nwant %q", err, tt.want)
			}
		})
	}
}
