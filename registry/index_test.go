package registry

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// indexEvents: a match with an exact key, a sale with a prefix and a glob, both armed
// around 2026-03-01 19:30–21:30 UTC+1 with a 15m lead.
func indexEvents() []Event {
	match := testEvent("match42")
	match.Patterns = []string{"score:match42", "odds:match42"}
	match.Mitigations = []string{"l1", "copies"}
	sale := testEvent("sale")
	sale.Patterns = []string{"sale:sku:*", "cart:*:count"}
	sale.ExpectedReadRate, sale.ExpectedWriteRate = 1000, 30000
	sale.Mitigations = []string{"sharded_counter"}
	later := testEvent("later")
	later.Start = later.Start.Add(24 * time.Hour)
	later.End = later.End.Add(24 * time.Hour)
	later.Patterns = []string{"score:match42"}
	return []Event{match, sale, later}
}

func newIndex(t testing.TB, evs []Event, cd time.Duration) *Index {
	t.Helper()
	x, err := NewIndex(evs, IndexOptions{CoolDown: cd})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestIndexMatch(t *testing.T) {
	x := newIndex(t, indexEvents(), 5*time.Minute)
	start := indexEvents()[0].Start
	cases := []struct {
		key  string
		at   time.Duration // from start
		want []string
	}{
		{"score:match42", -16 * time.Minute, nil},
		{"score:match42", -15 * time.Minute, []string{"match42"}},
		{"score:match42", 2*time.Hour + 4*time.Minute, []string{"match42"}},
		{"score:match42", 2*time.Hour + 5*time.Minute, nil},
		{"score:match42", 24 * time.Hour, []string{"later"}},
		{"odds:match42", 0, []string{"match42"}},
		{"score:match4", 0, nil},
		{"sale:sku:17", time.Hour, []string{"sale"}},
		{"sale:sku:", time.Hour, []string{"sale"}},
		{"sale:sk", time.Hour, nil},
		{"cart:99:count", time.Hour, []string{"sale"}},
		{"cart:99:counts", time.Hour, nil},
	}
	for _, c := range cases {
		got := x.Match(c.key, start.Add(c.at), nil)
		if !slices.Equal(got, c.want) {
			t.Errorf("Match(%q, start%+v) = %q; want %q", c.key, c.at, got, c.want)
		}
	}
}

func TestIndexPredicted(t *testing.T) {
	x := newIndex(t, indexEvents(), 0)
	start := indexEvents()[0].Start
	if got := x.Predicted(start.Add(-time.Hour)); len(got) != 0 {
		t.Errorf("Predicted an hour before: %v; want nothing (lead is 15m)", got)
	}
	got := x.Predicted(start.Add(-10 * time.Minute))
	if len(got) != 2 || got[0].Key != "odds:match42" || got[1].Key != "score:match42" {
		t.Fatalf("Predicted 10m before = %+v; want the two exact keys of match42", got)
	}
	p := got[1]
	if !slices.Equal(p.Events, []string{"match42"}) || p.ExpectedReadRate != 50000 || p.Auto ||
		!slices.Equal(p.Kinds, []mitigate.Kind{mitigate.L1, mitigate.Copies}) || p.Counter {
		t.Errorf("prediction %+v; want match42's rates and kinds", p)
	}
	// Glob keys are predicted only when they show up.
	sp, ok := x.Predict("cart:7:count", start)
	if !ok || !sp.Counter || sp.ExpectedWriteRate != 30000 || !slices.Equal(sp.Kinds, []mitigate.Kind{mitigate.ShardedCounter}) {
		t.Errorf("Predict(cart:7:count) = %+v, %v; want the sale's counter prediction", sp, ok)
	}
	if _, ok := x.Predict("cart:7:count", start.Add(-time.Hour)); ok {
		t.Error("Predict before the lead: predicted; want not")
	}
	if arm := x.Armed(start); len(arm) != 2 || arm[0].Event.ID != "match42" || !arm[0].From.Equal(start.Add(-15*time.Minute)) ||
		!arm[0].Until.Equal(start.Add(2*time.Hour+DefaultCoolDown)) {
		t.Errorf("Armed(start) = %+v; want match42 and sale, from start−15m to end+60s", arm)
	}
}

func TestIndexErrors(t *testing.T) {
	if _, err := NewIndex([]Event{testEvent("a"), testEvent("a")}, IndexOptions{}); err == nil {
		t.Error("NewIndex with a duplicate id: no error")
	}
	if _, err := NewIndex([]Event{testEvent("")}, IndexOptions{}); err == nil {
		t.Error("NewIndex without an id: no error")
	}
}

// benchIndex builds n events: a third exact, a third prefixes, a third globs.
func benchIndex(b testing.TB, n int) (*Index, time.Time) {
	var evs []Event
	for i := range n {
		e := testEvent(fmt.Sprintf("ev%04d", i))
		switch i % 3 {
		case 0:
			e.Patterns = []string{fmt.Sprintf("score:match%d", i)}
		case 1:
			e.Patterns = []string{fmt.Sprintf("sale:%d:sku:*", i)}
		default:
			e.Patterns = []string{fmt.Sprintf("feed:%d:*:post?", i)}
		}
		evs = append(evs, e)
	}
	return newIndex(b, evs, 0), evs[0].Start
}

func TestIndexMatchAllocs(t *testing.T) {
	x, now := benchIndex(t, 1000)
	buf := make([]string, 0, 8)
	keys := []string{"score:match300", "sale:301:sku:9", "feed:302:x:post1", "unmatched:key"}
	for _, k := range keys {
		x.Match(k, now, buf[:0]) // warm the armed-state cache
	}
	n := testing.AllocsPerRun(100, func() {
		for _, k := range keys {
			buf = x.Match(k, now, buf[:0])
		}
	})
	if n != 0 {
		t.Errorf("Match allocates %v times per 4 keys; want 0", n)
	}
	if got := x.Match("feed:302:x:post1", now, nil); !slices.Equal(got, []string{"ev0302"}) {
		t.Errorf("Match(feed:302:x:post1) = %v; want [ev0302]", got)
	}
}

var sinkIDs []string

// BenchmarkIndexMatch: 1,000 events, keys that hit each kind of pattern and one that
// hits none.
func BenchmarkIndexMatch(b *testing.B) {
	x, now := benchIndex(b, 1000)
	keys := []string{"score:match300", "sale:301:sku:9", "feed:302:x:post1", "unmatched:key:with:some:length"}
	buf := make([]string, 0, 8)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = x.Match(keys[i&3], now, buf[:0])
		i++
	}
	sinkIDs = buf
}

