package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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
	port, err := freePort(false)
	if err != nil {
		t.Fatalf("redistest: start nutcracker: %v", err)
	}
	stats, err := freePort(false)
	if err != nil {
		t.Fatalf("redistest: start nutcracker: %v", err)
	}
	dir := t.TempDir()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := fmt.Sprintf("pool:\n  listen: %s\n  redis: true\n  servers:\n    - %s:1\n", addr, upstream)
	confPath := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatalf("redistest: start nutcracker: %v", err)
	}
	logf, err := os.Create(filepath.Join(dir, "nutcracker.log"))
	if err != nil {
		t.Fatalf("redistest: start nutcracker: %v", err)
	}
	cmd := exec.Command(bin, "-c", confPath, "-s", strconv.Itoa(stats), "-a", "127.0.0.1")
	cmd.Stdout, cmd.Stderr = logf, logf
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		t.Fatalf("redistest: start nutcracker: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(startTimeout)
	for {
		reply, err := command(addr, "", "PING")
		if err == nil && reply == "PONG" {
			return &Twemproxy{addr: addr}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: nutcracker on %s did not answer PING within %v: got %q, %v (log in %s)",
				addr, startTimeout, reply, err, dir)
		}
		select {
		case <-done:
			t.Fatalf("redistest: nutcracker exited before answering PING (log in %s)", dir)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
