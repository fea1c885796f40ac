package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
)

// TestRenderTopEscapesKeys: keys are any bytes; top writes them so that none reaches the
// terminal as a control sequence (a key holding ESC [ ? 1049 h would switch the screen and
// leave it switched after top exits).
func TestRenderTopEscapesKeys(t *testing.T) {
	r := &agent.TopK{Keys: []agent.Key{
		{Key: "evil\x1b[?1049h\x1b[?25l", Rate: 10},
		{Key: "bell\a\r\nline", Rate: 5},
	}}
	var buf bytes.Buffer
	renderTop(&buf, r, nil, "http://127.0.0.1:9736", time.Unix(0, 0), 0, true)
	out := buf.String()
	for _, c := range []string{"\x1b", "\a", "\r"} {
		if strings.Contains(out, c) {
			t.Errorf("frame holds the control character %q from a key:\n%q", c, out)
		}
	}
	if !strings.Contains(out, "evil") || !strings.Contains(out, "bell") {
		t.Errorf("frame lacks the keys:\n%s", out)
	}
	if n := strings.Count(out, "\n"); n != 6 {
		t.Errorf("frame has %d lines; want 6: two header lines, a blank one, the table head, one line per key", n)
	}
}

// TestTopBadInterval: a zero or negative --interval is an error naming the flag, not a
// panic.
func TestTopBadInterval(t *testing.T) {
	for _, iv := range []string{"0s", "-1s"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := runCmd(t, ctx, "top", "--addr", "http://127.0.0.1:1", "--interval", iv)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--interval") {
			t.Errorf("top --interval %s: %v; want an error naming --interval", iv, err)
		}
	}
}

// TestRenderTopPrimary: when the agent places keys in Redis, a PRIMARY column shows each
// key's primary and slot, "-" for a key it could not place; without placement, no column.
func TestRenderTopPrimary(t *testing.T) {
	slot := 5474
	r := &agent.TopK{Keys: []agent.Key{
		{Key: "score:match42", Rate: 9000, Primary: "127.0.0.1:7001", Slot: &slot},
		{Key: "feed:xxxxxxxx", Rate: 10, Truncated: true},
	}}
	var buf bytes.Buffer
	renderTop(&buf, r, nil, "http://127.0.0.1:9736", time.Unix(0, 0), 0, true)
	lines := strings.Split(buf.String(), "\n")
	if len(lines) < 5 || !strings.Contains(lines[3], "PRIMARY") ||
		!strings.Contains(lines[4], "127.0.0.1:7001 [5474]") || !strings.HasSuffix(lines[4], "  score:match42") ||
		!strings.Contains(lines[5], " -  feed:xxxxxxxx") {
		t.Errorf("frame:\n%s\nwant a PRIMARY column: 127.0.0.1:7001 [5474] for score:match42, - for the truncated key", buf.String())
	}
	r.Keys[0].Primary, r.Keys[0].Slot = "", nil
	buf.Reset()
	renderTop(&buf, r, nil, "http://127.0.0.1:9736", time.Unix(0, 0), 0, true)
	if strings.Contains(buf.String(), "PRIMARY") {
		t.Errorf("frame without placement:\n%s\nwant no PRIMARY column", buf.String())
	}
}

