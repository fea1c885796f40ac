package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/agent"
)

const fuzzTopAddr = "http://127.0.0.1:9736"

// FuzzTopFrame renders frames of `hotkeyd top` with keys of any bytes (not UTF-8,
// control characters, ESC, wide CJK, combining marks), any rates and shares (NaN, ±Inf,
// negative, huge) and any terminal size, tiny ones included. checkTopFrame says what
// every frame must be.
func FuzzTopFrame(f *testing.F) {
	type seed struct {
		key, key2, predicted     string
		rate, share, read, write float64
		hotSince                 int64
		hot                      bool
		n, cols, rows            uint16
		tty                      bool
	}
	for _, s := range []seed{
		{"score:match42", "likes", "", 6000, 0.5, 6000, 0, 0, true, 2, 100, 30, true},
		{"evil\x1b[?1049h\x1b[?25l", "bell\a\r\nline", "ev\x1b1", 10, 0.1, 1, 1, 0, false, 2, 0, 0, false},
		{strings.Repeat("热", 40), "e\u0301\u0301\u20dd", "black_friday", 1e6, 1, 1e6, 1e6, 1_700_000_000, true, 3, 40, 12, true},
		{"bin\xff\xfe\x80", "c1\u0085\u009b[2J", "", math.NaN(), math.Inf(1), math.Inf(-1), -1, -1 << 62, true, 1, 80, 6, true},
		{"k", "k2", "", 1e308, -1e308, math.MaxFloat64, 5e-324, 1 << 62, true, 40, 1, 1, true},
		{"k", "k2", "", 1, 1, 1, 1, 0, false, 20, 3, 5, true},
		{"k", "k2", "", 1, 1, 1, 1, 0, false, 0, 2, 3, true},
		{"\x7f\x00\t\v\f", "\u2028\u202e\ufeff", "\xc0", 1, 1, 1, 1, 0, true, 2, 79, 7, true},
		{"", "", "", 0, 0, 0, 0, 0, false, 0, 0, 0, false},
		{"bin\xff\xfe\x80", "k", "", 1, 1, 1, 1, 0, false, 1, 0, 0, false}, // printed raw, before displayKey checked UTF-8
	} {
		f.Add(s.key, s.key2, s.predicted, s.rate, s.share, s.read, s.write, s.hotSince, s.hot, s.n, s.cols, s.rows, s.tty)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, key, key2, predicted string, rate, share, read, write float64, hotSince int64, hot bool, n, cols, rows uint16, tty bool) {
		r := &agent.TopK{TotalRate: rate, WindowSeconds: share, DistinctKeys: uint64(n) * 1000, HotKeys: int(n)}
		since := time.Unix(hotSince, 0)
		for i := range int(n % 300) {
			k := agent.Key{Key: key, Rate: rate, Share: share, ReadRate: read, WriteRate: write, Hot: hot, HotSince: &since}
			if i%2 == 1 {
				k.Key = key2
			}
			if predicted != "" {
				k.PredictedBy = []string{predicted, "x"}
			}
			r.Keys = append(r.Keys, k)
		}
		c, h := int(cols%512), int(rows%512)
		if !tty {
			c, h = 0, 0 // termSize gives no size when stdout is not a terminal
		}
		var nodes *agent.Nodes // the primaries line, named by the fuzzed keys, on one frame in three
		if n%3 == 0 {
			nodes = &agent.Nodes{UnplacedRate: write, Nodes: []agent.Node{{Primary: key2, Share: share, Redis: &agent.RedisLoad{CPU: read}}, {Primary: key, Share: rate, RedisError: &agent.RedisError{Error: predicted}}}}
		}
		var frame bytes.Buffer
		writeFrame(&frame, r, nodes, nil, fuzzTopAddr, time.Second, now, c, h, tty, false)
		checkTopFrame(t, frame.String(), c, h, tty, key, key2, predicted)
	})
}

