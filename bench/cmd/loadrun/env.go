package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// env is one subcommand's run: its temporary directory and the processes it started,
// all killed by close.
type env struct {
	out, log io.Writer
	tmp      string
	procs    []*proc
	cpus     map[string]string // process name → the CPUs it may run on (taskset -c); absent: any
	began    time.Time         // when the run began
	load     string            // the load average then
}

// newEnv returns an env that writes tables to out and progress to log, and notes the time
// and the load average now, before the run adds its own load.
func newEnv(out, log io.Writer) *env {
	e := &env{out: out, log: log, began: time.Now()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		la := strings.Fields(string(b))
		e.load = strings.Join(la[:min(3, len(la))], " ")
	}
	return e
}

// proc is a started process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	logf string        // its stdout and stderr
}

// Pid returns the process id.
func (p *proc) Pid() int { return p.cmd.Process.Pid }

func (e *env) dir() (string, error) {
	if e.tmp == "" {
		d, err := os.MkdirTemp("", "loadrun-")
		if err != nil {
			return "", err
		}
		e.tmp = d
	}
	return e.tmp, nil
}

// close kills every process started, waits for them, and removes the temporary directory.
func (e *env) close() {
	for _, p := range slices.Backward(e.procs) {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range e.procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			fmt.Fprintf(e.log, "loadrun: %s (pid %d) did not exit\n", p.name, p.Pid())
		}
	}
	e.procs = nil
	if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
		e.tmp = ""
	}
}

// start starts a long-running process, its output going to a log file in the temporary
// directory. It dies with loadrun (SIGKILL on the parent's death) and is killed by close.
func (e *env) start(name string, environ []string, argv ...string) (*proc, error) {
	d, err := e.dir()
	if err != nil {
		return nil, err
	}
	logf := filepath.Join(d, fmt.Sprintf("%s-%d.log", name, len(e.procs)))
	f, err := os.Create(logf)
	if err != nil {
		return nil, err
	}
	argv = pinned(e.cpus[name], argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), environ...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), logf: logf}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	e.procs = append(e.procs, p)
	return p, nil
}

// pinned returns argv run by taskset on the CPUs in list (taskset execs it, so its pid is
// the command's), or argv itself when list is empty.
func pinned(list string, argv []string) []string {
	if list == "" {
		return argv
	}
	return append([]string{"taskset", "-c", list}, argv...)
}

// cpuList checks a -*-cpus flag: empty, or a CPU list as taskset -c takes it.
func cpuList(name, list string) error {
	if list == "" || cpuListRE.MatchString(list) {
		return nil
	}
	return fmt.Errorf("-%s %q: want a CPU list such as 1 or 0,2-3 (taskset -c), or empty for no pinning", name, list)
}

