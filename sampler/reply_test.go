package sampler

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// scanReplies feeds chunks, in order, to a new replyScanner and returns where each reply
// ends (the offset just past it in the chunks' concatenation) and the scanner's error. It
// fails t when scan breaks its contract: n out of range, a reply done without a byte, n
// short of the chunk without done, bytes counted past the input, or an error that is not
// a *ProtocolError inside the input, or that scan does not keep returning 0, false after.
func scanReplies(t testing.TB, chunks ...[]byte) ([]int, error) {
	t.Helper()
	var s replyScanner
	var ends []int
	total, off := 0, 0
	for _, c := range chunks {
		total += len(c)
	}
	for _, c := range chunks {
		for len(c) > 0 {
			n, done := s.scan(c)
			if s.err != nil {
				if n != 0 || done {
					t.Fatalf("scan at offset %d failed with %v but returned %d, %v; want 0, false", off, s.err, n, done)
				}
				var pe *ProtocolError
				if !errors.As(s.err, &pe) {
					t.Fatalf("scan error %v (%T); want a *ProtocolError", s.err, s.err)
				}
				if pe.Offset < 0 || pe.Offset >= int64(total) {
					t.Fatalf("scan error %v: offset %d outside the %d bytes of input", pe, pe.Offset, total)
				}
				if !strings.HasPrefix(pe.Reason, "reply: ") {
					t.Fatalf("scan error reason %q; want the prefix %q", pe.Reason, "reply: ")
				}
				for _, again := range [][]byte{c, []byte("+OK\r\n")} {
					if n, done := s.scan(again); n != 0 || done || s.err != pe {
						t.Fatalf("scan(%q) after error %v = %d, %v (err %v); want 0, false and the same error", again, pe, n, done, s.err)
					}
				}
				return ends, s.err
			}
			if n <= 0 && done || n < 0 || n > len(c) || !done && n != len(c) {
				t.Fatalf("scan(%d bytes at offset %d) = %d, %v; want 0 < n ≤ len when done, n == len when not", len(c), off, n, done)
			}
			off += n
			if off > total {
				t.Fatalf("scan counted %d bytes; the input has %d", off, total)
			}
			c = c[n:]
			if done {
				ends = append(ends, off)
			}
		}
	}
	if n, done := s.scan(nil); n != 0 || done {
		t.Fatalf("scan(nil) = %d, %v; want 0, false", n, done)
	}
	return ends, nil
}

// scanRepliesBy feeds stream to a new replyScanner in chunks of size bytes, or whole when
// size ≤ 0, and returns what scanReplies returns.
func scanRepliesBy(t testing.TB, stream []byte, size int) ([]int, error) {
	t.Helper()
	if size <= 0 || size >= len(stream) {
		return scanReplies(t, stream)
	}
	chunks := make([][]byte, 0, len(stream)/size+1)
	for len(stream) > size {
		chunks = append(chunks, stream[:size])
		stream = stream[size:]
	}
	return scanReplies(t, append(chunks, stream)...)
}

