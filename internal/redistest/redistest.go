package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// installHint is appended to every "binary not found" failure.
const installHint = "run ./scripts/test.sh, which installs redis-server, redis-tools and nutcracker"

// startTimeout bounds how long a server may take to answer PING, and a cluster to reach
// cluster_state:ok.
const startTimeout = 20 * time.Second

// Options configure Start. The zero value starts a server without a password.
type Options struct {
	// Password, when not empty, is set with --requirepass: clients must AUTH. Default: none.
	Password string
	// Args are extra redis-server arguments, for example {"--maxmemory", "64mb"}.
	// Default: none.
	Args []string
}

// Server is a running redis-server.
type Server struct {
	addr     string
	port     int
	password string
	dir      string
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
}

// Addr returns the server's "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Password returns the password clients must AUTH with, "" for none.
func (s *Server) Password() string { return s.password }

// Dir returns the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Start starts a standalone redis-server on a free 127.0.0.1 port, waits until it answers
// PING, and stops it when the test ends. With no options it runs without a password.
func Start(t testing.TB, opts ...Options) *Server {
	t.Helper()
	o := theOptions(t, "Start", opts)
	s, err := launchFree(t, lookPath(t, "redis-server"), false, o.Password, o.Args)
	if err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	return s
}

// StartAt starts a standalone redis-server on addr ("127.0.0.1:port"), for a test that
// needs a server at an address it chose, or again at the address of one it stopped (a
// restart: the new server is empty). It waits until the server answers PING and stops it
// when the test ends.
func StartAt(t testing.TB, addr string, opts ...Options) *Server {
	t.Helper()
	o := theOptions(t, "StartAt", opts)
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || host != "127.0.0.1" {
		t.Fatalf("redistest: StartAt: address %q: want 127.0.0.1:port", addr)
	}
	s, err := launch(t, lookPath(t, "redis-server"), port, o.Password, o.Args)
	if err != nil {
		t.Fatalf("redistest: start redis-server at %s: %v", addr, err)
	}
	return s
}

// theOptions returns the one Options a helper was given, or the zero value.
func theOptions(t testing.TB, helper string, opts []Options) Options {
	t.Helper()
	switch len(opts) {
	case 0:
		return Options{}
	case 1:
		return opts[0]
	}
	t.Fatalf("redistest: %s: got %d Options; want at most 1", helper, len(opts))
	return Options{}
}

// Cluster is a running Redis Cluster of primaries only.
type Cluster struct {
	nodes    []*Server
	replicas []*Server // added by AddReplica
}

// launchClusterNode starts a redis-server with cluster support on a free port (and a
// free bus port).
func launchClusterNode(t testing.TB, bin string) (*Server, error) {
	return launchFree(t, bin, true, "", []string{"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"})
}

// launchFree starts redis-server on a free port (with bus, its cluster bus port free as
// well), trying other ports while the one it picked is taken meanwhile.
func launchFree(t testing.TB, bin string, bus bool, password string, args []string) (*Server, error) {
	t.Helper()
	var lastErr error
	for range 8 {
		port, err := freePort(bus)
		if err != nil {
			lastErr = err
			continue
		}
		s, err := launch(t, bin, port, password, args)
		if err == nil || !errors.Is(err, errPortTaken) {
			return s, err
		}
		lastErr = err
	}
	return nil, fmt.Errorf("no port free after 8 tries, the last: %w", lastErr)
}

