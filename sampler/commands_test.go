package sampler

import (
	"strings"
	"testing"
)

func TestCommandKeys(t *testing.T) {
	tests := []struct {
		cmd     string
		keys    []string
		op      Op
		counter bool
	}{
		{"get a", []string{"a"}, OpRead, false},
		{"GeT a", []string{"a"}, OpRead, false},
		{"mget a b c", []string{"a", "b", "c"}, OpRead, false},
		{"mset a 1 b 2", []string{"a", "b"}, OpWrite, false},
		{"del a b", []string{"a", "b"}, OpWrite, false},
		{"incr n", []string{"n"}, OpWrite, true},
		{"incrby n 5", []string{"n"}, OpWrite, true},
		{"blpop q1 q2 0", []string{"q1", "q2"}, OpWrite, false},
		{"eval s 2 k1 k2 a1", []string{"k1", "k2"}, OpWrite, false},
		{"eval s 0", nil, OpWrite, false},
		{"eval s 3 k1", nil, OpWrite, false},
		{"hget h f", []string{"h"}, OpRead, false},
		{"get", nil, OpRead, false},
		{"rename a b", []string{"a", "b"}, OpWrite, false},
	}
	for _, tt := range tests {
		fields := strings.Fields(tt.cmd)
		args := make([][]byte, len(fields))
		for i, f := range fields {
			args[i] = []byte(f)
		}
		c, ok := LookupCommand(args[0])
		if !ok {
			t.Fatalf("%q: not found", tt.cmd)
		}
		if c.Op != tt.op || c.Counter != tt.counter {
			t.Errorf("%q: op %v counter %v; want %v %v", tt.cmd, c.Op, c.Counter, tt.op, tt.counter)
		}
		var got []string
		if first, last, step, ok := c.KeyRange(args); ok {
			for i := first; i <= last; i += step {
				got = append(got, string(args[i]))
			}
		}
		if strings.Join(got, ",") != strings.Join(tt.keys, ",") {
			t.Errorf("%q: keys %q; want %q", tt.cmd, got, tt.keys)
		}
	}
	for _, name := range []string{"PING", "AUTH", "", "AVERYLONGCOMMANDNAMETHATISNOTREDIS"} {
		if _, ok := LookupCommand([]byte(name)); ok {
			t.Errorf("LookupCommand(%q) found a command; want none", name)
		}
	}
}

func TestLookupCommandAllocs(t *testing.T) {
	name := []byte("hgetall")
	if n := testing.AllocsPerRun(100, func() { LookupCommand(name) }); n != 0 {
		t.Errorf("LookupCommand allocates %v times; want 0", n)
	}
}

// TestKeyRangeHugeNumKeys checks that a numkeys so large that the last key's index
// overflows is not taken for a key range.
func TestKeyRangeHugeNumKeys(t *testing.T) {
	c, _ := LookupCommand([]byte("EVAL"))
	for _, nk := range []string{"9223372036854775807", "9223372036854775806"} {
		args := [][]byte{[]byte("EVAL"), []byte("s"), []byte(nk), []byte("k")}
		if first, last, step, ok := c.KeyRange(args); ok {
			t.Errorf("EVAL s %s k: got keys %d..%d step %d, ok; want not ok (numkeys over the arguments)", nk, first, last, step)
		}
	}
}

// TestCommandKeysBeyondFixedPositions checks commands whose keys are not at fixed
// positions: after a numkeys argument that is not args[2], after the STREAMS keyword, or
// behind a subcommand. Without them, a key read only this way is never sampled.
func TestCommandKeysBeyondFixedPositions(t *testing.T) {
	tests := []struct {
		cmd  string
		keys []string
		op   Op
	}{
		{"xread count 10 block 0 streams s1 s2 0-0 $", []string{"s1", "s2"}, OpRead},
		{"xread streams s1 0-0", []string{"s1"}, OpRead},
		{"xread streams s1 s2 0-0", nil, OpRead}, // ids and keys must pair up
		{"xread streams", nil, OpRead},
		{"xread count 1", nil, OpRead},
		{"object encoding k", []string{"k"}, OpRead},
		{"object help", nil, OpRead},
		{"sort_ro k by w_*", []string{"k"}, OpRead},
		{"zunion 2 z1 z2 withscores", []string{"z1", "z2"}, OpRead},
		{"zinter 1 z1", []string{"z1"}, OpRead},
		{"zdiff 2 z1 z2", []string{"z1", "z2"}, OpRead},
		{"zintercard 2 z1 z2 limit 5", []string{"z1", "z2"}, OpRead},
		{"sintercard 2 s1 s2", []string{"s1", "s2"}, OpRead},
		{"lmpop 2 l1 l2 left count 3", []string{"l1", "l2"}, OpWrite},
		{"zmpop 1 z1 min", []string{"z1"}, OpWrite},
		{"blmpop 0.5 2 l1 l2 right", []string{"l1", "l2"}, OpWrite},
		{"bzmpop 0 1 z1 max", []string{"z1"}, OpWrite},
		{"georadiusbymember_ro g m 10 km", []string{"g"}, OpRead},
	}
	for _, tt := range tests {
		fields := strings.Fields(tt.cmd)
		args := make([][]byte, len(fields))
		for i, f := range fields {
			args[i] = []byte(f)
		}
		c, ok := LookupCommand(args[0])
		if !ok {
			t.Errorf("%q: not in the command table", tt.cmd)
			continue
		}
		if c.Op != tt.op {
			t.Errorf("%q: op %v; want %v", tt.cmd, c.Op, tt.op)
		}
		var got []string
		if first, last, step, ok := c.KeyRange(args); ok {
			for i := first; i <= last; i += step {
				got = append(got, string(args[i]))
			}
		}
		if strings.Join(got, ",") != strings.Join(tt.keys, ",") {
			t.Errorf("%q: keys %q; want %q", tt.cmd, got, tt.keys)
		}
	}
	args := [][]byte{[]byte("XREAD"), []byte("STREAMS"), []byte("s"), []byte("0")}
	c, _ := LookupCommand(args[0])
	if n := testing.AllocsPerRun(100, func() { c.KeyRange(args) }); n != 0 {
		t.Errorf("KeyRange of XREAD allocates %v times; want 0", n)
	}
}