// replySplits returns the points at which to split a stream of n bytes in two: all of
// them for a short stream; for a long one, all within 64 bytes of either end and every
// 37th between.
func replySplits(n int) []int {
	var ps []int
	for p := 0; p <= n; p++ {
		if n <= 512 || p < 64 || p > n-64 || p%37 == 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

// replyRef is the reference the scanner is checked against: a recursive-descent parser of
// a whole buffer, strict where the scanner is lenient (every line and bulk payload ends in
// "\r\n", a length is -1 or digits) and with the scanner's limits. Whatever it parses the
// scanner must split the same way.
type replyRef struct {
	buf   []byte
	types [256]bool // type bytes seen
	nulls [256]bool // type bytes seen with length -1
}

var errRefIncomplete = errors.New("buffer ends inside a reply")

// replies parses replies from the start of buf and returns where each ends. Its error is
// errRefIncomplete when buf ends inside a reply.
func (r *replyRef) replies() ([]int, error) {
	var ends []int
	for i := 0; i < len(r.buf); {
		j, err := r.reply(i, 0)
		if err != nil {
			return ends, err
		}
		ends = append(ends, j)
		i = j
	}
	return ends, nil
}

// line returns the offset of the "\r\n" that ends the line starting at i.
func (r *replyRef) line(i int) (int, error) {
	j := bytes.IndexByte(r.buf[i:], '\n')
	if j < 0 {
		return 0, errRefIncomplete
	}
	if j == 0 || r.buf[i+j-1] != '\r' {
		return 0, fmt.Errorf("line at %d: no \\r before its \\n", i)
	}
	return i + j - 1, nil
}

// reply parses the reply at i, inside depth open non-empty aggregates, and returns its end.
func (r *replyRef) reply(i, depth int) (int, error) {
	if i >= len(r.buf) {
		return 0, errRefIncomplete
	}
	t := r.buf[i]
	r.types[t] = true
	switch t {
	case '+', '-', ':', ',', '#', '_', '(':
		e, err := r.line(i + 1)
		return e + 2, err
	case '$', '=', '!', '*', '~', '>', '%', '|':
	default:
		return 0, fmt.Errorf("type byte %q at %d", t, i)
	}
	e, err := r.line(i + 1)
	if err != nil {
		return 0, err
	}
	digits := r.buf[i+1 : e]
	next := e + 2
	if string(digits) == "-1" {
		r.nulls[t] = true
		return next, nil
	}
	if len(digits) == 0 {
		return 0, fmt.Errorf("length at %d: no digits", i)
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("length at %d: %q", i, digits)
		}
		if n = n*10 + int64(c-'0'); n > replyMaxLen {
			return 0, fmt.Errorf("length at %d: over %d", i, int64(replyMaxLen))
		}
	}
	switch t {
	case '$', '=', '!':
		end := int64(next) + n + 2
		if end > int64(len(r.buf)) {
			return 0, errRefIncomplete
		}
		if r.buf[end-2] != '\r' || r.buf[end-1] != '\n' {
			return 0, fmt.Errorf("bulk at %d: no \\r\\n after its %d bytes", i, n)
		}
		return int(end), nil
	case '%':
		n *= 2
	case '|':
		n = 2*n + 1
	}
	if n > 0 && depth >= replyMaxDepth {
		return 0, fmt.Errorf("aggregate at %d: nested over %d deep", i, replyMaxDepth)
	}
	for range n {
		if next, err = r.reply(next, depth+1); err != nil {
			return 0, err
		}
	}
	return next, nil
}

// replyTestCmd is a command of TestReplyScannerRealRedis and how many replies it gets.
type replyTestCmd struct {
	args    []string
	replies int // 0 for 1
}

// replyTestBig is the value of the large bulk string in TestReplyScannerRealRedis.
var replyTestBig = strings.Repeat("0123456789abcdef", 6400) // 100 KiB

// replyTestCmds returns a pipeline, on keys starting with p, whose replies cover every
// type Redis sends: with resp3 it starts with HELLO 3.
func replyTestCmds(p string, resp3 bool) []replyTestCmd {
	c := func(args ...string) replyTestCmd { return replyTestCmd{args: args} }
	cmds := []replyTestCmd{
		c("SET", p+"str", "hello"),
		c("GET", p+"str"),
		c("GET", p+"missing"),
		c("SET", p+"empty", ""),
		c("GET", p+"empty"),
		c("INCR", p+"n"),
		c("INCRBY", p+"n", "41"),
		c("LPUSH", p+"str", "x"), // WRONGTYPE
		c("NOSUCHCOMMAND", "a"),
		c("MSET", p+"a", "1", p+"b", "2"),
		c("MGET", p+"a", p+"missing", p+"b", p+"missing2"),
		c("RPUSH", p+"list", "a", "b", "c", "d", "e"),
		c("LRANGE", p+"list", "0", "-1"),
		c("LRANGE", p+"missing", "0", "-1"), // empty array
		c("XADD", p+"stream", "1-1", "f1", "v1", "f2", "v2"),
		c("XADD", p+"stream", "2-1", "f", "v"),
		c("XRANGE", p+"stream", "-", "+"),
		c("XREAD", "COUNT", "10", "STREAMS", p+"stream", "0"),
		c("XREAD", "STREAMS", p+"missing", "0"), // null array
		c("XINFO", "STREAM", p+"stream"),
		c("COMMAND", "INFO", "get", "set"),
		c("SCAN", "0", "COUNT", "1000"),
		c("ZADD", p+"z", "1", "a", "2.5", "b", "3", "c"),
		c("ZRANGE", p+"z", "0", "-1", "WITHSCORES"),
		c("ZSCORE", p+"z", "b"),
		c("HSET", p+"h", "f1", "v1", "f2", "v2"),
		c("HGETALL", p+"h"),
		c("HGETALL", p+"missing"), // empty map
		c("HRANDFIELD", p+"h", "-3", "WITHVALUES"),
		c("CONFIG", "GET", "maxmemory*"),
		c("SADD", p+"s", "a", "b", "c"),
		c("SMEMBERS", p+"s"),
		c("SISMEMBER", p+"s", "a"),
		c("SET", p+"big", replyTestBig),
		c("GET", p+"big"),
		c("MULTI"),
		c("INCR", p+"n"),
		c("GET", p+"str"),
		c("LRANGE", p+"list", "0", "1"),
		c("EXEC"),
		c("BLPOP", p+"missing", "0.01"), // null array after a pause
		c("EVAL", "return {1, {2, {3, {}}}, 'x', false, redis.error_reply('inner')}", "0"),
		c("MEMORY", "STATS"),
		c("ACL", "GETUSER", "default"),
		c("INFO", "server"),
		c("CLIENT", "INFO"),
	}
	for _, typ := range []string{"attrib", "verbatim", "bignum", "double", "true", "false", "null", "map", "set", "array"} {
		cmds = append(cmds, c("DEBUG", "PROTOCOL", typ))
	}
	// A push, then the reply: two replies in RESP3; in RESP2 an error.
	push := c("DEBUG", "PROTOCOL", "push")
	if resp3 {
		push.replies = 2
	}
	cmds = append(cmds, push,
		c("SUBSCRIBE", p+"ch"), // a push in RESP3, an array in RESP2
		c("PING"),
		c("UNSUBSCRIBE", p+"ch"),
	)
	if resp3 {
		cmds = append([]replyTestCmd{c("HELLO", "3")}, cmds...)
	}
	return cmds
}

// readReplyStream reads from conn until a replyScanner has counted want replies, and
// returns the bytes read. It fails t when a read waits 10s.
func readReplyStream(t *testing.T, conn net.Conn, want int) []byte {
	t.Helper()
	var s replyScanner
	var stream []byte
	buf := make([]byte, 16<<10)
	for got := 0; got < want; {
		if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		stream = append(stream, buf[:n]...)
		for data := buf[:n]; len(data) > 0; {
			k, done := s.scan(data)
			if s.err != nil {
				t.Fatalf("scan: %v\nstream so far:\n%q", s.err, stream)
			}
			data = data[k:]
			if done {
				if got++; got > want {
					t.Fatalf("got more than %d replies; stream:\n%q", want, stream)
				}
			}
		}
		if err != nil {
			t.Fatalf("read after %d of %d replies: %v\nstream so far:\n%q", got, want, err, stream)
		}
	}
	return stream
}

func TestReplyScannerRealRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--enable-debug-command", "yes"}})
	for _, tc := range []struct {
		name  string
		resp3 bool
		types string // type bytes the replies must include
		nulls string // type bytes that must come with length -1
	}{
		{name: "RESP2", types: "+-:$*", nulls: "$*"},
		{name: "RESP3", resp3: true, types: "+-:$*%~,_#(=|>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", srv.Addr(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cmds := replyTestCmds(strings.ToLower(tc.name)+":", tc.resp3)
			var req []byte
			want := 0
			for _, c := range cmds {
				req = append(req, respCmd(c.args...)...)
				want += max(c.replies, 1)
			}
			// Write while reading: the replies may not fit in the socket buffers.
			written := make(chan error, 1)
			go func() {
				_, err := conn.Write(req)
				written <- err
			}()
			stream := readReplyStream(t, conn, want)
			if err := <-written; err != nil {
				t.Fatal(err)
			}

			ref := replyRef{buf: stream}
			wantEnds, err := ref.replies()
			if err != nil {
				t.Fatalf("reference parser: %v", err)
			}
			if len(wantEnds) != want {
				t.Fatalf("reference parser: got %d replies; want %d", len(wantEnds), want)
			}
			for _, typ := range []byte(tc.types) {
				if !ref.types[typ] {
					t.Errorf("no reply of type %q; the commands must cover it", typ)
				}
			}
			for _, typ := range []byte(tc.nulls) {
				if !ref.nulls[typ] {
					t.Errorf("no null (length -1) of type %q; the commands must cover it", typ)
				}
			}
			for _, s := range []string{"WRONGTYPE", "unknown command", replyTestBig} {
				if !bytes.Contains(stream, []byte(s)) {
					t.Errorf("the replies do not contain %.40q", s)
				}
			}

			for size := 0; size <= 64; size++ {
				ends, err := scanRepliesBy(t, stream, size)
				if err != nil || !slices.Equal(ends, wantEnds) {
					t.Fatalf("chunks of %d bytes: got ends %v, %v; want %v, nil", size, ends, err, wantEnds)
				}
			}
			// Two chunks split anywhere but deep inside the large value, where every split
			// is alike.
			var splits []int
			for p := 0; p <= len(stream); p++ {
				splits = append(splits, p)
				if bytes.HasPrefix(stream[p:], []byte(replyTestBig)) {
					for q := p + 1; q < p+64; q++ {
						splits = append(splits, q)
					}
					p += len(replyTestBig) - 64
				}
			}
			for _, p := range splits {
				ends, err := scanReplies(t, stream[:p], stream[p:])
				if err != nil || !slices.Equal(ends, wantEnds) {
					t.Fatalf("split at %d: got ends %v, %v; want %v, nil", p, ends, err, wantEnds)
				}
			}
		})
	}
}

