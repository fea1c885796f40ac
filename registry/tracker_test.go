package registry

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	x := newIndex(t, indexEvents(), 5*time.Minute)
	start := indexEvents()[0].Start
	tr, err := NewTracker(TrackerOptions{MaxSurprises: 2})
	if err != nil {
		t.Fatal(err)
	}
	tick := func(at time.Duration, obs ...Observation) int { return tr.Observe(start.Add(at), x, obs) }

	// Before arming: a hot key is a surprise, counted once per hot episode.
	if n := tick(-time.Hour, Observation{Key: "score:match42", ReadRate: 900, Hot: true}); n != 1 {
		t.Errorf("unpredicted hot key: %d new surprises; want 1", n)
	}
	if n := tick(-59*time.Minute, Observation{Key: "score:match42", ReadRate: 900, Hot: true}); n != 0 {
		t.Errorf("still hot: %d new surprises; want 0 (one per episode)", n)
	}
	if _, ok := tr.Report("match42", start); ok {
		t.Error("report before the event armed; want none")
	}
	// Armed at −15m: no more surprise; a cold tick, then traffic.
	tick(-10*time.Minute, Observation{Key: "score:match42", ReadRate: 100})
	tick(-2*time.Minute, Observation{Key: "score:match42", ReadRate: 30000, Hot: true},
		Observation{Key: "sale:sku:1", ReadRate: 10, WriteRate: 20000, Hot: true})
	tick(10*time.Minute, Observation{Key: "score:match42", ReadRate: 60000, Hot: true},
		Observation{Key: "odds:match42", ReadRate: 40000, WriteRate: 5, Hot: true},
		Observation{Key: "sale:sku:2", WriteRate: 45000, Hot: true},
		Observation{Key: "surprise:1", ReadRate: 7, Hot: true},
		Observation{Key: "surprise:2", ReadRate: 8, Hot: true})
	tick(3*time.Hour, Observation{Key: "score:match42", ReadRate: 99999, Hot: true}) // disarmed: a surprise again

	r, ok := tr.Report("match42", start.Add(time.Hour))
	if !ok {
		t.Fatal("no report for match42")
	}
	if r.State != "running" || r.ObservedPeakReadRate != 60000 || r.PeakReadKey != "score:match42" ||
		r.ReadRatio == nil || *r.ReadRatio != 1.2 || r.WriteRatio != nil || r.HotKeysTotal != 2 ||
		r.FirstHot == nil || time.Duration(*r.FirstHotAfterStart) != -2*time.Minute {
		j, _ := json.MarshalIndent(r, "", " ")
		t.Errorf("match42 report:\n%s\nwant running, peak 60000 on score:match42 (ratio 1.2), 2 hot keys, first hot 2m before start", j)
	}
	if len(r.HotKeys) != 2 || r.HotKeys[0].Key != "score:match42" || r.HotKeys[0].PeakReadRate != 60000 || r.HotKeys[1].Key != "odds:match42" {
		t.Errorf("hot keys %+v; want score:match42 (peak 60000) then odds:match42", r.HotKeys)
	}
	if r.ArmedFrom != start.Add(-15*time.Minute) || r.ArmedUntil != start.Add(2*time.Hour+5*time.Minute) {
		t.Errorf("armed %v–%v; want start−15m to end+5m", r.ArmedFrom, r.ArmedUntil)
	}
	sale, _ := tr.Report("sale", start.Add(4*time.Hour))
	if sale.State != "over" || sale.ObservedPeakWriteRate != 45000 || sale.PeakWriteKey != "sale:sku:2" || *sale.WriteRatio != 1.5 || sale.HotKeysTotal != 2 {
		t.Errorf("sale report %+v; want over, peak write 45000 on sale:sku:2 (ratio 1.5), 2 hot keys", sale)
	}
	total, recent := tr.Surprises()
	if total != 4 || len(recent) != 2 || recent[0].Key != "surprise:2" || recent[1].Key != "score:match42" {
		t.Errorf("surprises %d %+v; want 4, the last two surprise:2 and score:match42", total, recent)
	}
	if rs := tr.Reports(start); len(rs) != 2 {
		t.Errorf("Reports = %d; want 2 (match42 and sale; later has not armed)", len(rs))
	}
	out, _ := json.Marshal(r)
	for _, f := range []string{`"state":"running"`, `"read_ratio":1.2`, `"first_hot_after_start":"-2m0s"`, `"hot_keys_total":2`} {
		if !strings.Contains(string(out), f) {
			t.Errorf("report JSON %s; want %s", out, f)
		}
	}

	// The next occurrence starts a new report; deleted events lose theirs.
	x2 := newIndex(t, indexEvents()[1:], 5*time.Minute)
	tr.Observe(start.Add(24*time.Hour), x2, nil)
	if _, ok := tr.Report("match42", start); ok {
		t.Error("report of a deleted event still there")
	}
	if r, ok := tr.Report("later", start.Add(24*time.Hour)); !ok || r.HotKeysTotal != 0 || r.State != "running" {
		t.Errorf("later's report %+v, %v; want a fresh running one", r, ok)
	}
}

