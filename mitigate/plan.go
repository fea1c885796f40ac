package mitigate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Plan is what hotkeyd tells clients to do: one entry per key and mitigation kind. Its JSON
// form is the contract between the agent and the SDK; docs/plan.md describes it field by
// field. A Plan returned by the Store or the Planner shares its slices with them: treat
// it as read-only.
type Plan struct {
	// Version increases by one each time the entries change (the Store assigns it); it is
	// the plan's ETag. The first plan of an agent is version 1.
	Version uint64 `json:"version"`
	// Generated is when the agent made the plan. Clients measure leases against it (see
	// Entry.Expires), so their clocks need not agree with the agent's.
	Generated time.Time `json:"generated"`
	// Primaries is how many Redis primaries the plan was made for: 1 for standalone
	// Redis or when no Redis is configured, more for a Redis Cluster.
	Primaries int `json:"primaries"`
	// Entries are sorted by key, then by kind in the order of Kinds.
	Entries []Entry `json:"entries"`
}

// Overrides an entry can carry (Entry.Override).
const (
	// Pinned: an operator forced the mitigation; it stays until the pin is cleared.
	Pinned = "pinned"
	// Forbidden: an operator forbade what the rules wanted; the Report entry says what.
	Forbidden = "forbidden"
)

// Entry is one mitigation of one key.
type Entry struct {
	// Key is the key as clients name it, verbatim.
	Key string `json:"key"`
	// Kind is the mitigation.
	Kind Kind `json:"kind"`
	// Mode is Enforce (clients apply it) or Recommend (published only; clients do not
	// apply it). Observe entries are not published.
	Mode Mode `json:"mode"`
	// Reason says, for an operator, why the mitigation was chosen. It is written when the
	// mitigation starts or its parameters change, so it quotes the rates of that moment.
	Reason string `json:"reason"`
	// TradeOff says what the mitigation costs (staleness, read cost, lag, loss bound).
	TradeOff string `json:"trade_off,omitempty"`
	// Since is when the mitigation started.
	Since time.Time `json:"since"`
	// Expires ends the entry's lease: a client drops an entry it has not seen renewed by
	// then (fail safe). A client computes the lease as Expires − Plan.Generated and counts
	// it from when it received the plan, on its own clock.
	Expires time.Time `json:"expires"`
	// Override is "pinned" or "forbidden" when an operator's override made this entry.
	Override string `json:"override,omitempty"`
	// PredictedBy names the registry events that predicted the key.
	PredictedBy []string `json:"predicted_by,omitempty"`
	// TTL is how long SDK clients cache the key (L1 only).
	TTL Duration `json:"ttl,omitempty"`
	// Copies name the key's copies and where they live (Copies only; N = len(Copies)).
	Copies []Node `json:"copies,omitempty"`
	// SubCounters name the counter's sub-counters (ShardedCounter only; M = len).
	SubCounters []Node `json:"sub_counters,omitempty"`
	// FlushInterval is how often SDK clients send a batched counter's sum (BatchedCounter
	// only).
	FlushInterval Duration `json:"flush_interval,omitempty"`
}

// Limits that Validate enforces on parameters.
const (
	MaxTTL           = time.Hour
	MaxFlushInterval = time.Minute
	// MaxLease bounds the planner's lease, and clients hold no entry longer than that
	// after a fetch, whatever its Expires says.
	MaxLease = time.Hour
)

// MaxPlanBytes is the largest plan body the SDK accepts (client/plan.go); it refuses a
// larger plan whole and keeps the one it has until its leases run out. The planner keeps
// its plans well within it (PlannerOptions.MaxPlanBytes).
const MaxPlanBytes = 16 << 20

// DecodePlan reads a plan that came from outside (an agent over HTTP, a Redis channel) and
// validates it. Unknown fields are ignored, so the format can grow; a bad kind, mode,
// duration or parameter is an error that names the entry and the field.
func DecodePlan(data []byte) (Plan, error) {
	var p Plan
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&p); err != nil {
		return Plan{}, fmt.Errorf("plan: %w", err)
	}
	// More misses a stray '}' or ']' after the object; only EOF means nothing follows.
	if _, err := d.Token(); err != io.EOF {
		return Plan{}, fmt.Errorf("plan: trailing data after the JSON object")
	}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// Validate reports the first thing wrong with the plan, naming the entry and the field.
