package sampler

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// respCmd renders args as a RESP array of bulk strings.
func respCmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// parsed is one command as the tests see it.
type parsed struct {
	args  []string
	sizes []int64
	n     int
}

func (c parsed) String() string {
	return fmt.Sprintf("%q sizes %v n %d", c.args, c.sizes, c.n)
}

// parseChunks feeds chunks to p and collects the commands and the error.
func parseChunks(p *RESPParser, chunks ...[]byte) ([]parsed, error) {
	var out []parsed
	for _, c := range chunks {
		p.Feed(c)
		for p.Next() {
			var cmd parsed
			for i, a := range p.Args() {
				cmd.args = append(cmd.args, string(a))
				cmd.sizes = append(cmd.sizes, p.ArgSize(i))
			}
			cmd.n = p.NArgs()
			out = append(out, cmd)
		}
	}
	return out, p.Err()
}

func newTestParser(t testing.TB, o RESPOptions) *RESPParser {
	t.Helper()
	p, err := NewRESPParser(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sameCommands(a, b []parsed) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func TestRESPParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want [][]string
	}{
		{"get", respCmd("GET", "k"), [][]string{{"GET", "k"}}},
		{"pipeline", respCmd("SET", "a", "1") + respCmd("GET", "a") + respCmd("PING"),
			[][]string{{"SET", "a", "1"}, {"GET", "a"}, {"PING"}}},
		{"empty arg", respCmd("SET", "", ""), [][]string{{"SET", "", ""}}},
		{"binary", respCmd("SET", "k\r\n\x00", "\xff"), [][]string{{"SET", "k\r\n\x00", "\xff"}}},
		{"empty arrays are ignored", "*0\r\n*-1\r\n" + respCmd("PING"), [][]string{{"PING"}}},
		{"inline", "GET k\r\n", [][]string{{"GET", "k"}}},
		{"inline lf only", "GET k\nPING\n", [][]string{{"GET", "k"}, {"PING"}}},
		{"inline blank lines ignored", "\r\n\n  \r\nPING\r\n", [][]string{{"PING"}}},
		{"inline spaces", "  SET   a\tb  \r\n", [][]string{{"SET", "a", "b"}}},
		{"inline double quotes", `SET "a b" "\x41\n\"\\\t\r\a\b\q"` + "\r\n",
			[][]string{{"SET", "a b", "A\n\"\\\t\r\a\bq"}}},
		{"inline single quotes", `SET 'a "b' 'it\'s'` + "\r\n", [][]string{{"SET", `a "b`, "it's"}}},
		{"inline empty quoted", `SET "" ''` + "\r\n", [][]string{{"SET", "", ""}}},
		{"inline then resp", "PING\r\n" + respCmd("GET", "k"), [][]string{{"PING"}, {"GET", "k"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestParser(t, RESPOptions{})
			got, err := parseChunks(p, []byte(tt.in))
			if err != nil {
				t.Fatalf("err %v; want nil", err)
			}
			var gotArgs [][]string
			for _, c := range got {
				gotArgs = append(gotArgs, c.args)
				if c.n != len(c.args) {
					t.Errorf("NArgs %d; want %d", c.n, len(c.args))
				}
			}
			if fmt.Sprintf("%q", gotArgs) != fmt.Sprintf("%q", tt.want) {
				t.Fatalf("got %q; want %q", gotArgs, tt.want)
			}
			if p.Offset() != int64(len(tt.in)) {
				t.Fatalf("Offset() = %d; want %d", p.Offset(), len(tt.in))
			}
		})
	}
}

func TestRESPErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		offset int64
		reason string
	}{
		{"letter in array length", "*2x\r\n", 2, "array length"},
		{"no digits", "*\r\n", 2, "no digits"},
		{"cr without lf", "*1\rX", 3, `want '\n'`},
		{"not a dollar", "*1\r\n:5\r\n", 4, "want '$'"},
		{"negative bulk", "*1\r\n$-1\r\n", 9, "must be ≥ 0"},
		{"huge bulk", "*1\r\n$99999999999999999\r\n", 18, "over"},
		{"huge array", "*99999999999\r\n", 10, "over"},
		{"payload too long", "*1\r\n$1\r\nab\r\n", 9, `want '\r'`},
		{"payload cr without lf", "*1\r\n$1\r\na\rb", 10, `want '\n'`},
		{"unbalanced quotes", "PING\r\nSET \"a\r\n", 6, "unbalanced quotes"},
		{"text after quote", "SET \"a\"b\r\n", 0, "closing quote"},
		// Redis reads lengths with string2ll, which refuses these.
		{"leading zero in array length", "*02\r\n", 2, "leading zero"},
		{"leading zero in bulk length", "*1\r\n$03\r\nGET\r\n", 6, "leading zero"},
		{"array length -0", "*-0\r\n", 2, "leading zero"},
		{"bulk length -0", "*1\r\n$-0\r\n\r\n", 6, "leading zero"},
		{"inline too long", strings.Repeat("a", respMaxInline+1), 0, "over 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestParser(t, RESPOptions{})
			_, err := parseChunks(p, []byte(tt.in))
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("err %v; want a *ProtocolError", err)
			}
			if pe.Offset != tt.offset || !strings.Contains(pe.Reason, tt.reason) {
				t.Fatalf("got offset %d reason %q; want offset %d reason containing %q",
					pe.Offset, pe.Reason, tt.offset, tt.reason)
			}
			if !strings.HasPrefix(err.Error(), "resp: protocol error at byte ") {
				t.Fatalf("Error() = %q; want it to start with \"resp: protocol error at byte \"", err)
			}
			// The error is sticky until Reset.
			p.Feed([]byte(respCmd("PING")))
			if p.Next() {
				t.Fatalf("Next after an error: got true; want false")
			}
			p.Reset()
			got, err := parseChunks(p, []byte(respCmd("PING")))
			if err != nil || len(got) != 1 {
				t.Fatalf("after Reset: got %v, %v; want one PING", got, err)
			}
		})
	}
}