// Addrs returns the primaries' "127.0.0.1:port" addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// Nodes returns the primaries.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// StartCluster starts a Redis Cluster of n primaries and no replicas on free 127.0.0.1
// ports (each with its cluster bus port, port+10000, free too), joins them with
// `redis-cli --cluster create` (or, for n < 3, which redis-cli refuses, with CLUSTER
// ADDSLOTSRANGE and CLUSTER MEET), waits until every node reports cluster_state:ok and
// knows all the others, and stops them all when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 || n > 64 {
		t.Fatalf("redistest: StartCluster: primaries %d: must be between 1 and 64", n)
	}
	bin := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	c := &Cluster{}
	for len(c.nodes) < n {
		node, err := launchClusterNode(t, bin)
		if err != nil {
			t.Fatalf("redistest: start cluster node %d: %v", len(c.nodes), err)
		}
		c.nodes = append(c.nodes, node)
	}

	if n >= 3 {
		cargs := []string{"--cluster", "create"}
		cargs = append(cargs, c.Addrs()...)
		cargs = append(cargs, "--cluster-replicas", "0", "--cluster-yes")
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, cli, cargs...).CombinedOutput()
		if err != nil {
			t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
		}
	} else {
		for i, node := range c.nodes {
			lo, hi := i*16384/n, (i+1)*16384/n-1
			if _, err := command(node.addr, "", "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
				t.Fatalf("redistest: %s CLUSTER ADDSLOTSRANGE %d %d: %v", node.addr, lo, hi, err)
			}
			if i > 0 {
				if _, err := command(c.nodes[0].addr, "", "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(node.port)); err != nil {
					t.Fatalf("redistest: CLUSTER MEET %s: %v", node.addr, err)
				}
			}
		}
	}

	deadline := time.Now().Add(startTimeout)
	want := []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(n)}
	for _, node := range c.nodes {
		for {
			info, err := command(node.addr, "", "CLUSTER", "INFO")
			if err == nil && containsAll(info, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ready after %v: got %q (err %v); want lines %q",
					node.addr, startTimeout, info, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// BenchmarkPath returns the path of redis-benchmark, failing t when it is not installed.
func BenchmarkPath(t testing.TB) string {
	t.Helper()
	return lookPath(t, "redis-benchmark")
}

// RunBenchmark runs redis-benchmark against addr ("host:port") with the given arguments
// (for example "-n", "20000", "-t", "set,get", "-P", "16", "-q") and returns its standard
// output. It fails t when redis-benchmark exits with an error, prints an error line, or
// runs longer than two minutes.
func RunBenchmark(t testing.TB, addr string, args ...string) string {
	t.Helper()
	bin := BenchmarkPath(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("redistest: RunBenchmark: address %q: %v", addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("redistest: redis-benchmark %s: %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), err, tail(stdout.Bytes()), tail(stderr.Bytes()))
	}
	for _, out := range [][]byte{stdout.Bytes(), stderr.Bytes()} {
		for line := range strings.Lines(string(out)) {
			if strings.HasPrefix(line, "Error") || strings.Contains(line, "ERR ") || strings.Contains(line, "Connection refused") {
				t.Fatalf("redistest: redis-benchmark %s reported an error: %s", strings.Join(args, " "), line)
			}
		}
	}
	return stdout.String()
}

// ParseBenchmarkCSV reads the output of `redis-benchmark --csv` and returns requests per
// second by test name ("SET", "GET", "MSET (10 keys)", …).
func ParseBenchmarkCSV(out string) (map[string]float64, error) {
	rps := make(map[string]float64)
	for line := range strings.Lines(out) {
		fields := strings.Split(strings.TrimSpace(line), ",")
		if len(fields) < 2 {
			continue
		}
		name := strings.Trim(fields[0], `"`)
		v, err := strconv.ParseFloat(strings.Trim(fields[1], `"`), 64)
		if err != nil {
			continue // the header line
		}
		rps[name] = v
	}
	if len(rps) == 0 {
		return nil, fmt.Errorf("redistest: no CSV results in redis-benchmark output %q", tail([]byte(out)))
	}
	return rps, nil
}

// Command sends one command to addr, after AUTH when password is set, and returns the
// reply rendered as text (a simple string, a bulk string, an integer, or the elements of
// an array joined by newlines). A Redis error reply is returned as an error.
func Command(addr, password string, args ...string) (string, error) {
	return command(addr, password, args...)
}

var errPortTaken = errors.New("port already in use")

// launch starts redis-server on port and waits for PING.
func launch(t testing.TB, bin string, port int, password string, extra []string) (*Server, error) {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "redis-"+strconv.Itoa(port)+"-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--logfile", "redis.log",
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
	}
	if password != "" {
		args = append(args, "--requirepass", password)
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	s := &Server{
		addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		port:     port,
		password: password,
		dir:      dir,
		cmd:      cmd,
		done:     make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()

	switch err := awaitPING(s.addr, password, s.done); {
	case errors.Is(err, errExited):
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		if bytes.Contains(log, []byte("Address already in use")) {
			return nil, fmt.Errorf("%w: %d", errPortTaken, port)
		}
		return nil, fmt.Errorf("redis-server on port %d exited before answering PING: %s\nlog:\n%s",
			port, cmd.ProcessState, tail(log))
	case err != nil:
		s.stop()
		return nil, fmt.Errorf("redis-server on port %d: %w", port, err)
	}
	t.Cleanup(s.stop)
	return s, nil
}

var errExited = errors.New("exited")

// awaitPING sends PING to addr until it answers PONG. It returns errExited once done is
// closed (the process has exited), and an error with the last reply after startTimeout.
func awaitPING(addr, password string, done <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			return errExited
		default:
		}
		reply, err := command(addr, password, "PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not answer PING within %v: got %q, %v; want PONG", startTimeout, reply, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop terminates the server and waits for it, killing it if it lingers.
func (s *Server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Stop stops the server now rather than at the end of the test; later calls do nothing.
func (s *Server) Stop() { s.stop() }

var portMu sync.Mutex // guards handed, so one test binary never hands out a port twice

var handed = map[int]bool{}

// freePort returns a port in 20000-29999 that is free on 127.0.0.1 and not handed out
// before by this process; with bus, port+10000 is free as well.
func freePort(bus bool) (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 200 {
		port := 20000 + rand.IntN(10000)
		if handed[port] || !portFree(port) || (bus && !portFree(port+10000)) {
			continue
		}
		handed[port] = true
		return port, nil
	}
	return 0, errors.New("no free port pair found in 20000-29999 after 200 tries")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH (%v); %s", name, err, installHint)
	}
	return p
}

func containsAll(s string, lines []string) bool {
	for _, l := range lines {
		if !strings.Contains(s, l+"\r\n") && !strings.HasSuffix(s, l) {
			return false
		}
	}
	return true
}

func tail(b []byte) []byte {
	const limit = 4096
	if len(b) > limit {
		return b[len(b)-limit:]
	}
	return b
}

// command sends one RESP command and reads one reply; see Command.
func command(addr, password string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := roundTrip(conn, r, "AUTH", password); err != nil {
			return "", fmt.Errorf("AUTH: %w", err)
		}
	}
	return roundTrip(conn, r, args...)
}

func roundTrip(conn net.Conn, r *bufio.Reader, args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(r, 0)
}

func readReply(r *bufio.Reader, depth int) (string, error) {
	if depth > 8 {
		return "", errors.New("reply nested too deep")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad array length %q", line)
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r, depth+1)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
