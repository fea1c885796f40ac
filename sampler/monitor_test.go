package sampler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// redisRepr quotes s as Redis's sdscatrepr does for MONITOR.
func redisRepr(s string) string {
	b := []byte{'"'}
	for i := range len(s) {
		switch c := s[i]; c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		case '\a':
			b = append(b, `\a`...)
		case '\b':
			b = append(b, `\b`...)
		default:
			if c >= 0x20 && c <= 0x7e {
				b = append(b, c)
			} else {
				b = fmt.Appendf(b, `\x%02x`, c)
			}
		}
	}
	return string(append(b, '"'))
}

func TestMonitorLineParse(t *testing.T) {
	tests := []struct {
		line string
		db   int
		want []string
	}{
		{`1339518083.107412 [0 127.0.0.1:60866] "SET" "k\x00y" "v"`, 0, []string{"SET", "k\x00y", "v"}},
		{`1339518083.107412 [3 [::1]:60866] "GET" "a b"`, 3, []string{"GET", "a b"}},
		{`1.000001 [0 lua] "incr" "n"`, 0, []string{"incr", "n"}},
		{`1.000001 [15 unix:/tmp/redis.sock] "PING"`, 15, []string{"PING"}},
		{`1.2 [0 127.0.0.1:1] "SET" "\"q\"\\\n\r\t\a\b\xff" "10"`, 0, []string{"SET", "\"q\"\\\n\r\t\a\b\xff", "10"}},
		{`1.2 [0 127.0.0.1:1] "SET" ""`, 0, []string{"SET", ""}},
	}
	var l monitorLine
	for _, tt := range tests {
		if err := l.parse([]byte(tt.line), false); err != nil {
			t.Errorf("%s: %v", tt.line, err)
			continue
		}
		if got := fmt.Sprintf("%q", l.args); got != fmt.Sprintf("%q", tt.want) || l.db != tt.db {
			t.Errorf("%s: got %s db %d; want %q db %d", tt.line, got, l.db, tt.want, tt.db)
		}
	}
}

func TestMonitorLineErrors(t *testing.T) {
	tests := []struct{ line, want string }{
		{"OK", "no timestamp"},
		{"", "no timestamp"},
		{`1.2 "GET"`, "no [db client]"},
		{`1.2 [x 127.0.0.1:1] "GET"`, `database "x"`},
		{`1.2 [0 127.0.0.1:1]`, `no '] "'`},
		{`1.2 [0 127.0.0.1:1] "GET" "k`, "unbalanced quotes"},
		{`1.2 [0 127.0.0.1:1] "GET"x`, "closing quote"},
		{`abc [0 127.0.0.1:1] "GET"`, "no timestamp"},
	}
	var l monitorLine
	for _, tt := range tests {
		err := l.parse([]byte(tt.line), false)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v; want an error containing %q", tt.line, err, tt.want)
		}
	}
	// A line cut short keeps its complete arguments.
	if err := l.parse([]byte(`1.2 [0 127.0.0.1:1] "SET" "k" "vvvv`), true); err != nil || len(l.args) != 2 {
		t.Errorf("partial line: got %q, %v; want [SET k]", l.args, err)
	}
}

// FuzzMonitorLine checks that the line parser never panics and that arguments quoted as
// Redis quotes them come back unchanged.
func FuzzMonitorLine(f *testing.F) {
	f.Add([]byte(`1339518083.107412 [0 127.0.0.1:60866] "SET" "k\x00y" "v"`), "SET", "k\x00\xff\"\\ y")
	f.Add([]byte(`1.2 [0 lua] "a" "b`), "GET", "")
	f.Add([]byte(`1.2 [0 [::1]:1] "\x4"`), "\n\r\t\a\b", "'")
	f.Fuzz(func(t *testing.T, line []byte, a, b string) {
		var l monitorLine
		if l.parse(line, false) == nil {
			// What parses whole parses alike when marked partial (nothing is in progress
			// at its end), and survives being quoted again the way Redis quotes.
			db, args := l.db, make([]string, len(l.args))
			quotedArgs := make([]string, len(l.args))
			for i, a := range l.args {
				args[i], quotedArgs[i] = string(a), redisRepr(string(a))
				if l.sizes[i] != int64(len(a)) {
					t.Fatalf("%q: arg %d size %d; want %d", line, i, l.sizes[i], len(a))
				}
			}
			if err := l.parse(line, true); err != nil || l.db != db || !slices.Equal(byteStrings(l.args), args) {
				t.Fatalf("%q partial: got db %d %q, %v; want db %d %q", line, l.db, l.args, err, db, args)
			}
			again := fmt.Sprintf("1.5 [%d 127.0.0.1:1] %s", db, strings.Join(quotedArgs, " "))
			if err := l.parse([]byte(again), false); err != nil || l.db != db || !slices.Equal(byteStrings(l.args), args) {
				t.Fatalf("%q requoted as %q: got db %d %q, %v; want db %d %q", line, again, l.db, l.args, err, db, args)
			}
		} else {
			_ = l.parse(line, true)
		}
		quoted := fmt.Sprintf("1339518083.107412 [0 127.0.0.1:1] %s %s", redisRepr(a), redisRepr(b))
		if err := l.parse([]byte(quoted), false); err != nil {
			t.Fatalf("%s: %v", quoted, err)
		}
		if len(l.args) != 2 || string(l.args[0]) != a || string(l.args[1]) != b {
			t.Fatalf("%s: got %q; want %q", quoted, l.args, []string{a, b})
		}
	})
}