// TestRESPSplitEverywhere checks that a stream split at every byte, and split into
// single bytes, parses the same as whole.
func TestRESPSplitEverywhere(t *testing.T) {
	stream := respCmd("SET", "key:1", "value") + "GET \"a\\x00b\"\r\n" + respCmd("MGET", "a", "b", "c") +
		"*0\r\n" + respCmd("HSET", "h", "f", strings.Repeat("v", 300))
	whole, err := parseChunks(newTestParser(t, RESPOptions{MaxArgBytes: 100}), []byte(stream))
	if err != nil || len(whole) != 4 {
		t.Fatalf("whole: got %v, %v; want 4 commands", whole, err)
	}
	for i := 0; i <= len(stream); i++ {
		p := newTestParser(t, RESPOptions{MaxArgBytes: 100})
		got, err := parseChunks(p, []byte(stream[:i]), []byte(stream[i:]))
		if err != nil || !sameCommands(got, whole) {
			t.Fatalf("split at %d: got %v, %v; want %v", i, got, err, whole)
		}
	}
	var bytewise [][]byte
	for i := range len(stream) {
		bytewise = append(bytewise, []byte{stream[i]})
	}
	got, err := parseChunks(newTestParser(t, RESPOptions{MaxArgBytes: 100}), bytewise...)
	if err != nil || !sameCommands(got, whole) {
		t.Fatalf("byte by byte: got %v, %v; want %v", got, err, whole)
	}
}

