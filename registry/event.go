package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/internal/jsontext"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// Event is a predicted hot-key event: keys that will be hot in a known window. Its JSON
// form is the registry contract of the HTTP API and of the file store; docs/registry.md
// describes every field.
type Event struct {
	// ID names the event: 1 to 64 of a-z, 0-9, '.', '_' and '-'. Create generates one
	// when it is empty.
	ID string `json:"id"`
	// Name is for people. Optional.
	Name string `json:"name,omitempty"`
	// Patterns are the keys the event makes hot: exact keys, prefixes ("sale:sku:*") or
	// Redis globs. At least one.
	Patterns []string `json:"patterns"`
	// AllowBroad allows patterns with no literal character, such as "*".
	AllowBroad bool `json:"allow_broad,omitempty"`
	// Start and End bound the first (or only) occurrence. RFC 3339 with a zone.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Lead is how long before each occurrence's start the event arms. 0 to 7 days.
	Lead Duration `json:"lead"`
	// Recurrence repeats the event: "" (once), "daily", "daily@HH:MM", "weekly",
	// "weekly@DAY HH:MM" or "cron:EXPR", in Zone.
	Recurrence string `json:"recurrence,omitempty"`
	// Zone is the IANA time zone recurrences follow ("Europe/Madrid", "UTC"). Required
	// with a recurrence.
	Zone string `json:"zone,omitempty"`
	// ExpectedReadRate and ExpectedWriteRate are the peak requests/s expected on one key.
	ExpectedReadRate  float64 `json:"expected_read_rate"`
	ExpectedWriteRate float64 `json:"expected_write_rate"`
	// Mitigations to arm: "auto" (the rules choose from the expected rates) or any of
	// l1, copies, sharded_counter and batched_counter. Empty means auto.
	Mitigations []string `json:"mitigations"`
	// Owner and Note are free text for people.
	Owner string `json:"owner,omitempty"`
	Note  string `json:"note,omitempty"`
}

// Limits on free-text fields and lists, in bytes and items.
const (
	MaxIDLen       = 64
	MaxNameLen     = 200
	MaxOwnerLen    = 200
	MaxNoteLen     = 4096
	MaxPatterns    = 256
	MaxEventJSON   = 1 << 20 // DecodeEvent reads at most this much
	MitigationAuto = "auto"
)

// Mitigations an event may ask for, besides "auto".
var eventKinds = []mitigate.Kind{mitigate.L1, mitigate.Copies, mitigate.ShardedCounter, mitigate.BatchedCounter}

// Duration is a time.Duration that reads and writes JSON as a Go duration string ("15m").
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string; "" is zero.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("want a Go duration string such as \"15m\"")
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want a Go duration string such as \"15m\" or \"1h30m\"", s)
	}
	*d = Duration(v)
	return nil
}

// ErrInvalid is wrapped by every error about an event's content (an *InvalidError):
// answer it with 400.
var ErrInvalid = errors.New("invalid event")

// FieldError is one problem with one field.
type FieldError struct {
	// Field is the JSON name of the field ("patterns[1]"), or "" for the document.
	Field string
	// Problem says what is wrong and what is allowed.
	Problem string
}

func (e FieldError) String() string {
	if e.Field == "" {
		return e.Problem
	}
	return e.Field + ": " + e.Problem
}

// InvalidError lists every problem found in one event.
type InvalidError struct {
	ID       string // the event's id, when known
	Problems []FieldError
}

