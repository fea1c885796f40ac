package registry

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Window is one occurrence of an event: from Start (inclusive) to End (exclusive).
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Contains reports whether t is in [Start, End).
func (w Window) Contains(t time.Time) bool { return !t.Before(w.Start) && t.Before(w.End) }

// MaxLead is the longest lead an event may have.
const MaxLead = 7 * 24 * time.Hour

// maxScanDays bounds the search for the next or previous occurrence of a cron schedule.
// A cron expression that fires at all fires at least once in 8 years (29 February can be
// 8 years apart), so a search this long that finds nothing proves there is none.
const maxScanDays = 366*8 + 2

// recurKind is how an event repeats.
type recurKind uint8

const (
	once recurKind = iota
	daily
	weekly
	cronly
)

// recurrence is a parsed "recurrence" field.
type recurrence struct {
	kind recurKind
	// at says whether the time of day (and weekday) was written ("daily@19:30"); when
	// false they come from start.
	at     bool
	hour   int
	minute int
	day    time.Weekday
	cron   Cron
}

// parseRecurrence reads the recurrence field: "", "daily", "daily@HH:MM", "weekly",
// "weekly@DAY HH:MM" or "cron:EXPR".
func parseRecurrence(s string) (recurrence, error) {
	kw, arg, hasArg := strings.Cut(s, "@")
	if c, ok := strings.CutPrefix(s, "cron:"); ok {
		cr, err := ParseCron(c)
		if err != nil {
			return recurrence{}, err
		}
		return recurrence{kind: cronly, cron: cr}, nil
	}
	switch {
	case s == "":
		return recurrence{}, nil
	case kw == "daily" && !hasArg:
		return recurrence{kind: daily}, nil
	case kw == "weekly" && !hasArg:
		return recurrence{kind: weekly}, nil
	case kw == "daily":
		h, m, err := parseClock(arg)
		if err != nil {
			return recurrence{}, err
		}
		return recurrence{kind: daily, at: true, hour: h, minute: m}, nil
	case kw == "weekly":
		ds, clock, ok := strings.Cut(strings.TrimSpace(arg), " ")
		if !ok {
			return recurrence{}, fmt.Errorf("%q: want weekly@DAY HH:MM, such as weekly@sat 19:30", s)
		}
		d := -1
		for i, n := range dayNames {
			if strings.EqualFold(ds, n) || strings.EqualFold(ds, time.Weekday(i).String()) {
				d = i
			}
		}
		if d < 0 {
			return recurrence{}, fmt.Errorf("day %q: want sun, mon, tue, wed, thu, fri or sat", ds)
		}
		h, m, err := parseClock(strings.TrimSpace(clock))
		if err != nil {
			return recurrence{}, err
		}
		return recurrence{kind: weekly, at: true, hour: h, minute: m, day: time.Weekday(d)}, nil
	}
	return recurrence{}, fmt.Errorf("%q: want daily, daily@HH:MM, weekly, weekly@DAY HH:MM or cron:EXPR (5 fields), or nothing for a one-off event", s)
}

// parseClock reads "HH:MM" (24-hour).
func parseClock(s string) (h, m int, err error) {
	hs, ms, ok := strings.Cut(s, ":")
	if ok && len(hs) >= 1 && len(hs) <= 2 && len(ms) == 2 {
		h, err1 := strconv.Atoi(hs)
		m, err2 := strconv.Atoi(ms)
		if err1 == nil && err2 == nil && h >= 0 && h <= 23 && m >= 0 && m <= 59 && hs[0] != '+' && hs[0] != '-' && ms[0] != '+' && ms[0] != '-' {
			return h, m, nil
		}
	}
	return 0, 0, fmt.Errorf("time of day %q: want HH:MM from 00:00 to 23:59", s)
}

// Schedule is the timing of a valid event: its first window, how it repeats, in which
// zone, and its lead. It is immutable and safe for concurrent use; every method is pure
// and takes the time it answers for.
type Schedule struct {
	first Window
	dur   time.Duration
	lead  time.Duration
	rec   recurrence
	loc   *time.Location
	// The wall clock of daily and weekly occurrences.
	hour, minute, second, nsec int
}

// offsetProblem says what is wrong when t's UTC offset is not loc's at that instant, and
// the value to write instead (the same wall clock with loc's offset); "" when they agree.
func offsetProblem(t time.Time, loc *time.Location) string {
	_, off := t.Zone()
	there := t.In(loc)
	name, zoff := there.Zone()
	if off == zoff {
		return ""
	}
	fixed := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), loc)
	return fmt.Sprintf("%s: the offset %s is not %s's on that date, which is %s (%s): that instant is %s there, and the recurrence follows %s's clock; write %s",
		t.Format(time.RFC3339Nano), offset(off), loc, offset(zoff), name, there.Format("15:04:05"), loc, fixed.Format(time.RFC3339Nano))
}

