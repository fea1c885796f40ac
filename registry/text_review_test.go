package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDecodeEventNotUTF8Review: encoding/json reads each byte that is not UTF-8 as
// U+FFFD, as it reads a lone surrogate escape, so a pattern spelled with one would name
// other keys. DecodeEvent, and a registry file, refuse it as they refuse the escape.
func TestDecodeEventNotUTF8Review(t *testing.T) {
	doc := "{\"id\":\"ev1\",\"patterns\":[\"k:\xff\"],\"start\":\"2026-03-01T19:30:00+01:00\",\"end\":\"2026-03-01T21:30:00+01:00\"}"
	if e, err := DecodeEvent([]byte(doc)); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("pattern holding the byte 0xff: %q, %v; want it refused as not UTF-8", e.Patterns, err)
	}
	path := filepath.Join(t.TempDir(), "registry.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"events":[`+doc+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if evs, err := s.List(t.Context()); len(evs) != 0 || !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("registry file with a pattern holding the byte 0xff: %d events, %v; want it unreadable as not UTF-8", len(evs), err)
	}
}

// TestOpenFileLoneSurrogateByteReview: the byte a registry file's error names is the
// byte in the file, not in the event: events after the first start far into it.
func TestOpenFileLoneSurrogateByteReview(t *testing.T) {
	ev := `{"id":"%s","patterns":["k:%s"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00"}`
	data := `{"version":1,"events":[` + fmt.Sprintf(ev, "a", "x") + ",\n  " + fmt.Sprintf(ev, "b", `\udc00`) + `]}`
	path := filepath.Join(t.TempDir(), "registry.json")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.List(t.Context())
	want := fmt.Sprintf(`\udc00 at byte %d`, strings.Index(data, `\udc00`))
	if err == nil || !strings.Contains(err.Error(), "events[1]") || !strings.Contains(err.Error(), want) {
		t.Errorf("OpenFile: %v; want events[1] and %q", err, want)
	}
}

// TestOpenFileErrorFieldAndByteReview: an error about the document names the field at
// fault and a byte within the value at fault (FuzzOpenFile checks only that some field or
// byte is named).
func TestOpenFileErrorFieldAndByteReview(t *testing.T) {
	for _, tc := range []struct{ doc, field, value string }{
		{`{"version":"x","events":[]}`, "version", `"x"`},
		{`{"events":[],  "version":-1}`, "version", `-1`},
		{`{"version":1,"events":{}}`, "events", `{}`},
		{`{"version":1,"events":5}`, "events", `5`},
	} {
		path := filepath.Join(t.TempDir(), "registry.json")
		if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenFile(path, FileOptions{})
		if err == nil {
			t.Errorf("OpenFile(%s): no error", tc.doc)
			continue
		}
		if !strings.Contains(err.Error(), "field "+tc.field+":") {
			t.Errorf("OpenFile(%s): %v; want it to name the field %s", tc.doc, err, tc.field)
		}
		m := regexp.MustCompile(`at byte (\d+)`).FindStringSubmatch(err.Error())
		start := strings.Index(tc.doc, tc.value)
		if m == nil {
			t.Errorf("OpenFile(%s): %v; want a byte offset", tc.doc, err)
		} else if n, _ := strconv.Atoi(m[1]); n < start || n > start+len(tc.value) {
			t.Errorf("OpenFile(%s): %v; want a byte within %s, bytes %d to %d", tc.doc, err, tc.value, start, start+len(tc.value))
		}
	}
}
