package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestQuick builds loadrun and hotkeyd and runs every subcommand in its -quick mode, so
// that the benchmarks cannot rot. It checks that each prints its command line and a
// table, not the figures.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers; skipped with -short")
	}
	dir := t.TempDir()
	loadrun := filepath.Join(dir, "loadrun")
	if out, err := exec.Command("go", "build", "-o", loadrun, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build loadrun: %v\n%s", err, out)
	}
	hotkeyd := filepath.Join(dir, "hotkeyd")
	build := exec.Command("go", "build", "-o", hotkeyd, "./cmd/hotkeyd")
	build.Dir = "../../.." // the main module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build hotkeyd: %v\n%s", err, out)
	}
	for _, s := range subcommands {
		t.Run(s.name, func(t *testing.T) {
			if s.name == "proxy" {
				for _, tool := range []string{"redis-server", "redis-benchmark", "nutcracker"} {
					if _, err := exec.LookPath(tool); err != nil {
						t.Skipf("%s not installed (scripts/test.sh installs it)", tool)
					}
				}
			}
			out, err := exec.Command(loadrun, s.name, "-quick", "-bin", hotkeyd).CombinedOutput()
			if err != nil {
				t.Fatalf("loadrun %s -quick: %v\n%s", s.name, err, out)
			}
			for _, want := range []string{"go run ./cmd/loadrun " + s.name + " ", "\n|---|"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("loadrun %s -quick printed no %q:\n%s", s.name, want, out)
				}
			}
			if !headerRE.Match(out) {
				t.Errorf("loadrun %s -quick printed no line with when it began and ended and the load before:\n%s", s.name, out)
			}
		})
	}
	t.Run("proxy pinned", func(t *testing.T) {
		for _, tool := range []string{"redis-server", "redis-benchmark", "nutcracker", "taskset"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("%s not installed (scripts/test.sh installs it)", tool)
			}
		}
		out, err := exec.Command(loadrun, "proxy", "-quick", "-bin", hotkeyd, "-hotkeyd-only",
			"-client-cpus", "0", "-redis-cpus", "0", "-proxy-cpus", "0").CombinedOutput()
		if err != nil {
			t.Fatalf("loadrun proxy -quick, pinned: %v\n%s", err, out)
		}
		for _, want := range []string{"-client-cpus=0 ", "\n|---|"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("loadrun proxy -quick, pinned, printed no %q:\n%s", want, out)
			}
		}
	})
}

func TestMedianQuantile(t *testing.T) {
	tests := []struct {
		xs       []float64
		med, q90 float64
	}{
		{[]float64{3, 1, 2}, 2, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 4},
		{[]float64{5}, 5, 5},
		{nil, 0, 0},
	}
	for _, tt := range tests {
		if got := median(tt.xs); got != tt.med {
			t.Errorf("median(%v) = %v; want %v", tt.xs, got, tt.med)
		}
		if got := quantile(tt.xs, 0.9); got != tt.q90 {
			t.Errorf("quantile(%v, 0.9) = %v; want %v", tt.xs, got, tt.q90)
		}
	}
}

func TestPinning(t *testing.T) {
	if got := pinned("", []string{"redis-server", "--port", "1"}); !slices.Equal(got, []string{"redis-server", "--port", "1"}) {
		t.Errorf("no CPUs: %q; want the command as it is", got)
	}
	if got := pinned("0,2-3", []string{"redis-server"}); !slices.Equal(got, []string{"taskset", "-c", "0,2-3", "redis-server"}) {
		t.Errorf("CPUs 0,2-3: %q; want it under taskset -c 0,2-3", got)
	}
	for _, ok := range []string{"", "1", "0,1", "0-3", "0,2-3,7"} {
		if err := cpuList("proxy-cpus", ok); err != nil {
			t.Errorf("%q: %v; want no error", ok, err)
		}
	}
	for _, bad := range []string{"a", "1,", "-1", "0 1", "1-", "0,,1"} {
		err := cpuList("proxy-cpus", bad)
		if err == nil || !strings.Contains(err.Error(), "-proxy-cpus") || !strings.Contains(err.Error(), "CPU list") {
			t.Errorf("%q: %v; want an error naming -proxy-cpus and what a CPU list is", bad, err)
		}
	}
}

// headerRE is the line above each table: when the run began and ended, and the load
// average before it.
var headerRE = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\d \d\d:\d\d to \d\d:\d\d UTC, \d+ CPUs, go[^,]+, load average at start [0-9.]+ [0-9.]+ [0-9.]+\.$`)

func TestParseRedisCounters(t *testing.T) {
	info := "# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:600011\r\n" +
		"instantaneous_ops_per_sec:0\r\ntotal_reads_processed:98615\r\ntotal_writes_processed:98610\r\n"
	c, err := parseRedisCounters(info)
	if err != nil || c.commands != 600011 || c.reads != 98615 {
		t.Fatalf("parseRedisCounters = %+v, %v; want 600011 commands, 98615 reads", c, err)
	}
	if d := c.sub(redisCounters{commands: 11, reads: 15}); d.commands != 600000 || d.reads != 98600 {
		t.Errorf("sub = %+v", d)
	}
	if _, err := parseRedisCounters("# Stats\r\ntotal_commands_processed:5\r\n"); err == nil || !strings.Contains(err.Error(), "total_reads_processed") {
		t.Errorf("missing counter: err = %v", err)
	}
	if _, err := parseRedisCounters("total_commands_processed:x\r\ntotal_reads_processed:1\r\n"); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("bad number: err = %v", err)
	}
}
