package sampler

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// newTestProxyConn returns a connection of a proxy that is never served, for driving
// parse and sample directly.
func newTestProxyConn(t testing.TB, every int) *proxyConn {
	t.Helper()
	p, err := NewProxy(ProxyOptions{SampleEvery: every, Sink: SinkFunc(func(Batch) {})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	pc := &proxyConn{p: p}
	pc.parser, _ = NewRESPParser(RESPOptions{MaxArgBytes: p.maxKey})
	pc.skip = pc.draw()
	return pc
}

// flushTestBatches delivers whatever the batcher holds, as the flusher does on Close.
func flushTestBatches(p *Proxy) { p.drain() }

func TestProxySampleAllocs(t *testing.T) {
	for _, every := range []int{1, 100} {
		pc := newTestProxyConn(t, every)
		stream := []byte(strings.Repeat(respCmd("SET", "key:000000001", "xxx")+respCmd("MGET", "a", "b", "c")+
			respCmd("SUNIONSTORE", "d", "a", "b")+respCmd("ZUNIONSTORE", "d", "2", "a", "b")+
			respCmd("SORT", "k", "BY", "w_*", "STORE", "d"), 50))
		run := func() {
			pc.parse(stream)
			flushTestBatches(pc.p)
		}
		run()
		if n := testing.AllocsPerRun(100, run); n != 0 {
			t.Errorf("SampleEvery %d: allocs per run %v; want 0", every, n)
		}
	}
}

var proxySinkN int

// BenchmarkProxyParse measures the proxy's per-command work on the client-to-server copy
// (parse, sampling draw, samples into batches), in 16 KiB reads, at the default 1 in 100
// and at 1 in 1; the naive baseline is the allocating line splitter of BenchmarkRESP.
func BenchmarkProxyParse(b *testing.B) {
	one := respCmd("SET", "key:000000001", "xxx") + respCmd("GET", "key:000000001")
	stream := []byte(strings.Repeat(one, 1000))
	const cmds = 2000
	for _, every := range []int{100, 1} {
		b.Run(fmt.Sprintf("every=%d", every), func(b *testing.B) {
			pc := newTestProxyConn(b, every)
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				for i := 0; i < len(stream); i += 16 << 10 {
					pc.parse(stream[i:min(i+16<<10, len(stream))])
				}
				flushTestBatches(pc.p)
			}
			proxySinkN += int(pc.parser.Offset())
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*cmds), "ns/cmd")
		})
	}
	b.Run("naive", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n += naiveRESP(stream)
		}
		proxySinkN += n
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*cmds), "ns/cmd")
	})
}

// TestAppendKeySamplesTruncated: a key longer than what the parser kept is sampled by its
// prefix and marked truncated, not dropped.
func TestAppendKeySamplesTruncated(t *testing.T) {
	args := [][]byte{[]byte("MGET"), []byte("short"), []byte("longkeyprefix")}
	sizes := []int64{4, 5, 2000}
	got, lost := appendKeySamples(nil, args, sizes, 3)
	if lost != 0 || len(got) != 2 {
		t.Fatalf("%d samples, %d lost; want 2, 0", len(got), lost)
	}
	if got[0].Truncated || !got[1].Truncated || string(got[1].Key) != "longkeyprefix" {
		t.Errorf("samples %+v; want the second marked truncated with its prefix", got)
	}
	if _, lost := appendKeySamples(nil, args, sizes, 5); lost != 1 {
		t.Errorf("arguments past those kept: lost %d; want 1", lost)
	}
}

