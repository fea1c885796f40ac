package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/internal/agenttest"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/spf13/pflag"
)

func runCmd(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(ctx, args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

func TestUsageAndVersion(t *testing.T) {
	if _, stderr, err := runCmd(t, context.Background()); err == nil || !strings.Contains(stderr, "Usage:") {
		t.Errorf("no command: %v, %q; want an error and the usage", err, stderr)
	}
	if _, _, err := runCmd(t, context.Background(), "frobnicate"); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %v", err)
	}
	if out, _, err := runCmd(t, context.Background(), "version"); err != nil || !strings.HasPrefix(out, "hotkeyd ") {
		t.Errorf("version: %q, %v", out, err)
	}
}

func TestPrintConfig(t *testing.T) {
	t.Setenv("HOTKEYD_AUTH_TOKEN", "s3cret")
	t.Setenv("HOTKEYD_PROXY_UPSTREAM_USERNAME", "tap")
	t.Setenv("HOTKEYD_PROXY_UPSTREAM_PASSWORD", "redis-pw-s3")
	out, _, err := runCmd(t, context.Background(), "serve", "--print-config", "--topk", "250")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"listen: 127.0.0.1:9736", "topk: 250", `token: '***'`, "upstream_username: tap", `upstream_password: '***'`} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Error("--print-config shows the token")
	}
	if strings.Contains(out, "redis-pw-s3") {
		t.Error("--print-config shows proxy.upstream_password")
	}
	if _, _, err := runCmd(t, context.Background(), "serve", "--http-listen", "nonsense"); err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Errorf("bad --http-listen: %v; want an error naming http.listen", err)
	}
}

func TestTopOnce(t *testing.T) {
	a := agenttest.Run(t, agent.Options{})
	ctx := context.Background()
	a.Accept(sampler.Batch{Source: "t", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte("score:match42"), Op: sampler.OpRead, Count: 50}}})
	out, _, err := runCmd(t, ctx, "top", "--once", "--addr", "http://"+a.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "score:match42") || !strings.Contains(out, "RATE/s") {
		t.Errorf("top --once:\n%s\nwant a table with score:match42", out)
	}
	if _, _, err := runCmd(t, ctx, "top", "--once", "--addr", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("top against nothing: %v; want 'agent unreachable'", err)
	}
}

// TestDemo runs the demo, shortened: the flash key must be flagged.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes 6 s")
	}
	out, stderr, err := runCmd(t, context.Background(), "demo", "--duration", "6s", "--spike-at", "2s")
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "sale:sku:4711 flagged HOT") {
		t.Errorf("demo output lacks the flagging of the flash key:\n%s", out)
	}
	if !strings.Contains(out, "sale:sku:4711 → l1 (enforce): predicted by flash-sale") {
		t.Errorf("demo output lacks the plan's L1 entry armed by the registry for the flash key:\n%s", out)
	}
	if !strings.Contains(out, `registry report for "flash-sale"`) {
		t.Errorf("demo output lacks the registry report:\n%s", out)
	}
	if !strings.Contains(out, "redis: real redis-server") {
		t.Errorf("demo did not drive real Redis through the proxy (redis-server is installed by scripts/test.sh):\n%s", out)
	}
}

// TestServeStopsOnSIGTERM builds the binary, runs hotkeyd serve, and stops it with
// SIGTERM: it must stop listening and exit 0.
func TestServeStopsOnSIGTERM(t *testing.T) {
	cmd := exec.Command(hotkeydBinary(t), "serve", "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "HOTKEYD_LOG_FORMAT=text")
	cmd.Dir = t.TempDir() // the registry file goes there
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	var addr string
	re := regexp.MustCompile(`http=(127\.0\.0\.1:\d+)`)
	for addr == "" && lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatal("hotkeyd serve never logged its HTTP address")
	}
	go io.Copy(io.Discard, stderr)
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz: %d; want 200", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("hotkeyd serve did not exit within 15 s of SIGTERM")
	}
	if _, err := http.Get("http://" + addr + "/readyz"); err == nil {
		t.Error("still listening after exit")
	}
}

