package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/client"
	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestSDKOutlivesAgentKill: an app using the SDK keeps running while its agent is
// killed with SIGKILL and started again on the same address. Every Redis call succeeds
// throughout (fail open), and once the agent is back the SDK reports to it again and
// takes its plan.
func TestSDKOutlivesAgentKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the agent: several seconds")
	}
	srv := redistest.Start(t)
	addr := freeAddr(t)
	args := []string{"--http-listen", addr, "--udp-listen", addr}
	agent := startServe(t, nil, args...)

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, err := client.Attach(rdb, client.Options{Agent: "http://" + addr, Source: "sre-app", SampleEvery: 1, PlanWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The app: reads of one hot key and writes of others, until stop.
	ctx := context.Background()
	if err := rdb.Set(ctx, "sre:hot", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				var err error
				if i%10 == 0 {
					err = rdb.Set(ctx, fmt.Sprintf("sre:w:%d", w), i, 0).Err()
				} else if v, gerr := rdb.Get(ctx, "sre:hot").Result(); gerr != nil || v != "v" {
					err = fmt.Errorf("GET sre:hot: %q, %v; want \"v\"", v, gerr)
				}
				d := int64(time.Since(start))
				for s := slowest.Load(); d > s && !slowest.CompareAndSwap(s, d); s = slowest.Load() {
				}
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				if i%64 == 0 {
					time.Sleep(time.Millisecond) // leave the machine some room
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	hotPlanned := func() bool { return c.Stats().Plan.Entries > 0 }
	eventually(t, "the first agent's plan to name sre:hot", hotPlanned)
	before := c.Stats()
	t.Logf("before the kill: %+v", before.Plan)

	if err := agent.signal(t, syscall.SIGKILL); err == nil {
		t.Fatal("hotkeyd serve after SIGKILL: exit status 0; want killed")
	}
	killedAt := calls.Load()
	eventually(t, "the SDK to notice the agent is gone", func() bool { return c.Stats().Plan.Errors > before.Plan.Errors })
	eventually(t, "the app to go on while the agent is gone", func() bool { return calls.Load() > killedAt+1000 })

	again := startServe(t, nil, args...)
	base := "http://" + addr
	eventually(t, "samples from the app at the restarted agent", func() bool {
		m, err := httpGet(base + "/metrics")
		v, _ := metricValue(m, `hotkeyd_samples_received_total{source="sre-app"}`)
		return err == nil && v > 0
	})
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last seen: %s", last)
		}
	}()
	eventually(t, "the SDK to take the restarted agent's plan", func() bool {
		body, err := httpGet(base + "/v1/plan")
		if err != nil {
			return false
		}
		var p struct {
			Version uint64 `json:"version"`
		}
		if json.Unmarshal([]byte(body), &p) != nil {
			return false
		}
		st := c.Stats().Plan
		last = fmt.Sprintf("agent's plan: %s; SDK: %+v", body, st)
		return st.Updates > before.Plan.Updates && st.Version == p.Version && st.Entries > 0
	})
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d app calls failed while the agent was killed and restarted; want none (fail open). First: %v", n, calls.Load(), firstErr.Load())
	}
	t.Logf("%d app calls, slowest %v; SDK after: %+v", calls.Load(), time.Duration(slowest.Load()), c.Stats().Plan)
	if err := again.signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0\n%s", err, again.log)
	}
}

// TestServeSIGTERMProxyMidReply: a proxy client whose reply is on its way when hotkeyd
// gets SIGTERM must get all of it before its connection closes, never a part; hotkeyd
// then exits 0.
func TestServeSIGTERMProxyMidReply(t *testing.T) {
	srv := redistest.Start(t)
	const size = 32 << 20 // more than the sockets' buffers hold
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	if err := direct.Set(context.Background(), "big", strings.Repeat("v", size), 0).Err(); err != nil {
		t.Fatal(err)
	}
	proxy := freeAddr(t)
	agent := startServe(t, nil, "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0",
		"--proxy-listen", proxy, "--proxy-upstream", srv.Addr())
	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n"); err != nil {
		t.Fatal(err)
	}
	want := len(fmt.Sprintf("$%d\r\n", size)) + size + 2
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(conn, head); err != nil {
		t.Fatalf("the start of the reply: %v", err)
	}
	// Sent here, waited for below: signal would call t.Fatal off the test's goroutine.
	if err := agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	rest, err := io.ReadAll(conn)
	if got := len(head) + len(rest); got != want || err != nil {
		t.Errorf("the client got %d bytes of its %d-byte reply, then %v; want all of it, then the connection closed", got, want, err)
	}
	conn.Close() // the proxy waits for the client's side to close (or its drain timeout)
	if err := agent.wait(t, syscall.SIGTERM); err != nil {
		t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0\n%s", err, agent.log)
	}
}

