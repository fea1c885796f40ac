// Command loadrun drives hotkeyd's real binaries on loopback and prints markdown tables,
// each with the command line that produced it, for docs/BENCHMARKS.md.
//
//	loadrun proxy    redis-benchmark through the hotkeyd proxy tap and twemproxy vs direct Redis
//	loadrun ingest   UDP samples/s the agent takes in vs a bare UDP reader
//	loadrun rss      the agent's resident memory after 10M distinct keys vs right after start
//	loadrun latency  time from a key's spike to "hot": true in /v1/topk
//	loadrun all      the four in turn
//	loadrun pool     the proxy ratios pooled over several runs' logs
//
// Every figure is a ratio against a baseline measured in the same run, the median over
// interleaved rounds: the machine is small and shared, so absolute numbers mean little.
// Every process loadrun starts is killed when it returns, also on error or Ctrl-C.
// It runs on Linux only (it reads /proc).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// subcommands, in the order `all` runs them.
var subcommands = []struct {
	name, help string
	run        func(ctx context.Context, e *env, args []string) error
}{
	{"proxy", "redis-benchmark through the hotkeyd proxy and twemproxy, against direct Redis", runProxy},
	{"ingest", "UDP report samples/s accepted by the agent, against a bare UDP reader", runIngest},
	{"rss", "agent memory after 10M distinct keys, against right after start", runRSS},
	{"latency", "time from a key's spike to hot in /v1/topk", runLatency},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadrun:", err)
		}
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: loadrun SUBCOMMAND [flags]   (loadrun SUBCOMMAND -h for its flags)")
	fmt.Fprintln(w)
	for _, s := range subcommands {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.help)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "all", "all four in turn; flags: -quick, -bin")
	fmt.Fprintf(w, "  %-8s %s\n", "pool", "[-after] LOG...: the proxy ratios pooled over the rounds of several proxy runs' logs (their stderr)")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return flag.ErrHelp
	}
	name, args := args[0], args[1:]
	switch name {
	case "udpsink": // the ingest baseline, run as its own process
		return udpSink(ctx, args, stdout)
	case "naivemap": // the rss comparison, run as its own process
		return naiveMap(args, stdout)
	case "pool":
		return poolLogs(args, stdout, stderr)
	case "all":
		return runAll(ctx, args, stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return nil
	}
	for _, s := range subcommands {
		if s.name == name {
			e := newEnv(stdout, stderr)
			defer e.close()
			return s.run(ctx, e, args)
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown subcommand %q", name)
}

// runAll runs every subcommand with its defaults, or its quick mode, building hotkeyd
// once.
func runAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "tiny runs that only check that everything works")
	bin := fs.String("bin", "", "hotkeyd binary to run (default: build ../cmd/hotkeyd)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	e := newEnv(stdout, stderr)
	defer e.close()
	if *bin == "" {
		b, err := e.build(ctx)
		if err != nil {
			return err
		}
		*bin = b
	}
	var failed []string
	for _, s := range subcommands {
		sub := []string{"-bin", *bin}
		if *quick {
			sub = append(sub, "-quick")
		}
		se := newEnv(stdout, stderr)
		err := s.run(ctx, se, sub)
		se.close()
		if err != nil {
			fmt.Fprintf(stderr, "loadrun %s: %v\n", s.name, err)
			failed = append(failed, s.name)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}