// BenchmarkIndexMatchNaive is the baseline: every pattern of every event, matched with
// MatchGlob.
func BenchmarkIndexMatchNaive(b *testing.B) {
	x, now := benchIndex(b, 1000)
	keys := []string{"score:match300", "sale:301:sku:9", "feed:302:x:post1", "unmatched:key:with:some:length"}
	buf := make([]string, 0, 8)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = buf[:0]
		k := keys[i&3]
		for _, en := range x.entries {
			for _, p := range en.c.patterns {
				if MatchGlob(p.Source, k) && x.armed(en, now).armed {
					buf = append(buf, en.c.ev.ID)
				}
			}
		}
		i++
	}
	sinkIDs = buf
}

// TestIndexMatchEmptyKey: Redis's "**" (and "***") does not match the empty key, which
// Redis allows; the index must agree with Pattern.Match and MatchGlob.
func TestIndexMatchEmptyKey(t *testing.T) {
	e := testEvent("broad")
	e.Patterns, e.AllowBroad = []string{"**"}, true
	x := newIndex(t, []Event{e}, 0)
	p, _ := CompilePattern("**")
	for _, key := range []string{"", "k"} {
		got := len(x.Match(key, e.Start, nil)) == 1
		if want := MatchGlob("**", key); got != want || p.Match(key) != want {
			t.Errorf("%q: index match %v, Pattern.Match %v; want %v (as Redis)", key, got, p.Match(key), want)
		}
	}
}