func TestRESPLimits(t *testing.T) {
	p := newTestParser(t, RESPOptions{MaxArgs: 3, MaxArgBytes: 4})
	got, err := parseChunks(p, []byte(respCmd("MSET", "key1", "value1", "k2", "v2")+"SET abcdefg hi\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []parsed{
		{args: []string{"MSET", "key1", "valu"}, sizes: []int64{4, 4, 6}, n: 5},
		{args: []string{"SET", "abcd", "hi"}, sizes: []int64{3, 7, 2}, n: 3},
	}
	if !sameCommands(got, want) {
		t.Fatalf("got %v; want %v", got, want)
	}
}

// TestRESPHugeValue streams a SET with a 10 MB value in 64 KiB reads and checks that the
// parser keeps only a prefix.
func TestRESPHugeValue(t *testing.T) {
	const size = 10 << 20
	var b bytes.Buffer
	b.WriteString("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$" + strconv.Itoa(size) + "\r\n")
	b.Write(bytes.Repeat([]byte{'x'}, size))
	b.WriteString("\r\n" + respCmd("GET", "big"))
	p := newTestParser(t, RESPOptions{})
	var chunks [][]byte
	for s := b.Bytes(); len(s) > 0; {
		n := min(len(s), 64<<10)
		chunks = append(chunks, s[:n])
		s = s[n:]
	}
	got, err := parseChunks(p, chunks...)
	if err != nil || len(got) != 2 {
		t.Fatalf("got %d commands, %v; want 2", len(got), err)
	}
	if got[0].sizes[2] != size || len(got[0].args[2]) != DefaultRESPMaxArgBytes {
		t.Fatalf("value: size %d kept %d; want size %d kept %d",
			got[0].sizes[2], len(got[0].args[2]), size, DefaultRESPMaxArgBytes)
	}
	if cap(p.buf) > 64<<10 {
		t.Fatalf("buffer grew to %d bytes; want it bounded by the kept prefix", cap(p.buf))
	}
}

func TestRESPSkip(t *testing.T) {
	p := newTestParser(t, RESPOptions{})
	p.Feed([]byte(respCmd("SET", "a", "1") + respCmd("GET", "a")))
	if !p.Skip() || len(p.Args()) != 0 || p.NArgs() != 3 || string(p.Name()) != "SET" {
		t.Fatalf("Skip: got args %q n %d name %q; want none, 3 and SET", p.Args(), p.NArgs(), p.Name())
	}
	if !p.Next() || fmt.Sprintf("%q", p.Args()) != `["GET" "a"]` || string(p.Name()) != "GET" {
		t.Fatalf("Next: got %q name %q; want [GET a] and GET", p.Args(), p.Name())
	}
	p.Feed([]byte("incr  n\r\n"))
	if !p.Skip() || string(p.Name()) != "incr" || string(p.Sub()) != "n" || len(p.Args()) != 0 || p.NArgs() != 2 {
		t.Fatalf("Skip inline: got name %q sub %q args %q n %d; want incr, n, none, 2", p.Name(), p.Sub(), p.Args(), p.NArgs())
	}
	if p.Next() || p.Skip() {
		t.Fatalf("Next after the input: got true; want false")
	}
	// A command begun by Skip stays skipped when Next finishes it.
	cmd := respCmd("GET", "b")
	p.Feed([]byte(cmd[:5]))
	if p.Skip() {
		t.Fatalf("Skip on half a command: got true; want false")
	}
	p.Feed([]byte(cmd[5:]))
	if !p.Next() || len(p.Args()) != 0 || p.NArgs() != 2 {
		t.Fatalf("Next finishing a skipped command: got %q n %d; want no args, n 2", p.Args(), p.NArgs())
	}
}

// TestRESPRefeed: a caller that stops before the end of its input and moves it (the
// proxy's loop, see parseMore) has the parser go on from the moved bytes.
func TestRESPRefeed(t *testing.T) {
	p := newTestParser(t, RESPOptions{})
	first, second := respCmd("SET", "a", "1"), respCmd("GET", "bb")
	buf := []byte(first + second + second[:6])
	p.Feed(buf)
	if !p.Next() || p.Buffered() != len(second)+6 {
		t.Fatalf("Next: Buffered %d; want the %d bytes after SET", p.Buffered(), len(second)+6)
	}
	n := copy(buf, buf[len(first):]) // moved to the front; the old bytes are overwritten
	clear(buf[n:])
	p.Refeed(buf[:n])
	if !p.Next() || fmt.Sprintf("%q", p.Args()) != `["GET" "bb"]` || p.Offset() != int64(len(first+second)) {
		t.Fatalf("Next after Refeed: %q at offset %d; want [GET bb] at %d", p.Args(), p.Offset(), len(first+second))
	}
	if p.Next() || p.Buffered() != 0 {
		t.Fatalf("Next on half a command: true or %d bytes left; want false and 0", p.Buffered())
	}
	p.Feed([]byte(second[6:]))
	if !p.Next() || fmt.Sprintf("%q", p.Args()) != `["GET" "bb"]` || p.Err() != nil {
		t.Fatalf("Next on the rest: %q, %v; want [GET bb]", p.Args(), p.Err())
	}
}

func TestNewRESPParserErrors(t *testing.T) {
	tests := []struct {
		o    RESPOptions
		want string
	}{
		{RESPOptions{MaxArgs: -1}, "MaxArgs -1: must be between 0"},
		{RESPOptions{MaxArgBytes: -1}, "MaxArgBytes -1: must be between 0"},
		{RESPOptions{MaxArgBytes: 1 << 20}, "MaxArgBytes 1048576"},
	}
	for _, tt := range tests {
		_, err := NewRESPParser(tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewRESPParser(%+v): got %v; want an error containing %q", tt.o, err, tt.want)
		}
	}
}

func TestRESPAllocs(t *testing.T) {
	stream := []byte(strings.Repeat(respCmd("SET", "key:000000001", "xxx")+respCmd("GET", "key:000000001"), 16))
	p := newTestParser(t, RESPOptions{})
	run := func() {
		for i := 0; i < len(stream); i += 100 {
			p.Feed(stream[i:min(i+100, len(stream))])
			for p.Next() {
			}
		}
	}
	run() // warm the buffers
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("allocs per run %v; want 0", n)
	}
}

var respSinkN int