// Error lists the problems: `event "x": end: … ; patterns[0]: …`.
func (e *InvalidError) Error() string {
	var b strings.Builder
	if e.ID != "" {
		fmt.Fprintf(&b, "event %q: ", e.ID)
	} else {
		b.WriteString("event: ")
	}
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(id, field, format string, args ...any) error {
	return &InvalidError{ID: id, Problems: []FieldError{{Field: field, Problem: fmt.Sprintf(format, args...)}}}
}

// wireEvent is what DecodeEvent accepts: an event, plus fields that the API adds to
// events it returns and that a client may send back unchanged (they are ignored). Start
// and End are read raw and parsed afterwards, so that an error names the field: the
// errors of time.Time's UnmarshalJSON carry no field name.
type wireEvent struct {
	Event
	Start  json.RawMessage `json:"start"`
	End    json.RawMessage `json:"end"`
	Report json.RawMessage `json:"report,omitempty"`
	Source json.RawMessage `json:"source,omitempty"`
}

// DecodeEvent reads one event from JSON and validates it. Unknown fields are errors (a
// misspelt field would otherwise be silently dropped), except "report" and "source",
// which the API adds to events it returns. Missing or empty "mitigations" become
// ["auto"]. Every error is an *InvalidError naming the field.
func DecodeEvent(data []byte) (Event, error) { return decodeEvent(data, MaxEventJSON) }

// decodeEvent is DecodeEvent with a size limit; 0 means none. The stores read back their
// own events with no limit: an event Validate accepted may take more than MaxEventJSON
// bytes once encoded (escapes, indentation), and must not make the store unreadable.
func decodeEvent(data []byte, limit int) (Event, error) {
	if limit > 0 && len(data) > limit {
		return Event{}, invalid("", "", "document is %d bytes: at most %d allowed", len(data), limit)
	}
	if err := checkText(data, 0, len(data)); err != nil {
		return Event{}, err
	}
	var w wireEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Event{}, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Event{}, invalid("", "", "trailing data after the event object: send one JSON object")
	}
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("null")) {
		return Event{}, invalid("", "", "null: want a JSON object")
	}
	e := w.Event
	var probs []FieldError
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *time.Time
	}{{"start", w.Start, &e.Start}, {"end", w.End, &e.End}} {
		if len(f.raw) == 0 {
			continue
		}
		if err := json.Unmarshal(f.raw, f.dst); err != nil {
			probs = append(probs, FieldError{f.name, fmt.Sprintf("%v: want an RFC 3339 time with a zone, such as \"2026-03-01T19:30:00+01:00\"", err)})
		}
	}
	if len(probs) > 0 {
		return Event{}, &InvalidError{ID: e.ID, Problems: probs}
	}
	if len(e.Mitigations) == 0 {
		e.Mitigations = []string{MitigationAuto}
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// checkText refuses in doc[start:end], JSON text, what encoding/json would read as
// U+FFFD: a byte that is not UTF-8, or a \u escape of half a surrogate pair. A pattern
// holding one would name other keys. The error names the byte in doc.
func checkText(doc []byte, start, end int) error {
	b := doc[start:end]
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return invalid("", "", "byte %d (%#02x) is not UTF-8: JSON text must be; write the character itself or its \\u escape", start+i, b[i])
		}
		i += n
	}
	if at := jsontext.LoneSurrogate(b); at >= 0 {
		return invalid("", "", "%v: write the character itself, or both halves", jsontext.LoneSurrogateError(doc, start+at))
	}
	return nil
}

// jsonError turns an encoding/json error into an InvalidError naming the field.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return invalid("", "", "invalid JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		f := strings.TrimPrefix(typ.Field, "Event.")
		return invalid("", f, "got a JSON %s; want %s", typ.Value, wantType(f))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "", "empty or truncated document: want a JSON object")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return invalid("", strings.Trim(f, `"`), "unknown field: want id, name, patterns, allow_broad, start, end, lead, recurrence, zone, expected_read_rate, expected_write_rate, mitigations, owner or note")
	}
	// Errors from a field's UnmarshalJSON carry no field name in encoding/json v1; the
	// times are parsed by DecodeEvent itself, which leaves the lead.
	if strings.Contains(msg, "duration") {
		return invalid("", "lead", "%v", err)
	}
	return invalid("", "", "%v", err)
}

// wantType says what a field must hold.
func wantType(field string) string {
	switch {
	case strings.HasSuffix(field, "rate"):
		return "a number ≥ 0"
	case field == "patterns" || field == "mitigations" || strings.HasPrefix(field, "patterns.") || strings.HasPrefix(field, "mitigations."):
		return "an array of strings"
	case field == "allow_broad":
		return "true or false"
	case field == "":
		return "a JSON object"
	}
	return "a string"
}

// validID reports whether id is 1–64 of [a-z0-9._-].
func validID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// Validate checks every field and returns an *InvalidError listing all problems, or nil.
// An empty ID is allowed (Create assigns one); Put and the stores' loaders require one.
func (e *Event) Validate() error {
	_, err := compile(e, nil)
	return err
}

// Schedule returns the event's timing, or the error Validate would return.
func (e *Event) Schedule() (*Schedule, error) {
	c, err := compile(e, nil)
	if err != nil {
		return nil, err
	}
	return c.sched, nil
}

// Kinds returns the mitigations the event asks for: auto when it leaves the choice to the
// rules (empty Mitigations, or "auto"), else the kinds listed.
func (e *Event) Kinds() (auto bool, kinds []mitigate.Kind) {
	for _, m := range e.Mitigations {
		if m == MitigationAuto {
			auto = true
		} else {
			kinds = append(kinds, mitigate.Kind(m))
		}
	}
	return auto || len(e.Mitigations) == 0, kinds
}

// compiled is a validated event ready for matching.
type compiled struct {
	ev       Event
	patterns []Pattern
	sched    *Schedule
	auto     bool
	kinds    []mitigate.Kind
	counter  bool // asks for a counter mitigation
}