// TestIndexArmingBoundaries walks one Index (and its cached armed states) and a Tracker
// forward across the boundaries of a daily event whose lead (23h) arms the next occurrence
// while the current one runs, beside one with a short lead (15m). At each boundary, and
// 1ns before it, it checks Armed, Match, the cached span and the report, then walks back.
func TestIndexArmingBoundaries(t *testing.T) {
	long, short := testEvent("long"), testEvent("short")
	for i, e := range []*Event{&long, &short} {
		e.Start = time.Date(2026, 3, 1, 19, 30, 0, 0, time.UTC)
		e.End = e.Start.Add(2 * time.Hour)
		e.Recurrence, e.Zone = "daily", "UTC"
		e.Patterns = []string{"score:" + e.ID}
		e.Lead = Duration([]time.Duration{23 * time.Hour, 15 * time.Minute}[i])
	}
	const cd = 10 * time.Minute
	x := newIndex(t, []Event{long, short}, cd)
	tr, _ := NewTracker(TrackerOptions{})
	s := long.Start.Add(24 * time.Hour) // the occurrence walked across; the previous one starts a day earlier
	day := 24 * time.Hour

	// want is an event's expected state: its report's state and occurrence (relative to
	// s); armed follows from the state.
	type want struct {
		state string
		occ   time.Duration
	}
	steps := []struct {
		name        string
		at          time.Duration // from s
		long, short want
	}{
		{"previous running", -22*time.Hour - time.Minute, want{"running", -day}, want{"running", -day}},
		{"previous end", -22 * time.Hour, want{"cooling", -day}, want{"cooling", -day}},
		{"previous cool-down end", -22*time.Hour + cd, want{"armed", 0}, want{"over", -day}},
		{"start − short lead", -15 * time.Minute, want{"armed", 0}, want{"armed", 0}},
		{"start", 0, want{"running", 0}, want{"running", 0}},
		{"next start − long lead", time.Hour, want{"running", 0}, want{"running", 0}},
		{"end", 2 * time.Hour, want{"cooling", 0}, want{"cooling", 0}},
		{"cool-down end", 2*time.Hour + cd, want{"armed", day}, want{"over", 0}},
		{"next start − short lead", day - 15*time.Minute, want{"armed", day}, want{"armed", day}},
		{"next start", day, want{"running", day}, want{"running", day}},
	}

	leads := map[string]time.Duration{"long": time.Duration(long.Lead), "short": time.Duration(short.Lead)}
	rate := 1e6 // falls at each tick: an occurrence's peak is its first tick's rate
	firstRate := map[string]float64{}
	lastOcc := map[string]time.Time{}
	check := func(name string, at time.Time, w map[string]want, walkBack bool) {
		t.Helper()
		var obs []Observation
		for _, id := range []string{"long", "short"} {
			obs = append(obs, Observation{Key: "score:" + id, ReadRate: rate})
		}
		if !walkBack {
			tr.Observe(at, x, obs)
		}
		arm := x.Armed(at)
		for _, id := range []string{"long", "short"} {
			ww := w[id]
			occ := s.Add(ww.occ)
			armed := ww.state != "over"
			var got *Arming
			for i := range arm {
				if arm[i].Event.ID == id {
					got = &arm[i]
				}
			}
			if armed != (got != nil) || (got != nil && (!got.Window.Start.Equal(occ) ||
				!got.From.Equal(occ.Add(-leads[id])) || !got.Until.Equal(occ.Add(2*time.Hour+cd)))) {
				t.Errorf("%s (%v): Armed lists %s as %+v; want armed %v for the occurrence of %v", name, at, id, got, armed, occ)
			}
			if m := x.Match("score:"+id, at, nil); armed != slices.Equal(m, []string{id}) {
				t.Errorf("%s (%v): Match(score:%s) = %q; want armed %v", name, at, id, m, armed)
			}
			en := x.entries[x.byID[id]]
			st := en.state.Load()
			fresh := en.c.sched.state(at, cd)
			if st == nil || at.Before(st.from) || !at.Before(st.until) || st.armed != fresh.armed || !st.w.Start.Equal(fresh.w.Start) {
				t.Errorf("%s (%v): %s's cached state %+v; want one holding at %v like %+v", name, at, id, st, at, fresh)
			}
			if walkBack {
				continue
			}
			if armed && !lastOcc[id].Equal(occ) {
				firstRate[id], lastOcc[id] = rate, occ
			}
			r, ok := tr.Report(id, at)
			if !ok || r.State != ww.state || !r.Occurrence.Start.Equal(occ) || r.ObservedPeakReadRate != firstRate[id] {
				t.Errorf("%s (%v): %s's report %s for %v, peak %v; want %s for %v, peak %v",
					name, at, id, r.State, r.Occurrence.Start, r.ObservedPeakReadRate, ww.state, occ, firstRate[id])
			}
		}
		rate--
	}
	for i, st := range steps {
		at := s.Add(st.at)
		if i > 0 {
			prev := steps[i-1]
			check(st.name+" − 1ns", at.Add(-time.Nanosecond), map[string]want{"long": prev.long, "short": prev.short}, false)
		}
		check(st.name, at, map[string]want{"long": st.long, "short": st.short}, false)
	}
	for i := len(steps) - 1; i >= 0; i-- {
		st := steps[i]
		check(st.name+", walking back", s.Add(st.at), map[string]want{"long": st.long, "short": st.short}, true)
	}
}