// offset formats a UTC offset in seconds as RFC 3339 does: +02:00, -09:30, +00:00.
func offset(sec int) string {
	sign := '+'
	if sec < 0 {
		sign, sec = '-', -sec
	}
	s := fmt.Sprintf("%c%02d:%02d", sign, sec/3600, sec/60%60)
	if sec%60 != 0 {
		s += fmt.Sprintf(":%02d", sec%60)
	}
	return s
}

// newSchedule builds and checks the schedule of an event whose fields are known to be
// individually valid.
func newSchedule(start, end time.Time, lead time.Duration, rec recurrence, loc *time.Location) (*Schedule, error) {
	s := &Schedule{first: Window{start, end}, dur: end.Sub(start), lead: lead, rec: rec, loc: loc}
	if rec.kind == once {
		return s, nil
	}
	// Sub saturates: occurrences after the first are start + dur, so dur must be exact.
	if !start.Add(s.dur).Equal(end) {
		return nil, fmt.Errorf("occurrences last end − start: at most %v (about 292 years) with a recurrence", time.Duration(math.MaxInt64))
	}
	local := start.In(loc)
	s.hour, s.minute, s.second, s.nsec = local.Hour(), local.Minute(), local.Second(), local.Nanosecond()
	if rec.kind == weekly && !rec.at {
		s.rec.day = local.Weekday()
	}
	if rec.at {
		s.hour, s.minute, s.second, s.nsec = rec.hour, rec.minute, 0, 0
	}
	if rec.kind == cronly {
		s.second, s.nsec = 0, 0
	}
	if t, ok := s.nextStart(start.Add(-time.Nanosecond)); !ok || !t.Equal(start) {
		if !ok {
			return nil, fmt.Errorf("never fires")
		}
		return nil, fmt.Errorf("start %s (%s in %s) is not an occurrence of the schedule: the first occurrence is %s; move start there",
			start.Format(time.RFC3339), local.Format("Mon 15:04:05"), loc, t.Format(time.RFC3339))
	}
	return s, nil
}

// First returns the first occurrence.
func (s *Schedule) First() Window { return s.first }

// Lead returns how long before each occurrence the event arms.
func (s *Schedule) Lead() time.Duration { return s.lead }

// Recurring reports whether the event repeats.
func (s *Schedule) Recurring() bool { return s.rec.kind != once }

// Next returns the first occurrence that starts after t, and false when there is none.
func (s *Schedule) Next(t time.Time) (Window, bool) {
	st, ok := s.nextStart(t)
	return s.window(st), ok
}

// Last returns the latest occurrence that starts at or before t, and false when there is
// none (t is before the first one).
func (s *Schedule) Last(t time.Time) (Window, bool) {
	st, ok := s.prevStart(t)
	return s.window(st), ok
}

// window returns the occurrence that starts at st. A one-off event's is its first window,
// kept exactly: its end − start may exceed what a time.Duration holds.
func (s *Schedule) window(st time.Time) Window {
	if s.rec.kind == once {
		return s.first
	}
	return Window{st, st.Add(s.dur)}
}

// Armed reports whether the event is armed at now: some occurrence w has
// w.Start − lead ≤ now < w.End + coolDown. It returns the occurrence it is armed for:
// the one running or cooling at now (the latest to start, when windows overlap) or, when
// none is, the next one to start. A lead longer than the gap between occurrences arms the
// next one while the current one runs; the current one is still returned until its
// cool-down ends.
func (s *Schedule) Armed(now time.Time, coolDown time.Duration) (Window, bool) {
	st := s.state(now, coolDown)
	return st.w, st.armed
}

// armState is the armed state of a schedule over a span of time [from, until) in which
// it does not change.
type armState struct {
	from, until time.Time
	armed       bool
	w           Window
}

// Far ends of time for spans that do not end.
var (
	beginning = time.Unix(-1<<62, 0)
	forever   = time.Unix(1<<62, 0)
)

