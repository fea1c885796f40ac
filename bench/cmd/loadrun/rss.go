package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// distinctKey is the i-th distinct key of the rss run and of the naive map.
func distinctKey(dst []byte, i int) []byte {
	dst = append(dst, "user:"...)
	return strconv.AppendInt(dst, int64(i), 10)
}

func runRSS(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("rss", flag.ContinueOnError)
	fs.SetOutput(e.log)
	bin, quick := commonFlags(fs)
	keys := fs.Int("keys", 10_000_000, "distinct keys to send")
	senders := fs.Int("k", 2, "sender goroutines")
	window := fs.Int("window", 40000, "most samples in flight (sent, not yet counted by the agent); keeps the kernel from dropping")
	naive := fs.Bool("naive", true, "also measure a naive exact map[string]uint32 fed the same keys, in its own process")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		*keys = 200_000
	}
	hk, err := e.binary(ctx, *bin)
	if err != nil {
		return err
	}
	a, err := e.startAgent(ctx, hk, true, nil)
	if err != nil {
		return err
	}
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return err
	}
	rss0, err := procStatus(a.Pid(), "VmRSS")
	if err != nil {
		return err
	}
	recv0, err := a.metric("hotkeyd_samples_received_total")
	if err != nil {
		return err
	}

	start := time.Now()
	var sent, received atomic.Int64
	pollDone := make(chan struct{})
	stopPoll := make(chan struct{})
	go func() { // keeps `received` fresh for the senders' flow control
		defer close(pollDone)
		for {
			if v, err := a.metric("hotkeyd_samples_received_total"); err == nil {
				received.Store(int64(v - recv0))
			}
			select {
			case <-stopPoll:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, *senders)
	var next atomic.Int64 // next key index to hand out, in chunks of samplesPerReport
	for range *senders {
		conn, err := net.Dial("udp", a.udp)
		if err != nil {
			close(stopPoll)
			<-pollDone
			return err
		}
		wg.Go(func() {
			defer conn.Close()
			samples := make([]sampler.Sample, 0, samplesPerReport)
			var keyBuf, dgram []byte
			for ctx.Err() == nil {
				first := int(next.Add(samplesPerReport)) - samplesPerReport
				if first >= *keys {
					return
				}
				samples, keyBuf = samples[:0], keyBuf[:0]
				ends := [samplesPerReport]int{}
				n := min(samplesPerReport, *keys-first)
				for j := range n {
					keyBuf = distinctKey(keyBuf, first+j)
					ends[j] = len(keyBuf)
				}
				s := 0
				for j := range n {
					samples = append(samples, sampler.Sample{Key: keyBuf[s:ends[j]], Op: sampler.OpRead, Count: 1})
					s = ends[j]
				}
				dgram, err = sampler.AppendReport(dgram[:0], sampler.Batch{Source: "bench", Rate: 0.01, Samples: samples}, nil)
				if err != nil {
					errs <- err
					return
				}
				// Flow control: wait (at most 2 s) while too much is in flight.
				for wait := time.Now(); sent.Load()-received.Load() > int64(*window) && time.Since(wait) < 2*time.Second; {
					time.Sleep(200 * time.Microsecond)
				}
				if _, err := conn.Write(dgram); err == nil {
					sent.Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	sendTime := time.Since(start)
	_ = sleep(ctx, 500*time.Millisecond)
	close(stopPoll)
	<-pollDone
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	recv1, err := a.metric("hotkeyd_samples_received_total")
	if err != nil {
		return err
	}
	rss1, err := procStatus(a.Pid(), "VmRSS")
	if err != nil {
		return err
	}
	hwm, err := procStatus(a.Pid(), "VmHWM")
	if err != nil {
		return err
	}

	e.header(fs, "Memory: agent resident set after distinct keys, against right after start")
	got := recv1 - recv0
	fmt.Fprintf(e.out, "The agent (`hotkeyd serve`, default settings) is sent %s distinct keys (`user:0` …), %d per report "+
		"datagram from %d senders, paced to at most %s samples in flight (%.1f s, %s samples/s); "+
		"it counted %s (%.2f%% lost). VmRSS and VmHWM from /proc/PID/status. Target: ≤ 64 MiB.\n\n",
		thousands(float64(*keys)), samplesPerReport, *senders, thousands(float64(*window)), sendTime.Seconds(),
		thousands(got/sendTime.Seconds()), thousands(got), 100*(1-got/float64(*keys)))
	mib := func(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }
	rows := [][]string{
		{"hotkeyd agent, right after start (baseline)", "–", mib(rss0), "–", "1.00×"},
		{fmt.Sprintf("hotkeyd agent, after %s distinct keys", thousands(float64(*keys))), thousands(got), mib(rss1), mib(hwm),
			"**" + f2(float64(rss1)/float64(rss0)) + "×**"},
	}
	if *naive {
		nrss, nhwm, err := e.naiveMapRSS(ctx, *keys)
		if err != nil {
			return err
		}
		rows = append(rows, []string{"naive exact `map[string]uint32`, same keys (own process)",
			thousands(float64(*keys)), mib(nrss), mib(nhwm), f2(float64(nrss)/float64(rss0)) + "×"})
	}
	e.table([]string{"process", "keys counted", "VmRSS", "VmHWM", "RSS ratio to baseline"}, rows)
	return nil
}

// naiveMapRSS runs `loadrun naivemap` and returns its VmRSS and VmHWM in kB.
func (e *env) naiveMapRSS(ctx context.Context, keys int) (rss, hwm int64, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, self, "naivemap", "-keys", strconv.Itoa(keys))
	cmd.Stdout, cmd.Stderr = &out, e.log
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("naivemap: %v", err)
	}
	_, err = fmt.Sscan(out.String(), &rss, &hwm)
	return rss, hwm, err
}

// naiveMap is the hidden subcommand behind the naive comparison: it counts keys exactly in
// a map and prints its own VmRSS and VmHWM in kB.
func naiveMap(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("naivemap", flag.ContinueOnError)
	keys := fs.Int("keys", 10_000_000, "distinct keys")
	if err := fs.Parse(args); err != nil {
		return err
	}
	counts := make(map[string]uint32)
	var buf []byte
	for i := range *keys {
		buf = distinctKey(buf[:0], i)
		counts[string(buf)]++
	}
	rss, err := procStatus(os.Getpid(), "VmRSS")
	if err != nil {
		return err
	}
	hwm, err := procStatus(os.Getpid(), "VmHWM")
	if err != nil {
		return err
	}
	runtime.KeepAlive(counts)
	_, err = fmt.Fprintln(stdout, rss, hwm)
	return err
}
