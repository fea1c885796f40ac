package agent

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// FuzzOverrides posts random bodies to POST /v1/plan/overrides, after one valid override,
// on a real agent's handler. It must never panic or answer 5xx; a 400 names the field at
// fault (key, kind, action, mode or body) and leaves the overrides as they were; a 201
// means GET /v1/plan/overrides lists exactly the key sent (byte for byte, as the JSON
// string in the body spells it), with the kind, action and mode sent, and the other
// overrides as they were.
func FuzzOverrides(f *testing.F) {
	for _, s := range []string{
		`{"key":"score:match42","kind":"l1","action":"pin","mode":"enforce"}`,
		`{"key":"score:match42","kind":"copies","action":"forbid"}`,
		`{"key":"seed","kind":"l1","action":"forbid"}`,
		`{"key":"ctr","kind":"report","action":"forbid"}`,
		`{"key":"ctr","kind":"report","action":"pin"}`,
		`{"key":"k","kind":"sharded_counter","action":"pin","mode":"observe"}`,
		`{"key":"k","kind":"batched_counter","action":"pin","mode":"recommend"}`,
		`{"key":"","kind":"l1","action":"pin"}`,
		`{"key":"k","kind":"magic","action":"pin"}`,
		`{"key":"k","kind":"l1","action":"nuke"}`,
		`{"key":"k","kind":"l1","action":"pin","mode":"loud"}`,
		`{"key":"k","kind":"l1","action":"forbid","mode":"enforce"}`,
		`{"key":"k","kind":"l1","action":"pin","extra":1}`,
		`{"KEY":"a","Kind":"l1","ACTION":"pin"}`,
		`{"key":"a","key":"b","kind":"l1","action":"pin"}`,
		`{"key":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/","kind":"l1","action":"pin"}`,
		`{"key":"k","kind":"l1","action":"pin"} {}`,
		`{"key":null,"kind":"l1","action":"pin"}`,
		`{"key":5}`,
		`[]`,
		`null`,
		``,
		"{\"key\":\"bin\xff\",\"kind\":\"report\",\"action\":\"forbid\"}",
	} {
		f.Add([]byte(s))
	}
	a := newFuzzAgent(f)
	h := a.Handler()
	const seed = `{"key":"seed","kind":"copies","action":"pin","mode":"enforce"}`
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, o := range a.planner.Overrides() { // each input starts from the same state
			a.planner.Clear(o.Key)
		}
		if w := post(h, []byte(seed)); w.Code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s; want 201", seed, w.Code, w.Body)
		}
		before := listOverrides(t, h)
		w := post(h, body)
		after := listOverrides(t, h)
		switch w.Code {
		case http.StatusBadRequest:
			var e map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatalf("POST %q: 400 with a body that is not JSON: %q", body, w.Body)
			}
			field, _, _ := strings.Cut(e["error"], ":")
			switch field {
			case "key", "kind", "action", "mode", "body":
			default:
				t.Fatalf("POST %q: 400 %q; want the error to start with the field at fault (key, kind, action, mode or body)", body, e["error"])
			}
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("POST %q: 400 %q, yet the overrides changed:\nbefore %+v\nafter  %+v", body, e["error"], before, after)
			}
		case http.StatusCreated:
			want, ok := sentOverride(body)
			if !ok {
				t.Fatalf("POST %q: 201, yet the body does not spell one key, kind and action as JSON strings; overrides %+v", body, after)
			}
			var got *mitigate.Override
			others := before[:0:0]
			for i, o := range after {
				if o.Key == want.Key && o.Kind == want.Kind {
					got = &after[i]
				} else {
					others = append(others, o)
				}
			}
			if got == nil || got.Action != want.Action || got.Mode != want.Mode {
				t.Fatalf("POST %q: 201; want the override %+v listed, got %+v", body, want, after)
			}
			var kept []mitigate.Override
			for _, o := range before {
				if o.Key != want.Key || o.Kind != want.Kind {
					kept = append(kept, o)
				}
			}
			if len(kept) != len(others) || (len(kept) > 0 && !reflect.DeepEqual(kept, others)) {
				t.Fatalf("POST %q: 201, and the other overrides changed:\nbefore %+v\nafter  %+v", body, before, after)
			}
		default:
			t.Fatalf("POST %q: %d %s; want 201 or 400", body, w.Code, w.Body)
		}
	})
}

// newFuzzAgent is newTestAgent for a fuzz target: one agent for all the inputs.
func newFuzzAgent(tb testing.TB) *Agent {
	tb.Helper()
	c := &clock{t: t0}
	a, err := New(Options{Now: c.now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func post(h http.Handler, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/plan/overrides", bytes.NewReader(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func listOverrides(t *testing.T, h http.Handler) []mitigate.Override {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/plan/overrides", nil))
	var got struct{ Overrides []mitigate.Override }
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/plan/overrides: %d %q: %v", w.Code, w.Body, err)
	}
	return got.Overrides
}

// sentOverride reads the override a body spells, independently of the handler: the last
// member of the object whose name matches each field (as encoding/json matches them, case
// folded), its string unquoted strictly, so that an escape naming no character (a lone
// surrogate, which encoding/json reads as U+FFFD) is no key at all. ok is false when a
// field is not one strict JSON string.
func sentOverride(body []byte) (o mitigate.Override, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return o, false
	}
	vals := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return o, false
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return o, false
		}
		for _, f := range []string{"key", "kind", "action", "mode"} {
			if strings.EqualFold(name, f) {
				s, ok := strictUnquote(raw)
				if !ok {
					return o, false
				}
				vals[f] = s
			}
		}
	}
	return mitigate.Override{Key: vals["key"], Kind: mitigate.Kind(vals["kind"]), Action: vals["action"], Mode: mitigate.Mode(vals["mode"])}, true
}

// strictUnquote unquotes a JSON string, failing on anything but a string of Unicode
// characters: a lone surrogate escape, or bytes that are not UTF-8.
func strictUnquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || !utf8.Valid(raw) {
		return "", false
	}
	s := string(raw[1 : len(raw)-1])
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return "", false
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if !strings.HasPrefix(s[i:], `\u`) {
					return "", false
				}
				r2, ok := hex4(s[i+2:])
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
				i += 6
			}
			b.WriteRune(r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