// replyCases are hand-written streams: ends are the offsets just past each reply, err a
// substring of the error's reason ("" for none), and off the offset of the byte at fault.
var replyCases = []struct {
	name string
	in   string
	ends []int
	err  string
	off  int64
}{
	{name: "empty", in: ""},
	{name: "simple", in: "+OK\r\n", ends: []int{5}},
	{name: "error", in: "-ERR unknown command 'x'\r\n", ends: []int{26}},
	{name: "integer", in: ":-42\r\n", ends: []int{6}},
	{name: "double", in: ",3.14\r\n,inf\r\n", ends: []int{7, 13}},
	{name: "boolean", in: "#t\r\n#f\r\n", ends: []int{4, 8}},
	{name: "null", in: "_\r\n", ends: []int{3}},
	{name: "big number", in: "(3492890328409238509324850943850943825024385\r\n", ends: []int{46}},
	{name: "empty line", in: "+\r\n", ends: []int{3}},
	{name: "line with CR inside", in: "+a\rb\r\n:1\r\n", ends: []int{6, 10}},
	{name: "bulk", in: "$5\r\nhello\r\n", ends: []int{11}},
	{name: "bulk with CRLF inside", in: "$6\r\n\r\n*1\r\n\r\n", ends: []int{12}},
	{name: "empty bulk", in: "$0\r\n\r\n", ends: []int{6}},
	{name: "null bulk", in: "$-1\r\n", ends: []int{5}},
	{name: "length with leading zeros", in: "$03\r\nabc\r\n", ends: []int{10}},
	{name: "verbatim", in: "=15\r\ntxt:Some string\r\n", ends: []int{22}},
	{name: "blob error", in: "!21\r\nSYNTAX invalid syntax\r\n", ends: []int{28}},
	{name: "array", in: "*3\r\n:1\r\n$1\r\na\r\n+b\r\n", ends: []int{19}},
	{name: "empty array", in: "*0\r\n:1\r\n", ends: []int{4, 8}},
	{name: "null array", in: "*-1\r\n:1\r\n", ends: []int{5, 9}},
	{name: "null in array", in: "*3\r\n$-1\r\n*-1\r\n_\r\n", ends: []int{17}},
	{name: "nested", in: "*2\r\n*2\r\n:1\r\n*0\r\n*1\r\n*1\r\n+x\r\n", ends: []int{28}},
	{name: "map", in: "%2\r\n+a\r\n:1\r\n+b\r\n*2\r\n:1\r\n:2\r\n", ends: []int{28}},
	{name: "empty map", in: "%0\r\n+OK\r\n", ends: []int{4, 9}},
	{name: "set", in: "~2\r\n+a\r\n+b\r\n", ends: []int{12}},
	{name: "push", in: ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n+OK\r\n", ends: []int{33, 38}},
	{name: "attribute", in: "|1\r\n+key\r\n+val\r\n:5\r\n", ends: []int{20}},
	{name: "empty attribute", in: "|0\r\n:5\r\n:6\r\n", ends: []int{8, 12}},
	{name: "attribute on an aggregate", in: "|1\r\n+k\r\n*2\r\n:1\r\n:2\r\n*2\r\n:3\r\n:4\r\n", ends: []int{32}},
	{name: "attribute in an array", in: "*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n:2\r\n:3\r\n", ends: []int{24, 28}},
	{name: "attribute on an attribute", in: "|1\r\n+a\r\n+b\r\n|1\r\n+c\r\n+d\r\n:1\r\n", ends: []int{28}},
	{name: "depth limit", in: strings.Repeat("*1\r\n", replyMaxDepth) + ":1\r\n", ends: []int{4*replyMaxDepth + 4}},
	{name: "largest length", in: "*70368744177664\r\n", ends: nil},
	{name: "pipeline", in: "+OK\r\n$3\r\nbar\r\n:1\r\n*2\r\n$3\r\nfoo\r\n$-1\r\n-ERR x\r\n", ends: []int{5, 14, 18, 36, 44}},

	{name: "bad type byte", in: "x\r\n", err: `got 'x'; want a RESP type byte`, off: 0},
	{name: "bad type byte in array", in: "*2\r\n:1\r\n?\r\n", err: `got '?'; want a RESP type byte`, off: 8},
	{name: "bad type byte after replies", in: "+OK\r\n:1\r\n\x00", ends: []int{5, 9}, err: `got '\x00'; want a RESP type byte`, off: 9},
	{name: "streamed string", in: "$?\r\n;4\r\nHell\r\n;0\r\n", err: `length: got '?'; want a digit`, off: 1},
	{name: "bad digit", in: "$1x\r\nab\r\n", err: `length: got 'x'; want a digit`, off: 2},
	{name: "space in length", in: "*1 \r\n", err: `length: got ' '; want a digit`, off: 2},
	{name: "minus after digits", in: "*1-\r\n", err: `length: got '-'; want a digit`, off: 2},
	{name: "two minus", in: "$--1\r\n", err: `length: got '-'; want a digit`, off: 2},
	{name: "length -2", in: "+OK\r\n*-2\r\n", ends: []int{5}, err: "length -2: want -1 or ≥ 0", off: 9},
	{name: "length -0", in: "$-0\r\n", err: "length -0: want -1 or ≥ 0", off: 4},
	{name: "nested length -2", in: "*1\r\n$-2\r\n", err: "length -2: want -1 or ≥ 0", off: 8},
	{name: "length without digits", in: "$\r\n", err: "length without digits", off: 2},
	{name: "minus without digits", in: "*-\r\n", err: "length without digits", off: 3},
	{name: "length over the limit", in: "$70368744177665\r\n", err: "length over 70368744177664", off: 14},
	{name: "length overflowing int64", in: "*99999999999999999999999\r\n", err: "length over 70368744177664", off: 14},
	{name: "too deep", in: strings.Repeat("*1\r\n", replyMaxDepth+1) + ":1\r\n", err: "aggregates nested over 1024 deep", off: 4*replyMaxDepth + 3},
	{name: "too deep maps", in: strings.Repeat("%1\r\n+k\r\n", replyMaxDepth+1) + ":1\r\n", err: "aggregates nested over 1024 deep", off: 8*replyMaxDepth + 3},
}

func TestReplyScannerCases(t *testing.T) {
	for _, tc := range replyCases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			check := func(how string, ends []int, err error) {
				t.Helper()
				if !slices.Equal(ends, tc.ends) {
					t.Fatalf("%s: got ends %v; want %v", how, ends, tc.ends)
				}
				switch {
				case tc.err == "" && err != nil:
					t.Fatalf("%s: got error %v; want none", how, err)
				case tc.err != "" && err == nil:
					t.Fatalf("%s: got no error; want one with %q", how, tc.err)
				case tc.err != "" && !strings.Contains(err.Error(), tc.err):
					t.Fatalf("%s: got error %q; want one with %q", how, err, tc.err)
				}
			}
			for _, size := range []int{0, 1, 2, 3, 5, 7} {
				ends, err := scanRepliesBy(t, in, size)
				check(fmt.Sprintf("chunks of %d", size), ends, err)
			}
			for _, p := range replySplits(len(in)) {
				ends, err := scanReplies(t, in[:p], in[p:])
				check(fmt.Sprintf("split at %d", p), ends, err)
			}
			if tc.err == "" {
				// Whatever the strict reference parses, the scanner splits alike.
				ref := replyRef{buf: in}
				if ends, err := ref.replies(); err == nil && !slices.Equal(ends, tc.ends) {
					t.Errorf("reference parser: got ends %v; want %v", ends, tc.ends)
				}
			}
		})
	}
}

