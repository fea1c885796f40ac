package registry

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the DST tests must not depend on the machine's zoneinfo
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestParseCron(t *testing.T) {
	cases := []struct {
		expr string
		want string // canonical form; "" for an error
	}{
		{"30 19 * * 6", "30 19 * * 6"},
		{"30 19 * * sat", "30 19 * * 6"},
		{"0 12 * * mon-fri", "0 12 * * 1-5"},
		{"*/15 * * * *", "0,15,30,45 * * * *"},
		{"0-30/10 8,20 1 jan,JUL *", "0,10,20,30 8,20 1 1,7 *"},
		{"5/20 * * * *", "5,25,45 * * * *"},
		{"0 0 * * 7", "0 0 * * 0"},
		{"0 0 * * 0,7", "0 0 * * 0"},
		{"0 0 */2 * *", "0 0 */31,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31 * *"},
		{"@daily", "0 0 * * *"},
		{"@WEEKLY", "0 0 * * 0"},
		{"  30 19 * * 6  ", "30 19 * * 6"},
		{"0 0 1-31 * *", "0 0 1-31 * *"},
		{"0 0 * * 0-6", "0 0 * * 0-6"},
		{"", ""},
		{"* * * *", ""},
		{"* * * * * *", ""},
		{"60 * * * *", ""},
		{"* 24 * * *", ""},
		{"* * 0 * *", ""},
		{"* * 32 * *", ""},
		{"* * * 13 *", ""},
		{"* * * * 8", ""},
		{"5-1 * * * *", ""},
		{"*/0 * * * *", ""},
		{"*/x * * * *", ""},
		{"1,,2 * * * *", ""},
		{"+1 * * * *", ""},
		{"-1 * * * *", ""},
		{"* * * foo *", ""},
		{"@reboot", ""},
		{"L * * * *", ""},
	}
	for _, c := range cases {
		got, err := ParseCron(c.expr)
		if c.want == "" {
			if err == nil {
				t.Errorf("ParseCron(%q) = %v; want an error", c.expr, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseCron(%q): %v", c.expr, err)
			continue
		}
		if s := got.String(); s != c.want {
			t.Errorf("ParseCron(%q).String() = %q; want %q", c.expr, s, c.want)
		}
		again, err := ParseCron(got.String())
		if err != nil || again != got {
			t.Errorf("ParseCron(%q) does not survive a round trip through %q: %v", c.expr, got.String(), err)
		}
	}
}

func TestCronDayRule(t *testing.T) {
	// 2026-03-01 is a Sunday, 2026-03-13 a Friday.
	cases := []struct {
		expr string
		day  int
		want bool
	}{
		{"0 0 13 * 5", 13, true}, // both restricted: either matches
		{"0 0 13 * 5", 6, true},  // a Friday
		{"0 0 13 * 5", 7, false},
		{"0 0 13 * *", 6, false}, // dow unrestricted: only dom counts
		{"0 0 * * 5", 13, true},
		{"0 0 * * 5", 12, false},
		{"0 0 */2 * 5", 6, false}, // a '*' field is unrestricted: both must match
		{"0 0 */2 * 5", 13, true},
	}
	for _, c := range cases {
		cr, err := ParseCron(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := cr.Matches(time.Date(2026, 3, c.day, 0, 0, 0, 0, time.UTC)); got != c.want {
			t.Errorf("%q on 2026-03-%02d: got %v; want %v", c.expr, c.day, got, c.want)
		}
	}
}

// sched builds the schedule of a test event.
func sched(t *testing.T, start, end, lead, rec, zone string) *Schedule {
	t.Helper()
	e := testEvent("e")
	e.Start, e.End = mustTime(t, start), mustTime(t, end)
	d, err := time.ParseDuration(lead)
	if err != nil {
		t.Fatal(err)
	}
	e.Lead, e.Recurrence, e.Zone = Duration(d), rec, zone
	s, err := e.Schedule()
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	return s
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestArmedOnce(t *testing.T) {
	s := sched(t, "2026-03-01T19:30:00+01:00", "2026-03-01T21:30:00+01:00", "15m", "", "")
	cd := 5 * time.Minute
	cases := []struct {
		at   string
		want bool
	}{
		{"2026-03-01T19:14:59+01:00", false},
		{"2026-03-01T19:15:00+01:00", true}, // start − lead
		{"2026-03-01T20:00:00+01:00", true},
		{"2026-03-01T21:34:59+01:00", true},
		{"2026-03-01T21:35:00+01:00", false}, // end + cool-down
		{"2026-03-02T19:20:00+01:00", false}, // no recurrence
	}
	for _, c := range cases {
		if _, got := s.Armed(mustTime(t, c.at), cd); got != c.want {
			t.Errorf("Armed(%s) = %v; want %v", c.at, got, c.want)
		}
	}
}

// TestDailyAcrossDST: a daily 19:30 event in Madrid stays at 19:30 local time across the
// spring (29 March 2026) and autumn (25 October 2026) changes.
func TestDailyAcrossDST(t *testing.T) {
	mad := mustLoc(t, "Europe/Madrid")
	s := sched(t, "2026-03-27T19:30:00+01:00", "2026-03-27T21:30:00+01:00", "30m", "daily", "Europe/Madrid")
	for _, day := range []string{"2026-03-28", "2026-03-29", "2026-03-30", "2026-10-24", "2026-10-25", "2026-10-26"} {
		local, _ := time.ParseInLocation("2006-01-02 15:04", day+" 19:30", mad)
		w, ok := s.Next(local.Add(-time.Hour))
		if !ok || !w.Start.Equal(local) || w.End.Sub(w.Start) != 2*time.Hour {
			t.Errorf("occurrence on %s: got %v–%v; want %v for 2h", day, w.Start, w.End, local)
		}
		if got := w.Start.In(mad).Format("15:04"); got != "19:30" {
			t.Errorf("occurrence on %s starts at %s local; want 19:30", day, got)
		}
		// Armed from 19:00 local, not 18:00 or 20:00.
		if _, ok := s.Armed(local.Add(-30*time.Minute), 0); !ok {
			t.Errorf("%s 19:00 local: not armed; want armed (lead 30m)", day)
		}
		if _, ok := s.Armed(local.Add(-31*time.Minute), 0); ok {
			t.Errorf("%s 18:59 local: armed; want not yet", day)
		}
	}
	// Last: the latest occurrence at or before a time.
	w, ok := s.Last(mustTime(t, "2026-03-30T10:00:00+02:00"))
	if want := mustTime(t, "2026-03-29T19:30:00+02:00"); !ok || !w.Start.Equal(want) {
		t.Errorf("Last before 30 March 10:00: got %v; want %v", w.Start, want)
	}
	if _, ok := s.Last(mustTime(t, "2026-03-27T19:29:59+01:00")); ok {
		t.Errorf("Last before the first occurrence: got one; want none")
	}
}

// TestSkippedAndRepeatedWallTime: in New York, 8 March 2026 02:00 EST jumps to 03:00 EDT
// and 1 November 2026 02:00 EDT falls back to 01:00 EST. A daily 02:30 event runs at
// 03:30 EDT on the spring-forward day (shifted by the gap); a daily 01:30 event runs once,
// at the first 01:30 (EDT), on the fall-back day.
func TestSkippedAndRepeatedWallTime(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	s := sched(t, "2026-03-06T02:30:00-05:00", "2026-03-06T03:00:00-05:00", "0s", "daily", "America/New_York")
	want := []string{
		"2026-03-07T02:30:00-05:00",
		"2026-03-08T03:30:00-04:00", // 02:30 does not exist: one gap later
		"2026-03-09T02:30:00-04:00",
	}
	at := mustTime(t, "2026-03-06T02:30:00-05:00")
	for _, w := range want {
		got, ok := s.Next(at)
		if !ok || !got.Start.Equal(mustTime(t, w)) {
			t.Fatalf("Next(%v) = %v; want %s", at, got.Start, w)
		}
		if got.End.Sub(got.Start) != 30*time.Minute {
			t.Errorf("occurrence at %v lasts %v; want 30m", got.Start, got.End.Sub(got.Start))
		}
		at = got.Start
	}

	// "daily@02:30" may start on the spring-forward day itself, at the moved time.
	s = sched(t, "2026-03-08T03:30:00-04:00", "2026-03-08T04:00:00-04:00", "0s", "daily@02:30", "America/New_York")
	if w, _ := s.Next(s.First().Start); !w.Start.Equal(mustTime(t, "2026-03-09T02:30:00-04:00")) {
		t.Errorf("daily@02:30 after the spring-forward day: %v; want 02:30 EDT the next day", w.Start)
	}

	s = sched(t, "2026-10-30T01:30:00-04:00", "2026-10-30T02:00:00-04:00", "0s", "daily", "America/New_York")
	got, _ := s.Next(mustTime(t, "2026-10-31T12:00:00-04:00"))
	if want := mustTime(t, "2026-11-01T01:30:00-04:00"); !got.Start.Equal(want) {
		t.Errorf("fall-back day: got %v; want the first 01:30, %v", got.Start.In(ny), want)
	}
	next, _ := s.Next(got.Start)
	if want := mustTime(t, "2026-11-02T01:30:00-05:00"); !next.Start.Equal(want) {
		t.Errorf("after the fall-back day's occurrence: got %v; want %v (once a day)", next.Start.In(ny), want)
	}

	// A cron every 30 minutes across the gap: 02:00 and 02:30 land on 03:00 and 03:30,
	// which also occur in their own right; each instant comes once.
	s = sched(t, "2026-03-08T01:00:00-05:00", "2026-03-08T01:10:00-05:00", "0s", "cron:*/30 * * * *", "America/New_York")
	var starts []string
	at = mustTime(t, "2026-03-08T00:59:00-05:00")
	for range 5 {
		w, ok := s.Next(at)
		if !ok {
			t.Fatal("no next occurrence")
		}
		starts = append(starts, w.Start.In(ny).Format("15:04 MST"))
		at = w.Start
	}
	wantStarts := "[01:00 EST 01:30 EST 03:00 EDT 03:30 EDT 04:00 EDT]"
	if got := fmtList(starts); got != wantStarts {
		t.Errorf("*/30 across spring forward: got %s; want %s", got, wantStarts)
	}
}

func fmtList(s []string) string {
	out := "["
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}

func TestWeeklyAndCron(t *testing.T) {
	mad := mustLoc(t, "Europe/Madrid")
	// Saturday 28 March 2026, 19:30 CET; the next Saturday is in CEST.
	for _, rec := range []string{"weekly", "weekly@sat 19:30", "weekly@Saturday 19:30", "cron:30 19 * * 6", "cron:30 19 * * sat"} {
		s := sched(t, "2026-03-28T19:30:00+01:00", "2026-03-28T20:30:00+01:00", "1h", rec, "Europe/Madrid")
		w, ok := s.Next(mustTime(t, "2026-03-28T19:30:00+01:00"))
		if want := time.Date(2026, 4, 4, 19, 30, 0, 0, mad); !ok || !w.Start.Equal(want) {
			t.Errorf("%s: next = %v; want %v", rec, w.Start, want)
		}
		if _, ok := s.Armed(time.Date(2026, 4, 4, 18, 30, 0, 0, mad), 0); !ok {
			t.Errorf("%s: not armed an hour before the second occurrence", rec)
		}
		if _, ok := s.Armed(time.Date(2026, 4, 1, 19, 30, 0, 0, mad), 0); ok {
			t.Errorf("%s: armed on a Wednesday", rec)
		}
	}
	// Cron on a rare day: 29 February, years apart.
	s := sched(t, "2028-02-29T12:00:00Z", "2028-02-29T13:00:00Z", "0s", "cron:0 12 29 2 *", "UTC")
	w, ok := s.Next(mustTime(t, "2028-03-01T00:00:00Z"))
	if want := mustTime(t, "2032-02-29T12:00:00Z"); !ok || !w.Start.Equal(want) {
		t.Errorf("29 February: next = %v; want %v", w.Start, want)
	}
	w, ok = s.Last(mustTime(t, "2031-01-01T00:00:00Z"))
	if want := mustTime(t, "2028-02-29T12:00:00Z"); !ok || !w.Start.Equal(want) {
		t.Errorf("29 February: last = %v; want %v", w.Start, want)
	}
}

func TestStartMustBeAnOccurrence(t *testing.T) {
	e := testEvent("e")
	e.Start = mustTime(t, "2026-03-28T18:00:00+01:00")
	e.End = e.Start.Add(time.Hour)
	e.Recurrence, e.Zone = "cron:30 19 * * 6", "Europe/Madrid"
	err := e.Validate()
	if err == nil {
		t.Fatal("start 18:00 with cron 19:30: no error; want one")
	}
	if want := "first occurrence is 2026-03-28T19:30:00+01:00"; !contains(err.Error(), want) {
		t.Errorf("error %q; want it to say %q", err, want)
	}
	e.Recurrence = "daily@19:30"
	if e.Validate() == nil {
		t.Error("start 18:00 with daily@19:30: no error; want one")
	}
}

// TestArmedOverlapping: windows longer than the period keep the event armed, reporting
// the latest occurrence.
func TestArmedOverlapping(t *testing.T) {
	s := sched(t, "2026-01-01T00:00:00Z", "2026-01-02T06:00:00Z", "0s", "daily", "UTC")
	w, ok := s.Armed(mustTime(t, "2026-01-02T03:00:00Z"), 0)
	if want := mustTime(t, "2026-01-02T00:00:00Z"); !ok || !w.Start.Equal(want) {
		t.Errorf("overlap: armed %v with %v; want armed with the occurrence of %v", ok, w.Start, want)
	}
}

// TestArmState: the cached state spans agree with Armed at every minute of a week.
func TestArmState(t *testing.T) {
	s := sched(t, "2026-03-27T19:30:00+01:00", "2026-03-27T21:30:00+01:00", "45m", "cron:30 19 * * 5,6", "Europe/Madrid")
	cd := 10 * time.Minute
	at := mustTime(t, "2026-03-26T00:00:00+01:00")
	for range 7 * 24 * 60 {
		st := s.state(at, cd)
		w, armed := s.Armed(at, cd)
		if st.armed != armed || (armed && !st.w.Start.Equal(w.Start)) || at.Before(st.from) || !at.Before(st.until) {
			t.Fatalf("state(%v) = %+v; Armed says %v %v", at, st, armed, w)
		}
		for _, edge := range []time.Time{st.from, st.until.Add(-time.Nanosecond)} {
			if edge.Equal(beginning) || edge.Equal(forever.Add(-time.Nanosecond)) {
				continue
			}
			if _, a := s.Armed(edge, cd); a != st.armed {
				t.Fatalf("state(%v) holds over [%v, %v) but Armed(%v) = %v", at, st.from, st.until, edge, a)
			}
		}
		at = at.Add(time.Minute)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestVeryLongEvent: an event may last longer than a time.Duration holds (about 292
// years; "end": "9999-12-31T23:59:59Z" for "until further notice"). A one-off event keeps
// its end exactly; a recurring one that long is refused rather than cut short in silence.
func TestVeryLongEvent(t *testing.T) {
	start, end := "2026-01-01T00:00:00Z", "9999-12-31T23:59:59Z"
	s := sched(t, start, end, "0s", "", "")
	at := mustTime(t, "2400-01-01T00:00:00Z")
	w, ok := s.Armed(at, 0)
	if !ok || !w.End.Equal(mustTime(t, end)) {
		t.Errorf("Armed(%v) = %v, ends %v; want armed, ending %s", at, ok, w.End, end)
	}
	if w, _ := s.Last(at); !w.End.Equal(mustTime(t, end)) {
		t.Errorf("Last(%v) ends %v; want %s", at, w.End, end)
	}

	e := testEvent("e")
	e.Start, e.End = mustTime(t, start), mustTime(t, end)
	e.Recurrence, e.Zone = "daily", "UTC"
	if err := e.Validate(); err == nil || !contains(err.Error(), "292 years") {
		t.Errorf("daily event lasting 8000 years: error %v; want one saying occurrences last at most 292 years", err)
	}
}

// armedByDefinition is the occurrence an event is armed for at now, found by scanning
// occ (every occurrence, by start): the latest one running or cooling, or else the
// soonest one in its lead.
func armedByDefinition(occ []Window, lead, cd time.Duration, now time.Time) (Window, bool) {
	var cur, next Window
	hasCur, hasNext := false, false
	for _, w := range occ {
		if !w.Start.After(now) && now.Before(w.End.Add(cd)) {
			cur, hasCur = w, true
		}
		if w.Start.After(now) && !now.Before(w.Start.Add(-lead)) && !hasNext {
			next, hasNext = w, true
		}
	}
	if hasCur {
		return cur, true
	}
	return next, hasNext
}

// TestArmedPicksRunningOccurrence: when arming windows overlap (a lead longer than the
// gap between occurrences), Armed and the cached state report the occurrence running or
// cooling, and the next one only once that has cooled down. Checked against a scan of
// the occurrences at every boundary (± 1ns) and every 13 minutes over ten days.
func TestArmedPicksRunningOccurrence(t *testing.T) {
	week := 7 * 24 * time.Hour
	cases := []struct {
		name                        string
		start, end, lead, rec, zone string
		cd                          time.Duration
	}{
		{"weekly, lead a week", "2026-03-01T19:30:00+01:00", "2026-03-01T21:30:00+01:00", "168h", "weekly", "Europe/Madrid", time.Minute},
		{"daily, lead 23h", "2026-03-01T19:30:00Z", "2026-03-01T21:30:00Z", "23h", "daily", "UTC", 10 * time.Minute},
		{"daily, lead a week", "2026-03-01T19:30:00Z", "2026-03-01T21:30:00Z", "168h", "daily", "UTC", 5 * time.Minute},
		{"daily, 30h windows", "2026-03-01T00:00:00Z", "2026-03-02T06:00:00Z", "1h", "daily", "UTC", 0},
		{"cron, short lead", "2026-03-27T19:30:00+01:00", "2026-03-27T21:30:00+01:00", "45m", "cron:30 19 * * 5,6", "Europe/Madrid", 10 * time.Minute},
		{"once", "2026-03-01T19:30:00+01:00", "2026-03-01T21:30:00+01:00", "168h", "", "", time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := sched(t, c.start, c.end, c.lead, c.rec, c.zone)
			first := s.First()
			horizon := first.Start.Add(10 * 24 * time.Hour)
			occ := []Window{first}
			for w := first; w.Start.Before(horizon.Add(2 * week)); {
				var ok bool
				if w, ok = s.Next(w.Start); !ok {
					break
				}
				occ = append(occ, w)
			}
			var times []time.Time
			for _, w := range occ {
				for _, b := range []time.Time{w.Start.Add(-s.Lead()), w.Start, w.End, w.End.Add(c.cd)} {
					times = append(times, b.Add(-time.Nanosecond), b, b.Add(time.Nanosecond))
				}
			}
			for at := first.Start.Add(-8 * 24 * time.Hour); at.Before(horizon); at = at.Add(13 * time.Minute) {
				times = append(times, at)
			}
			for _, at := range times {
				if !at.Before(horizon) {
					continue
				}
				want, wantOK := armedByDefinition(occ, s.Lead(), c.cd, at)
				w, ok := s.Armed(at, c.cd)
				if ok != wantOK || (ok && !w.Start.Equal(want.Start)) {
					t.Fatalf("Armed(%v) = %v, %v; want %v, %v", at, w.Start, ok, want.Start, wantOK)
				}
				st := s.state(at, c.cd)
				if st.armed != ok || (ok && !st.w.Start.Equal(w.Start)) || at.Before(st.from) || !at.Before(st.until) {
					t.Fatalf("state(%v) = %+v; Armed says %v %v", at, st, ok, w.Start)
				}
				for _, edge := range []time.Time{st.from, st.until.Add(-time.Nanosecond)} {
					if edge.Equal(beginning) || edge.Equal(forever.Add(-time.Nanosecond)) {
						continue
					}
					if ew, eok := armedByDefinition(occ, s.Lead(), c.cd, edge); eok != st.armed || (eok && !ew.Start.Equal(st.w.Start)) {
						t.Fatalf("state(%v) holds %v %v over [%v, %v), but at %v the event is armed %v for %v",
							at, st.armed, st.w.Start, st.from, st.until, edge, eok, ew.Start)
					}
				}
			}
		})
	}
}

// TestRecurringStartOffset: a recurring event's start whose UTC offset is not the zone's
// at that date (a winter offset in April) would move every occurrence by an hour; it is
// refused with the offset given, the zone's, and the value to write.
func TestRecurringStartOffset(t *testing.T) {
	e := Event{ID: "w", Patterns: []string{"k"}, Recurrence: "weekly", Zone: "Europe/Berlin",
		Start: mustTime(t, "2026-04-04T19:30:00+01:00"), End: mustTime(t, "2026-04-04T21:30:00+01:00")}
	err := e.Validate()
	for _, want := range []string{"start", "+01:00", "+02:00", "write 2026-04-04T19:30:00+02:00"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(weekly, Europe/Berlin, start +01:00 in April) = %v; want an error with %q", err, want)
		}
	}
	e.Start, e.End = mustTime(t, "2026-04-04T19:30:00+02:00"), mustTime(t, "2026-04-04T21:30:00+02:00")
	if err := e.Validate(); err != nil {
		t.Errorf("Validate with the zone's offset: %v", err)
	}
	// A one-off event's start is an instant: any offset.
	e.Recurrence, e.Zone = "", ""
	e.Start, e.End = mustTime(t, "2026-04-04T19:30:00+01:00"), mustTime(t, "2026-04-04T21:30:00+01:00")
	if err := e.Validate(); err != nil {
		t.Errorf("Validate of a one-off event with offset +01:00: %v", err)
	}
}