func (p Plan) Validate() error {
	if p.Version == 0 {
		return fmt.Errorf("plan: version 0: versions start at 1")
	}
	if p.Generated.IsZero() {
		return fmt.Errorf("plan: generated missing: want an RFC 3339 time")
	}
	if p.Primaries < 1 {
		return fmt.Errorf("plan: primaries %d: must be ≥ 1", p.Primaries)
	}
	type id struct {
		key  string
		kind Kind
	}
	seen := make(map[id]bool, len(p.Entries))
	for i, e := range p.Entries {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("plan: entry %d: %w", i, err)
		}
		if seen[id{e.Key, e.Kind}] {
			return fmt.Errorf("plan: entry %d: key %q kind %s: listed twice; one entry per key and kind", i, e.Key, e.Kind)
		}
		seen[id{e.Key, e.Kind}] = true
	}
	return nil
}

// Validate reports the first thing wrong with the entry. Its key may be empty: "" is a
// key Redis accepts, and an app that reads it often makes it hot like any other.
func (e Entry) Validate() error {
	at := fmt.Sprintf("key %q", e.Key)
	if !knownKind(e.Kind) {
		return fmt.Errorf("%s: kind %q: %s", at, e.Kind, kindsAllowed)
	}
	at += " kind " + string(e.Kind)
	if _, err := ParseMode(string(e.Mode)); err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	if e.Kind == Report && e.Mode == Enforce {
		return fmt.Errorf("%s: mode enforce: a report has nothing to enforce; use observe or recommend", at)
	}
	if e.Since.IsZero() {
		return fmt.Errorf("%s: since missing: want an RFC 3339 time", at)
	}
	if !e.Expires.After(e.Since) {
		return fmt.Errorf("%s: expires %s: must be after since %s", at, e.Expires.Format(time.RFC3339), e.Since.Format(time.RFC3339))
	}
	switch e.Override {
	case "", Pinned, Forbidden:
	default:
		return fmt.Errorf("%s: override %q: use pinned, forbidden or leave it out", at, e.Override)
	}
	for j, ev := range e.PredictedBy {
		if ev == "" {
			return fmt.Errorf("%s: predicted_by[%d] empty: want an event name", at, j)
		}
	}
	// Each parameter belongs to one kind, and that kind needs it.
	if err := checkDuration(at, "ttl", e.TTL, e.Kind == L1, MaxTTL); err != nil {
		return err
	}
	if err := checkDuration(at, "flush_interval", e.FlushInterval, e.Kind == BatchedCounter, MaxFlushInterval); err != nil {
		return err
	}
	if err := checkNodes(at, "copies", e.Key, e.Copies, e.Kind == Copies); err != nil {
		return err
	}
	return checkNodes(at, "sub_counters", e.Key, e.SubCounters, e.Kind == ShardedCounter)
}

func checkDuration(at, field string, d Duration, wanted bool, limit time.Duration) error {
	switch {
	case !wanted && d != 0:
		return fmt.Errorf("%s: %s %v: only for kind %s", at, field, time.Duration(d), kindOf(field))
	case wanted && (d <= 0 || time.Duration(d) > limit):
		return fmt.Errorf("%s: %s %v: must be in (0, %v]", at, field, time.Duration(d), limit)
	}
	return nil
}