// TestReplyScannerErrorOffset checks that an error's offset is that of the byte at fault
// however the stream is chunked.
func TestReplyScannerErrorOffset(t *testing.T) {
	for _, tc := range replyCases {
		if tc.err == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			var bad []string
			splits := replySplits(len(in))
			for _, p := range splits {
				_, err := scanReplies(t, in[:p], in[p:])
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("split at %d: got error %v; want a *ProtocolError", p, err)
				}
				if pe.Offset != tc.off {
					bad = append(bad, fmt.Sprintf("split at %d: %d", p, pe.Offset))
				}
			}
			if len(bad) > 0 {
				t.Errorf("got offsets other than %d (%q) in %d of %d splits: %s",
					tc.off, in[tc.off], len(bad), len(splits), strings.Join(bad[:min(len(bad), 6)], ", "))
			}
		})
	}
}

func FuzzReplyScanner(f *testing.F) {
	for _, tc := range replyCases {
		f.Add([]byte(tc.in), uint(len(tc.in)/2))
	}
	f.Add([]byte("|1\r\n+key\r\n+val\r\n:5\r\n*2\r\n$3\r\nfoo\r\n$-1\r\n"), uint(9))
	f.Fuzz(func(t *testing.T, in []byte, split uint) {
		p := int(split % uint(len(in)+1))
		whole, wholeErr := scanReplies(t, in)
		for _, c := range []struct {
			how    string
			chunks [][]byte
		}{
			{fmt.Sprintf("split at %d", p), [][]byte{in[:p], in[p:]}},
			{"split in three", [][]byte{in[:p/2], in[p/2 : p], in[p:]}},
		} {
			ends, err := scanReplies(t, c.chunks...)
			if !slices.Equal(ends, whole) || fmt.Sprint(err) != fmt.Sprint(wholeErr) {
				t.Fatalf("%s: got %v, %v; whole: %v, %v", c.how, ends, err, whole, wholeErr)
			}
		}
		// Whatever the strict reference parses, the scanner splits alike.
		ref := replyRef{buf: in}
		refEnds, refErr := ref.replies()
		if len(whole) < len(refEnds) || !slices.Equal(whole[:len(refEnds)], refEnds) {
			t.Fatalf("got ends %v, %v; the reference parser found %v, %v", whole, wholeErr, refEnds, refErr)
		}
		if refErr == nil && (len(whole) != len(refEnds) || wholeErr != nil) {
			t.Fatalf("got ends %v, %v; the reference parser found %v and no error", whole, wholeErr, refEnds)
		}
	})
}