// TestRenderTopNodes: the primaries table puts those whose INFO fails first, then the
// busiest command threads, then the largest top-k shares; it marks a saturated primary,
// says since when one fails, shows six and counts the rest; narrow, without commands/s.
func TestRenderTopNodes(t *testing.T) {
	slot := 1
	now := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	r := &agent.TopK{Keys: []agent.Key{{Key: "k", Rate: 10, Primary: "10.0.0.1:6379", Slot: &slot}}}
	n := &agent.Nodes{Cluster: true, Nodes: []agent.Node{
		{Primary: "10.0.0.1:6379", Share: 0.62, Redis: &agent.RedisLoad{CPU: 0.934, CommandsPerSecond: 98000}},
		{Primary: "10.0.0.2:6379", Share: 0.2},
		{Primary: "10.0.0.3:6379", Share: 0.18, Redis: &agent.RedisLoad{CPU: 0.5, CommandsPerSecond: 430000}},
		{Primary: "10.0.0.4:6379", RedisError: &agent.RedisError{Error: "INFO stats: no answer within 2s", Since: now.Add(-12 * time.Second)}},
	}}
	for i := 5; i <= 9; i++ {
		n.Nodes = append(n.Nodes, agent.Node{Primary: fmt.Sprintf("10.0.0.%d:6379", i)})
	}
	var buf bytes.Buffer
	renderTop(&buf, r, n, "http://127.0.0.1:9736", now, 0, true)
	lines := strings.Split(buf.String(), "\n")
	want := []string{
		"PRIMARY  TOP-K SHARE  CMD/s   CPU",
		"10.0.0.4:6379  0%  -  -  INFO failing for 12s: no answer within 2s",
		"10.0.0.1:6379  62%  98.0k  0.93  SATURATED",
		"10.0.0.3:6379  18%  430.0k  0.50",
		"10.0.0.2:6379  20%  -  -",
		"10.0.0.5:6379  0%  -  -",
		"10.0.0.6:6379  0%  -  -",
		"(3 more primaries)",
	}
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), "  ") }
	if len(lines) < 3+len(want) {
		t.Fatalf("frame:\n%s", buf.String())
	}
	for i, w := range want {
		if got := squeeze(lines[3+i]); got != squeeze(w) {
			t.Errorf("line %d: %q; want %q\nframe:\n%s", 3+i, got, squeeze(w), buf.String())
		}
	}
	buf.Reset()
	renderTop(&buf, r, n, "http://127.0.0.1:9736", now, 60, true)
	lines = strings.Split(buf.String(), "\n")
	if got := squeeze(lines[3]); got != squeeze("PRIMARY  TOP-K  CPU") || !strings.Contains(buf.String(), "PRIMARY  KEY") {
		t.Errorf("narrow frame:\n%s\nwant the primaries without CMD/s, and the PRIMARY column of keys", buf.String())
	}
	buf.Reset()
	renderTop(&buf, r, n, "http://127.0.0.1:9736", now, 0, false)
	if strings.Contains(buf.String(), "q to quit") {
		t.Errorf("a frame for --once says q to quit:\n%s", buf.String())
	}
	// Truncated keys whose slot is unknown have a row of their own, of the whole load.
	n.UnplacedRate = 100
	n.Nodes[0].Rate, n.Nodes[1].Rate = 300, 100
	buf.Reset()
	renderTop(&buf, r, n, "http://127.0.0.1:9736", now, 0, true)
	if !strings.Contains(squeeze(buf.String()), squeeze("(unplaced)  20%  truncated keys, slot unknown")) {
		t.Errorf("frame with unplaced load:\n%s\nwant an (unplaced) row at 20%%", buf.String())
	}
	// Below 60 columns the key goes before its primary.
	buf.Reset()
	renderTop(&buf, r, n, "http://127.0.0.1:9736", now, 50, true)
	if strings.Contains(buf.String(), "PRIMARY  KEY") {
		t.Errorf("50-column frame:\n%s\nwant no PRIMARY column of keys", buf.String())
	}
}

// TestWriteFrameShortTerminal: on a short terminal the primaries table gives way to the
// keys; on a tall one both show.
func TestWriteFrameShortTerminal(t *testing.T) {
	r := &agent.TopK{}
	for i := range 30 {
		r.Keys = append(r.Keys, agent.Key{Key: fmt.Sprintf("key:%02d", i), Rate: float64(100 - i), Primary: "10.0.0.1:6379"})
	}
	n := &agent.Nodes{}
	for i := range 6 {
		n.Nodes = append(n.Nodes, agent.Node{Primary: fmt.Sprintf("10.0.0.%d:6379", i+1)})
	}
	for _, tc := range []struct {
		rows      int
		wantTable bool
	}{{12, false}, {40, true}} {
		n.Nodes[0].RedisError = nil
		var frame bytes.Buffer
		top := *r
		top.Keys = slices.Clone(r.Keys)
		writeFrame(&frame, &top, n, nil, "http://127.0.0.1:9736", time.Second, time.Unix(0, 0), 120, tc.rows, true, true)
		out := frame.String()
		if got := strings.Contains(out, "TOP-K SHARE"); got != tc.wantTable || !strings.Contains(out, "key:00") || strings.Count(out, "\n") > tc.rows-1 {
			t.Errorf("%d rows: table shown %v, want %v; key:00 shown %v; lines %d:\n%s", tc.rows, got, tc.wantTable, strings.Contains(out, "key:00"), strings.Count(out, "\n")+1, out)
		}
	}
	// A primary in trouble still shows on a short terminal, alone.
	n.Nodes[3].RedisError = &agent.RedisError{Error: "INFO stats: BUSY Redis is busy running a script.", Since: time.Unix(0, 0)}
	var frame bytes.Buffer
	top := *r
	top.Keys = slices.Clone(r.Keys)
	writeFrame(&frame, &top, n, nil, "http://127.0.0.1:9736", time.Second, time.Unix(9, 0), 120, 12, true, true)
	out := frame.String()
	table, _, _ := strings.Cut(out, "#  RATE/s")
	if !strings.Contains(table, "10.0.0.4:6379") || !strings.Contains(table, "INFO failing for 9s: BUSY") || strings.Contains(table, "10.0.0.1:6379") ||
		!strings.Contains(out, "key:00") || strings.Count(out, "\n") > 11 {
		t.Errorf("12 rows, one primary failing:\n%s\nwant it alone in the table, the keys below, 12 lines at most", out)
	}
}