// TestRegistryCLI drives hotkeyd registry add, list, show and rm against a real agent.
func TestRegistryCLI(t *testing.T) {
	a := agenttest.Run(t, agent.Options{AuthToken: "tk"})
	ctx := context.Background()
	addr := "http://" + a.HTTPAddr().String()

	_, _, err := runCmd(t, ctx, "registry", "add", "--addr", addr, "--id", "final", "--pattern", "score:match42",
		"--start", "2026-12-01T19:30:00+01:00", "--end", "2026-12-01T21:30:00+01:00", "--lead", "10m")
	if err == nil || !strings.Contains(err.Error(), "authorization") {
		t.Errorf("add without a token: %v; want an authorization error", err)
	}
	out, _, err := runCmd(t, ctx, "registry", "add", "--addr", addr, "--token", "tk", "--id", "final", "--pattern", "score:match42",
		"--start", "2026-12-01T19:30:00+01:00", "--end", "2026-12-01T21:30:00+01:00", "--lead", "10m", "--expected-read-rate", "200000")
	if err != nil || !strings.Contains(out, "registered final") {
		t.Fatalf("add: %q, %v", out, err)
	}
	if _, _, err := runCmd(t, ctx, "registry", "add", "--addr", addr, "--token", "tk", "--id", "bad", "--pattern", "k",
		"--start", "2026-12-01T19:30:00Z", "--end", "2026-12-01T18:00:00Z"); err == nil || !strings.Contains(err.Error(), "end") {
		t.Errorf("add with end before start: %v; want an error naming end", err)
	}
	if out, _, err := runCmd(t, ctx, "registry", "list", "--addr", addr); err != nil || !strings.Contains(out, "final") || !strings.Contains(out, "200.0k") {
		t.Errorf("list: %q, %v", out, err)
	}
	if out, _, err := runCmd(t, ctx, "registry", "show", "--addr", addr, "final"); err != nil || !strings.Contains(out, `"score:match42"`) {
		t.Errorf("show: %q, %v", out, err)
	}
	if out, _, err := runCmd(t, ctx, "registry", "rm", "--addr", addr, "--token", "tk", "final"); err != nil || !strings.Contains(out, "deleted final") {
		t.Errorf("rm: %q, %v", out, err)
	}
	if _, _, err := runCmd(t, ctx, "registry", "show", "--addr", addr, "final"); err == nil || !strings.Contains(err.Error(), "no such event") {
		t.Errorf("show after rm: %v; want not found", err)
	}
}

// TestRegistryHelp: `hotkeyd help` sends users to `hotkeyd registry` for its usage, and
// the usage says events can be added "with flags": --help must show the usage and every
// flag of add, and succeed.
func TestRegistryHelp(t *testing.T) {
	for _, args := range [][]string{{"registry", "--help"}, {"registry", "-h"}, {"registry", "help"}} {
		out, stderr, err := runCmd(t, context.Background(), args...)
		if err != nil {
			t.Errorf("%v: %v; want the usage and no error", args, err)
		}
		if !strings.Contains(out+stderr, "hotkeyd registry list") {
			t.Errorf("%v: output lacks the usage:\n%s%s", args, out, stderr)
		}
	}
	t.Setenv("HOTKEYD_AUTH_TOKEN", "s3cret")
	help, stderr, err := runCmd(t, context.Background(), "registry", "add", "--help") // asked for: on stdout
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("registry add --help: %v; want the usage and no error (or pflag.ErrHelp, status 0)", err)
	}
	if strings.Contains(help+stderr, "s3cret") {
		t.Error("registry add --help shows $HOTKEYD_AUTH_TOKEN")
	}
	for _, flag := range []string{"--recurrence", "--zone", "--expected-write-rate", "--mitigation", "--owner", "--note", "--file"} {
		if !strings.Contains(help, flag) {
			t.Errorf("registry add --help lacks %s:\n%s", flag, help)
		}
	}
}

// TestRegistryListEscapes: an event's name is anyone's text; `registry list` shows it
// with its control characters escaped, so no escape sequence reaches the terminal and a
// tab or newline in it does not break the table.
func TestRegistryListEscapes(t *testing.T) {
	a := agenttest.Run(t, agent.Options{})
	ctx := context.Background()
	addr := "http://" + a.HTTPAddr().String()
	name := "sale\x1b[2J\tnoon\nday\u0085"
	if _, _, err := runCmd(t, ctx, "registry", "add", "--addr", addr, "--id", "esc", "--name", name, "--pattern", "sku:*",
		"--start", "2026-12-01T12:00:00Z", "--end", "2026-12-01T13:00:00Z"); err != nil {
		t.Fatalf("add: %v", err)
	}
	out, _, err := runCmd(t, ctx, "registry", "list", "--addr", addr)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if strings.ContainsAny(out, "\x1b\t\u0085") || strings.Count(out, "\n") != 2 {
		t.Errorf("list printed control characters or extra lines:\n%q", out)
	}
	if want := `sale\x1b[2J\tnoon\nday\u0085`; !strings.Contains(out, want) {
		t.Errorf("list:\n%s\nwant the name shown as %s", out, want)
	}
}
