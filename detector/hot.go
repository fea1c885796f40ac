package detector

import (
	"fmt"
	"strings"
	"time"
)

// Threshold makes a key hot for one operation: its rate (requests per second of the full
// traffic) reaches Rate, or its share of all traffic (reads and writes: the load it puts
// on its node) reaches Share. A zero field is off.
type Threshold struct {
	Rate  float64
	Share float64
}

// Override replaces the thresholds for keys matching Pattern: an exact key, or a prefix
// ending in "*" ("score:*"). Zero fields of Read and Write inherit the default rule's. An
// exact pattern beats every prefix; a longer prefix beats a shorter one.
type Override struct {
	Pattern     string
	Read, Write Threshold
}

// Rules decide when a key is hot and when it has cooled.
type Rules struct {
	// Read and Write are the default thresholds. Default: reads at 1,000/s or 5 % of
	// traffic, writes at 500/s or 5 %.
	Read, Write Threshold
	// MinRate keeps quiet keys from being hot by share alone: a key below this rate (of the
	// operation) is never hot by share. Default: 100/s.
	MinRate float64
	// MinSamples keeps keys seen in too few samples from turning hot: to turn hot, an
	// operation of a key counts towards a threshold, by rate or by share, only once its
	// count over the window stands for at least MinSamples samples of the key's weight
	// (Key.Weight); a hot key cools on its rates as they are. One sample of 1 in 100 reads
	// as 100 requests a second over a one-second window, enough by share for every key of
	// an agent that sees under 2,000 requests a second; five such samples (500/s) give a
	// rate known to about ±45 %. 0 is off. Default: 5.
	MinSamples int
	// CoolRatio: a hot key cools once it stays below CoolRatio × its threshold. In (0, 1).
	// Default: 0.7.
	CoolRatio float64
	// CoolTicks is how many evaluations in a row the key must stay below. Default: 10.
	CoolTicks int
	// Overrides apply to matching keys; see Override.
	Overrides []Override
}

// maxMinSamples bounds Rules.MinSamples.
const maxMinSamples = 1_000_000

// DefaultRules returns the rules with every default filled in.
func DefaultRules() Rules {
	return Rules{
		Read:       Threshold{Rate: 1000, Share: 0.05},
		Write:      Threshold{Rate: 500, Share: 0.05},
		MinRate:    100,
		MinSamples: 5,
		CoolRatio:  0.7,
		CoolTicks:  10,
	}
}

// Validate reports the first rule that is out of range, naming it.
func (r Rules) Validate() error {
	check := func(name string, t Threshold) error {
		if t.Rate < 0 {
			return fmt.Errorf("%s rate %v: must be ≥ 0", name, t.Rate)
		}
		if t.Share < 0 || t.Share > 1 {
			return fmt.Errorf("%s share %v: must be in [0, 1]", name, t.Share)
		}
		return nil
	}
	if err := check("read", r.Read); err != nil {
		return err
	}
	if err := check("write", r.Write); err != nil {
		return err
	}
	if r.MinSamples < 0 || r.MinSamples > maxMinSamples {
		return fmt.Errorf("min samples %d: must be in [0, %d]", r.MinSamples, maxMinSamples)
	}
	if !(r.CoolRatio > 0 && r.CoolRatio < 1) {
		return fmt.Errorf("cool ratio %v: must be in (0, 1)", r.CoolRatio)
	}
	if r.CoolTicks < 1 {
		return fmt.Errorf("cool ticks %d: must be ≥ 1", r.CoolTicks)
	}
	for i, o := range r.Overrides {
		if o.Pattern == "" || strings.Contains(strings.TrimSuffix(o.Pattern, "*"), "*") {
			return fmt.Errorf("override %d: pattern %q: must be a key or a prefix ending in *", i, o.Pattern)
		}
		if err := check(fmt.Sprintf("override %q read", o.Pattern), o.Read); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("override %q write", o.Pattern), o.Write); err != nil {
			return err
		}
	}
	return nil
}

// thresholds returns the read and write thresholds for key: the defaults, with the set
// fields of the best matching override in their place. An exact pattern beats every
// prefix, and a longer prefix beats a shorter one.
func (r *Rules) thresholds(key string) (read, write Threshold) {
	read, write = r.Read, r.Write
	best, bestLen := -1, -1
	for i, o := range r.Overrides {
		if p, prefix := strings.CutSuffix(o.Pattern, "*"); !prefix {
			if p == key {
				best = i
				break
			}
		} else if strings.HasPrefix(key, p) && len(p) > bestLen {
			best, bestLen = i, len(p)
		}
	}
	if best >= 0 {
		inherit(&read, r.Overrides[best].Read)
		inherit(&write, r.Overrides[best].Write)
	}
	return read, write
}

func inherit(dst *Threshold, o Threshold) {
	if o.Rate != 0 {
		dst.Rate = o.Rate
	}
	if o.Share != 0 {
		dst.Share = o.Share
	}
}

// level returns how far a rate is past a threshold: 1 is at it, 2 twice over. share is the
// rate's share of all traffic.
func (r *Rules) level(t Threshold, rate, share float64) float64 {
	l := 0.0
	if t.Rate > 0 {
		l = rate / t.Rate
	}
	if t.Share > 0 && rate >= r.MinRate {
		l = max(l, share/t.Share)
	}
	return l
}

// Level is the state of one key after an evaluation.
type Level struct {
	Key       Key
	ReadRate  float64
	WriteRate float64
	Share     float64 // of all traffic, reads and writes
	Level     float64 // ≥ 1: over a threshold
	Hot       bool
	HotSince  time.Time // zero unless Hot
	FirstOver time.Time // first evaluation of this episode over a threshold
	Cooling   int       // evaluations in a row below CoolRatio × threshold, while hot
}