func checkNodes(at, field, key string, nodes []Node, wanted bool) error {
	switch {
	case !wanted && len(nodes) > 0:
		return fmt.Errorf("%s: %s given: only for kind %s", at, field, kindOf(field))
	case wanted && len(nodes) < 2:
		return fmt.Errorf("%s: %d %s: want at least 2", at, len(nodes), field)
	}
	for j, n := range nodes {
		switch {
		case !strings.Contains(n.Name, key) || n.Name == key:
			return fmt.Errorf("%s: %s[%d] name %q: must contain the key verbatim and differ from it", at, field, j, n.Name)
		case n.Slot < 0 || n.Slot > 16383:
			return fmt.Errorf("%s: %s[%d] slot %d: must be in [0, 16383]", at, field, j, n.Slot)
		case slices.ContainsFunc(nodes[:j], func(o Node) bool { return o.Name == n.Name }):
			return fmt.Errorf("%s: %s[%d] name %q: listed twice", at, field, j, n.Name)
		}
	}
	return nil
}

// kindOf names the kind a parameter belongs to.
func kindOf(field string) Kind {
	switch field {
	case "ttl":
		return L1
	case "copies":
		return Copies
	case "sub_counters":
		return ShardedCounter
	}
	return BatchedCounter
}

// Equal reports whether two entries say the same, comparing times as instants.
func (e Entry) Equal(o Entry) bool {
	return e.sameBut(o) && e.Expires.Equal(o.Expires)
}

// sameBut is Equal without Expires: the entries differ at most in their lease.
func (e Entry) sameBut(o Entry) bool {
	return e.Key == o.Key && e.Kind == o.Kind && e.Mode == o.Mode && e.Reason == o.Reason &&
		e.TradeOff == o.TradeOff && e.Since.Equal(o.Since) && e.Override == o.Override &&
		slices.Equal(e.PredictedBy, o.PredictedBy) && e.TTL == o.TTL &&
		slices.Equal(e.Copies, o.Copies) && slices.Equal(e.SubCounters, o.SubCounters) &&
		e.FlushInterval == o.FlushInterval
}

// sameEntries compares two entry lists in order; withLease includes Expires.
func sameEntries(a, b []Entry, withLease bool) bool {
	return slices.EqualFunc(a, b, func(x, y Entry) bool {
		if withLease {
			return x.Equal(y)
		}
		return x.sameBut(y)
	})
}

// Find returns the entry for key and kind.
func (p Plan) Find(key string, kind Kind) (Entry, bool) {
	for _, e := range p.Entries {
		if e.Key == key && e.Kind == kind {
			return e, true
		}
	}
	return Entry{}, false
}

// Bounds of an entry's JSON size, as encoding/json writes it with SetIndent("", "  ") at
// the depth of a plan's entries (the agent's form; compact JSON is smaller): every byte
// of field names, punctuation, indentation and values that are not strings or times.
const (
	entryJSONFixed = 640 // fields, indentation, two times of up to 35 bytes, durations
	nodeJSONFixed  = 120 // a node's fields, indentation and slot
	itemJSONFixed  = 16  // a predicted_by item's indentation and punctuation
	planJSONFixed  = 256 // the plan's own fields
)

// sizeBound is an upper bound of the entry's JSON size (see entryJSONFixed) that reads
// no string: it counts every string byte as 6, the most encoding/json writes for one
// (\u00XX).
func (e *Entry) sizeBound() int {
	n := entryJSONFixed + quickLen(e.Key) + quickLen(e.Reason) + quickLen(e.TradeOff) +
		quickLen(string(e.Kind)) + quickLen(string(e.Mode)) + quickLen(e.Override)
	for _, ev := range e.PredictedBy {
		n += itemJSONFixed + quickLen(ev)
	}
	for _, nodes := range [2][]Node{e.Copies, e.SubCounters} {
		for i := range nodes {
			n += nodeJSONFixed + quickLen(nodes[i].Name) + quickLen(nodes[i].Primary)
		}
	}
	return n
}

// quickLen bounds the length of s as a JSON string, quotes included.
func quickLen(s string) int { return 2 + 6*len(s) }

// encodedSize is the entry's JSON size as the agent serves it (indented at the depth of a
// plan's entries, with the separator before it), by encoding it; sizeBound if that fails.
func (e *Entry) encodedSize() int {
	b, err := json.MarshalIndent(e, "    ", "  ")
	if err != nil {
		return e.sizeBound()
	}
	return len(b) + len(",\n    ")
}
