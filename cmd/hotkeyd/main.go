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
	"runtime"
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
		fmt.Fprintln(stdout, "hotkeyd", versionString(), runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
		return nil
	case "help", "-h", "--help":
		if len(rest) > 0 && rest[0] != "help" && rest[0] != "-h" && rest[0] != "--help" {
			if rest[0] == "version" {
				return run(ctx, rest[:1], stdin, stdout, stderr)
			}
			return run(ctx, []string{rest[0], "--help"}, stdin, stdout, stderr) // hotkeyd help serve
		}
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q: use serve, demo, top, registry or version", cmd)
	}
}

// versionString is the build's version: the one set with -ldflags, else the module's,
// else the VCS revision the binary was built from (with "+dirty" for local changes), else
// "(devel)".
func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "(devel)"
	}
	return "(devel) " + rev[:min(12, len(rev))] + dirty
}

// newFlags returns a flag set that reports errors (with the usage) to stderr and does not
// exit. When args ask for help (-h or --help), the usage goes to stdout instead, so that
// it can be piped to grep or a pager.
func newFlags(name string, args []string, stdout, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" {
			fs.SetOutput(stdout)
			break
		}
	}
	fs.SortFlags = false
	return fs
}
