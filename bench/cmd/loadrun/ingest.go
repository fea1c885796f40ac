package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// samplesPerReport is how many samples each report datagram carries.
const samplesPerReport = 50

// zipfReports encodes count report datagrams of samplesPerReport samples each, keys drawn
// from a Zipf distribution over keyspace keys, at sample rate 1/100.
func zipfReports(count, keyspace int, seed uint64) ([][]byte, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(rng, 1.1, 1, uint64(keyspace-1))
	out := make([][]byte, count)
	samples := make([]sampler.Sample, samplesPerReport)
	for i := range out {
		for j := range samples {
			op := sampler.OpRead
			if rng.IntN(10) == 0 {
				op = sampler.OpWrite
			}
			samples[j] = sampler.Sample{Key: []byte("user:" + strconv.FormatUint(z.Uint64(), 10)), Op: op, Count: 1, Bytes: 100}
		}
		b, err := sampler.AppendReport(nil, sampler.Batch{Source: "bench", Rate: 0.01, Samples: samples}, nil)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// blast sends the datagrams round-robin to address from k goroutines, each on its own
// socket, as fast as it can for d, and returns how many datagrams were sent.
func blast(ctx context.Context, address string, reports [][]byte, k int, d time.Duration) (int64, error) {
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, k)
	deadline := time.Now().Add(d)
	for g := range k {
		conn, err := net.Dial("udp", address)
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			defer conn.Close()
			var n int64
			for i := g * 97; ; i++ {
				if i%256 == 0 && (time.Now().After(deadline) || ctx.Err() != nil) {
					break
				}
				if _, err := conn.Write(reports[i%len(reports)]); err != nil {
					if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOBUFS) {
						continue // an ICMP error from an earlier datagram, or a full queue
					}
					errs <- err
					break
				}
				n++
			}
			sent.Add(n)
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return sent.Load(), err
	default:
	}
	return sent.Load(), ctx.Err()
}

// counter reads a monotone count of samples taken in by a receiver.
type counter interface {
	count() (float64, error)
}

type agentCounter struct{ a *agent }

func (c agentCounter) count() (float64, error) { return c.a.metric("hotkeyd_samples_received_total") }

// sinkProc is the baseline receiver: `loadrun udpsink`, a separate process that only
// counts datagrams.
type sinkProc struct {
	*proc
	in  io.Writer
	out *bufio.Reader
}

func (s *sinkProc) count() (float64, error) {
	if _, err := io.WriteString(s.in, "count\n"); err != nil {
		return 0, err
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("udpsink: %v", err)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(line), 64)
	return n * samplesPerReport, err
}

// startSink runs `loadrun udpsink` on a free loopback port.
func (e *env) startSink(ctx context.Context, readers int) (*sinkProc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	a := addr(port)
	cmd := exec.Command(self, "udpsink", "-listen", a, "-readers", strconv.Itoa(readers))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = e.log
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	p := &proc{name: "udpsink", cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	e.procs = append(e.procs, p)
	s := &sinkProc{proc: p, in: in, out: bufio.NewReader(outp)}
	line, err := s.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return nil, "", fmt.Errorf("udpsink did not start: %q %v", line, err)
	}
	return s, a, ctx.Err()
}

// udpSink is the hidden subcommand behind the ingest baseline: it reads datagrams with the
// agent's socket buffer and reader count, counts them, and prints the count for every line
// on standard input, until standard input closes.
func udpSink(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("udpsink", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "UDP address")
	readers := fs.Int("readers", 2, "reading goroutines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return err
	}
	defer pc.Close()
	conn := pc.(*net.UDPConn)
	_ = conn.SetReadBuffer(sampler.DefaultSocketBuffer)
	var n atomic.Int64
	for range *readers {
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := conn.Read(buf); err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				n.Add(1)
			}
		}()
	}
	fmt.Fprintln(stdout, "ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() && ctx.Err() == nil {
		fmt.Fprintln(stdout, n.Load())
	}
	return nil
}

