package registry

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Observation is one evaluated key of a detector tick: its rates (requests/s of the full
// traffic) and whether detection holds it hot.
type Observation struct {
	Key                 string
	ReadRate, WriteRate float64
	Hot                 bool
}

// TrackerOptions configure a Tracker. The zero value works.
type TrackerOptions struct {
	// MaxHotKeys bounds the hot keys a report lists per occurrence (the count goes on).
	// Default: 100.
	MaxHotKeys int
	// MaxSurprises bounds the list of recent surprises (the counter goes on). Default: 100.
	MaxSurprises int
	// SurpriseMemory is how long a key that was hot and unpredicted stays remembered: it
	// counts as a surprise again only once it has not been so for this long, so that a key
	// that flaps at its threshold, or leaves the ranking for a tick, is one surprise, not
	// one per flap. Default: 5 minutes (the window of the HotkeydUnpredictedHotKey alert).
	SurpriseMemory time.Duration
}

// Tracker compares predictions with detection. Fed the evaluated keys of every tick, it
// records per event occurrence the peak rates of keys under its patterns while it is
// armed and the keys that got hot under it, and counts surprises: keys turning hot that
// no armed event predicted. It is time-driven (Observe takes now) and safe for concurrent
// use.
type Tracker struct {
	maxHot, maxSurprises int
	memory               time.Duration // SurpriseMemory

	mu         sync.Mutex             // guards every field below
	occ        map[string]*occurrence // by event id: the occurrence it was last armed for
	surprising map[string]time.Time   // keys hot and unpredicted: the last tick they were
	pruned     time.Time              // when surprising was last rid of keys past memory
	surprises  uint64                 // surprises counted since the start
	recent     []Surprise             // the latest surprises, oldest first
	buf        []string               // Match's buffer
}

// Surprise is a key that turned hot with no armed event predicting it.
type Surprise struct {
	Key       string    `json:"key"`
	At        time.Time `json:"at"`
	ReadRate  float64   `json:"read_rate"`
	WriteRate float64   `json:"write_rate"`
}

// HotKey is a key that got hot under an event.
type HotKey struct {
	Key string `json:"key"`
	// FirstHot is the first tick the key was hot while the event was armed.
	FirstHot time.Time `json:"first_hot"`
	// PeakReadRate and PeakWriteRate are its highest rates while the event was armed.
	PeakReadRate  float64 `json:"peak_read_rate"`
	PeakWriteRate float64 `json:"peak_write_rate"`
}

// occurrence is the record of one armed occurrence of an event.
type occurrence struct {
	r      Report
	hotIdx map[string]int // key → index in r.HotKeys
}

// Report is prediction against reality for the occurrence an event was last armed for
// (Arming.Window: the one running or cooling, or else the next one to start).
type Report struct {
	ID string `json:"id"`
	// State at the time asked: "armed" (in the lead, before start), "running" (between
	// start and end), "cooling" (after end, in the cool-down) or "over".
	State string `json:"state"`
	// Occurrence is the window reported on; ArmedFrom and ArmedUntil extend it by the
	// lead and the cool-down. Observations count from ArmedFrom to ArmedUntil, while the
	// event is armed for this occurrence: when arming windows overlap, from the previous
	// occurrence's end + cool-down (if later) until the next one starts (if earlier).
	Occurrence Window    `json:"occurrence"`
	ArmedFrom  time.Time `json:"armed_from"`
	ArmedUntil time.Time `json:"armed_until"`
	// Expected rates, from the event (requests/s on one key).
	ExpectedReadRate  float64 `json:"expected_read_rate"`
	ExpectedWriteRate float64 `json:"expected_write_rate"`
	// ObservedPeakReadRate and ObservedPeakWriteRate are the highest rates one key under
	// the event's patterns reached in a tick while armed, and PeakReadKey and
	// PeakWriteKey the keys that reached them.
	ObservedPeakReadRate  float64 `json:"observed_peak_read_rate"`
	ObservedPeakWriteRate float64 `json:"observed_peak_write_rate"`
	PeakReadKey           string  `json:"peak_read_key,omitempty"`
	PeakWriteKey          string  `json:"peak_write_key,omitempty"`
	// ReadRatio and WriteRatio are observed peak / expected; absent when nothing was
	// expected.
	ReadRatio  *float64 `json:"read_ratio,omitempty"`
	WriteRatio *float64 `json:"write_ratio,omitempty"`
	// ObservedReadRate and ObservedWriteRate are the highest rates of one matching key at
	// the last tick (0 once the occurrence is over): what a live gauge shows.
	ObservedReadRate  float64 `json:"observed_read_rate"`
	ObservedWriteRate float64 `json:"observed_write_rate"`
	// HotKeys are the keys that got hot under the event, by first hot time (at most
	// TrackerOptions.MaxHotKeys); HotKeysTotal counts them all.
	HotKeys      []HotKey `json:"hot_keys"`
	HotKeysTotal int      `json:"hot_keys_total"`
	// FirstHot is when the first key got hot, and FirstHotAfterStart that time minus
	// Occurrence.Start: negative when it was hot before the start. Absent when no key got
	// hot.
	FirstHot           *time.Time `json:"first_hot,omitempty"`
	FirstHotAfterStart *Duration  `json:"first_hot_after_start,omitempty"`
	// ObservedSince is the first tick that fed the report: when this tracker (this
	// agent, since its last start) began observing the occurrence. Later than ArmedFrom,
	// the report covers only from then: the agent started, or restarted, while the event
	// was armed, and its peaks, ratios and hot keys say nothing of the time before.
	ObservedSince time.Time `json:"observed_since"`
	// LastObserved is the last tick that fed the report.
	LastObserved time.Time `json:"last_observed"`
}

// NewTracker checks the options and returns a tracker with nothing recorded.
func NewTracker(o TrackerOptions) (*Tracker, error) {
	if o.MaxHotKeys < 0 {
		return nil, fmt.Errorf("registry: tracker: max hot keys %d: must be ≥ 0 (0 means 100)", o.MaxHotKeys)
	}
	if o.MaxSurprises < 0 {
		return nil, fmt.Errorf("registry: tracker: max surprises %d: must be ≥ 0 (0 means 100)", o.MaxSurprises)
	}
	if o.SurpriseMemory < 0 {
		return nil, fmt.Errorf("registry: tracker: surprise memory %v: must be ≥ 0 (0 means 5m)", o.SurpriseMemory)
	}
	return &Tracker{
		maxHot:       cmp.Or(o.MaxHotKeys, 100),
		maxSurprises: cmp.Or(o.MaxSurprises, 100),
		memory:       cmp.Or(o.SurpriseMemory, 5*time.Minute),
		occ:          make(map[string]*occurrence),
		surprising:   make(map[string]time.Time),
	}, nil
}

// Observe records one tick: the events armed at now in x, and the evaluated keys. It
// returns how many keys turned into surprises at this tick (add it to
// hotkeyd_surprise_hot_keys_total). A key counts once per hot episode: again only after
// SurpriseMemory without a tick where it was hot and unpredicted. Records of events no
// longer in x are dropped.
func (t *Tracker) Observe(now time.Time, x *Index, obs []Observation) int {
	armed := x.Armed(now)
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.occ {
		if _, ok := x.byID[id]; !ok {
			delete(t.occ, id)
		}
	}
	for _, o := range t.occ {
		o.r.ObservedReadRate, o.r.ObservedWriteRate = 0, 0
	}
	for _, a := range armed {
		o := t.occ[a.Event.ID]
		if o == nil || !o.r.Occurrence.Start.Equal(a.Window.Start) {
			o = &occurrence{r: Report{ID: a.Event.ID, Occurrence: a.Window, HotKeys: []HotKey{}, ObservedSince: now}, hotIdx: make(map[string]int)}
			t.occ[a.Event.ID] = o
		}
		// The same start after a change to the event (a PUT extending or shortening it)
		// is the same occurrence: keep its record, follow its new end.
		o.r.Occurrence, o.r.ArmedFrom, o.r.ArmedUntil = a.Window, a.From, a.Until
		o.r.ExpectedReadRate, o.r.ExpectedWriteRate = a.Event.ExpectedReadRate, a.Event.ExpectedWriteRate
		o.r.LastObserved = now
	}
	if now.Sub(t.pruned) >= time.Second {
		for key, last := range t.surprising {
			if now.Sub(last) >= t.memory {
				delete(t.surprising, key)
			}
		}
		t.pruned = now
	}
	fresh := 0
	for _, ob := range obs {
		t.buf = x.Match(ob.Key, now, t.buf[:0])
		if len(t.buf) == 0 {
			if !ob.Hot {
				continue
			}
			last, seen := t.surprising[ob.Key]
			t.surprising[ob.Key] = now
			if !seen || now.Sub(last) >= t.memory {
				fresh++
				t.surprises++
				if len(t.recent) == t.maxSurprises {
					t.recent = append(t.recent[:0], t.recent[1:]...)
				}
				t.recent = append(t.recent, Surprise{Key: ob.Key, At: now, ReadRate: ob.ReadRate, WriteRate: ob.WriteRate})
			}
			continue
		}
		for _, id := range t.buf {
			if o := t.occ[id]; o != nil {
				t.record(o, ob, now)
			}
		}
	}
	return fresh
}

// record folds one observation into an occurrence.
func (t *Tracker) record(o *occurrence, ob Observation, now time.Time) {
	r := &o.r
	if ob.ReadRate > r.ObservedPeakReadRate {
		r.ObservedPeakReadRate, r.PeakReadKey = ob.ReadRate, ob.Key
	}
	if ob.WriteRate > r.ObservedPeakWriteRate {
		r.ObservedPeakWriteRate, r.PeakWriteKey = ob.WriteRate, ob.Key
	}
	r.ObservedReadRate = max(r.ObservedReadRate, ob.ReadRate)
	r.ObservedWriteRate = max(r.ObservedWriteRate, ob.WriteRate)
	if i, ok := o.hotIdx[ob.Key]; ok {
		if i < 0 {
			return
		}
		h := &r.HotKeys[i]
		h.PeakReadRate = max(h.PeakReadRate, ob.ReadRate)
		h.PeakWriteRate = max(h.PeakWriteRate, ob.WriteRate)
		return
	}
	if !ob.Hot {
		return
	}
	r.HotKeysTotal++
	if r.FirstHot == nil {
		at := now
		d := Duration(now.Sub(r.Occurrence.Start))
		r.FirstHot, r.FirstHotAfterStart = &at, &d
	}
	if len(r.HotKeys) < t.maxHot {
		o.hotIdx[ob.Key] = len(r.HotKeys)
		r.HotKeys = append(r.HotKeys, HotKey{Key: ob.Key, FirstHot: now, PeakReadRate: ob.ReadRate, PeakWriteRate: ob.WriteRate})
	} else {
		// Listed or not, count each key once.
		o.hotIdx[ob.Key] = -1
	}
}

// Report returns the report on the occurrence the event was last armed for, with its
// state at now, and false when the event has not been armed since the tracker started.
func (t *Tracker) Report(id string, now time.Time) (Report, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.occ[id]
	if o == nil {
		return Report{}, false
	}
	return o.report(now), true
}

// Reports returns the reports of every tracked event, sorted by id.
func (t *Tracker) Reports(now time.Time) []Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Report, 0, len(t.occ))
	for _, o := range t.occ {
		out = append(out, o.report(now))
	}
	slices.SortFunc(out, func(a, b Report) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// report copies the occurrence's report and fills in what depends on now.
func (o *occurrence) report(now time.Time) Report {
	r := o.r
	r.HotKeys = slices.Clone(r.HotKeys)
	switch {
	case now.Before(r.Occurrence.Start):
		r.State = "armed"
	case now.Before(r.Occurrence.End):
		r.State = "running"
	case now.Before(r.ArmedUntil):
		r.State = "cooling"
	default:
		r.State = "over"
		r.ObservedReadRate, r.ObservedWriteRate = 0, 0
	}
	if r.ExpectedReadRate > 0 {
		v := r.ObservedPeakReadRate / r.ExpectedReadRate
		r.ReadRatio = &v
	}
	if r.ExpectedWriteRate > 0 {
		v := r.ObservedPeakWriteRate / r.ExpectedWriteRate
		r.WriteRatio = &v
	}
	if r.FirstHot != nil {
		at, d := *r.FirstHot, *r.FirstHotAfterStart
		r.FirstHot, r.FirstHotAfterStart = &at, &d
	}
	return r
}

// Surprises returns how many surprises were counted since the start, and the latest
// ones, oldest first.
func (t *Tracker) Surprises() (total uint64, recent []Surprise) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.surprises, slices.Clone(t.recent)
}