// state returns the armed state at now and the span around now in which it holds.
//
// Occurrences end in the order they start (they all last end − start), so when the
// latest one to start at or before now (cur) has cooled down, so have all before it; the
// event is then armed only for occurrences yet to start, the first of which (next) is
// the one reported.
func (s *Schedule) state(now time.Time, coolDown time.Duration) armState {
	st := armState{from: beginning, until: forever}
	next, hasNext := s.Next(now)
	if hasNext {
		st.until = next.Start
	}
	cur, hasCur := s.Last(now)
	if hasCur {
		st.from = cur.Start
		end := cur.End.Add(coolDown)
		if now.Before(end) {
			// Running or cooling: until the cool-down ends or the next one starts.
			st.armed, st.w = true, cur
			st.until = minTime(st.until, end)
			return st
		}
		st.from = maxTime(st.from, end)
	}
	if !hasNext {
		return st
	}
	if arm := next.Start.Add(-s.lead); now.Before(arm) {
		st.until = arm
	} else {
		st.armed, st.w = true, next
		st.from = maxTime(st.from, arm)
	}
	return st
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// nextStart returns the first occurrence start after t.
func (s *Schedule) nextStart(t time.Time) (time.Time, bool) {
	if s.rec.kind == once {
		return s.first.Start, s.first.Start.After(t)
	}
	if t.Before(s.first.Start) {
		t = s.first.Start.Add(-time.Nanosecond)
	}
	y, m, d := t.In(s.loc).Date()
	var best time.Time
	found := false
	for i := -1; i <= maxScanDays; i++ {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, time.UTC)
		s.each(day, func(c time.Time) {
			if c.After(t) && (!found || c.Before(best)) {
				best, found = c, true
			}
		})
		// A wall time skipped by a DST change moves forward by at most a few hours, so
		// the earliest occurrence is on the first day with one, or the day after.
		if found && i >= 0 {
			s.each(day.AddDate(0, 0, 1), func(c time.Time) {
				if c.After(t) && c.Before(best) {
					best = c
				}
			})
			return best, true
		}
		if s.rec.kind != cronly && i > 8 {
			break
		}
	}
	return time.Time{}, false
}

// prevStart returns the latest occurrence start at or before t, not before the first.
func (s *Schedule) prevStart(t time.Time) (time.Time, bool) {
	if t.Before(s.first.Start) {
		return time.Time{}, false
	}
	if s.rec.kind == once {
		return s.first.Start, true
	}
	y, m, d := t.In(s.loc).Date()
	fy, fm, fd := s.first.Start.In(s.loc).Date()
	firstDay := time.Date(fy, fm, fd, 12, 0, 0, 0, time.UTC)
	var best time.Time
	found := false
	for i := 1; i >= -maxScanDays; i-- {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, time.UTC)
		if day.Before(firstDay.AddDate(0, 0, -1)) {
			break
		}
		s.each(day, func(c time.Time) {
			if !c.After(t) && !c.Before(s.first.Start) && (!found || c.After(best)) {
				best, found = c, true
			}
		})
		if found && i <= 0 {
			s.each(day.AddDate(0, 0, -1), func(c time.Time) {
				if !c.After(t) && !c.Before(s.first.Start) && c.After(best) {
					best = c
				}
			})
			return best, true
		}
	}
	// Unreachable for a valid schedule: the first start is an occurrence ≤ t.
	return s.first.Start, true
}

// each calls fn with every occurrence start whose wall-clock date is day (a UTC noon
// standing for a calendar date).
func (s *Schedule) each(day time.Time, fn func(time.Time)) {
	y, m, d := day.Date()
	switch s.rec.kind {
	case daily:
		fn(resolve(y, m, d, s.hour, s.minute, s.second, s.nsec, s.loc))
	case weekly:
		if day.Weekday() == s.rec.day {
			fn(resolve(y, m, d, s.hour, s.minute, s.second, s.nsec, s.loc))
		}
	case cronly:
		if s.rec.cron.matchesDay(y, m, d) {
			s.rec.cron.times(func(h, mi int) bool {
				fn(resolve(y, m, d, h, mi, 0, 0, s.loc))
				return true
			})
		}
	}
}

// resolve turns a wall-clock time in loc into an instant, with defined answers where a
// DST change makes the wall clock skip or repeat:
//
//   - a skipped wall time (02:30 on a spring-forward day where 02:00 jumps to 03:00)
//     is read with the offset in force before the change, so it lands as far after the
//     jump as it was after its start: 02:30 becomes 03:30;
//   - a repeated wall time (01:30 on a fall-back day) is the first of the two instants.
//
// It assumes no two offset changes within a day of each other, true of every IANA zone.
func resolve(y int, mo time.Month, d, h, mi, sec, nsec int, loc *time.Location) time.Time {
	naive := time.Date(y, mo, d, h, mi, sec, nsec, time.UTC)
	_, before := naive.Add(-26 * time.Hour).In(loc).Zone()
	_, after := naive.Add(26 * time.Hour).In(loc).Zone()
	var best time.Time
	found := false
	for _, off := range [2]int{before, after} {
		t := naive.Add(-time.Duration(off) * time.Second)
		l := t.In(loc)
		ly, lm, ld := l.Date()
		if ly == y && lm == mo && ld == d && l.Hour() == h && l.Minute() == mi && l.Second() == sec {
			if !found || t.Before(best) {
				best, found = t, true
			}
		}
	}
	if !found {
		// Skipped: use the offset before the change.
		best = naive.Add(-time.Duration(before) * time.Second)
	}
	return best.In(loc)
}