func TestNewMonitorErrors(t *testing.T) {
	sink := SinkFunc(func(Batch) {})
	tests := []struct {
		o    MonitorOptions
		want string
	}{
		{MonitorOptions{}, "Sink is nil"},
		{MonitorOptions{Sink: sink, SampleEvery: -1}, "SampleEvery -1: must be ≥ 1"},
		{MonitorOptions{Sink: sink, BatchSize: -2}, "BatchSize -2"},
		{MonitorOptions{Sink: sink, MaxLineBytes: 10}, "MaxLineBytes 10: must be between 256"},
		{MonitorOptions{Sink: sink, MinBackoff: -1}, "MinBackoff -1ns"},
		{MonitorOptions{Sink: sink, MinBackoff: time.Minute, MaxBackoff: time.Second}, "MaxBackoff 1s: must be ≥ MinBackoff 1m0s"},
		{MonitorOptions{Sink: sink, Addr: "x"}, `Addr "x": must be host:port`},
	}
	for _, tt := range tests {
		_, err := NewMonitor(tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewMonitor(%+v): got %v; want an error containing %q", tt.o, err, tt.want)
		}
	}
}

// monitorSink records samples by key.
type monitorSink struct {
	ch chan Sample
}

func (s monitorSink) Accept(b Batch) {
	if b.Source != "monitor" || b.Rate != 1 {
		panic(fmt.Sprintf("batch source %q rate %v; want monitor, 1", b.Source, b.Rate))
	}
	for _, x := range b.Samples {
		x.Key = append([]byte(nil), x.Key...)
		s.ch <- x
	}
}

func (monitorSink) Drop(string, string, int) {}

