package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Twemproxy is a running twemproxy (nutcracker) in front of one server.
type Twemproxy struct {
	addr string
}

// Addr returns twemproxy's "127.0.0.1:port".
func (p *Twemproxy) Addr() string { return p.addr }

// StartTwemproxy starts nutcracker on a free 127.0.0.1 port, forwarding to upstream (a
// "127.0.0.1:port" of a server without a password), waits until it answers PING through
// to the server, and stops it when the test ends.
func StartTwemproxy(t testing.TB, upstream string) *Twemproxy {
	t.Helper()
	bin := lookPath(t, "nutcracker")
	fail := func(step string, err error) {
		t.Helper()
		t.Fatalf("redistest: start nutcracker for %s: %s: %v", upstream, step, err)
	}
	port, err := freePort(false)
	if err != nil {
		fail("listen port", err)
	}
	stats, err := freePort(false)
	if err != nil {
		fail("stats port", err)
	}
	dir := t.TempDir()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := fmt.Sprintf("pool:\n  listen: %s\n  redis: true\n  servers:\n    - %s:1\n", addr, upstream)
	confPath := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		fail("write its configuration", err)
	}
	logPath := filepath.Join(dir, "nutcracker.log")
	logf, err := os.Create(logPath)
	if err != nil {
		fail("create its log", err)
	}
	cmd := exec.Command(bin, "-c", confPath, "-s", strconv.Itoa(stats), "-a", "127.0.0.1")
	cmd.Stdout, cmd.Stderr = logf, logf
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		fail(bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	if err := awaitPING(addr, "", done); err != nil {
		if errors.Is(err, errExited) {
			err = fmt.Errorf("exited (%s)", cmd.ProcessState)
		}
		log, _ := os.ReadFile(logPath)
		t.Fatalf("redistest: nutcracker on %s for %s: %v\nconfiguration:\n%s\nlog:\n%s", addr, upstream, err, conf, tail(log))
	}
	return &Twemproxy{addr: addr}
}