// replyGen builds RESP replies from a byte stream that drives every choice: type, size,
// payload and nesting. Once src runs out it reads zeros, which choose the smallest reply,
// so any src gives replies of bounded size.
type replyGen struct {
	src    []byte
	budget int // replies it may still build, to bound the size
}

const replyGenDepth = 5

func (g *replyGen) next() byte {
	if len(g.src) == 0 {
		return 0
	}
	c := g.src[0]
	g.src = g.src[1:]
	return c
}

// The types replyGen picks from: simple lines, then bulk strings, then nulls, then
// aggregates, so that a choice modulo replyGenScalars is a reply that nests nothing.
const (
	replyGenTypes   = "+-:,#_($=!" + "01" + "*~>%|" // 0 and 1 stand for $-1 and *-1
	replyGenScalars = 12
)

// reply appends one reply, inside depth aggregates, to b.
func (g *replyGen) reply(b []byte, depth int) []byte {
	g.budget--
	k := int(g.next()) % len(replyGenTypes)
	if depth >= replyGenDepth || g.budget <= 0 {
		k %= replyGenScalars
	}
	t := replyGenTypes[k]
	switch t {
	case '+', '-':
		b = append(b, t)
		for range g.next() % 16 {
			b = append(b, "abc XYZ:-*$%_"[g.next()%13])
		}
	case ':', '(':
		b = append(b, t)
		b = strconv.AppendInt(b, int64(int32(uint32(g.next())<<24|uint32(g.next()))), 10)
	case ',':
		b = append(b, t)
		b = append(b, []string{"3.14", "inf", "-inf", "nan", "1e+300", "0"}[g.next()%6]...)
	case '#':
		b = append(b, t, "tf"[g.next()%2])
	case '_':
		b = append(b, t)
	case '$', '=', '!':
		n := int(g.next() % 24)
		if n == 23 && len(b) < 64<<10 {
			n = 256 + 40*int(g.next())
		}
		b = append(b, t)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, "\r\n"...)
		if t == '=' && n >= 4 {
			b = append(b, "txt:"...)
			n -= 4
		}
		for i := range n {
			b = append(b, "\r\n*$+:ab"[(int(g.next())+i)%8])
		}
	case '0':
		b = append(b, "$-1"...)
	case '1':
		b = append(b, "*-1"...)
	default:
		n := int(g.next() % 8)
		b = append(b, t)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, "\r\n"...)
		switch t {
		case '%':
			n *= 2
		case '|':
			n = 2*n + 1 // the pairs and the reply they annotate
		}
		for range n {
			b = g.reply(b, depth+1)
		}
		return b
	}
	return append(b, "\r\n"...)
}

