package sampler

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// lookupKeys looks up the command of line ("sunionstore d a b", split at spaces) and
// returns it with the keys its Keys finds at First…Last (not the destination); found is
// false when the table lacks the command.
func lookupKeys(line string) (c Command, keys []string, found bool) {
	var args [][]byte
	for _, f := range strings.Fields(line) {
		args = append(args, []byte(f))
	}
	if c, found = LookupCommand(args[0]); !found {
		return c, nil, false
	}
	if k, _, ok := c.Keys(args); ok {
		for i := k.First; i <= k.Last; i += k.Step {
			keys = append(keys, string(args[i]))
		}
	}
	return c, keys, true
}

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
		// newer than the Redis the tests run (7.4 to 8.4, Valkey 9): from the docs' key specs
		{"hpexpire h 100 fields 1 f", []string{"h"}, OpWrite, false},
		{"hexpireat h 100 fields 1 f", []string{"h"}, OpWrite, false},
		{"hpexpireat h 100 fields 1 f", []string{"h"}, OpWrite, false},
		{"hpttl h fields 1 f", []string{"h"}, OpRead, false},
		{"hexpiretime h fields 1 f", []string{"h"}, OpRead, false},
		{"hpexpiretime h fields 1 f", []string{"h"}, OpRead, false},
		{"msetex 2 a 1 b 2 px 100", []string{"a", "b"}, OpWrite, false},
		{"msetex 1 a 1", []string{"a"}, OpWrite, false},
		{"msetex 2 a 1", nil, OpWrite, false},
		{"msetex 0 a 1", nil, OpWrite, false},
		{"delex k ifeq v", []string{"k"}, OpWrite, false},
		{"delifeq k v", []string{"k"}, OpWrite, false},
		{"digest k", []string{"k"}, OpRead, false},
		{"xdelex x ids 1 1-0", []string{"x"}, OpWrite, false},
		{"xackdel x g ids 1 1-0", []string{"x"}, OpWrite, false},
		{"bitop diff d a b", []string{"a", "b"}, OpWrite, false},
		{"vadd v values 2 1 2 e", []string{"v"}, OpWrite, false},
		{"vrem v e", []string{"v"}, OpWrite, false},
		{"vsetattr v e {}", []string{"v"}, OpWrite, false},
		{"vsim v ele e count 3", []string{"v"}, OpRead, false},
		{"vcard v", []string{"v"}, OpRead, false},
		{"vdim v", []string{"v"}, OpRead, false},
		{"vemb v e", []string{"v"}, OpRead, false},
		{"vgetattr v e", []string{"v"}, OpRead, false},
		{"vinfo v", []string{"v"}, OpRead, false},
		{"vlinks v e", []string{"v"}, OpRead, false},
		{"vrandmember v 2", []string{"v"}, OpRead, false},
		{"vismember v e", []string{"v"}, OpRead, false},
		{"vrange v - + 10", []string{"v"}, OpRead, false},
	}
	for _, tt := range tests {
		c, got, ok := lookupKeys(tt.cmd)
		if !ok {
			t.Fatalf("%q: not found", tt.cmd)
		}
		if c.Op != tt.op || c.Counter != tt.counter {
			t.Errorf("%q: op %v counter %v; want %v %v", tt.cmd, c.Op, c.Counter, tt.op, tt.counter)
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

// TestKeysHugeNumKeys checks that a numkeys so large that the last key's index
// overflows is not taken for a key range.
func TestKeysHugeNumKeys(t *testing.T) {
	c, _ := LookupCommand([]byte("EVAL"))
	for _, nk := range []string{"9223372036854775807", "9223372036854775806"} {
		args := [][]byte{[]byte("EVAL"), []byte("s"), []byte(nk), []byte("k")}
		if k, _, ok := c.Keys(args); ok {
			t.Errorf("EVAL s %s k: got keys %+v, ok; want not ok (numkeys over the arguments)", nk, k)
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
		{"xreadgroup group g c count 1 streams s1 s2 > >", []string{"s1", "s2"}, OpWrite},
		{"xreadgroup group streams streams streams s >", []string{"s"}, OpWrite}, // group and consumer named streams
		{"xreadgroup group g c streams s", nil, OpWrite},
		{"xgroup create s g $ mkstream", []string{"s"}, OpWrite},
		{"xgroup help", nil, OpWrite},
		{"xinfo stream s full", []string{"s"}, OpRead},
		{"memory usage k samples 5", []string{"k"}, OpRead},
		{"memory stats", nil, OpRead},
		{"eval_ro s 1 k", []string{"k"}, OpRead},
		{"fcall_ro f 2 k1 k2 a", []string{"k1", "k2"}, OpRead},
		{"pfcount h1 h2", []string{"h1", "h2"}, OpRead},
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
		c, got, ok := lookupKeys(tt.cmd)
		if !ok {
			t.Errorf("%q: not in the command table", tt.cmd)
			continue
		}
		if c.Op != tt.op {
			t.Errorf("%q: op %v; want %v", tt.cmd, c.Op, tt.op)
		}
		if strings.Join(got, ",") != strings.Join(tt.keys, ",") {
			t.Errorf("%q: keys %q; want %q", tt.cmd, got, tt.keys)
		}
	}
	args := [][]byte{[]byte("XREAD"), []byte("STREAMS"), []byte("s"), []byte("0")}
	c, _ := LookupCommand(args[0])
	if n := testing.AllocsPerRun(100, func() { c.Keys(args) }); n != 0 {
		t.Errorf("Keys of XREAD allocates %v times; want 0", n)
	}
}

// fieldArgs splits a command line at spaces into arguments.
func fieldArgs(line string) [][]byte {
	var args [][]byte
	for _, f := range strings.Fields(line) {
		args = append(args, []byte(f))
	}
	return args
}

// describeKeys renders the keys of a call in argument order, each with its op:
// "write d, read a". It fails t when Keys returns indexes outside args, a destination
// among the other keys, or a Step below 1.
func describeKeys(t testing.TB, k Keys, dest int, args [][]byte) string {
	t.Helper()
	type key struct {
		i  int
		op Op
	}
	var keys []key
	if k.Step < 1 {
		t.Fatalf("%q: Step %d; want ≥ 1", args, k.Step)
	}
	for i := k.First; i <= k.Last; i += k.Step {
		if i < 1 || i >= len(args) || i == dest {
			t.Fatalf("%q: key index %d of %+v: want 1 ≤ i < %d, not the destination %d", args, i, k, len(args), dest)
		}
		keys = append(keys, key{i, k.Op})
	}
	if dest != 0 {
		if dest < 1 || dest >= len(args) || k.Op != OpRead {
			t.Fatalf("%q: destination %d with op %v; want 1 ≤ dest < %d, the other keys read", args, dest, k.Op, len(args))
		}
		keys = append(keys, key{dest, OpWrite})
	}
	slices.SortFunc(keys, func(a, b key) int { return a.i - b.i })
	var out []string
	for _, x := range keys {
		out = append(out, fmt.Sprintf("%v %s", x.op, args[x.i]))
	}
	return strings.Join(out, ", ")
}

// TestCommandKeysDestination checks the commands that write one key and read the others,
// each key with its own op, and their calls with too few arguments or a bad numkeys.
func TestCommandKeysDestination(t *testing.T) {
	tests := []struct {
		cmd, want string // want "" for no keys
	}{
		{"copy a b", "read a, write b"},
		{"COPY a b DB 1 REPLACE", "read a, write b"},
		{"copy a", ""},
		{"copy", ""},
		{"sunionstore d a b", "write d, read a, read b"},
		{"SINTERSTORE d a", "write d, read a"},
		{"sdiffstore d a b c", "write d, read a, read b, read c"},
		{"sunionstore d", "write d"}, // Redis refuses it; its destination is still named
		{"sunionstore", ""},
		{"bitop and d a b", "write d, read a, read b"},
		{"BITOP NOT d a", "write d, read a"},
		{"bitop and d", "write d"},
		{"bitop and", ""},
		{"pfmerge d a b", "write d, read a, read b"},
		{"pfmerge d", "write d"}, // valid: an empty HyperLogLog
		{"pfmerge", ""},
		{"zrangestore d z 0 -1 rev", "write d, read z"},
		{"zrangestore d", "write d"},
		{"geosearchstore d g frommember m byradius 10 km storedist", "write d, read g"},
		{"geosearchstore", ""},
		{"zunionstore d 2 a b weights 1 2 aggregate max", "write d, read a, read b"},
		{"ZINTERSTORE d 1 a", "write d, read a"},
		{"zdiffstore d 2 a b", "write d, read a, read b"},
		{"zunionstore d x a", ""},   // numkeys not a number
		{"zunionstore d 3 a b", ""}, // numkeys over the arguments
		{"zunionstore d 2 a", ""},
		{"zunionstore d 0 a", ""},
		{"zunionstore d -1 a", ""},
		{"zunionstore d 9223372036854775807 a", ""},
		{"zunionstore d 2", ""},
		{"zunionstore d", ""},
		{"zunionstore", ""},
		{"sort k", "read k"},
		{"sort k by w_* get # get o_* limit 0 10 desc alpha", "read k"},
		{"sort k store d", "read k, write d"},
		{"SORT k STORE d", "read k, write d"},
		{"Sort k LIMIT 0 5 StOrE d", "read k, write d"},
		{"sort k store d1 store d2", "read k, write d2"}, // the last STORE counts, as in Redis
		{"sort k by store", "read k"},                    // a pattern spelled STORE
		{"sort k get store store d", "read k, write d"},
		{"sort k limit store store", "read k"},
		{"sort k store", "read k"}, // STORE last, no destination
		{"sort", ""},
		{"georadius g 15 37 200 km", "read g"},
		{"georadius g 15 37 200 km withdist count 5 any asc store d", "read g, write d"},
		{"GEORADIUS g 15 37 200 km STOREDIST d", "read g, write d"},
		{"georadius g 15 37 200 km store d1 storedist d2", "read g, write d2"},
		{"georadius g 15 37 200 km count store", "read g"},
		{"georadius g 15 37 200 km store", "read g"},
		{"georadius g store d", "read g"}, // before the options: no destination
		{"georadiusbymember g store 100 km", "read g"},
		{"georadiusbymember g m 100 km store d", "read g, write d"},
		{"georadiusbymember g m 100 km storedist d", "read g, write d"},
		// A key popped from one key and pushed to another is written twice.
		{"lmove a b left right", "write a, write b"},
		{"rpoplpush a b", "write a, write b"},
		{"smove a b m", "write a, write b"},
		{"blmove a b left right 0", "write a, write b"},
	}
	for _, tt := range tests {
		args := fieldArgs(tt.cmd)
		c, ok := LookupCommand(args[0])
		if !ok {
			t.Errorf("%q: not in the command table", tt.cmd)
			continue
		}
		if c.Op != OpWrite {
			t.Errorf("%q: command op %v; want write, what a caller that looks at Op alone sees", tt.cmd, c.Op)
		}
		got := ""
		if k, dest, ok := c.Keys(args); ok {
			got = describeKeys(t, k, dest, args)
		}
		if got != tt.want {
			t.Errorf("%q: got %q; want %q", tt.cmd, got, tt.want)
		}
	}
}

// TestKeysOf checks that KeysOf, given the number of arguments and numkeys, finds what
// Keys finds, except for the commands whose keys depend on other arguments, for which it
// finds none.
func TestKeysOf(t *testing.T) {
	for _, line := range []string{
		"get a", "mset a 1 b 2", "copy a b", "copy a", "sunionstore d a b", "sunionstore d",
		"bitop and d a", "zunionstore d 2 a b", "zunionstore d x a", "zunionstore d 3 a b",
		"eval s 1 k", "pfmerge d", "sort k store d", "georadius g 1 2 3 km store d", "xread streams s 0",
	} {
		args := fieldArgs(line)
		c, _ := LookupCommand(args[0])
		numKeys := -1
		if c.NumKeysAt > 0 && c.NumKeysAt < len(args) {
			if n, err := strconv.Atoi(string(args[c.NumKeysAt])); err == nil {
				numKeys = n
			}
		}
		want, wantDest, wantOK := c.Keys(args)
		if c.Streams || c.Store > 0 {
			want, wantDest, wantOK = Keys{}, 0, false
		}
		if got, dest, ok := c.KeysOf(len(args), numKeys); got != want || dest != wantDest || ok != wantOK {
			t.Errorf("%q: KeysOf %+v, %d, %v; want %+v, %d, %v", line, got, dest, ok, want, wantDest, wantOK)
		}
	}
}

// TestKeysDestinationAllocs checks that finding the keys of the commands with a
// destination allocates nothing.
func TestKeysDestinationAllocs(t *testing.T) {
	for _, line := range []string{"sunionstore d a b", "zunionstore d 2 a b", "sort k by w get o limit 0 1 store d"} {
		args := fieldArgs(line)
		c, _ := LookupCommand(args[0])
		if n := testing.AllocsPerRun(100, func() { c.Keys(args) }); n != 0 {
			t.Errorf("Keys of %q allocates %v times; want 0", line, n)
		}
	}
}

// FuzzCommandKeys checks that for any arguments Keys returns keys within them, with a
// destination apart from the others, and that sampling them does not panic and gives one
// sample per key with its op.
func FuzzCommandKeys(f *testing.F) {
	for _, s := range []string{
		"get a", "mset a 1 b", "eval s 2 k1 k2", "xread streams s1 s2 0 0", "object encoding k",
		"copy a b", "copy a", "sunionstore d a b", "sunionstore d", "bitop and d a b", "bitop and",
		"pfmerge d", "zrangestore d z 0 -1", "geosearchstore d g frommember m byradius 1 km",
		"zunionstore d 2 a b weights 1 2", "zunionstore d x a", "zunionstore d 3 a b",
		"zinterstore d -9223372036854775808 a", "sort k", "SORT k STORE d", "sort k store",
		"sort k limit 0", "sort k get store store d", "georadius g 1 2 3 km store d",
		"georadiusbymember g m 3 km storedist", "lmove a b left right",
		"xreadgroup group g c streams s >", "xgroup create s g $", "memory usage k",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := fieldArgs(line)
		if len(args) == 0 {
			return
		}
		c, ok := LookupCommand(args[0])
		if !ok {
			return
		}
		k, dest, ok := c.Keys(args)
		if !ok {
			return
		}
		want := describeKeys(t, k, dest, args) // checks the indexes
		sizes := make([]int64, len(args))
		for i, a := range args {
			sizes[i] = int64(len(a))
		}
		samples, _ := appendKeySamples(nil, args, sizes, len(args))
		var got []string
		for _, s := range samples {
			got = append(got, fmt.Sprintf("%v %s", s.Op, s.Key))
		}
		slices.Sort(got)
		wantKeys := strings.Split(want, ", ")
		slices.Sort(wantKeys)
		if !slices.Equal(got, wantKeys) {
			t.Fatalf("%q: samples %q; want %q", line, got, wantKeys)
		}
	})
}

// keysSink keeps the benchmarks' results alive.
var keysSink Keys

// BenchmarkCommandKeys measures finding a call's command and keys, which the proxy tap
// and MONITOR source do for every sampled command; it must not allocate.
func BenchmarkCommandKeys(b *testing.B) {
	for _, line := range []string{"get k", "mset k1 v1 k2 v2", "zunionstore d 2 a b", "xreadgroup group g c count 1 streams s1 s2 > >"} {
		args := fieldArgs(line)
		b.Run(string(args[0]), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, _ := LookupCommand(args[0])
				k, _, _ := c.Keys(args)
				keysSink = k
			}
		})
	}
}