// BenchmarkRESP parses a stream of SET and GET commands fed in 16 KiB reads: Next keeps
// the arguments, Skip only counts them, as the proxy does for unsampled commands. The
// naive baseline splits the same stream with bufio-style line reading into fresh slices.
func BenchmarkRESP(b *testing.B) {
	one := respCmd("SET", "key:000000001", "xxx") + respCmd("GET", "key:000000001")
	stream := []byte(strings.Repeat(one, 1000))
	const cmds = 2000
	for _, mode := range []string{"Next", "Skip", "naive"} {
		b.Run(mode, func(b *testing.B) {
			p := newTestParser(b, RESPOptions{})
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			n := 0
			for b.Loop() {
				if mode == "naive" {
					n += naiveRESP(stream)
					continue
				}
				for i := 0; i < len(stream); i += 16 << 10 {
					p.Feed(stream[i:min(i+16<<10, len(stream))])
					if mode == "Next" {
						for p.Next() {
							n += len(p.Args())
						}
					} else {
						for p.Skip() {
							n++
						}
					}
				}
			}
			respSinkN = n
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*cmds), "ns/cmd")
		})
	}
}

// naiveRESP is the obvious parser: split into lines, allocate each command's args.
func naiveRESP(stream []byte) int {
	n := 0
	lines := bytes.Split(stream, []byte("\r\n"))
	for i := 0; i < len(lines); {
		if len(lines[i]) == 0 || lines[i][0] != '*' {
			i++
			continue
		}
		c, _ := strconv.Atoi(string(lines[i][1:]))
		args := make([][]byte, 0, c)
		for j := 0; j < c && i+2+2*j < len(lines); j++ {
			args = append(args, append([]byte(nil), lines[i+2+2*j]...))
		}
		n += len(args)
		i += 1 + 2*c
	}
	return n
}

// FuzzRESP checks that the parser never panics, that whatever it parses whole it parses
// the same when split at any point, and that Skip counts what Next keeps.
func FuzzRESP(f *testing.F) {
	seeds := []string{
		respCmd("GET", "k"),
		respCmd("SET", "k", "v") + respCmd("MGET", "a", "b"),
		"GET k\r\nSET \"a\\x41\" 'b\\'c'\r\n",
		"*0\r\n*-1\r\n*1\r\n$0\r\n\r\n",
		"*1\r\n$-1\r\n",
		"*2\r\n$3\r\nGET\r\n:1\r\n",
		"\r\n\n",
		"SET \"a\"b\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$700\r\n" + strings.Repeat("v", 700) + "\r\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		o := RESPOptions{MaxArgs: 4, MaxArgBytes: 8}
		whole, wholeErr := parseChunks(newTestParser(t, o), data)
		for _, c := range whole {
			if len(c.args) > o.MaxArgs || c.n < len(c.args) {
				t.Fatalf("kept %d of %d args; want at most %d", len(c.args), c.n, o.MaxArgs)
			}
			for i, a := range c.args {
				if len(a) > o.MaxArgBytes || int64(len(a)) > c.sizes[i] {
					t.Fatalf("arg %d kept %d of %d bytes; want at most %d", i, len(a), c.sizes[i], o.MaxArgBytes)
				}
			}
		}
		at := int(split) % (len(data) + 1)
		got, err := parseChunks(newTestParser(t, o), data[:at], data[at:])
		if !sameCommands(got, whole) || fmt.Sprint(err) != fmt.Sprint(wholeErr) {
			t.Fatalf("split at %d: got %v, %v; want %v, %v", at, got, err, whole, wholeErr)
		}
		// Skip sees the same number of commands with the same argument counts.
		p := newTestParser(t, o)
		p.Feed(data)
		var counts []int
		for p.Skip() {
			i := len(counts)
			counts = append(counts, p.NArgs())
			if i < len(whole) && len(whole[i].args) > 0 && string(p.Name()) != whole[i].args[0] {
				t.Fatalf("Skip command %d: Name %q; want %q as Next kept it", i, p.Name(), whole[i].args[0])
			}
			if i < len(whole) && len(whole[i].args) > 1 && string(p.Sub()) != whole[i].args[1] {
				t.Fatalf("Skip command %d: Sub %q; want %q as Next kept it", i, p.Sub(), whole[i].args[1])
			}
		}
		if len(counts) != len(whole) || fmt.Sprint(p.Err()) != fmt.Sprint(wholeErr) {
			t.Fatalf("Skip: got %v, %v; want %d commands, %v", counts, p.Err(), len(whole), wholeErr)
		}
		for i, n := range counts {
			if n != whole[i].n {
				t.Fatalf("Skip command %d: NArgs %d; want %d", i, n, whole[i].n)
			}
		}
	})
}