// TestAppendKeySamplesDestination: a command that writes one key from others gives a
// write of that key and reads of the others, none with a value size, and marks a
// destination kept only in part as truncated.
func TestAppendKeySamplesDestination(t *testing.T) {
	tests := []struct {
		args  []string
		sizes []int64 // nil: the arguments' own lengths
		want  []string
	}{
		{[]string{"SUNIONSTORE", "d", "a", "b"}, nil, []string{"write d", "read a", "read b"}},
		{[]string{"copy", "src", "dst", "REPLACE"}, nil, []string{"write dst", "read src"}},
		{[]string{"BITOP", "AND", "d", "a"}, nil, []string{"write d", "read a"}},
		{[]string{"ZINTERSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"}, nil, []string{"write d", "read a", "read b"}},
		{[]string{"SORT", "k", "LIMIT", "0", "10", "STORE", "d"}, nil, []string{"write d", "read k"}},
		{[]string{"SORT", "k"}, nil, []string{"read k"}},
		{[]string{"SORT", "k", "STORE"}, nil, []string{"read k"}},
		{[]string{"PFMERGE", "d"}, nil, []string{"write d"}},
		{[]string{"SUNIONSTORE", "dest", "a"}, []int64{11, 900, 1}, []string{"write dest truncated", "read a"}},
	}
	for _, tt := range tests {
		args := make([][]byte, len(tt.args))
		sizes := tt.sizes
		for i, a := range tt.args {
			args[i] = []byte(a)
			if tt.sizes == nil {
				sizes = append(sizes, int64(len(a)))
			}
		}
		samples, lost := appendKeySamples(nil, args, sizes, len(args))
		var got []string
		for _, s := range samples {
			str := fmt.Sprintf("%v %s", s.Op, s.Key)
			if s.Truncated {
				str += " truncated"
			}
			if s.Bytes != 0 || s.Counter || s.Count != 1 {
				t.Errorf("%q: sample %+v; want no bytes, no counter, count 1", tt.args, s)
			}
			got = append(got, str)
		}
		if lost != 0 || !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, %d lost; want %q, 0 lost", tt.args, got, lost, tt.want)
		}
	}
}

func TestMuxRoute(t *testing.T) {
	tests := []struct {
		cmd           []string
		shared, write bool
	}{
		{[]string{"GET", "k"}, true, false},
		{[]string{"get", "k"}, true, false},
		{[]string{"MGET", "a", "b"}, true, false},
		{[]string{"INCRBY", "c", "5"}, true, true},
		{[]string{"set", "k", "v"}, true, true},
		{[]string{"PFCOUNT", "h"}, true, true},
		{[]string{"PING"}, true, false},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}, true, false},
		{[]string{"client", "setinfo", "lib-ver", "5.0"}, true, false},
		{[]string{"SELECT", "0"}, true, false},
		{[]string{"SELECT", "1"}, false, false},
		{[]string{"SELECT", "00"}, false, false},
		{[]string{"SELECT", "0", "x"}, false, false},
		{[]string{"CLIENT", "SETNAME", "a"}, false, false},
		{[]string{"CLIENT", "REPLY", "OFF"}, false, false},
		{[]string{"AUTH", "pw"}, false, false},
		{[]string{"HELLO", "3"}, false, false},
		{[]string{"MULTI"}, false, false},
		{[]string{"WATCH", "k"}, false, false},
		{[]string{"BLPOP", "q", "0"}, false, false},
		{[]string{"BLMPOP", "0", "1", "q", "LEFT"}, false, false},
		{[]string{"BZMPOP", "0", "1", "z", "MIN"}, false, false},
		{[]string{"XREAD", "STREAMS", "s", "0"}, true, false},
		{[]string{"xread", "streams", "s", "0"}, true, false},
		{[]string{"XREAD", "BLOCK", "0", "STREAMS", "s", "$"}, false, false},
		{[]string{"XREAD", "COUNT", "1", "STREAMS", "s", "0"}, false, false},
		{[]string{"XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "$"}, false, false},
		{[]string{"SUBSCRIBE", "ch"}, false, false},
		{[]string{"WAIT", "1", "0"}, false, false},
		{[]string{"EVAL", "return 1", "0"}, false, false},
		{[]string{"QUIT"}, false, false},
		{[]string{"NOSUCHCOMMAND"}, false, false},
		{[]string{""}, false, false},
	}
	check := func(how string, route func(name, sub []byte, nargs int) (bool, bool)) {
		t.Helper()
		for _, tt := range tests {
			var sub []byte
			if len(tt.cmd) > 1 {
				sub = []byte(tt.cmd[1])
			}
			shared, write := route([]byte(tt.cmd[0]), sub, len(tt.cmd))
			if shared != tt.shared || write != tt.write {
				t.Errorf("%s %q: shared %v, write %v; want %v, %v", how, tt.cmd, shared, write, tt.shared, tt.write)
			}
		}
	}
	check("muxRoute", func(name, sub []byte, nargs int) (bool, bool) {
		shared, write, _ := muxRoute(name, sub, nargs)
		return shared, write
	})
	// One memo through the table, each command twice in a row (the second from what
	// it remembered), then backwards: what it remembers never decides another command.
	var m routeMemo
	twice := func(name, sub []byte, nargs int) (bool, bool) {
		shared, write := m.route(name, sub, nargs)
		if s, w := m.route(name, sub, nargs); s != shared || w != write {
			t.Errorf("routeMemo %q %q: %v, %v, then %v, %v", name, sub, shared, write, s, w)
		}
		return shared, write
	}
	check("routeMemo", twice)
	slices.Reverse(tests)
	check("routeMemo backwards", twice)
}