// TestMonitor samples a real server's traffic, survives the server killing its MONITOR
// connection, and stops when its context is cancelled.
func TestMonitor(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: "pw"})
	sink := monitorSink{ch: make(chan Sample, 1000)}
	m, err := NewMonitor(MonitorOptions{
		Addr: srv.Addr(), Password: "pw", SampleEvery: 1, Sink: sink,
		FlushInterval: 10 * time.Millisecond, MinBackoff: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "pw"})
	defer c.Close()

	waitMonitoring := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			list, err := c.ClientList(ctx).Result()
			if err == nil && strings.Contains(list, "cmd=monitor") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no MONITOR client after 5s: %q, %v", list, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	expect := func(key string, op Op, counter bool, size uint32) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case s := <-sink.ch:
				if string(s.Key) != key {
					continue
				}
				if s.Op != op || s.Counter != counter || s.Bytes != size {
					t.Fatalf("%s: got op %v counter %v bytes %d; want %v %v %d", key, s.Op, s.Counter, s.Bytes, op, counter, size)
				}
				return
			case <-timeout:
				t.Fatalf("no sample of %q after 5s", key)
			}
		}
	}

	waitMonitoring()
	c.Set(ctx, "m:k\x00\n\"", "value", 0)
	expect("m:k\x00\n\"", OpWrite, false, 5)
	c.Incr(ctx, "m:n")
	expect("m:n", OpWrite, true, 0)
	c.MGet(ctx, "m:a", "m:b")
	expect("m:b", OpRead, false, 0)
	// A command that writes one key from others: a write of it, reads of the others.
	c.SAdd(ctx, "m:s1", "x")
	c.SUnionStore(ctx, "m:dst", "m:s1", "m:s2")
	expect("m:dst", OpWrite, false, 0)
	expect("m:s1", OpRead, false, 0)
	expect("m:s2", OpRead, false, 0)
	// A script: Redis echoes the commands it runs (client "lua"), which carry their own
	// read or write; the EVAL line's keys are not sampled as well.
	c.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"m:lua"})
	c.Get(ctx, "m:marker")
	var lua []Op
	for marker := false; !marker; {
		select {
		case s := <-sink.ch:
			switch string(s.Key) {
			case "m:lua":
				lua = append(lua, s.Op)
			case "m:marker":
				marker = true
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no sample of m:marker after 5s")
		}
	}
	if !slices.Equal(lua, []Op{OpRead}) {
		t.Errorf("EVAL of a script that GETs m:lua: samples of m:lua with ops %v; want one read", lua)
	}
	big := strings.Repeat("\x01", 100<<10) // escaped to 400 KiB: a line longer than MaxLineBytes
	c.Set(ctx, "m:big", big, 0)
	expect("m:big", OpWrite, false, 0)

	// The server kills the MONITOR connection; the Monitor comes back.
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	for line := range strings.Lines(list) {
		if strings.Contains(line, "cmd=monitor") {
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			if err := c.ClientKillByFilter(ctx, "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	if !killed {
		t.Fatalf("no monitor client in %q", list)
	}
	waitMonitoring()
	c.Get(ctx, "m:after")
	expect("m:after", OpRead, false, 0)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: got %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestMonitorMaxKeyBytesSparesCommandName checks that a MaxKeyBytes shorter than a command
// name truncates the command's keys, not its name, which must still be found in the table.
func TestMonitorMaxKeyBytesSparesCommandName(t *testing.T) {
	var got []Sample
	m, err := NewMonitor(MonitorOptions{SampleEvery: 1, MaxKeyBytes: 4, Sink: SinkFunc(func(b Batch) {
		for _, s := range b.Samples {
			s.Key = append([]byte(nil), s.Key...)
			got = append(got, s)
		}
	})})
	if err != nil {
		t.Fatal(err)
	}
	m.sampleLine([]byte(`+1700000000.000001 [0 127.0.0.1:5000] "HINCRBY" "user:42" "visits" "1"`+"\r\n"), false)
	m.flush()
	if len(got) != 1 || string(got[0].Key) != "user" || got[0].Op != OpWrite || !got[0].Truncated {
		t.Fatalf("HINCRBY user:42 with MaxKeyBytes 4: got %+v; want one truncated write of \"user\"", got)
	}
}

// TestMonitorDestination checks that a MONITOR line of a command that writes one key and
// reads others gives a write of the one and reads of the others, and that a line cut
// short before the destination gives the reads alone.
func TestMonitorDestination(t *testing.T) {
	var got []string
	m, err := NewMonitor(MonitorOptions{SampleEvery: 1, Sink: SinkFunc(func(b Batch) {
		for _, s := range b.Samples {
			got = append(got, fmt.Sprintf("%v %s", s.Op, s.Key))
		}
	})})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		line    string
		partial bool
		want    []string
	}{
		{`"SORT" "k" "BY" "store" "STORE" "d"`, false, []string{"write d", "read k"}},
		{`"sort" "k"`, false, []string{"read k"}},
		{`"ZUNIONSTORE" "d" "2" "a" "b" "WEIGHTS" "1" "2"`, false, []string{"write d", "read a", "read b"}},
		{`"COPY" "a" "b"`, false, []string{"write b", "read a"}},
		{`"SORT" "k" "STORE" "dd`, true, []string{"read k"}},
	}
	for _, tt := range tests {
		got = nil
		line := `+1700000000.000001 [0 127.0.0.1:5000] ` + tt.line
		if !tt.partial {
			line += "\r\n"
		}
		m.sampleLine([]byte(line), tt.partial)
		m.flush()
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q; want %q", tt.line, got, tt.want)
		}
	}
}

func byteStrings(b [][]byte) []string {
	s := make([]string, len(b))
	for i, x := range b {
		s[i] = string(x)
	}
	return s
}

// TestMonitorLogsConnect: a Monitor that cannot reach its server says it could not
// connect, naming the address and the error; "connection lost" is kept for a MONITOR
// connection that was up.
func TestMonitorLogsConnect(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	var logs logbuf.Buffer
	m, err := NewMonitor(MonitorOptions{
		Addr: addr, Sink: monitorSink{ch: make(chan Sample, 1000)},
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitLog := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), what); {
			if time.Now().After(deadline) {
				t.Fatalf("logs:\n%s\nwant a line with %q", logs.String(), what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitLog("connection refused")
	if s := logs.String(); !strings.Contains(s, "monitor: could not connect") || !strings.Contains(s, "addr="+addr) ||
		strings.Contains(s, "connection lost") {
		t.Fatalf("logs:\n%s\nwant \"monitor: could not connect\" with addr=%s, and no \"connection lost\"", s, addr)
	}

	redistest.StartAt(t, addr)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var id string
	for deadline := time.Now().Add(5 * time.Second); id == ""; time.Sleep(5 * time.Millisecond) {
		list, _ := c.ClientList(ctx).Result()
		for line := range strings.Lines(list) {
			if strings.Contains(line, "cmd=monitor") {
				id = strings.TrimPrefix(strings.Fields(line)[0], "id=")
			}
		}
		if id == "" && time.Now().After(deadline) {
			t.Fatalf("no MONITOR client after 5s: %q", list)
		}
	}
	if err := c.ClientKillByFilter(ctx, "ID", id).Err(); err != nil {
		t.Fatal(err)
	}
	waitLog("monitor: connection lost")
}
