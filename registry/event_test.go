package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testEvent returns a valid one-off event.
func testEvent(id string) Event {
	start := time.Date(2026, 3, 1, 19, 30, 0, 0, time.FixedZone("", 3600))
	return Event{
		ID: id, Name: "Match 42", Patterns: []string{"score:match42"},
		Start: start, End: start.Add(2 * time.Hour), Lead: Duration(15 * time.Minute),
		ExpectedReadRate: 50000, Mitigations: []string{"auto"}, Owner: "sports",
	}
}

const contractExample = `{"id":"match42","name":"Match 42","patterns":["score:match42","sale:sku:*"],
"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00","lead":"15m",
"recurrence":"","expected_read_rate":50000,"expected_write_rate":200,"mitigations":["auto"],
"owner":"sports","note":"derby"}`

func TestDecodeContractExample(t *testing.T) {
	e, err := DecodeEvent([]byte(contractExample))
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != "match42" || len(e.Patterns) != 2 || time.Duration(e.Lead) != 15*time.Minute ||
		e.ExpectedReadRate != 50000 || e.ExpectedWriteRate != 200 || e.Owner != "sports" || e.Note != "derby" {
		t.Errorf("decoded %+v; want the contract's fields", e)
	}
	out, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"id":"match42"`, `"start":"2026-03-01T19:30:00+01:00"`, `"lead":"15m0s"`, `"mitigations":["auto"]`, `"expected_read_rate":50000`} {
		if !bytes.Contains(out, []byte(f)) {
			t.Errorf("encoded %s; want it to contain %s", out, f)
		}
	}
}

func TestDecodeEventErrors(t *testing.T) {
	good := map[string]any{
		"id": "ev1", "patterns": []string{"k"}, "start": "2026-03-01T19:30:00+01:00",
		"end": "2026-03-01T21:30:00+01:00", "lead": "15m",
	}
	cases := []struct {
		name  string
		set   map[string]any
		del   string
		field string // the field the error must name
		want  string // and a phrase it must contain
	}{
		{name: "end before start", set: map[string]any{"end": "2026-03-01T19:00:00+01:00"}, field: "end", want: "not after start"},
		{name: "end equals start", set: map[string]any{"end": "2026-03-01T19:30:00+01:00"}, field: "end", want: "not after start"},
		{name: "no start", del: "start", field: "start", want: "required"},
		{name: "time without zone", set: map[string]any{"start": "2026-03-01T19:30:00"}, field: "start", want: "RFC 3339"},
		{name: "empty pattern", set: map[string]any{"patterns": []string{""}}, field: "patterns[0]", want: "empty"},
		{name: "no patterns", set: map[string]any{"patterns": []string{}}, field: "patterns", want: "at least one"},
		{name: "star alone", set: map[string]any{"patterns": []string{"k", "*"}}, field: "patterns[1]", want: "allow_broad"},
		{name: "broad glob", set: map[string]any{"patterns": []string{"?*"}}, field: "patterns[0]", want: "allow_broad"},
		{name: "duplicate pattern", set: map[string]any{"patterns": []string{"k", "k"}}, field: "patterns[1]", want: "twice"},
		{name: "unknown mitigation", set: map[string]any{"mitigations": []string{"l2"}}, field: "mitigations[0]", want: "auto, l1, copies, sharded_counter or batched_counter"},
		{name: "report is not an event mitigation", set: map[string]any{"mitigations": []string{"report"}}, field: "mitigations[0]", want: "want auto"},
		{name: "auto with others", set: map[string]any{"mitigations": []string{"auto", "l1"}}, field: "mitigations[0]", want: "alone"},
		{name: "duplicate mitigation", set: map[string]any{"mitigations": []string{"l1", "l1"}}, field: "mitigations[1]", want: "twice"},
		{name: "negative rate", set: map[string]any{"expected_read_rate": -1}, field: "expected_read_rate", want: "≥ 0"},
		{name: "rate as string", set: map[string]any{"expected_write_rate": "many"}, field: "expected_write_rate", want: "a number ≥ 0"},
		{name: "negative lead", set: map[string]any{"lead": "-5m"}, field: "lead", want: "from 0s"},
		{name: "absurd lead", set: map[string]any{"lead": "200h"}, field: "lead", want: "7 days"},
		{name: "lead as number", set: map[string]any{"lead": 900}, field: "lead", want: "duration string"},
		{name: "bad lead", set: map[string]any{"lead": "soon"}, field: "lead", want: "duration string"},
		{name: "bad id", set: map[string]any{"id": "Match 42"}, field: "id", want: "a-z, 0-9"},
		{name: "long id", set: map[string]any{"id": strings.Repeat("a", 65)}, field: "id", want: "1 to 64"},
		{name: "bad recurrence", set: map[string]any{"recurrence": "hourly", "zone": "UTC"}, field: "recurrence", want: "daily"},
		{name: "bad cron", set: map[string]any{"recurrence": "cron:61 * * * *", "zone": "UTC"}, field: "recurrence", want: "minute"},
		{name: "bad clock", set: map[string]any{"recurrence": "daily@25:00", "zone": "UTC"}, field: "recurrence", want: "HH:MM"},
		{name: "bad weekday", set: map[string]any{"recurrence": "weekly@sab 19:30", "zone": "UTC"}, field: "recurrence", want: "sun, mon"},
		{name: "recurrence without zone", set: map[string]any{"recurrence": "daily"}, field: "zone", want: "required"},
		{name: "unknown zone", set: map[string]any{"recurrence": "daily", "zone": "Mars/Olympus"}, field: "zone", want: "IANA"},
		{name: "local zone", set: map[string]any{"recurrence": "daily", "zone": "Local"}, field: "zone", want: "machine"},
		{name: "unknown field", set: map[string]any{"patern": "x"}, field: "patern", want: "unknown field"},
		{name: "patterns not a list", set: map[string]any{"patterns": "k"}, field: "patterns", want: "array of strings"},
		{name: "long note", set: map[string]any{"note": strings.Repeat("n", MaxNoteLen+1)}, field: "note", want: "at most"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := map[string]any{}
			for k, v := range good {
				doc[k] = v
			}
			for k, v := range c.set {
				doc[k] = v
			}
			delete(doc, c.del)
			data, _ := json.Marshal(doc)
			_, err := DecodeEvent(data)
			if err == nil {
				t.Fatalf("DecodeEvent(%s): no error; want one naming %s", data, c.field)
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not an *InvalidError wrapping ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q; want it to name %q and say %q", err, c.field, c.want)
			}
		})
	}
}

func TestDecodeEventDocument(t *testing.T) {
	for _, doc := range []string{``, `null`, `[]`, `{`, `{"id":"a"} {"id":"b"}`, `"x"`} {
		if _, err := DecodeEvent([]byte(doc)); !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodeEvent(%q) error %v; want an ErrInvalid", doc, err)
		}
	}
	// Fields the API adds to what it returns are accepted back and ignored.
	e, err := DecodeEvent([]byte(`{"id":"a","patterns":["k"],"start":"2026-03-01T19:30:00Z","end":"2026-03-01T20:30:00Z","report":{"state":"over"},"source":"store"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Mitigations) != 1 || e.Mitigations[0] != "auto" {
		t.Errorf("missing mitigations decode as %q; want [auto]", e.Mitigations)
	}
	// All problems at once.
	_, err = DecodeEvent([]byte(`{"id":"A","patterns":["*"],"start":"2026-03-01T19:30:00Z","end":"2026-03-01T19:00:00Z","mitigations":["x"]}`))
	for _, f := range []string{"id:", "patterns[0]:", "end:", "mitigations[0]:"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v; want it to list %s", err, f)
		}
	}
}