// genReplyStream builds a stream of 1 to 8 replies from src and returns it with the offset
// just past each reply.
func genReplyStream(src []byte) ([]byte, []int) {
	g := replyGen{src: src, budget: 500}
	var stream []byte
	var ends []int
	for range 1 + g.next()%8 {
		stream = g.reply(stream, 0)
		ends = append(ends, len(stream))
	}
	return stream, ends
}

// checkGenReplyStream checks that the scanner, in chunks of size bytes and whole, and the
// reference parser find the ends of the replies built from src.
func checkGenReplyStream(t testing.TB, src []byte, size int) {
	t.Helper()
	stream, want := genReplyStream(src)
	for _, s := range []int{0, size} {
		ends, err := scanRepliesBy(t, stream, s)
		if err != nil || !slices.Equal(ends, want) {
			t.Fatalf("chunks of %d: got ends %v, %v; want %v, nil\nstream: %q", s, ends, err, want, stream)
		}
	}
	ref := replyRef{buf: stream}
	if ends, err := ref.replies(); err != nil || !slices.Equal(ends, want) {
		t.Fatalf("reference parser: got ends %v, %v; want %v, nil\nstream: %q", ends, err, want, stream)
	}
}

func TestReplyScannerGenerated(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 512)
	for i := range n {
		for j := range src {
			src[j] = byte(r.Uint32())
		}
		checkGenReplyStream(t, src, 1+i%17)
	}
}

