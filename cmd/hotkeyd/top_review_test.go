package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/internal/agenttest"
	"github.com/hotkeyd/hotkeyd/internal/logbuf"
)

// words is s with its runs of white space, line ends included, made single spaces: the
// text of a frame whatever lines it was wrapped over.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestWriteFrameErrorCause: on a terminal 80 or 40 cells wide, an error frame shows what
// went wrong, wrapped over lines rather than cut, without the URL the header shows: an
// agent that refuses connections, an agent that answers 400 to --op bytes with its fix,
// and a primary whose INFO fails.
func TestWriteFrameErrorCause(t *testing.T) {
	const addr = "http://127.0.0.1:9736"
	down := "http://" + freeAddr(t) // nothing listens there
	_, refused := fetchTop(context.Background(), &http.Client{Timeout: 5 * time.Second}, down+"/v1/topk?n=20&op=all")
	if refused == nil {
		t.Fatalf("GET %s: no error; want connection refused", down)
	}
	a := agenttest.Run(t, agent.Options{}) // detector.bytes off
	_, noBytes := fetchTop(context.Background(), http.DefaultClient, "http://"+a.HTTPAddr().String()+"/v1/topk?n=20&op=bytes")
	if noBytes == nil || !strings.Contains(noBytes.Error(), "set detector.bytes: true") {
		t.Fatalf("GET op=bytes from an agent without the ranking: %v; want the agent's 400 naming detector.bytes", noBytes)
	}
	now := time.Date(2026, 12, 1, 1, 0, 8, 0, time.UTC)
	keys := &agent.TopK{Keys: []agent.Key{{Key: "score:match42", Rate: 10, Primary: "10.0.0.4:6379"}}}
	nodes := &agent.Nodes{Nodes: []agent.Node{
		{Primary: "10.0.0.1:6379", Share: 0.5, Redis: &agent.RedisLoad{CPU: 0.5}},
		{Primary: "10.0.0.4:6379", Share: 0.5, RedisError: &agent.RedisError{Error: "INFO stats: dial tcp 10.0.0.4:6379: connect: connection refused", Since: now.Add(-8 * time.Second)}},
	}}
	for _, cols := range []int{80, 40} {
		for _, tc := range []struct {
			name    string
			reply   *agent.TopK
			nodes   *agent.Nodes
			err     error
			want    string
			notWant string
		}{
			{name: "refused", err: refused, want: "agent unreachable: dial tcp " + strings.TrimPrefix(down, "http://") + ": connect: connection refused", notWant: "/v1/topk"},
			{name: "op bytes", err: noBytes, want: `400 Bad Request: op: "bytes" needs the ranking by bytes, which is off; set detector.bytes: true`, notWant: "/v1/topk"},
			{name: "INFO failing", reply: keys, nodes: nodes, want: "INFO failing for 8s: connect: connection refused"},
		} {
			var frame bytes.Buffer
			writeFrame(&frame, tc.reply, tc.nodes, tc.err, addr, time.Second, now, cols, 30, true, true)
			out := frame.String()
			checkTopFrame(t, out, cols, 30, true, tc.name)
			if !strings.Contains(words(out), words(tc.want)) || tc.notWant != "" && strings.Contains(out, tc.notWant) {
				t.Errorf("%s, %d columns: frame\n%s\nwant it to show %q (over lines as need be), without %q", tc.name, cols, out, tc.want, tc.notWant)
			}
		}
	}
	// Control characters in an agent's message stay escaped, wrapped or not.
	var frame bytes.Buffer
	writeFrame(&frame, nil, nil, fmt.Errorf("boom \x1b[2J%s\x07", strings.Repeat("x ", 50)), addr, time.Second, now, 40, 30, true, true)
	checkTopFrame(t, frame.String(), 40, 30, true, "escape")
	if !strings.Contains(frame.String(), `\x1b[2J`) {
		t.Errorf("frame:\n%s\nwant the ESC shown escaped", frame.String())
	}
}

// TestWriteFrameFewRows: however few rows the terminal has, a frame of an agent that
// reported keys never says there is no traffic; it shows a key when one fits, and how
// many do not.
func TestWriteFrameFewRows(t *testing.T) {
	r := &agent.TopK{}
	for i := range 11 {
		r.Keys = append(r.Keys, agent.Key{Key: fmt.Sprintf("key:%02d", i), Rate: float64(100 - i)})
	}
	for rows := 1; rows <= 20; rows++ {
		var frame bytes.Buffer
		top := *r
		writeFrame(&frame, &top, nil, nil, "http://127.0.0.1:9736", time.Second, time.Unix(0, 0), 120, rows, true, true)
		out := frame.String()
		checkTopFrame(t, out, 120, rows, true, "11 keys")
		if strings.Contains(out, "no traffic") {
			t.Errorf("%d rows: frame\n%s\nsays no traffic; the agent reported 11 keys", rows, out)
		}
		if rows >= 5 && !strings.Contains(out, "key:00") || rows >= 6 && rows < 16 && !strings.Contains(out, "more below") {
			t.Errorf("%d rows: frame\n%s\nwant key:00 and, while not all 11 keys fit, a line counting those that do not", rows, out)
		}
		if len(top.Keys) != len(r.Keys) {
			t.Errorf("%d rows: writeFrame left %d keys of the reply's %d; want the reply untouched", rows, len(top.Keys), len(r.Keys))
		}
	}
	var frame bytes.Buffer
	writeFrame(&frame, r, nil, nil, "http://127.0.0.1:9736", time.Second, time.Unix(0, 0), 120, 6, true, true)
	if out := frame.String(); !strings.Contains(out, "(10 more below") {
		t.Errorf("6 rows: frame\n%s\nwant key:00 and (10 more below…)", out)
	}
}