func TestAllowBroad(t *testing.T) {
	e := testEvent("all")
	e.Patterns = []string{"*"}
	if err := e.Validate(); err == nil {
		t.Fatal(`"*" without allow_broad: no error`)
	}
	e.AllowBroad = true
	if err := e.Validate(); err != nil {
		t.Fatalf(`"*" with allow_broad: %v`, err)
	}
}

// TestDocsExamples decodes every event example of docs/registry.md.
func TestDocsExamples(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "registry.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, block := range strings.Split(string(data), "```json\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if !strings.Contains(body, `"patterns"`) || strings.Contains(body, `"hot_keys"`) {
			continue
		}
		n++
		if _, err := DecodeEvent([]byte(body)); err != nil {
			t.Errorf("docs/registry.md example %d does not decode: %v\n%s", n, err, body)
		}
	}
	if n < 3 {
		t.Errorf("docs/registry.md has %d event examples; want at least 3", n)
	}
}

// eventFields are the JSON names of an event's fields.
var eventFields = []string{"id", "name", "patterns", "allow_broad", "start", "end", "lead", "recurrence", "zone", "expected_read_rate", "expected_write_rate", "mitigations", "owner", "note"}

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(contractExample))
	f.Add([]byte(`{"id":"a","patterns":["k","p:*","g:[a-z]?"],"start":"2026-03-28T19:30:00+01:00","end":"2026-03-28T21:30:00+01:00","recurrence":"weekly@sat 19:30","zone":"Europe/Madrid","mitigations":["l1","copies"]}`))
	f.Add([]byte(`{"id":"b","patterns":["*"],"allow_broad":true,"start":"2026-03-28T19:30:00Z","end":"2026-03-28T21:30:00Z","recurrence":"cron:30 19 * * 6","zone":"UTC","lead":"1h"}`))
	f.Add([]byte(`{"id":"c","patterns":["x"],"start":"2026-03-08T02:30:00-05:00","end":"2026-03-08T04:00:00-05:00","recurrence":"daily","zone":"America/New_York"}`))
	f.Add([]byte(`{"patterns":[""],"start":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEvent(data)
		if err != nil {
			var inv *InvalidError
			if !errors.As(err, &inv) || len(inv.Problems) == 0 {
				t.Fatalf("DecodeEvent error %v is not an *InvalidError with a problem", err)
			}
			// Each problem names a field of the event by its JSON name, or the document
			// (""), or the unknown field it is about.
			for _, p := range inv.Problems {
				name, _, _ := strings.Cut(p.Field, "[")
				if name != "" && !slices.Contains(eventFields, name) && !strings.HasPrefix(p.Problem, "unknown field") {
					t.Fatalf("DecodeEvent(%q): problem %q names field %q; want one of %q", data, p.Problem, p.Field, eventFields)
				}
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded event is invalid: %v", err)
		}
		if !json.Valid(data) {
			t.Fatalf("DecodeEvent accepted %q, which is not one JSON value", data)
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		again, err := DecodeEvent(out)
		if err != nil {
			t.Fatalf("re-encoded event %s does not decode: %v", out, err)
		}
		out2, err := json.Marshal(again)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the event:\n%s\n%s", out, out2)
		}
		if s, err := e.Schedule(); err != nil || s == nil {
			t.Fatalf("valid event has no schedule: %v", err)
		}
	})
}