var cpuListRE = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// tail returns the end of a process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.logf)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// build builds hotkeyd from the main module, the parent of the bench module.
func (e *env) build(ctx context.Context) (string, error) {
	d, err := e.dir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(d, "hotkeyd")
	// Build in the main module, with its own go.mod and go.sum: the bench module requires
	// only what it imports.
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	main := filepath.Dir(filepath.Dir(strings.TrimSpace(string(gomod))))
	if _, err := os.Stat(filepath.Join(main, "cmd", "hotkeyd")); err != nil {
		return "", fmt.Errorf("run loadrun inside the bench module (cd bench), or pass -bin: %v", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hotkeyd")
	cmd.Dir = main
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build hotkeyd: %v\n%s", err, out)
	}
	return bin, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func freePorts(n int) ([]int, error) {
	// Hold them all open at once so that no two are the same.
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// waitTCP waits up to 10s for a TCP port to accept, or for p to die.
func waitTCP(ctx context.Context, p *proc, address string) error {
	return waitReady(ctx, p, address+" not accepting", func() bool {
		c, err := net.DialTimeout("tcp", address, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// waitHTTP waits up to 10s for url to answer 200.
func waitHTTP(ctx context.Context, p *proc, url string) error {
	return waitReady(ctx, p, url+" not ready", func() bool {
		r, err := httpClient.Get(url)
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
}

// waitReady polls ready every 20ms for up to 10s, giving up early if p exits or ctx ends;
// notReady describes the failure.
func waitReady(ctx context.Context, p *proc, notReady string, ready func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: %s after 10s: %s", p.name, notReady, p.tail())
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// startRedis starts a throwaway redis-server on a free loopback port.
func (e *env) startRedis(ctx context.Context) (*proc, int, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	d, err := e.dir()
	if err != nil {
		return nil, 0, err
	}
	p, err := e.start("redis-server", nil, "redis-server", "--port", strconv.Itoa(port),
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d, "--protected-mode", "no")
	if err != nil {
		return nil, 0, err
	}
	return p, port, waitTCP(ctx, p, addr(port))
}

// agent is a running `hotkeyd serve`.
type agent struct {
	*proc
	http string // base URL
	udp  string // UDP address, empty when off
}

// startAgent runs `hotkeyd serve` on free loopback ports with the given extra flags and
// environment, and waits for /readyz.
func (e *env) startAgent(ctx context.Context, bin string, udp bool, environ []string, flags ...string) (*agent, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	a := &agent{http: "http://" + addr(ports[0])}
	args := []string{bin, "serve", "--http-listen", addr(ports[0]), "--log-level", "warn"}
	if udp {
		a.udp = addr(ports[1]) // the UDP port of a TCP port just free: free in practice
		args = append(args, "--udp-listen", a.udp)
	} else {
		args = append(args, "--udp-listen", "")
	}
	args = append(args, flags...)
	// No registry file: agents started side by side would share the default one in the
	// working directory, which the second refuses (its lock).
	environ = append([]string{"HOTKEYD_REGISTRY_FILE="}, environ...)
	p, err := e.start("hotkeyd", environ, args...)
	if err != nil {
		return nil, err
	}
	a.proc = p
	return a, waitHTTP(ctx, p, a.http+"/readyz")
}

// metric sums the values of every series of a metric in the agent's /metrics.
func (a *agent) metric(name string) (float64, error) {
	r, err := httpClient.Get(a.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	var sum float64
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// getJSON decodes the JSON answer of a GET.
func getJSON(url string, v any) error {
	r, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, r.Status, b)
	}
	return json.NewDecoder(r.Body).Decode(v)
}

// procStatus returns the fields of /proc/PID/status in kB (VmRSS, VmHWM).
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// cpuTime returns the user+system CPU time a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz, nil
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quantile returns the q-quantile of xs, nearest rank.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// commandLine is the command that reproduces a subcommand's run: every flag with its
// value, except the binary path.
func commandLine(fs *flag.FlagSet) string {
	parts := []string{"cd bench && go run ./cmd/loadrun", fs.Name()}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "bin" || f.Name == "bin-b" {
			return
		}
		parts = append(parts, fmt.Sprintf("-%s=%s", f.Name, f.Value))
	})
	return strings.Join(parts, " ")
}

// header prints the command line and the machine context above a table: when the run
// began and ended, and the load average before it.
func (e *env) header(fs *flag.FlagSet, title string) {
	fmt.Fprintf(e.out, "\n### %s\n\n```\n%s\n```\n\n", title, commandLine(fs))
	fmt.Fprintf(e.out, "%s to %s, %d CPUs, %s, load average at start %s.\n\n",
		e.began.UTC().Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04 MST"),
		runtime.NumCPU(), runtime.Version(), e.load)
}

// table prints a markdown table.
func (e *env) table(head []string, rows [][]string) {
	fmt.Fprintf(e.out, "| %s |\n", strings.Join(head, " | "))
	seps := make([]string, len(head))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "---:"
		}
	}
	fmt.Fprintf(e.out, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range rows {
		fmt.Fprintf(e.out, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(e.out)
}

// commonFlags adds -bin and -quick to a subcommand's flags.
func commonFlags(fs *flag.FlagSet) (bin *string, quick *bool) {
	bin = fs.String("bin", "", "hotkeyd binary to run (default: build ../cmd/hotkeyd)")
	quick = fs.Bool("quick", false, "a tiny run that only checks that everything works")
	return bin, quick
}

// binary returns *bin, building hotkeyd when it is empty.
func (e *env) binary(ctx context.Context, bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	return e.build(ctx)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func f0(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) }
func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
func f2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

// thousands formats n with thin separators: 1,234,567.
func thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