// BenchmarkMuxRoute is the look-up per multiplexed command: the table, and the memo
// under a run of one command.
func BenchmarkMuxRoute(b *testing.B) {
	name := []byte("GET")
	b.Run("lookup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			muxRoute(name, nil, 2)
		}
	})
	b.Run("memo", func(b *testing.B) {
		b.ReportAllocs()
		var m routeMemo
		for b.Loop() {
			m.route(name, nil, 2)
		}
	})
}

func TestConfigValue(t *testing.T) {
	tests := []struct {
		reply string
		v     int64
		ok    bool
	}{
		{"*2\r\n$18\r\nproto-max-bulk-len\r\n$7\r\n1048576\r\n", 1048576, true},
		{"%1\r\n$25\r\nclient-query-buffer-limit\r\n$10\r\n1073741824\r\n", 1073741824, true},
		{"*0\r\n", 0, false},
		{"%0\r\n", 0, false},
		{"-NOPERM this user has no permissions to run the 'config|get' command\r\n", 0, false},
		{"-ERR unknown command 'CONFIG'\r\n", 0, false},
		{"*2\r\n$1\r\nx\r\n$3\r\nabc\r\n", 0, false},
		{"*2\r\n$1\r\nx\r\n$1\r\n0\r\n", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		if v, ok := configValue([]byte(tt.reply)); v != tt.v || ok != tt.ok {
			t.Errorf("configValue(%q): got %d, %v; want %d, %v", tt.reply, v, ok, tt.v, tt.ok)
		}
	}
}

func TestNormalHardLimit(t *testing.T) {
	tests := []struct {
		v     string
		limit int64
		ok    bool
	}{
		{"normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60", 0, true},
		{"normal 67108864 33554432 10 replica 268435456 67108864 60 pubsub 33554432 8388608 60", 67108864, true},
		{"replica 268435456 67108864 60 pubsub 33554432 8388608 60 normal 1048576 0 0", 1048576, true},
		{"replica 268435456 67108864 60", 0, false},
		{"normal", 0, false},
		{"normal x 0 0", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		if limit, ok := normalHardLimit(tt.v); limit != tt.limit || ok != tt.ok {
			t.Errorf("normalHardLimit(%q): got %d, %v; want %d, %v", tt.v, limit, ok, tt.limit, tt.ok)
		}
	}
}

// TestReplyCounter: replyCounter counts replies, not RESP3 pushes, across chunks split
// anywhere, and stops after the reply that reaches its limit.
func TestReplyCounter(t *testing.T) {
	stream := "+OK\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n_\r\n$5\r\nhello\r\n*2\r\n:1\r\n$-1\r\n"
	const replies = 4 // the push is not one
	for split := range len(stream) + 1 {
		var rc replyCounter
		n := rc.count([]byte(stream[:split]), math.MaxInt64)
		n += rc.count([]byte(stream[split:]), math.MaxInt64)
		if n != len(stream) || rc.n != replies || !rc.reached(replies) || rc.reached(-1) {
			t.Fatalf("split at %d: scanned %d bytes of %d, counted %d replies; want all, %d", split, n, len(stream), rc.n, replies)
		}
	}
	for limit, want := range []int{0, 5, 40, 51, 64} {
		var rc replyCounter
		if got := rc.count([]byte(stream), int64(limit)); got != want {
			t.Errorf("limit %d: scanned %d bytes; want %d (up to the end of reply %d)", limit, got, want, limit)
		}
	}
	var rc replyCounter
	if rc.count([]byte("+OK\r\n?"), math.MaxInt64); rc.reached(1) {
		t.Errorf("after bytes that do not parse: reached; want never")
	}
}

// BenchmarkProxyReplyCount measures what counting replies costs a pinned client's
// replies (toClient): a chunk of 100 nil replies to pipelined GETs, the smallest and so
// the costliest per byte, as in BenchmarkProxyPipeline.
func BenchmarkProxyReplyCount(b *testing.B) {
	chunk := []byte(strings.Repeat("$-1\r\n", 100))
	var rc replyCounter
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		rc.count(chunk, math.MaxInt64)
	}
	if rc.n != int64(b.N)*100 {
		b.Fatalf("counted %d replies; want %d", rc.n, b.N*100)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/reply")
}
