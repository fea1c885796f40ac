package main

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelpOnStdout: asked for, help goes to standard output with status 0, so that
// `hotkeyd serve --help | grep listen` and `hotkeyd help serve` work; `help CMD` shows
// that command's own help, not the list of commands.
func TestHelpOnStdout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--help"}, "--http-listen"},
		{[]string{"help", "serve"}, "--http-listen"},
		{[]string{"help", "top"}, "--interval"},
		{[]string{"top", "-h"}, "--interval"},
		{[]string{"help", "demo"}, "--spike-at"},
		{[]string{"registry", "add", "--help"}, "--pattern"},
		{[]string{"--help"}, "hotkeyd serve"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(hotkeydBinary(t), tc.args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("hotkeyd %s: %v; stdout %q, stderr %q; want status 0 and %s on stdout",
				strings.Join(tc.args, " "), err, stdout.String(), stderr.String(), tc.want)
		}
	}
	// A wrong flag is an error on stderr, with the usage there too.
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(hotkeydBinary(t), "top", "--bogus")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err == nil || stdout.Len() != 0 || !strings.Contains(stderr.String(), "bogus") {
		t.Errorf("hotkeyd top --bogus: %v; stdout %q, stderr %q; want status 1 and the error on stderr", err, stdout.String(), stderr.String())
	}
}

// TestDemoFlagsValidated: a demo that would end before its own spike is refused at once,
// not after running its whole length to fail with "not flagged".
func TestDemoFlagsValidated(t *testing.T) {
	for _, args := range [][]string{
		{"--duration", "3s"},                      // spike at the default 4s
		{"--duration", "5s", "--spike-at", "-1s"}, // negative
		{"--duration", "5s", "--spike-at", "5s"},
		{"extra"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, _, err := runCmd(t, ctx, append([]string{"demo", "--no-redis"}, args...)...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "demo") || time.Since(start) > time.Second {
			t.Errorf("demo %q: %v after %v; want an error at once", args, err, time.Since(start).Round(time.Millisecond))
		}
	}
}

var demoRedisRE = regexp.MustCompile(`redis: real redis-server at (\S+) `)

// TestDemoCtrlC: Ctrl-C in the middle of the demo stops it with status 0 and a line that
// says so (not "the flash key was not flagged", status 1), and its redis-server is gone.
func TestDemoCtrlC(t *testing.T) {
	cmd, out, done := startHotkeyd(t, "demo", "--duration", "15s")
	eventually(t, "the demo's first frame", func() bool { return strings.Contains(out.String(), "t=1") })
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo after Ctrl-C: %v; want exit status 0\n%s", err, out)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("demo still runs 5 s after Ctrl-C:\n%s", out)
	}
	if s := out.String(); strings.Contains(s, "not flagged") || !strings.Contains(s, "interrupted") {
		t.Errorf("demo after Ctrl-C:\n%s\nwant a line saying it was interrupted, no error", s)
	}
	if m := demoRedisRE.FindStringSubmatch(out.String()); m != nil {
		if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
			c.Close()
			t.Errorf("the demo's redis-server at %s still answers after the demo ended", m[1])
		}
	} else if _, err := exec.LookPath("redis-server"); err == nil {
		t.Errorf("demo did not start its redis-server:\n%s", out)
	}
}

// TestServeLogsVersion: the agent's start log names the build, so that logs of an
// incident say which hotkeyd ran.
func TestServeLogsVersion(t *testing.T) {
	addr := freeAddr(t)
	p := startServe(t, nil, "--http-listen", addr, "--udp-listen", addr)
	if !regexp.MustCompile(`msg="hotkeyd agent started" .*version=.* go=go1`).MatchString(p.log.String()) {
		t.Errorf("serve's log names no version:\n%s", p.log)
	}
	if err := p.signal(t, syscall.SIGTERM); err != nil {
		t.Error(err)
	}
}

// TestServeProcessMetrics: /metrics of `hotkeyd serve` carries the Go runtime's and the
// process's metrics, so that an SRE can trend goroutines, memory and file descriptors
// (a soak found none), and the whole page passes promtool check metrics.
func TestServeProcessMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run ./scripts/test.sh, which installs Debian's prometheus package")
	}
	addr := freeAddr(t)
	p := startServe(t, nil, "--http-listen", addr, "--udp-listen", addr)
	body, err := httpGet("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if v, ok := metricValue(body, series); !ok || v <= 0 {
			t.Errorf("/metrics: %s = %v (present %v); want a positive value", series, v, ok)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	if err := p.signal(t, syscall.SIGTERM); err != nil {
		t.Error(err)
	}
}