// compile validates e and prepares it. locs caches loaded zones; nil loads each time.
func compile(e *Event, locs map[string]*time.Location) (*compiled, error) {
	var probs []FieldError
	add := func(field, format string, args ...any) {
		probs = append(probs, FieldError{field, fmt.Sprintf(format, args...)})
	}
	c := &compiled{ev: *e}

	if e.ID != "" && !validID(e.ID) {
		add("id", "%q: want 1 to %d characters of a-z, 0-9, '.', '_' and '-'", e.ID, MaxIDLen)
	}
	textField := func(name, v string, limit int) {
		if len(v) > limit {
			add(name, "%d bytes long: at most %d allowed", len(v), limit)
		} else if !utf8.ValidString(v) {
			add(name, "not valid UTF-8")
		}
	}
	textField("name", e.Name, MaxNameLen)
	textField("owner", e.Owner, MaxOwnerLen)
	textField("note", e.Note, MaxNoteLen)

	switch {
	case len(e.Patterns) == 0:
		add("patterns", "empty: want at least one key, prefix (\"sale:sku:*\") or Redis glob")
	case len(e.Patterns) > MaxPatterns:
		add("patterns", "%d patterns: at most %d allowed", len(e.Patterns), MaxPatterns)
	}
	for i, src := range e.Patterns {
		if i >= MaxPatterns {
			break
		}
		field := fmt.Sprintf("patterns[%d]", i)
		p, err := CompilePattern(src)
		switch {
		case err != nil:
			add(field, "%v", err)
			continue
		case p.Broad && !e.AllowBroad:
			add(field, "%q has no literal character, so it matches every key or nearly: set \"allow_broad\": true to allow it", src)
			continue
		case slices.Contains(e.Patterns[:i], src):
			add(field, "%q is listed twice", src)
			continue
		}
		c.patterns = append(c.patterns, p)
	}

	timesOK := true
	if e.Start.IsZero() {
		add("start", "required: an RFC 3339 time with a zone, such as \"2026-03-01T19:30:00+01:00\"")
		timesOK = false
	}
	if e.End.IsZero() {
		add("end", "required: an RFC 3339 time with a zone, such as \"2026-03-01T21:30:00+01:00\"")
		timesOK = false
	}
	if timesOK && !e.End.After(e.Start) {
		add("end", "%s is not after start %s: an event must end after it starts",
			e.End.Format(time.RFC3339Nano), e.Start.Format(time.RFC3339Nano))
		timesOK = false
	}
	lead := time.Duration(e.Lead)
	if lead < 0 || lead > MaxLead {
		add("lead", "%v: want from 0s to %v (7 days)", lead, MaxLead)
		timesOK = false
	}

	rec, err := parseRecurrence(e.Recurrence)
	if err != nil {
		add("recurrence", "%v", err)
		timesOK = false
	}
	var loc *time.Location
	switch {
	case e.Zone == "" && rec.kind != once:
		add("zone", "required with a recurrence: an IANA zone such as \"Europe/Madrid\", or \"UTC\"")
		timesOK = false
	case e.Zone != "":
		loc = locs[e.Zone]
		if loc == nil {
			loc, err = loadZone(e.Zone)
			if err != nil {
				add("zone", "%v", err)
				timesOK = false
			} else if locs != nil {
				locs[e.Zone] = loc
			}
		}
	}
	if loc == nil {
		loc = time.UTC
	}
	if timesOK && rec.kind != once {
		// A recurrence follows the zone's wall clock from start's: an offset that is not
		// the zone's at that date (a winter offset in summer) moves every occurrence in
		// silence. end is only an instant (end − start is each occurrence's length, which
		// may span a change), so its offset may be any.
		if msg := offsetProblem(e.Start, loc); msg != "" {
			add("start", "%s", msg)
			timesOK = false
		}
	}
	if timesOK {
		s, err := newSchedule(e.Start, e.End, lead, rec, loc)
		if err != nil {
			add("recurrence", "%q in %s: %v", e.Recurrence, loc, err)
		}
		c.sched = s
	}

	rate := func(name string, v float64) {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			add(name, "%v: want a number ≥ 0 (requests/s on one key)", v)
		}
	}
	rate("expected_read_rate", e.ExpectedReadRate)
	rate("expected_write_rate", e.ExpectedWriteRate)

	for i, m := range e.Mitigations {
		field := fmt.Sprintf("mitigations[%d]", i)
		switch {
		case m == MitigationAuto && len(e.Mitigations) > 1:
			add(field, "\"auto\" must be alone: it lets the rules choose; list kinds instead to choose yourself")
		case m == MitigationAuto:
			c.auto = true
		case !slices.Contains(eventKinds, mitigate.Kind(m)):
			add(field, "%q: want auto, l1, copies, sharded_counter or batched_counter", m)
		case slices.Contains(e.Mitigations[:i], m):
			add(field, "%q is listed twice", m)
		default:
			k := mitigate.Kind(m)
			c.kinds = append(c.kinds, k)
			c.counter = c.counter || k == mitigate.ShardedCounter || k == mitigate.BatchedCounter
		}
	}
	if len(e.Mitigations) == 0 {
		c.auto = true
	}
	if len(probs) > 0 {
		return nil, &InvalidError{ID: e.ID, Problems: probs}
	}
	return c, nil
}

// loadZone loads an IANA zone, refusing "Local" (which depends on the machine).
func loadZone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New("\"Local\" depends on the machine: want an IANA zone such as \"Europe/Madrid\", or \"UTC\"")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q: not a known IANA zone: want one such as \"Europe/Madrid\" or \"America/New_York\", or \"UTC\"", name)
	}
	return loc, nil
}

// jsonEncoder returns an encoder that leaves <, > and & as they are in keys and notes.
func jsonEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}