// TestRenderTopEmptyKey: the empty key is shown quoted, as keys with control characters
// are, not as a blank cell.
func TestRenderTopEmptyKey(t *testing.T) {
	r := &agent.TopK{Keys: []agent.Key{{Key: "", Rate: 10}, {Key: "ctl\x00", Rate: 5}}}
	var buf bytes.Buffer
	renderTop(&buf, r, nil, "http://127.0.0.1:9736", time.Unix(0, 0), 0, true)
	lines := strings.Split(buf.String(), "\n")
	if len(lines) < 6 || !strings.HasSuffix(lines[4], `  ""`) || !strings.HasSuffix(lines[5], `  "ctl\x00"`) {
		t.Errorf("frame:\n%s\nwant the empty key shown as \"\"", buf.String())
	}
}

// TestTopStaleFrame: when the agent stops answering (kill -STOP), top says so once a
// refresh interval has passed without an answer, and how long it has waited, rather than
// leave the last frame up as if the agent were quiet; q still quits at once.
func TestTopStaleFrame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var requests atomic.Int32
		client := &http.Client{Timeout: 5 * time.Second, Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			status, body := http.StatusNotFound, "404 page not found" // no /v1/nodes
			if r.URL.Path == "/v1/topk" {
				if requests.Add(1) > 1 {
					<-r.Context().Done() // the agent hangs from the second request on
					return nil, r.Context().Err()
				}
				status, body = http.StatusOK, `{"window_seconds":10,"total_rate":10,"keys":[{"key":"score:match42","rate":10}]}`
			}
			return &http.Response{StatusCode: status, Status: http.StatusText(status), Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}, Request: r}, nil
		})}
		stdin, keyboard := io.Pipe()
		var out logbuf.Buffer
		v := &topView{client: client, url: fuzzTopAddr + "/v1/topk?n=20&op=all", addr: fuzzTopAddr, interval: time.Second}
		done := make(chan error, 1)
		go func() { done <- v.run(context.Background(), stdin, &out) }()
		time.Sleep(3500 * time.Millisecond) // answered at 0 s; asked again at 1 s, no answer since
		synctest.Wait()
		got := out.String()
		for _, want := range []string{"score:match42", "waiting for the agent: no answer for 1s", "waiting for the agent: no answer for 2s"} {
			if !strings.Contains(got, want) {
				t.Errorf("top, 2.5 s into a request unanswered:\n%s\nwant %q", got, want)
			}
		}
		start := time.Now()
		_, _ = keyboard.Write([]byte("q"))
		if err := <-done; err != nil || time.Since(start) != 0 {
			t.Errorf("top after q: %v after %v; want nil at once", err, time.Since(start))
		}
		keyboard.Close()
	})
	// On a terminal, the stale frame keeps the keys it showed, under a line that says it is
	// stale, and still fits; before any answer, the header and that line.
	r := &agent.TopK{Keys: []agent.Key{{Key: "score:match42", Rate: 10}}}
	for _, tc := range []struct {
		reply *agent.TopK
		want  []string
	}{
		{r, []string{"hotkeyd top — ", "waiting for the agent: no answer for 3s", "traffic 0/s", "", "#  RATE/s", "1      10"}},
		{nil, []string{"hotkeyd top — ", "waiting for the agent: no answer for 3s"}},
	} {
		var frame bytes.Buffer
		writeFrameWaiting(&frame, tc.reply, nil, nil, fuzzTopAddr, time.Second, time.Unix(0, 0), 80, 12, true, false, 3*time.Second)
		checkTopFrame(t, frame.String(), 80, 12, true, "stale")
		lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(frame.String(), "\x1b[H\x1b[2J"), "\n"), "\n")
		if len(lines) != len(tc.want) {
			t.Errorf("stale frame on a terminal:\n%s\nwant %d lines", frame.String(), len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(strings.TrimSpace(lines[i]), w) {
				t.Errorf("stale frame on a terminal, line %d: %q; want it to start %q", i, lines[i], w)
			}
		}
	}
}

// TestWrapCells: wrapped text keeps every word, in order; no line is wider than asked
// (wide characters count two cells), continuation lines are indented, and a cap on lines
// ends the last in "...".
func TestWrapCells(t *testing.T) {
	text := "agent unreachable: dial tcp 127.0.0.1:23299: connect: connection refused\n" +
		strings.Repeat("热", 30) + " " + strings.Repeat("x", 90) + " end"
	for _, n := range []int{1, 2, 3, 5, 12, 40, 80, 200} {
		for _, indent := range []int{0, 4} {
			lines := wrapCells(text, n, indent, 0)
			for i, l := range lines {
				if cells(l) > n && cells(strings.TrimSpace(l)) > 2 { // a wide character alone on a line of 1
					t.Errorf("n %d, indent %d: line %d of %d cells: %q", n, indent, i, cells(l), l)
				}
				if i > 0 && indent > 0 && n >= 14 && !strings.HasPrefix(l, "    ") {
					t.Errorf("n %d, indent %d: line %d %q; want it indented", n, indent, i, l)
				}
			}
			if got, want := strings.Join(strings.Fields(strings.Join(lines, "")), ""), strings.Join(strings.Fields(text), ""); got != want {
				t.Errorf("n %d, indent %d: wrapped text %q; want %q", n, indent, got, want)
			}
			capped := wrapCells(text, n, indent, 2)
			if n >= 5 && len(lines) > 2 && (len(capped) != 2 || !strings.HasSuffix(capped[1], "...") || cells(capped[1]) > n) {
				t.Errorf("n %d, indent %d, at most 2 lines: %q; want 2 lines, the last ending in ...", n, indent, capped)
			}
		}
	}
}
