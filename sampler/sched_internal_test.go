package sampler

import (
	"strings"
	"testing"
	"time"
)

func TestNextBatch(t *testing.T) {
	for _, tc := range []struct {
		batch              bool
		reads, deep, least uint64
		want               bool
	}{
		{false, 1000, 950, 200, true},  // nine in ten deep: batch
		{false, 1000, 900, 200, true},  // exactly nine in ten
		{false, 1000, 899, 200, false}, // just under
		{false, 199, 199, 200, false},  // too few reads to decide
		{true, 199, 0, 200, true},      // too few reads: kept
		{true, 1000, 500, 200, true},   // half deep: still batch
		{true, 1000, 499, 200, false},  // fewer than half: back
		{true, 0, 0, 0, true},          // nothing at all decides nothing
		{false, 1, 1, 1, true},
	} {
		if got := nextBatch(tc.batch, tc.reads, tc.deep, tc.least); got != tc.want {
			t.Errorf("nextBatch(%v, %d reads, %d deep, least %d) = %v; want %v", tc.batch, tc.reads, tc.deep, tc.least, got, tc.want)
		}
	}
}

func TestParseSchedPolicy(t *testing.T) {
	for _, p := range []SchedPolicy{SchedOff, SchedAuto, SchedBatch} {
		if got, err := ParseSchedPolicy(p.String()); err != nil || got != p {
			t.Errorf("ParseSchedPolicy(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	for _, s := range []string{"", "Auto", "normal", "SchedPolicy(7)"} {
		if _, err := ParseSchedPolicy(s); err == nil || !strings.Contains(err.Error(), "off, auto or batch") {
			t.Errorf("ParseSchedPolicy(%q): %v; want an error naming off, auto or batch", s, err)
		}
	}
}

func TestCountRead(t *testing.T) {
	var s proxyCounters
	for _, cmds := range []int{1, 3, 4, 16, 2} {
		s.countRead(cmds)
	}
	if r, d := s.reads.Load(), s.deepReads.Load(); r != 5 || d != 2 {
		t.Errorf("after reads of 1, 3, 4, 16 and 2 commands: %d reads, %d deep; want 5 and 2", r, d)
	}
}

func TestSwitchLog(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 19, 30, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var s switchLog
	if n := s.report(at(0)); n != 0 {
		t.Errorf("no switch: report %d; want 0", n)
	}
	s.switched(at(0), 400, 400)
	if n := s.report(at(0)); n != 1 {
		t.Errorf("the first switch: report %d; want it at once", n)
	}
	// Back and forth at the edge of the thresholds: nothing until it settles.
	s.switched(at(100*time.Millisecond), 300, 100)
	s.switched(at(300*time.Millisecond), 300, 280)
	s.switched(at(500*time.Millisecond), 200, 50)
	for _, d := range []time.Duration{500 * time.Millisecond, 1400 * time.Millisecond} {
		if n := s.report(at(d)); n != 0 {
			t.Errorf("at %v, %v after the last switch: report %d; want 0 until it settles", d, d-500*time.Millisecond, n)
		}
	}
	if n := s.report(at(1500 * time.Millisecond)); n != 3 || s.reads != 200 || s.deep != 50 {
		t.Errorf("settled for %v: report %d with %d reads, %d deep; want the 3 switches, with the last one's 200 and 50",
			schedSettle, n, s.reads, s.deep)
	}
	if n := s.report(at(5 * time.Second)); n != 0 {
		t.Errorf("nothing new: report %d; want 0", n)
	}
	// Switching without end: one report a minute.
	reports := 0
	for d := 10 * time.Second; d < 10*time.Second+3*schedLogEvery; d += 500 * time.Millisecond {
		s.switched(at(d), 100, 50)
		if s.report(at(d)) > 0 {
			reports++
		}
	}
	if reports != 3 {
		t.Errorf("switching every 500ms for 3 minutes: %d reports; want 3 (one per %v)", reports, schedLogEvery)
	}
}
