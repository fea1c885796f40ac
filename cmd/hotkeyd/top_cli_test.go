package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/internal/agenttest"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// feedAgent runs an agent in process that receives reads of keys (the first the most)
// every 50 ms until the test ends, and returns its base URL.
func feedAgent(t *testing.T, keys ...string) string {
	t.Helper()
	return feedAgentWith(t, agent.Options{}, keys...)
}

// feedAgentWith is feedAgent with the agent's options.
func feedAgentWith(t *testing.T, o agent.Options, keys ...string) string {
	t.Helper()
	a := agenttest.Run(t, o)
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			for i, k := range keys {
				a.Accept(sampler.Batch{Source: "t", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte(k), Op: sampler.OpRead, Count: uint32(100 - i%100)}}})
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return "http://" + a.HTTPAddr().String()
}

// TestTopPipedPlain: `hotkeyd top > file` (stdout not a terminal) writes plain frames,
// one after another, with no escape sequence for a file or a pager to choke on, and
// stops with status 0 on SIGTERM.
func TestTopPipedPlain(t *testing.T) {
	addr := feedAgent(t, "score:match42")
	cmd, out, done := startHotkeyd(t, "top", "--addr", addr, "--interval", "200ms")
	eventually(t, "two frames", func() bool { return strings.Count(out.String(), "score:match42") >= 2 })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("top after SIGTERM: %v; want exit status 0\n%s", err, out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("top still runs 5 s after SIGTERM")
	}
	if s := out.String(); strings.Contains(s, "\x1b") {
		t.Errorf("top into a pipe wrote escape sequences; want plain text:\n%q", s)
	}
}

// TestTopArgs: what a tired operator types wrong is an error at once that says what to
// type, not a view that retries a bad request forever or watches another agent.
func TestTopArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"10.0.0.5:9736"}, "--addr"}, // the address without its flag
		{[]string{"--n", "0"}, "--n"},         // the agent answers 400, top retried every second
		{[]string{"--n", "20000"}, "--n"},     // above the agent's limit
		{[]string{"--op", "writes"}, "--op"},  // ditto
		{[]string{"--addr", "ftp://x"}, "--addr"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := time.Now()
		_, _, err := runCmd(t, ctx, append([]string{"top", "--interval", "100ms"}, tc.args...)...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) || time.Since(start) > time.Second {
			t.Errorf("top %q: %v after %v; want an error naming %s at once", tc.args, err, time.Since(start).Round(time.Millisecond), tc.want)
		}
	}
}

// TestRenderTopLongUnicodeKey: a long key of multi-byte characters is cut between
// characters, not inside one (invalid UTF-8 shows as garbage in the terminal).
func TestRenderTopLongUnicodeKey(t *testing.T) {
	r := &agent.TopK{Keys: []agent.Key{{Key: strings.Repeat("é", 40), Rate: 10}, {Key: strings.Repeat("热", 40), Rate: 5}}}
	var buf bytes.Buffer
	renderTop(&buf, r, nil, "http://127.0.0.1:9736", time.Unix(0, 0), 0, true)
	if !utf8.Valid(buf.Bytes()) {
		t.Errorf("frame is not valid UTF-8:\n%q", buf.String())
	}
}

// TestTopAgentRestarts: top started before its agent says so and retries; when the agent
// goes away it says so, and when it comes back top shows its keys again, by itself.
func TestTopAgentRestarts(t *testing.T) {
	addr := freeAddr(t)
	_, out, _ := startHotkeyd(t, "top", "--addr", "http://"+addr, "--interval", "100ms")
	eventually(t, "top to say the agent is unreachable", func() bool { return strings.Contains(out.String(), "agent unreachable") })
	for range 2 {
		p := startServe(t, nil, "--http-listen", addr, "--udp-listen", addr)
		mark := len(out.String())
		send := func() {
			if resp, err := http.Post("http://"+addr+"/v1/samples", "application/json",
				strings.NewReader(`{"source":"t","sample_rate":0.01,"samples":[{"key":"score:match42","op":"read","count":50}]}`)); err == nil {
				resp.Body.Close()
			}
		}
		eventually(t, "top to show the key", func() bool { send(); return strings.Contains(out.String()[mark:], "score:match42") })
		if err := p.signal(t, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		mark = len(out.String())
		eventually(t, "top to say the agent went away", func() bool { return strings.Contains(out.String()[mark:], "agent unreachable") })
	}
}

// TestTopErrorBodyEscaped: pointed at the wrong server, top quotes its error reply; a
// reply holding escape sequences must not reach the terminal as them.
func TestTopErrorBodyEscaped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("\x1b]0;pwned\a\x1b[2Jbad gateway"))
	}))
	defer srv.Close()
	_, _, err := runCmd(t, context.Background(), "top", "--once", "--addr", srv.URL)
	if err == nil || strings.ContainsAny(err.Error(), "\x1b\a") || !strings.Contains(err.Error(), "bad gateway") {
		t.Errorf("top against a server answering 502: %q; want the reply shown with its control characters escaped", err)
	}
}

// TestTopOncePrimaries: against an agent on a real 3-primary cluster, top shows each key's
// primary and slot, and a primaries line with the hot key's primary first and each
// primary's CPU from INFO.
func TestTopOncePrimaries(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	const key = "score:match42"
	addr := feedAgentWith(t, agent.Options{RedisAddrs: cl.Addrs(), RedisInfo: 100 * time.Millisecond}, key, "user:1", "user:2")
	topo, err := mitigate.NewTopology(context.Background(), mitigate.TopologyOptions{Seeds: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	primary := topo.PrimaryOfKey(key)
	var out string
	eventually(t, "a frame with primaries and their CPU", func() bool {
		var stdout, stderr bytes.Buffer
		if err := top(context.Background(), []string{"--once", "--addr", addr}, strings.NewReader(""), &stdout, &stderr); err != nil {
			t.Fatalf("top --once: %v\n%s", err, stderr.String())
		}
		out = stdout.String()
		return strings.Contains(out, "PRIMARY  TOP-K SHARE") && primaryFirst(out) == primary && cpuShown(out) == 3
	})
	want := fmt.Sprintf("%s [%d]", primary, mitigate.Slot(key))
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, "  "+key) && !strings.Contains(line, want) {
			t.Errorf("line of %s: %q; want its primary and slot %q", key, line, want)
		}
	}
	if !strings.Contains(out, "PRIMARY") {
		t.Errorf("frame:\n%s\nwant a PRIMARY column", out)
	}
}

// cpuShown counts the lines of a frame's primaries table that show a CPU figure.
func cpuShown(frame string) int {
	n := 0
	for _, line := range strings.Split(frame, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.HasPrefix(f[0], "127.0.0.1:") && strings.HasSuffix(f[1], "%") && strings.Contains(f[3], ".") {
			n++
		}
	}
	return n
}

// primaryFirst returns the first primary of a frame's primaries table.
func primaryFirst(frame string) string {
	_, table, _ := strings.Cut(frame, "TOP-K SHARE")
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "127.0.0.1:") {
			return f[0]
		}
	}
	return ""
}