func FuzzReplyScannerGenerated(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add([]byte{3, 14, 2, 1, 13, 1, 0, 1}, uint8(1))
	f.Add([]byte("the quick brown fox jumps over the lazy dog"), uint8(5))
	f.Add(bytes.Repeat([]byte{255, 14, 4}, 40), uint8(63))
	f.Fuzz(func(t *testing.T, src []byte, size uint8) {
		checkGenReplyStream(t, src, 1+int(size%64))
	})
}

// replyBenchStream is 50 small replies, as a shared connection carries them: +OK, short
// bulk strings, integers and MGET arrays.
func replyBenchStream() ([]byte, int) {
	var b []byte
	for i := range 50 {
		switch i % 4 {
		case 0:
			b = append(b, "+OK\r\n"...)
		case 1:
			b = append(b, "$3\r\nbar\r\n"...)
		case 2:
			b = append(b, ":1\r\n"...)
		case 3:
			b = append(b, "*2\r\n$3\r\nfoo\r\n$-1\r\n"...)
		}
	}
	return b, 50
}

// scanReplyStream scans data whole with s, as the shared connection's reader does, and returns
// how many replies ended in it.
func scanReplyStream(s *replyScanner, data []byte) int {
	replies := 0
	for len(data) > 0 && s.err == nil {
		n, done := s.scan(data)
		data = data[n:]
		if done {
			replies++
		}
	}
	return replies
}

