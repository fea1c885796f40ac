package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// ttyTop is a real `hotkeyd top` on a pseudo-terminal of its own.
type ttyTop struct {
	cmd    *exec.Cmd
	master *os.File
	slave  *os.File // kept open, to read the terminal's modes after top exits
	mu     sync.Mutex
	out    bytes.Buffer // guarded by mu: everything top wrote
	done   chan error
}

// startTTYTop runs `hotkeyd top args…` as the session leader of a new pseudo-terminal of
// cols×rows cells, its stdin, stdout and stderr.
func startTTYTop(t *testing.T, cols, rows int, args ...string) *ttyTop {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}); err != nil {
		t.Fatal(err)
	}
	p := &ttyTop{master: master, slave: slave, done: make(chan error, 1)}
	p.cmd = exec.Command(hotkeydBinary(t), append([]string{"top"}, args...)...)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	go func() { p.done <- p.cmd.Wait() }()
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			p.mu.Lock()
			p.out.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *ttyTop) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// wait waits 5 s at most for top to exit and returns its exit error.
func (p *ttyTop) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("top still runs after 5 s:\n%q", p.output())
		return nil
	}
}

// cooked reports whether the terminal is back in canonical mode with echo.
func (p *ttyTop) cooked(t *testing.T) bool {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio.Lflag&unix.ICANON != 0 && tio.Lflag&unix.ECHO != 0
}

// TestTopTTYQuitAndSignals: q, Ctrl-C, SIGTERM and SIGHUP (the terminal closed) each end
// top with status 0 and leave the terminal as it found it (echo and line editing on).
func TestTopTTYQuitAndSignals(t *testing.T) {
	addr := feedAgent(t, "score:match42")
	for _, how := range []string{"q", "ctrl-c", "sigterm", "sighup"} {
		t.Run(how, func(t *testing.T) {
			p := startTTYTop(t, 100, 30, "--addr", addr, "--interval", "100ms")
			eventually(t, "a frame", func() bool { return strings.Contains(p.output(), "score:match42") })
			if p.cooked(t) {
				t.Error("terminal still in line mode while top runs: q would need Enter")
			}
			switch how {
			case "q":
				_, _ = p.master.Write([]byte("q"))
			case "ctrl-c":
				_, _ = p.master.Write([]byte{3})
			case "sigterm":
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			case "sighup":
				_ = p.cmd.Process.Signal(syscall.SIGHUP)
			}
			if err := p.wait(t); err != nil {
				t.Errorf("top after %s: %v; want exit status 0", how, err)
			}
			if !p.cooked(t) {
				t.Errorf("terminal left without echo or line editing after %s", how)
			}
		})
	}
}

// TestTopTTYNarrowAndHostileKeys: on a terminal 40 cells wide and 12 rows high every line
// fits (a wrapped table is unreadable and scrolls the header away), a key holding escape
// sequences is shown escaped and never reaches the terminal as one, and wide characters
// are counted as the two cells they take.
func TestTopTTYNarrowAndHostileKeys(t *testing.T) {
	keys := []string{"sale:sku:4711", "evil\x1b[2J\x1b]0;pwned\a", strings.Repeat("热", 30), "user:" + strings.Repeat("x", 200)}
	for i := range 20 {
		keys = append(keys, "filler:"+strconv.Itoa(i))
	}
	addr := feedAgent(t, keys...)
	p := startTTYTop(t, 40, 12, "--addr", addr, "--interval", "100ms")
	eventually(t, "two frames", func() bool { return strings.Count(p.output(), "sale:sku:4711") >= 2 })
	_, _ = p.master.Write([]byte("q"))
	if err := p.wait(t); err != nil {
		t.Errorf("top: %v", err)
	}
	out := p.output()
	frames := strings.Split(out, "\x1b[H\x1b[2J") // top's own: home, clear
	if rest := strings.Join(frames, ""); strings.ContainsAny(rest, "\x1b\a") {
		t.Errorf("a key's escape sequence reached the terminal:\n%q", out)
	}
	if !strings.Contains(out, `evil\x1b[2J`) {
		t.Errorf("the hostile key is not shown escaped:\n%q", out)
	}
	last := frames[len(frames)-2] // the last complete frame
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(last, "\r\n", "\n"), "\n"), "\n")
	if len(lines) > 12 {
		t.Errorf("frame has %d lines on a terminal of 12 rows:\n%s", len(lines), last)
	}
	for _, l := range lines {
		if w := cellWidthForTest(l); w > 40 {
			t.Errorf("line of %d cells on a terminal of 40: %q", w, l)
		}
	}
}

// cellWidthForTest counts CJK ideographs as two cells and everything else as one.
func cellWidthForTest(s string) int {
	w := 0
	for _, r := range s {
		if r >= 0x4E00 && r <= 0x9FFF {
			w += 2
		} else if r != utf8.RuneError {
			w++
		}
	}
	return w
}