func TestTrackerHotKeysBound(t *testing.T) {
	x := newIndex(t, indexEvents(), 0)
	start := indexEvents()[0].Start
	tr, _ := NewTracker(TrackerOptions{MaxHotKeys: 3})
	for i := range 10 {
		tr.Observe(start, x, []Observation{{Key: "sale:sku:" + string(rune('a'+i)), WriteRate: 1, Hot: true}})
		tr.Observe(start, x, []Observation{{Key: "sale:sku:a", WriteRate: 2, Hot: true}})
	}
	r, _ := tr.Report("sale", start)
	if len(r.HotKeys) != 3 || r.HotKeysTotal != 10 {
		t.Errorf("%d hot keys listed, %d counted; want 3 and 10", len(r.HotKeys), r.HotKeysTotal)
	}
	if _, err := NewTracker(TrackerOptions{MaxHotKeys: -1}); err == nil {
		t.Error("negative MaxHotKeys: no error")
	}
}

// TestTrackerEventExtended: an operator extends a running event (extra time) with a PUT
// that keeps its start; the report must follow the new end, not call it cooling.
func TestTrackerEventExtended(t *testing.T) {
	ev := testEvent("match42")
	start := ev.Start
	tr, _ := NewTracker(TrackerOptions{})
	obs := []Observation{{Key: "score:match42", ReadRate: 100, Hot: true}}
	tr.Observe(start.Add(time.Hour), newIndex(t, []Event{ev}, time.Minute), obs)

	ev.End = ev.End.Add(time.Hour) // now 19:30–22:30
	x := newIndex(t, []Event{ev}, time.Minute)
	at := start.Add(2*time.Hour + 30*time.Minute)
	tr.Observe(at, x, obs)
	r, _ := tr.Report("match42", at)
	if r.State != "running" || !r.Occurrence.End.Equal(ev.End) || !r.ArmedUntil.Equal(ev.End.Add(time.Minute)) {
		t.Errorf("after extending the end to %v: state %s, occurrence end %v, armed until %v; want running, %v, %v",
			ev.End, r.State, r.Occurrence.End, r.ArmedUntil, ev.End, ev.End.Add(time.Minute))
	}
	if r.HotKeysTotal != 1 {
		t.Errorf("hot keys %d after the extension; want 1 (same occurrence, same record)", r.HotKeysTotal)
	}
}