func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"30 19 * * 6", "*/15 * * * *", "0-30/10 8,20 1 jan,JUL mon-fri", "@daily", "0 0 */2 * 5", "5/20 1-3 * * 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		c, err := ParseCron(expr)
		if err != nil {
			return
		}
		again, err := ParseCron(c.String())
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", c.String(), expr, err)
		}
		if again != c {
			t.Fatalf("canonical form %q of %q parses to a different schedule", c.String(), expr)
		}
		// Matches agrees with the sets for one day.
		day := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
		c.times(func(h, m int) bool {
			if tm := day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute); c.matchesDay(2026, 3, 7) != c.Matches(tm) {
				t.Fatalf("%q: Matches(%v) disagrees with the day rule", expr, tm)
			}
			return true
		})
	})
}

// TestDecodeEventTimeFieldNamed: a malformed time names the one field that holds it, as
// FieldError.Field promises (the JSON name), not "start/end"; a document with both wrong
// names both.
func TestDecodeEventTimeFieldNamed(t *testing.T) {
	const start, end = `"2026-03-01T19:30:00+01:00"`, `"2026-03-01T21:30:00+01:00"`
	cases := []struct {
		start, end string
		want       []string
	}{
		{start, `"2026-03-01T21:30:00"`, []string{"end"}},
		{`"19:30"`, end, []string{"start"}},
		{start, `5`, []string{"end"}},
		{`"tomorrow"`, `"later"`, []string{"start", "end"}},
	}
	for _, c := range cases {
		doc := `{"id":"ev1","patterns":["k"],"start":` + c.start + `,"end":` + c.end + `}`
		_, err := DecodeEvent([]byte(doc))
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Fatalf("DecodeEvent(%s): error %v; want an *InvalidError", doc, err)
		}
		var got []string
		for _, p := range inv.Problems {
			got = append(got, p.Field)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("DecodeEvent(%s): fields %q (%v); want %q", doc, got, err, c.want)
		}
	}
}

// TestValidateListsBothMissingTimes: Validate lists every problem, so an event with
// neither start nor end names both.
func TestValidateListsBothMissingTimes(t *testing.T) {
	e := testEvent("ev1")
	e.Start, e.End = time.Time{}, time.Time{}
	var inv *InvalidError
	if err := e.Validate(); !errors.As(err, &inv) {
		t.Fatalf("Validate() = %v; want an *InvalidError", err)
	}
	var got []string
	for _, p := range inv.Problems {
		got = append(got, p.Field)
	}
	if want := []string{"start", "end"}; !slices.Equal(got, want) {
		t.Errorf("fields %q (%v); want %q", got, inv, want)
	}
}

// TestDecodeEventLoneSurrogate: encoding/json reads an escaped half of a surrogate pair
// as U+FFFD, so a pattern spelled with one would name other keys; it is refused with
// where it is. A whole pair is the character it spells.
func TestDecodeEventLoneSurrogate(t *testing.T) {
	const doc = `{"id":"ev1","patterns":["k:%s"],"start":"2026-03-01T19:30:00+01:00","end":"2026-03-01T21:30:00+01:00"}`
	if _, err := DecodeEvent([]byte(fmt.Sprintf(doc, `\ud800`))); err == nil ||
		!strings.Contains(err.Error(), `\ud800 at byte 27 is half of a UTF-16 surrogate pair`) {
		t.Errorf("pattern with a lone surrogate: %v; want it refused, naming the escape and byte 27", err)
	}
	e, err := DecodeEvent([]byte(fmt.Sprintf(doc, `\ud83d\ude00`)))
	if err != nil || len(e.Patterns) != 1 || e.Patterns[0] != "k:😀" {
		t.Errorf("pattern with a pair: %+v, %v; want k:😀", e.Patterns, err)
	}
}
