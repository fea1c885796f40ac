package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzOpenFile writes random bytes as the document of a FileStore and opens it. OpenFile
// must never panic. An error names the file and where the document is wrong: an event
// (events[i]), a field, or a byte offset; the file is left as it was, and nothing else is
// left in its directory but the lock file. An accepted document holds as many events as
// the file, each valid, readable or listed as unreadable; written again by the store's
// own writer and reopened, it gives the same version, the same events and the same
// unreadable ones.
//
// OpenFile always makes a new store (the agent opens the file once, at start), so there
// are no events already in a store for a rejected file to destroy: the file itself is
// what must survive.
func FuzzOpenFile(f *testing.F) {
	ev := `{"id":"a","patterns":["k","p:*"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00"}`
	for _, s := range []string{
		``,
		` `,
		`{}`,
		`null`,
		`{"version":3,"events":[]}`,
		`{"version":3,"events":[` + ev + `]}`,
		`{"version":1,"events":[` + ev + `,` + strings.Replace(ev, `"a"`, `"b"`, 1) + `]}`,
		`{"version":1,"events":[` + ev + `,` + ev + `]}`,
		`{"version":1,"events":[{"patterns":["k"],"start":"2026-03-01T19:30:00Z","end":"2026-03-01T21:30:00Z"}]}`,
		`{"version":1,"events":[{"id":"w","patterns":["g:[a-z]?"],"start":"2026-03-28T19:30:00+01:00","end":"2026-03-28T21:30:00+01:00","recurrence":"weekly@sat 19:30","zone":"Europe/Madrid","lead":"1h","mitigations":["l1","copies"],"note":"<&>","expected_read_rate":5e3}]}`,
		`{"version":1,"events":[` + ev + `]}{"version":2,"events":[]}`,
		`{"version":-1,"events":[]}`,
		`{"version":1,"events":{}}`,
		`{"version":1,"events":[null]}`,
		`{"version":1,"events":[5]}`,
		`{"version":1,"extra":true}`,
		`{"version":1,"events":[` + ev,
		`{"Version":2,"EVENTS":[]}`,
		`[]`,
		`x`,
	} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/registry.json"); err == nil {
		f.Add(b)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "registry.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenFile(path, FileOptions{})
		if err != nil {
			msg := err.Error()
			rest, ok := strings.CutPrefix(msg, "registry: "+path+": ")
			if !ok {
				t.Fatalf("OpenFile(%q): %q; want an error starting with the file's name", data, msg)
			}
			rest = strings.TrimPrefix(rest, `want {"version":N,"events":[…]}: `)
			if !strings.HasPrefix(rest, "events[") && !strings.Contains(rest, "byte ") && !strings.Contains(rest, "field") {
				t.Fatalf("OpenFile(%q): %q; want the error to name an event (events[i]), a field or a byte offset", data, msg)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("OpenFile(%q) failed and changed the file: now %q (%v)", data, got, err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 2 {
				t.Fatalf("OpenFile(%q) failed and left %d files in the directory; want only the document and its lock", data, len(ents))
			}
			return
		}
		defer s.Close()
		var doc struct{ Events []json.RawMessage }
		_ = json.Unmarshal(data, &doc) // the loader accepted it: one JSON document
		events, _ := s.List(ctx)
		if len(events)+len(s.bad) != len(doc.Events) {
			t.Fatalf("OpenFile(%q) holds %d events and %d unreadable; the file has %d", data, len(events), len(s.bad), len(doc.Events))
		}
		for _, e := range events {
			if err := e.Validate(); err != nil {
				t.Fatalf("OpenFile(%q) accepted an invalid event: %v", data, err)
			}
		}
		version, _ := s.Version(ctx)

		// What the store writes, it reads back the same.
		s.mu.Lock()
		err = s.write(s.mem, s.bad)
		s.mu.Unlock()
		if err != nil {
			t.Fatalf("writing the events of %q: %v", data, err)
		}
		written, _ := os.ReadFile(path)
		bad := len(s.bad)
		s.Close()
		again, err := OpenFile(path, FileOptions{})
		if err != nil {
			t.Fatalf("OpenFile(%q) accepted; the store wrote\n%s\nwhich it cannot reopen: %v", data, written, err)
		}
		defer again.Close()
		v2, _ := again.Version(ctx)
		events2, _ := again.List(ctx)
		if len(again.bad) != bad {
			t.Fatalf("round trip of %q through\n%s\ngave %d unreadable events; want %d", data, written, len(again.bad), bad)
		}
		if v2 != version || len(events2) != len(events) {
			t.Fatalf("round trip of %q through\n%s\ngave version %d and %d events; want %d and %d", data, written, v2, len(events2), version, len(events))
		}
		for i := range events {
			if !sameEvent(events[i], events2[i]) {
				a, _ := json.Marshal(events[i])
				b, _ := json.Marshal(events2[i])
				t.Fatalf("round trip of %q changed an event:\n%s\n%s", data, a, b)
			}
		}
	})
}
