// Command hotkeyd finds hot keys in Redis traffic and cools them.
//
//	hotkeyd serve [--config FILE] [flags]   run the agent
//	hotkeyd demo                            the whole story on one machine, no set-up
//	hotkeyd top [--addr URL]                live terminal view of the hot keys
//	hotkeyd registry list|show|add|rm       predicted hot-key events
//	hotkeyd version                         print the version
//
// This package reads flags, the environment (through config) and signals; everything else
// lives in the packages it wires.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	_ "time/tzdata" // registry events name IANA zones: a host or container without zoneinfo must know them too

	"github.com/spf13/pflag"
)

const usage = `hotkeyd finds hot keys in Redis traffic and cools them.

Usage:
  hotkeyd serve [--config FILE] [flags]   run the agent (see hotkeyd serve --help)
  hotkeyd demo [--duration 12s]           the whole story on one machine, no set-up
  hotkeyd top [--addr URL]                live terminal view of the hot keys
  hotkeyd registry list|show|add|rm       predicted hot-key events (see hotkeyd registry)
  hotkeyd version                         print the version
`

// version is set at build time with -ldflags "-X main.version=…"; else the module version.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hotkeyd:", err)
		os.Exit(1)
	}
}

// run dispatches a subcommand; it returns when the command is done or ctx ends.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, rest, stdout, stderr)
	case "demo":
		return demo(ctx, rest, stdout, stderr)
	case "top":
		return top(ctx, rest, stdin, stdout, stderr)
	case "registry":
		return registryCmd(ctx, rest, stdin, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "hotkeyd", versionString())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q: use serve, demo, top, registry or version", cmd)
	}
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// newFlags returns a flag set that reports errors to stderr and does not exit.
func newFlags(name string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	return fs
}