// TestServeSIGTERMUnderLoad: SIGTERM while UDP reports flow and proxy clients pipeline:
// hotkeyd exits 0 and its log says that it is stopping, why, and then that it stopped
// and how long that took.
func TestServeSIGTERMUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	addr, proxy := freeAddr(t), freeAddr(t)
	agent := startServe(t, nil, "--http-listen", addr, "--udp-listen", addr,
		"--proxy-listen", proxy, "--proxy-upstream", srv.Addr())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, piped atomic.Int64
	wg.Go(func() { // reports, as fast as they go
		r, err := client.NewReporter(client.ReporterOptions{Agent: addr, Source: "flood", SampleEvery: 1})
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Close()
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb.Close()
		rdb.AddHook(r.Hook())
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rdb.Get(context.Background(), fmt.Sprint("udp:", i%100))
			sent.Add(1)
		}
	})
	for w := range 4 { // proxy clients, pipelining
		wg.Go(func() {
			rdb := redis.NewClient(&redis.Options{Addr: proxy, MaxRetries: -1})
			defer rdb.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pipe := rdb.Pipeline()
				for j := range 50 {
					pipe.Set(context.Background(), fmt.Sprintf("p:%d:%d", w, j), j, 0)
				}
				if _, err := pipe.Exec(context.Background()); err == nil {
					piped.Add(1)
				}
			}
		})
	}
	var stopOnce sync.Once
	stopLoad := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	}
	defer stopLoad()
	eventually(t, "reports and pipelines to flow", func() bool {
		m, err := httpGet("http://" + addr + "/metrics")
		v, _ := metricValue(m, `hotkeyd_samples_received_total{source="flood"}`)
		return err == nil && v > 0 && piped.Load() > 10
	})
	if err := agent.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("hotkeyd serve after SIGTERM under load: %v; want exit status 0\n%s", err, agent.log)
	}
	stopLoad()
	log := agent.log.String()
	stopping := strings.Index(log, `msg="hotkeyd agent stopping`)
	stopped := strings.Index(log, `msg="hotkeyd agent stopped"`)
	if stopping < 0 || stopped < stopping || !strings.Contains(log[stopping:], `reason="terminated signal received"`) || !strings.Contains(log[stopped:], "took=") {
		t.Errorf("log after SIGTERM:\n%s\nwant a line that the agent is stopping, with reason=\"terminated signal received\", then one that it stopped, with took=", log[max(stopping, 0):])
	}
}

// TestServeMisconfigured: a mistake in the settings stops hotkeyd serve at start with one
// line that names the setting and its value, and a non-zero exit; no panic, no stack.
func TestServeMisconfigured(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer takenUDP.Close()
	tcpAddr, udpAddr := taken.Addr().String(), takenUDP.LocalAddr().String()
	nothing := freeAddr(t) // nothing listens there
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain") // a file, where registry.file wants a directory
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ephemeral := []string{"--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0"}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string // in the error line
	}{
		{"http.listen taken", nil, []string{"--http-listen", tcpAddr, "--udp-listen", "127.0.0.1:0"}, []string{"http.listen", tcpAddr}},
		{"udp.listen taken", nil, []string{"--http-listen", "127.0.0.1:0", "--udp-listen", udpAddr}, []string{"udp.listen", udpAddr}},
		{"proxy.listen taken", nil, append(ephemeral, "--proxy-listen", tcpAddr, "--proxy-upstream", nothing), []string{"proxy.listen", tcpAddr}},
		{"bad environment value", []string{"HOTKEYD_DETECTOR_WIDTH=abc"}, ephemeral, []string{"HOTKEYD_DETECTOR_WIDTH", `"abc"`}},
		{"config file missing", nil, append(ephemeral, "--config", filepath.Join(dir, "nope.yaml")), []string{"config", "nope.yaml"}},
		{"config file a directory", nil, append(ephemeral, "--config", dir), []string{"config", dir}},
		{"config file without --config", nil, append(ephemeral, filepath.Join(dir, "hotkeyd.yaml")), []string{"--config " + filepath.Join(dir, "hotkeyd.yaml")}},
		{"misspelt environment variable", []string{"HOTKEYD_AUTH_TOKN=s3cret"}, ephemeral, []string{"HOTKEYD_AUTH_TOKN", "HOTKEYD_AUTH_TOKEN"}},
		{"registry.file in a missing directory", []string{"HOTKEYD_REGISTRY_FILE=" + filepath.Join(dir, "missing", "events.json")}, ephemeral,
			[]string{"registry.file", filepath.Join(dir, "missing")}},
		{"registry.file under a file", []string{"HOTKEYD_REGISTRY_FILE=" + filepath.Join(plain, "events.json")}, ephemeral,
			[]string{"registry.file", "not a directory"}},
		{"proxy tap dialing itself", nil, append(ephemeral, "--proxy-listen", "127.0.0.1:7641", "--proxy-upstream", "localhost:7641"),
			[]string{"proxy.upstream", "proxy.listen", "own listener"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, hotkeydBinary(t), append([]string{"serve"}, tt.args...)...)
			cmd.Env = append(append(os.Environ(), "HOTKEYD_LOG_FORMAT=text"), tt.env...)
			cmd.Dir = t.TempDir()
			var stderr logbuf.Buffer
			cmd.Stderr, cmd.Stdout = &stderr, &stderr
			err := cmd.Run()
			out := strings.TrimSpace(stderr.String())
			if ctx.Err() != nil {
				t.Fatalf("hotkeyd serve %q still ran after 20 s; want it to refuse to start:\n%s", tt.args, out)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Errorf("hotkeyd serve %q: %v; want a non-zero exit status", tt.args, err)
			}
			if strings.Count(out, "\n") != 0 || !strings.HasPrefix(out, "hotkeyd: ") {
				t.Errorf("hotkeyd serve %q printed:\n%s\nwant one line starting with \"hotkeyd: \"", tt.args, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("hotkeyd serve %q: %q; want it to name %s", tt.args, out, w)
				}
			}
		})
	}
}