func runIngest(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(e.log)
	bin, quick := commonFlags(fs)
	rounds := fs.Int("rounds", 3, "interleaved rounds; the table shows medians")
	senders := fs.Int("k", 2, "sender goroutines, each with its own socket")
	secs := fs.Duration("t", 3*time.Second, "how long each sending lasts")
	readers := fs.Int("readers", 2, "UDP readers of the agent (udp.readers) and of the baseline")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		*rounds, *secs = 1, 300*time.Millisecond
	}
	hk, err := e.binary(ctx, *bin)
	if err != nil {
		return err
	}
	reports, err := zipfReports(1024, 1_000_000, 1)
	if err != nil {
		return err
	}
	d, err := e.dir()
	if err != nil {
		return err
	}
	conf := d + "/ingest.yml"
	if err := os.WriteFile(conf, fmt.Appendf(nil, "udp:\n  readers: %d\n", *readers), 0o644); err != nil {
		return err
	}
	a, err := e.startAgent(ctx, hk, true, nil, "--config", conf)
	if err != nil {
		return err
	}
	sink, sinkAddr, err := e.startSink(ctx, *readers)
	if err != nil {
		return err
	}
	type side struct {
		name, addr string
		c          counter
		pid        int
	}
	sides := []side{{"bare UDP reader (baseline)", sinkAddr, sink, sink.Pid()}, {"hotkeyd agent", a.udp, agentCounter{a}, a.Pid()}}
	type result struct{ sent, got, cpu []float64 }
	res := make([]result, len(sides))
	var ratios []float64
	for r := range *rounds {
		var got [2]float64
		for i := range sides {
			j := (i + r) % len(sides) // alternate which goes first
			s := sides[j]
			before, err := s.c.count()
			if err != nil {
				return err
			}
			c0, err := cpuTime(s.pid)
			if err != nil {
				return err
			}
			sent, err := blast(ctx, s.addr, reports, *senders, *secs)
			if err != nil {
				return err
			}
			if err := sleep(ctx, 300*time.Millisecond); err != nil { // let the readers drain
				return err
			}
			after, err := s.c.count()
			if err != nil {
				return err
			}
			c1, err := cpuTime(s.pid)
			if err != nil {
				return err
			}
			sec := secs.Seconds()
			res[j].sent = append(res[j].sent, float64(sent*samplesPerReport)/sec)
			res[j].got = append(res[j].got, (after-before)/sec)
			res[j].cpu = append(res[j].cpu, (c1-c0).Seconds()/sec)
			got[j] = (after - before) / sec
			fmt.Fprintf(e.log, "round %d %-28s sent %.0f samples/s, counted %.0f/s\n", r+1, s.name, float64(sent*samplesPerReport)/sec, got[j])
		}
		if got[0] > 0 {
			ratios = append(ratios, got[1]/got[0])
		}
	}
	e.header(fs, "Ingest: UDP report samples/s accepted, ratio to a bare UDP reader")
	fmt.Fprintf(e.out, "%d sender goroutines (one socket each) send %d-sample report datagrams (Zipf s=1.1 over 1M keys, "+
		"≈%d bytes) as fast as they can for %v; the receiver's count is read before and after. The baseline is `loadrun udpsink`, a "+
		"process that only reads and counts datagrams (×%d) with the agent's reader count and socket buffer. %d rounds, "+
		"order alternated, medians. Senders and receiver share the 2 cores.\n\n",
		*senders, samplesPerReport, len(reports[0]), *secs, samplesPerReport, *rounds)
	var rows [][]string
	for i, s := range sides {
		sent, got := median(res[i].sent), median(res[i].got)
		drop := 0.0
		if sent > 0 {
			drop = 1 - got/sent
		}
		ratio := "1.00×"
		if i == 1 {
			ratio = "**" + f2(median(ratios)) + "×**"
		}
		rows = append(rows, []string{s.name, thousands(sent), thousands(got), fmt.Sprintf("%.1f%%", 100*max(drop, 0)), f2(median(res[i].cpu)), ratio})
	}
	e.table([]string{"receiver", "samples/s sent", "samples/s counted", "drop share", "receiver CPU (cores)", "ratio to baseline"}, rows)
	return nil
}
