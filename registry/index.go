package registry

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// DefaultCoolDown is how long an event stays armed after an occurrence ends, unless
// IndexOptions say otherwise.
const DefaultCoolDown = 60 * time.Second

// IndexOptions configure an Index. The zero value works.
type IndexOptions struct {
	// CoolDown is how long an event stays armed after each occurrence's end. Default (0):
	// 60s. A negative value means none.
	CoolDown time.Duration
}

// Index answers, for a key and a time, which armed events predict the key. Build one from
// the current events (NewIndex) and replace it when the store's Version changes. It is
// safe for concurrent use; Match does not allocate.
//
// Exact patterns are found in a map; prefixes (and globs, by their literal start) in a
// map keyed by the literal, probed once per distinct literal length; globs with no
// literal start are scanned.
type Index struct {
	coolDown time.Duration
	entries  []*entry // sorted by id
	byID     map[string]int

	exact    map[string][]int32 // key → entries
	prefixes literalIndex       // prefix patterns
	globs    literalIndex       // glob patterns with a literal start
	scanned  []patRef           // glob patterns without one
}

// entry is one compiled event and its cached armed state.
type entry struct {
	c     *compiled
	state atomic.Pointer[armState]
}

// patRef is a pattern and its event.
type patRef struct {
	p  *Pattern
	ev int32
}

// literalIndex finds patterns by a literal the key must start with.
type literalIndex struct {
	byLit   map[string][]patRef
	lengths []int // distinct literal lengths, ascending
}

func (li *literalIndex) add(lit string, r patRef) {
	if li.byLit == nil {
		li.byLit = make(map[string][]patRef)
	}
	li.byLit[lit] = append(li.byLit[lit], r)
	if i, found := slices.BinarySearch(li.lengths, len(lit)); !found {
		li.lengths = slices.Insert(li.lengths, i, len(lit))
	}
}

// NewIndex validates and compiles the events (ids required and unique).
func NewIndex(events []Event, o IndexOptions) (*Index, error) {
	cd := o.CoolDown
	switch {
	case cd == 0:
		cd = DefaultCoolDown
	case cd < 0:
		cd = 0
	}
	x := &Index{coolDown: cd, byID: make(map[string]int, len(events)), exact: make(map[string][]int32)}
	locs := make(map[string]*time.Location)
	for _, e := range events {
		if e.ID == "" {
			return nil, invalid("", "id", "required in an indexed event")
		}
		if _, dup := x.byID[e.ID]; dup {
			return nil, invalid(e.ID, "id", "%q is used by two events", e.ID)
		}
		c, err := compile(&e, locs)
		if err != nil {
			return nil, err
		}
		c.ev = clone(c.ev)
		x.byID[e.ID] = 0
		x.entries = append(x.entries, &entry{c: c})
	}
	slices.SortFunc(x.entries, func(a, b *entry) int { return cmp.Compare(a.c.ev.ID, b.c.ev.ID) })
	for i, en := range x.entries {
		x.byID[en.c.ev.ID] = i
		for j := range en.c.patterns {
			p := &en.c.patterns[j]
			r := patRef{p: p, ev: int32(i)}
			switch p.Kind {
			case Exact:
				if !slices.Contains(x.exact[p.Literal], int32(i)) {
					x.exact[p.Literal] = append(x.exact[p.Literal], int32(i))
				}
			case Prefix:
				x.prefixes.add(p.Literal, r)
			default:
				if lit, _ := splitLiteral(p.Source); lit != "" {
					x.globs.add(lit, r)
				} else {
					x.scanned = append(x.scanned, r)
				}
			}
		}
	}
	return x, nil
}

// CoolDown returns the cool-down the index arms events for after each occurrence.
func (x *Index) CoolDown() time.Duration { return x.coolDown }

// Len returns the number of events.
func (x *Index) Len() int { return len(x.entries) }

// Event returns the event with the id.
func (x *Index) Event(id string) (Event, bool) {
	i, ok := x.byID[id]
	if !ok {
		return Event{}, false
	}
	return clone(x.entries[i].c.ev), true
}

// Schedule returns the schedule of the event with the id.
func (x *Index) Schedule(id string) (*Schedule, bool) {
	i, ok := x.byID[id]
	if !ok {
		return nil, false
	}
	return x.entries[i].c.sched, true
}

// armed returns the entry's armed state at now, recomputing it only when now leaves the
// span the cached state holds for.
func (x *Index) armed(en *entry, now time.Time) *armState {
	if st := en.state.Load(); st != nil && !now.Before(st.from) && now.Before(st.until) {
		return st
	}
	st := en.c.sched.state(now, x.coolDown)
	en.state.Store(&st)
	return &st
}

// Arming is an armed event and the occurrence it is armed for: the one running or
// cooling (the latest to start, when windows overlap) or, when none is, the next one to
// start (see Schedule.Armed).
type Arming struct {
	// Event is the event; treat its slices as read-only.
	Event Event
	// Window is the occurrence: Start and End.
	Window Window
	// From and Until bound the occurrence's arming: Window.Start − lead and
	// Window.End + cool-down. The event may be armed beyond them for the occurrences
	// before and after it, when arming windows overlap.
	From, Until time.Time
}