// Change is a key turning hot or cool.
type Change struct {
	Key string
	Hot bool
	At  time.Time
	// Delay, for a key turning hot, is the time since the first evaluation that saw the key
	// over a threshold in its current tick alone: how long the window took to agree.
	Delay time.Duration
}

// Tracker keeps the hot state of ranked keys across evaluations: a key turns hot at the
// first evaluation over a threshold and cools after CoolTicks evaluations in a row below
// CoolRatio × the threshold (hysteresis, so a key hovering at the threshold does not flap).
// It is not safe for concurrent use.
type Tracker struct {
	rules  Rules
	states map[string]*state
}

type state struct {
	hot       bool
	since     time.Time
	firstOver time.Time
	below     int
	seen      bool // in the latest evaluation
}

// NewTracker returns a tracker with the rules, which must pass Validate.
func NewTracker(r Rules) (*Tracker, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("detector: rules: %w", err)
	}
	return &Tracker{rules: r, states: make(map[string]*state)}, nil
}

// Rules returns the tracker's rules.
func (t *Tracker) Rules() Rules { return t.rules }

// Update evaluates a snapshot: levels for every key in it, heaviest first, and the changes
// of hot state. Keys that left the snapshot count as below their threshold; their state is
// forgotten once they are cool, so the tracker holds no more than the ranked and hot keys.
func (t *Tracker) Update(s *Snapshot) ([]Level, []Change) {
	for _, st := range t.states {
		st.seen = false
	}
	total := s.Rate(s.Reads + s.Writes)
	levels := make([]Level, 0, len(s.Keys))
	var changes []Change
	for _, k := range s.Keys {
		lv := Level{Key: k, ReadRate: s.Rate(k.Reads), WriteRate: s.Rate(k.Writes)}
		if total > 0 {
			lv.Share = (lv.ReadRate + lv.WriteRate) / total
		}
		rt, wt := t.rules.thresholds(k.Key)
		tickLevel := 0.0
		if s.TickSpan > 0 {
			sec := s.TickSpan.Seconds()
			tickLevel = t.rules.both(rt, wt, float64(k.TickReads)/sec, float64(k.TickWrites)/sec, total)
		}
		st := t.states[k.Key]
		if st == nil {
			st = &state{}
			t.states[k.Key] = st
		}
		st.seen = true
		// To turn hot, an operation seen in fewer than MinSamples samples counts as no
		// traffic; a hot key cools on its rates as they are. That is a hysteresis on the
		// evidence: a key with about MinSamples samples a window would otherwise flap, in on
		// a window with enough of them and out on the next without (in the simulation of
		// TestMinSamplesSimulated, a key at 300/s turned hot 111 times in 10 minutes with
		// the floor on both, 11 times with it on turning hot only or without it). The
		// tick's level has no floor: it dates the start of an episode, and the time the
		// window then takes to gather the samples is part of the detection delay.
		if st.hot {
			lv.Level = t.rules.both(rt, wt, lv.ReadRate, lv.WriteRate, total)
		} else {
			readRate, writeRate := lv.ReadRate, lv.WriteRate
			floor := t.rules.floor(&k)
			if float64(k.Reads) < floor {
				readRate = 0
			}
			if float64(k.Writes) < floor {
				writeRate = 0
			}
			lv.Level = t.rules.both(rt, wt, readRate, writeRate, total)
		}
		if c, ok := t.step(st, lv.Level, tickLevel, s.At); ok {
			c.Key = k.Key
			changes = append(changes, c)
		}
		lv.Hot, lv.HotSince, lv.FirstOver, lv.Cooling = st.hot, st.since, st.firstOver, st.below
		levels = append(levels, lv)
	}
	for key, st := range t.states {
		if st.seen {
			continue
		}
		if c, ok := t.step(st, 0, 0, s.At); ok {
			c.Key = key
			changes = append(changes, c)
		}
		if !st.hot {
			delete(t.states, key)
		}
	}
	return levels, changes
}

// floor returns the least count of one operation of a key, over the window, that stands
// for MinSamples samples of the key's weight; 0 when the rule is off or the weight unknown.
func (r *Rules) floor(k *Key) float64 {
	return float64(r.MinSamples) * float64(k.Weight)
}

// both returns the higher of the read and write levels; total is the rate of all traffic.
func (r *Rules) both(rt, wt Threshold, readRate, writeRate, total float64) float64 {
	total = max(total, 1e-9)
	return max(r.level(rt, readRate, readRate/total), r.level(wt, writeRate, writeRate/total))
}

// step moves one key's state by one evaluation at window level l and tick level tl.
func (t *Tracker) step(st *state, l, tl float64, now time.Time) (Change, bool) {
	if (l >= 1 || tl >= 1) && st.firstOver.IsZero() && !st.hot {
		st.firstOver = now
	}
	switch {
	case l >= 1:
		st.below = 0
		if !st.hot {
			st.hot, st.since = true, now
			return Change{Hot: true, At: now, Delay: now.Sub(st.firstOver)}, true
		}
	case st.hot && l < t.rules.CoolRatio:
		st.below++
		if st.below >= t.rules.CoolTicks {
			st.hot, st.since, st.firstOver, st.below = false, time.Time{}, time.Time{}, 0
			return Change{Hot: false, At: now}, true
		}
	case st.hot:
		st.below = 0 // between the cool line and the threshold: stays hot
	case tl < 1:
		st.firstOver = time.Time{} // neither over: the episode did not start
	}
	return Change{}, false
}

// Hot returns the keys currently hot.
func (t *Tracker) Hot() int {
	n := 0
	for _, st := range t.states {
		if st.hot {
			n++
		}
	}
	return n
}