var replySink int

func TestReplyScannerAllocs(t *testing.T) {
	stream, want := replyBenchStream()
	var s replyScanner // one per connection, as in the proxy
	allocs := testing.AllocsPerRun(100, func() {
		replySink = scanReplyStream(&s, stream)
	})
	if replySink != want || s.err != nil {
		t.Fatalf("got %d replies, %v; want %d, nil", replySink, s.err, want)
	}
	if allocs != 0 {
		t.Errorf("got %v allocs per stream of %d replies; want 0", allocs, want)
	}
}

func BenchmarkReplyScanner(b *testing.B) {
	stream, want := replyBenchStream()
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(stream)))
		var s replyScanner
		for b.Loop() {
			replySink = scanReplyStream(&s, stream)
		}
		if replySink != want {
			b.Fatalf("got %d replies; want %d", replySink, want)
		}
	})
	// The baseline: the recursive reference parser, on a whole buffer only.
	b.Run("recursive", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(stream)))
		ref := &replyRef{buf: stream}
		for b.Loop() {
			replies := 0
			for i := 0; i < len(stream); replies++ {
				var err error
				if i, err = ref.reply(i, 0); err != nil {
					b.Fatal(err)
				}
			}
			replySink = replies
		}
		if replySink != want {
			b.Fatalf("got %d replies; want %d", replySink, want)
		}
	})
}