// Armed returns the events armed at now, sorted by id.
func (x *Index) Armed(now time.Time) []Arming {
	var out []Arming
	for _, en := range x.entries {
		if st := x.armed(en, now); st.armed {
			out = append(out, Arming{
				Event:  en.c.ev,
				Window: st.w,
				From:   st.w.Start.Add(-en.c.sched.lead),
				Until:  st.w.End.Add(x.coolDown),
			})
		}
	}
	return out
}

// Match appends to dst the ids of the events armed at now with a pattern matching key,
// each once, in id order, and returns the extended slice. With a dst of enough capacity
// it does not allocate.
func (x *Index) Match(key string, now time.Time, dst []string) []string {
	n := len(dst)
	add := func(ev int32) {
		en := x.entries[ev]
		id := en.c.ev.ID
		if slices.Contains(dst[n:], id) || !x.armed(en, now).armed {
			return
		}
		dst = append(dst, id)
	}
	for _, ev := range x.exact[key] {
		add(ev)
	}
	for _, l := range x.prefixes.lengths {
		if l > len(key) {
			break
		}
		for _, r := range x.prefixes.byLit[key[:l]] {
			if key != "" || r.p.Match(key) { // "**" does not match "" in Redis
				add(r.ev)
			}
		}
	}
	for _, l := range x.globs.lengths {
		if l > len(key) {
			break
		}
		for _, r := range x.globs.byLit[key[:l]] {
			if MatchGlob(r.p.Source, key) {
				add(r.ev)
			}
		}
	}
	for _, r := range x.scanned {
		if MatchGlob(r.p.Source, key) {
			add(r.ev)
		}
	}
	slices.Sort(dst[n:])
	return dst
}

// Prediction is what the armed events predict for one key: feed it to the mitigation
// rules as mitigate.KeyStats.PredictedBy, with the expected rates.
type Prediction struct {
	// Key is the key.
	Key string `json:"key"`
	// Events are the ids of the armed events predicting it, sorted.
	Events []string `json:"events"`
	// ExpectedReadRate and ExpectedWriteRate are the largest any of them expects.
	ExpectedReadRate  float64 `json:"expected_read_rate"`
	ExpectedWriteRate float64 `json:"expected_write_rate"`
	// Auto says some event leaves the choice of mitigations to the rules.
	Auto bool `json:"auto"`
	// Kinds are the mitigations the events list explicitly, in mitigate.Kinds order.
	Kinds []mitigate.Kind `json:"kinds,omitempty"`
	// Counter says some event lists a counter mitigation (sharded or batched): the key
	// is a counter.
	Counter bool `json:"counter"`
}

// add folds one event into the prediction.
func (p *Prediction) add(c *compiled) {
	if !slices.Contains(p.Events, c.ev.ID) {
		p.Events = append(p.Events, c.ev.ID)
	}
	p.ExpectedReadRate = max(p.ExpectedReadRate, c.ev.ExpectedReadRate)
	p.ExpectedWriteRate = max(p.ExpectedWriteRate, c.ev.ExpectedWriteRate)
	p.Auto = p.Auto || c.auto
	p.Counter = p.Counter || c.counter
	for _, k := range c.kinds {
		if !slices.Contains(p.Kinds, k) {
			p.Kinds = append(p.Kinds, k)
		}
	}
}

// finish sorts the prediction's lists.
func (p *Prediction) finish() {
	slices.Sort(p.Events)
	slices.SortFunc(p.Kinds, func(a, b mitigate.Kind) int {
		return cmp.Compare(slices.Index(mitigate.Kinds, a), slices.Index(mitigate.Kinds, b))
	})
}

// Predicted returns, sorted by key, the exact keys of the events armed at now: the keys
// to arm at once, before any traffic. Prefix and glob patterns cannot be enumerated;
// ask Predict for the keys that show up in traffic.
func (x *Index) Predicted(now time.Time) []Prediction {
	byKey := make(map[string]*Prediction)
	for _, en := range x.entries {
		if !x.armed(en, now).armed {
			continue
		}
		for _, p := range en.c.patterns {
			if p.Kind != Exact {
				continue
			}
			pr := byKey[p.Literal]
			if pr == nil {
				pr = &Prediction{Key: p.Literal}
				byKey[p.Literal] = pr
			}
			pr.add(en.c)
		}
	}
	out := make([]Prediction, 0, len(byKey))
	for _, p := range byKey {
		p.finish()
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Prediction) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Predict returns what the events armed at now predict for key, and false when none
// does.
func (x *Index) Predict(key string, now time.Time) (Prediction, bool) {
	var buf [8]string
	ids := x.Match(key, now, buf[:0])
	if len(ids) == 0 {
		return Prediction{}, false
	}
	p := Prediction{Key: key}
	for _, id := range ids {
		p.add(x.entries[x.byID[id]].c)
	}
	p.finish()
	return p, true
}

// String describes the index for logs.
func (x *Index) String() string {
	return fmt.Sprintf("registry index: %d events, %d exact keys, %d prefixes, %d globs (%d scanned)",
		len(x.entries), len(x.exact), countRefs(x.prefixes), countRefs(x.globs)+len(x.scanned), len(x.scanned))
}

func countRefs(li literalIndex) int {
	n := 0
	for _, rs := range li.byLit {
		n += len(rs)
	}
	return n
}
