package client

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClassify checks which keys the plan hook takes for written. A command that writes
// one key and reads others (SUNIONSTORE dst src…) writes all of them, as far as L1 and
// copies go; SORT and GEORADIUS write only with STORE or STOREDIST, and then may write
// any argument, as XREADGROUP may.
func TestClassify(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		args       []any
		write      bool
		keys       []string
		mirrorable bool
	}{
		{"get", []any{"get", "k"}, false, nil, false},
		{"sunion", []any{"sunion", "a", "b"}, false, nil, false},
		{"set", []any{"set", "k", "v"}, true, []string{"k"}, true},
		{"sunionstore", []any{"sunionstore", "d", "a", "b"}, true, []string{"d", "a", "b"}, false},
		{"sunionstore alone", []any{"sunionstore", "d"}, true, []string{"d"}, true},
		{"copy", []any{"copy", "a", "b", "replace"}, true, []string{"b", "a"}, false},
		{"copy too short", []any{"copy", "a"}, false, nil, false},
		{"bitop", []any{"bitop", "and", "d", "a"}, true, []string{"d", "a"}, false},
		{"pfmerge alone", []any{"pfmerge", "d"}, true, []string{"d"}, true},
		{"zrangestore", []any{"zrangestore", "d", "z", 0, -1}, true, []string{"d", "z"}, false},
		{"geosearchstore", []any{"geosearchstore", "d", "g", "frommember", "m", "byradius", 1, "km"}, true, []string{"d", "g"}, false},
		{"zunionstore", []any{"zunionstore", "d", 2, "a", "b", "weights", 1, 2}, true, []string{"d", "a", "b"}, false},
		{"zunionstore numkeys as text", []any{"zunionstore", "d", "1", "a"}, true, []string{"d", "a"}, false},
		{"zunionstore numkeys not a number", []any{"zunionstore", "d", "x", "a"}, true, []string{"d"}, false},
		{"zunionstore numkeys too large", []any{"zunionstore", "d", 3, "a", "b"}, true, []string{"d"}, false},
		{"sort", []any{"sort", "k", "by", "w_*"}, false, nil, false},
		{"sort store", []any{"sort", "k", "limit", 0, 1, "STORE", "d"}, true, []string{"k", "limit", "0", "1", "STORE", "d"}, false},
		{"sort store last", []any{"sort", "k", "store"}, true, []string{"k", "store"}, false},
		{"georadius", []any{"georadius", "g", 15, 37, 200, "km"}, false, nil, false},
		{"georadius storedist", []any{"georadius", "g", 15, 37, 200, "km", "storedist", "d"}, true,
			[]string{"g", "15", "37", "200", "km", "storedist", "d"}, false},
		{"lmove", []any{"lmove", "a", "b", "left", "right"}, true, []string{"a", "b"}, false},
		{"xreadgroup", []any{"xreadgroup", "group", "g", "c", "streams", "s", ">"}, true,
			[]string{"group", "g", "c", "streams", "s", ">"}, false},
		{"xread", []any{"xread", "streams", "s", "0"}, false, nil, false},
		{"eval_ro", []any{"eval_ro", "return 1", 1, "k"}, false, nil, false},
		{"pfcount", []any{"pfcount", "h"}, false, nil, false},
		{"move", []any{"move", "k", 1}, true, []string{"k"}, true},
		{"memory usage", []any{"memory", "usage", "k"}, false, nil, false},
		{"unknown", []any{"frobnicate", "x"}, true, []string{"x"}, false},
	}
	c := &Client{}
	for _, tt := range tests {
		w := c.parse(redis.NewCmd(ctx, tt.args...), nil).w
		if w.write != tt.write || !slices.Equal(w.keys, tt.keys) || w.mirrorable != tt.mirrorable {
			t.Errorf("%s: got write %v keys %q mirrorable %v; want %v %q %v",
				tt.name, w.write, w.keys, w.mirrorable, tt.write, tt.keys, tt.mirrorable)
		}
	}
}