// FuzzTopReply feeds any answer (status and body) to top's request for GET /v1/topk, then
// renders the frame for it on a terminal of any size. fetchTop must never panic; it
// returns keys only for a 200 whose body is a TopK, else an error; the frame, of keys or
// of the error, passes checkTopFrame.
func FuzzTopReply(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"at":"2026-11-29T12:00:00Z","window_seconds":10,"total_rate":6000,"distinct_keys":3,"hot_keys":1,"keys":[{"key":"score:match42","rate":6000,"share":0.9,"read_rate":6000,"write_rate":0,"hot":true,"hot_since":"2026-11-29T11:59:00Z","predicted_by":["ev"],"mitigations":["l1:enforce"],"level":2}]}`},
		{200, `{"keys":[{"key":"evil\u001b[2J\u0007\ud800\u009b","rate":1e308,"share":-1},{"key":"热热热热热","predicted_by":["\u001b]0;x\u0007"]}]}`},
		{200, `{"keys":[{"key":5}]}`},
		{200, `{"keys":`},
		{200, "\x1b[2J"},
		{200, ``},
		{200, `null`},
		{502, "\x1b]0;pwned\a\x1b[2Jbad gateway"},
		{400, `{"error":"n: \"0\" is not allowed\nsecond line\u001b[31m"}`},
		{500, "\xff\xfe not UTF-8 \xc0"},
		{404, strings.Repeat("long error ", 100)},
		{304, ``},
	} {
		f.Add(s.status, []byte(s.body), uint16(80), uint16(24), true)
		f.Add(s.status, []byte(s.body), uint16(20), uint16(4), true)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, body []byte, cols, rows uint16, tty bool) {
		if status < 100 || status > 999 {
			status = 200 // what net/http accepts
		}
		client := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
				Body: io.NopCloser(bytes.NewReader(body)), Header: http.Header{}, Request: r}, nil
		})}
		reply, err := fetchTop(context.Background(), client, fuzzTopAddr+"/v1/topk?n=20&op=all")
		if err == nil {
			var want agent.TopK
			if status != http.StatusOK || reply == nil || json.NewDecoder(bytes.NewReader(body)).Decode(&want) != nil {
				t.Fatalf("fetchTop of %d %q: keys %+v and no error; want keys only from a 200 holding a TopK", status, body, reply)
			}
		} else if reply != nil {
			t.Fatalf("fetchTop of %d %q: both keys and error %v", status, body, err)
		}
		c, h := int(cols%512), int(rows%512)
		if !tty {
			c, h = 0, 0
		}
		var frame bytes.Buffer
		writeFrame(&frame, reply, nil, err, fuzzTopAddr, time.Second, now, c, h, tty, true)
		checkTopFrame(t, frame.String(), c, h, tty, string(body))
	})
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// checkTopFrame checks one frame of top, written on a terminal of cols×rows cells when
// tty (0 for a size unknown), about inputs: it is UTF-8 and holds no control character
// but its line ends and, on a terminal, the home-and-clear it starts with — none of the
// inputs' escape sequences, C0, DEL or C1 characters reaches the terminal; on a terminal
// every line fits in cols cells (as top counts them) and the frame ends at most rows-1
// line ends down, so that the terminal does not scroll the header away.
func checkTopFrame(t *testing.T, frame string, cols, rows int, tty bool, inputs ...string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("inputs %q, terminal %v of %d×%d: "+format+"\nframe:\n%s", append([]any{inputs, tty, cols, rows}, append(args, frame)...)...)
	}
	if tty {
		var ok bool
		if frame, ok = strings.CutPrefix(frame, "\x1b[H\x1b[2J"); !ok {
			fail("frame does not start by clearing the screen")
		}
	}
	if !utf8.ValidString(frame) {
		fail("frame is not valid UTF-8: %q", frame)
	}
	for i, r := range frame {
		if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f) {
			fail("control character %U at byte %d reaches the terminal: %q", r, i, frame)
		}
	}
	if !tty {
		return
	}
	if rows > 0 && strings.Count(frame, "\n") > rows-1 {
		fail("%d line ends on a terminal of %d rows: it scrolls", strings.Count(frame, "\n"), rows)
	}
	if cols > 0 {
		for l := range strings.SplitSeq(frame, "\n") {
			if w := cells(l); w > cols {
				fail("line of %d cells on a terminal of %d: %q", w, cols, l)
			}
		}
	}
}
