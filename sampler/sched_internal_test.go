package sampler

import (
	"strings"
	"testing"
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