// TestProxyUpstreamRestart: Redis behind the proxy tap is stopped and started again on
// the same port. Clients of the tap get errors while it is down and work again after,
// hotkeyd still running; /metrics counts the failed shared connection.
func TestProxyUpstreamRestart(t *testing.T) {
	upstream, proxy, addr := freeAddr(t), freeAddr(t), freeAddr(t)
	redisSrv := redistest.StartAt(t, upstream)
	agent := startServe(t, nil, "--http-listen", addr, "--udp-listen", addr,
		"--proxy-listen", proxy, "--proxy-upstream", upstream)
	rdb := redis.NewClient(&redis.Options{Addr: proxy, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatalf("SET through the tap: %v", err)
	}

	redisSrv.Stop()
	if err := rdb.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET through the tap with Redis down: nil error; want one")
	}
	redistest.StartAt(t, upstream) // empty: nothing was saved
	eventually(t, "the tap to work again after Redis restarted", func() bool {
		return rdb.Set(ctx, "k", "after", 0).Err() == nil
	})
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "after" {
		t.Errorf("GET through the tap after the restart: %q, %v; want \"after\"", v, err)
	}
	m, err := httpGet("http://" + addr + "/metrics")
	if v, _ := metricValue(m, "hotkeyd_proxy_shared_failures_total"); err != nil || v < 1 {
		t.Errorf("hotkeyd_proxy_shared_failures_total = %v (%v); want ≥ 1 after Redis went away", v, err)
	}
	if err := agent.signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0", err)
	}
	// Redis's shutdown closes the shared connections: one owing replies fails (warned
	// with its name), and one owing nothing is opened again, which fails (warned with the
	// upstream) while Redis is down.
	log := agent.log.String()
	if !strings.Contains(log, "upstream="+upstream) ||
		!strings.Contains(log, "proxy: shared upstream connection failed") && !strings.Contains(log, "proxy: cannot open a shared upstream connection") {
		t.Errorf("log lacks a warning that a shared connection to upstream=%s failed or could not be opened:\n%s", upstream, log)
	}
}

// TestServeUpstreamDownAtStart: a proxy tap whose upstream does not answer at start
// starts all the same, warns with the address, and serves its clients once Redis is up:
// the tap is in the apps' path to Redis and must not refuse to start while Redis restarts.
func TestServeUpstreamDownAtStart(t *testing.T) {
	upstream, proxy := freeAddr(t), freeAddr(t)
	agent := startServe(t, nil, "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0",
		"--proxy-listen", proxy, "--proxy-upstream", upstream)
	log := agent.log.String()
	if !strings.Contains(log, "proxy.upstream does not answer") || !strings.Contains(log, upstream) {
		t.Errorf("log lacks a warning naming proxy.upstream %s:\n%s", upstream, log)
	}
	redistest.StartAt(t, upstream)
	rdb := redis.NewClient(&redis.Options{Addr: proxy, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	defer rdb.Close()
	ctx := context.Background()
	eventually(t, "the tap to serve once Redis is up", func() bool {
		return rdb.Set(ctx, "k", "v", 0).Err() == nil
	})
	if err := agent.signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0", err)
	}
}
