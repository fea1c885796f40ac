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
