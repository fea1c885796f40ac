package main

import (
	"os/exec"
	"path/filepath"
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
		})
	}
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
