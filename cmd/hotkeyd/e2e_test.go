package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
)

// The end-to-end tests run the real binary, built once per test run.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// hotkeydBinary builds cmd/hotkeyd once and returns the binary's path.
func hotkeydBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "hotkeyd-e2e-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "hotkeyd")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// serveProc is a running `hotkeyd serve`.
type serveProc struct {
	cmd    *exec.Cmd
	log    *logbuf.Buffer // its standard error
	exited chan struct{}  // closed when the process has exited; err is then set
	err    error
}

var startedRE = regexp.MustCompile(`msg="hotkeyd agent started" http=(\S+)`)

// startServe runs `hotkeyd serve args…` with env added to the environment, in a
// directory of its own, and waits until it logs that it started. It kills the process
// when the test ends if it still runs.
func startServe(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{log: &logbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(hotkeydBinary(t), append([]string{"serve"}, args...)...)
	p.cmd.Env = append(append(os.Environ(), "HOTKEYD_LOG_FORMAT=text"), env...)
	p.cmd.Dir = t.TempDir() // the registry file goes there
	p.cmd.Stderr = p.log
	p.cmd.Stdout = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	for i := 0; ; i++ {
		if startedRE.MatchString(p.log.String()) {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("hotkeyd serve %q exited before it started: %v\n%s", args, p.err, p.log)
		case <-time.After(20 * time.Millisecond):
		}
		if i == 1000 {
			t.Fatalf("hotkeyd serve %q did not log that it started within 20 s:\n%s", args, p.log)
		}
	}
}

// signal sends sig and waits (30 s at most) for the process to exit; it returns the
// exit error (nil for status 0).
func (p *serveProc) signal(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return p.wait(t, sig)
}

// wait waits (30 s at most) for the process to exit after sig was sent; it returns the
// exit error (nil for status 0).
func (p *serveProc) wait(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(30 * time.Second):
		t.Fatalf("hotkeyd serve still runs 30 s after %v:\n%s", sig, p.log)
		return nil
	}
}

// startHotkeyd runs the real `hotkeyd args…` with stdout and stderr into one buffer and
// stdin from /dev/null; done gets its exit error. It kills the process when the test
// ends if it still runs.
func startHotkeyd(t *testing.T, args ...string) (cmd *exec.Cmd, out *logbuf.Buffer, done chan error) {
	t.Helper()
	out = &logbuf.Buffer{}
	cmd = exec.Command(hotkeydBinary(t), args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, out, done
}

// freeAddr returns a loopback "127.0.0.1:port" free for both TCP and UDP, for an agent
// whose HTTP and UDP listeners share the port (the default) and that restarts on it.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no loopback port free for both TCP and UDP after 50 tries")
	return ""
}

// httpGet returns the body of GET url, or an error for a failure or a status not 200.
func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return string(b), err
}

// eventually polls cond every 20 ms, failing the test with what after 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("gave up after 20 s waiting for %s", what)
}

// metricValue returns the value of the series whose line starts with series (name and
// labels as /metrics prints them), and whether it was there.
func metricValue(metrics, series string) (float64, bool) {
	for line := range strings.Lines(metrics) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}