// TestTrackerLongLead: a weekly event armed a whole week ahead (lead 168h) is armed at
// every moment, for two occurrences while one runs. The report must follow the match that
// is running now, and move to next week's only once this one has cooled down.
func TestTrackerLongLead(t *testing.T) {
	ev := testEvent("derby")
	ev.Lead, ev.Recurrence, ev.Zone = Duration(7*24*time.Hour), "weekly", "Europe/Madrid"
	start, end, next := ev.Start, ev.End, ev.Start.Add(7*24*time.Hour)
	x := newIndex(t, []Event{ev}, time.Minute)
	tr, _ := NewTracker(TrackerOptions{})
	obs := func(rate float64, hot bool) []Observation {
		return []Observation{{Key: "score:match42", ReadRate: rate, Hot: hot}}
	}
	check := func(at time.Time, state string, occ time.Time, peak float64, hot int) {
		t.Helper()
		r, ok := tr.Report("derby", at)
		if !ok {
			t.Fatalf("at %v: no report; want one", at)
		}
		if r.State != state || !r.Occurrence.Start.Equal(occ) || r.ObservedPeakReadRate != peak || r.HotKeysTotal != hot {
			t.Errorf("at %v: report %s for the occurrence of %v, peak %v, %d hot keys; want %s for %v, peak %v, %d hot keys",
				at, r.State, r.Occurrence.Start, r.ObservedPeakReadRate, r.HotKeysTotal, state, occ, peak, hot)
		}
	}

	tr.Observe(start.Add(-time.Hour), x, obs(100, false))
	check(start.Add(-time.Hour), "armed", start, 100, 0)
	at := start.Add(10 * time.Minute)
	tr.Observe(at, x, obs(60000, true))
	check(at, "running", start, 60000, 1)
	if r, _ := tr.Report("derby", at); r.ReadRatio == nil || *r.ReadRatio != 1.2 {
		t.Errorf("at start+10m: read ratio %v; want 1.2 (observed 60000 against 50000 expected)", r.ReadRatio)
	}
	if arm := x.Armed(at); len(arm) != 1 || !arm[0].Window.Start.Equal(start) {
		t.Errorf("Armed(start+10m) = %+v; want derby armed for the running occurrence of %v", arm, start)
	}
	at = end.Add(30 * time.Second)
	tr.Observe(at, x, obs(20000, true))
	check(at, "cooling", start, 60000, 1)
	at = end.Add(time.Minute) // cool-down over: next week's occurrence, armed since start
	tr.Observe(at, x, obs(10, false))
	check(at, "armed", next, 10, 0)
	if r, _ := tr.Report("derby", at); !r.ArmedFrom.Equal(start) || !r.ArmedUntil.Equal(next.Add(2*time.Hour+time.Minute)) {
		t.Errorf("next occurrence armed %v–%v; want %v–%v", r.ArmedFrom, r.ArmedUntil, start, next.Add(2*time.Hour+time.Minute))
	}
	at = next.Add(time.Minute)
	tr.Observe(at, x, obs(55000, true))
	check(at, "running", next, 55000, 1)
}

// TestReportObservedSince: a tracker started mid-event (an agent restarted while the
// event runs) reports from its first tick only, and says so: observed_since is that tick,
// after armed_from, so that "observed 0" is not read as a missed prediction.
func TestReportObservedSince(t *testing.T) {
	x := newIndex(t, indexEvents(), 5*time.Minute)
	start := indexEvents()[0].Start
	tr, err := NewTracker(TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Observe(start.Add(30*time.Minute), x, nil) // the first tick, half an hour into the match
	tr.Observe(start.Add(31*time.Minute), x, nil)
	r, ok := tr.Report("match42", start.Add(31*time.Minute))
	if !ok {
		t.Fatal("no report for match42")
	}
	j, _ := json.Marshal(r)
	want := `"observed_since":"` + start.Add(30*time.Minute).Format(time.RFC3339) + `"`
	if !strings.Contains(string(j), want) {
		t.Errorf("report %s; want %s: the span it covers", j, want)
	}
}

// TestSurpriseFlapsCountOnce: a key at its threshold that flaps, or leaves the evaluated
// keys for a tick, is one surprise while it keeps coming back within SurpriseMemory; a soak
// counted 597 surprises for 34 real episodes, and HotkeydUnpredictedHotKey fired all along.
func TestSurpriseFlapsCountOnce(t *testing.T) {
	x := newIndex(t, indexEvents(), 5*time.Minute)
	at := indexEvents()[0].Start.Add(-24 * time.Hour) // nothing armed
	tr, _ := NewTracker(TrackerOptions{})
	total := 0
	tick := func(d time.Duration, obs ...Observation) {
		at = at.Add(d)
		total += tr.Observe(at, x, obs)
	}
	flap := Observation{Key: "bg:key:0", ReadRate: 108, Hot: true}
	for range 50 { // 10 minutes: hot for 2 s, cool for 8 s, and once out of the ranking
		tick(100*time.Millisecond, flap)
		tick(2*time.Second, flap)
		tick(100*time.Millisecond, Observation{Key: "bg:key:0", ReadRate: 90})
		tick(100 * time.Millisecond) // not evaluated
		tick(8*time.Second, Observation{Key: "bg:key:0", ReadRate: 90})
	}
	if total != 1 {
		t.Errorf("a key flapping for 10 minutes: %d surprises; want 1", total)
	}
	tick(5*time.Minute, Observation{Key: "bg:key:0", ReadRate: 90}) // cool for 5 minutes
	tick(100*time.Millisecond, flap)
	if total != 2 {
		t.Errorf("hot again after 5 minutes cool: %d surprises in all; want 2", total)
	}
	if _, err := NewTracker(TrackerOptions{SurpriseMemory: -time.Second}); err == nil {
		t.Error("negative SurpriseMemory: got nil; want an error")
	}
}
