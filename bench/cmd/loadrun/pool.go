package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A round's line in the log of `loadrun proxy`:
//
//	round 3 -P 16 hotkeyd proxy                map[GET:745157.2 SET:684932.1] rps in 1.601s
var roundLine = regexp.MustCompile(`^round (\d+) -P (\d+) (.+?)\s+map\[([^\]]*)\] rps in `)

// poolKey is one cell of the pooled table: a target at a pipeline depth, one test.
type poolKey struct {
	pipeline int
	target   string
	test     string
}

// pooled is what poolRatios reads from the logs of `loadrun proxy` runs.
type pooled struct {
	// ratios holds, per cell, the ratio of each round to direct Redis in the same round
	// of the same run, one slice per run.
	ratios map[poolKey][][]float64
	// after holds the same ratios by the target that ran just before in the same round
	// and phase (-P), "" for the first, which ran right after the last phase.
	after map[poolKey]map[string][]float64
	// vsTwemproxy holds, per cell, this target's requests/s ÷ twemproxy's in each round
	// that ran both (the "ahead of twemproxy", round by round).
	vsTwemproxy map[poolKey][]float64
	order       []poolKey // the cells, -P 1 first, each in the order it first appeared
}

// twemproxyTarget is the name `loadrun proxy` gives twemproxy in its round lines.
const twemproxyTarget = "twemproxy"

// poolRatios reads the logs of `loadrun proxy` runs.
func poolRatios(logs []io.Reader) (pooled, error) {
	p := pooled{ratios: map[poolKey][][]float64{}, after: map[poolKey]map[string][]float64{},
		vsTwemproxy: map[poolKey][]float64{}}
	for run, r := range logs {
		type roundAt struct{ round, pipeline int }
		rps := map[roundAt]map[string]map[string]float64{} // target → test → req/s
		last := map[roundAt]string{}                       // the target of the last line
		before := map[roundAt]map[string]string{}          // target → the one that ran before
		var targets []string
		sc := bufio.NewScanner(r)
		for line := 1; sc.Scan(); line++ {
			m := roundLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			round, _ := strconv.Atoi(m[1])
			pl, _ := strconv.Atoi(m[2])
			at := roundAt{round, pl}
			if rps[at] == nil {
				rps[at] = map[string]map[string]float64{}
				before[at] = map[string]string{}
			}
			before[at][m[3]], last[at] = last[at], m[3]
			tests := map[string]float64{}
			for _, kv := range strings.Fields(m[4]) {
				test, v, ok := strings.Cut(kv, ":")
				f, err := strconv.ParseFloat(v, 64)
				if !ok || err != nil {
					return pooled{}, fmt.Errorf("log %d, line %d: %q is not TEST:REQUESTS_PER_SECOND", run+1, line, kv)
				}
				tests[test] = f
			}
			rps[at][m[3]] = tests
			if !slices.Contains(targets, m[3]) {
				targets = append(targets, m[3])
			}
		}
		if err := sc.Err(); err != nil {
			return pooled{}, fmt.Errorf("log %d: %w", run+1, err)
		}
		ats := make([]roundAt, 0, len(rps))
		for at := range rps {
			ats = append(ats, at)
		}
		slices.SortFunc(ats, func(a, b roundAt) int {
			if a.pipeline != b.pipeline {
				return a.pipeline - b.pipeline
			}
			return a.round - b.round
		})
		for _, at := range ats {
			direct, twem := rps[at]["direct Redis"], rps[at][twemproxyTarget]
			for _, target := range targets {
				for test, v := range rps[at][target] {
					if direct[test] <= 0 {
						continue
					}
					k := poolKey{at.pipeline, target, test}
					if _, seen := p.ratios[k]; !seen {
						p.order = append(p.order, k)
						p.after[k] = map[string][]float64{}
					}
					for len(p.ratios[k]) <= run {
						p.ratios[k] = append(p.ratios[k], nil)
					}
					ratio := v / direct[test]
					p.ratios[k][run] = append(p.ratios[k][run], ratio)
					prev := before[at][target]
					p.after[k][prev] = append(p.after[k][prev], ratio)
					if target != twemproxyTarget && twem[test] > 0 {
						p.vsTwemproxy[k] = append(p.vsTwemproxy[k], v/twem[test])
					}
				}
			}
		}
	}
	slices.SortStableFunc(p.order, func(a, b poolKey) int {
		if a.pipeline != b.pipeline {
			return a.pipeline - b.pipeline
		}
		return strings.Compare(a.test, b.test)
	})
	return p, nil
}

// count counts the values of xs for which ok holds.
func count(xs []float64, ok func(float64) bool) int {
	n := 0
	for _, x := range xs {
		if ok(x) {
			n++
		}
	}
	return n
}

// poolTarget is issue 3's target for a proxy: this ratio to direct Redis or above.
const poolTarget = 0.9

// poolLogs prints the pooled table of the logs named by args: the median over every
// round of every run, next to each run's own median; with -after, also the medians by
// the target that ran just before.
func poolLogs(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	after := fs.Bool("after", false, "also split each cell by the target that ran just before it in its round and phase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names := fs.Args()
	if len(names) == 0 {
		return fmt.Errorf("pool: name the logs of `loadrun proxy` runs (what it prints to stderr)")
	}
	var readers []io.Reader
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		defer f.Close()
		readers = append(readers, f)
	}
	p, err := poolRatios(readers)
	if err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	if len(p.order) == 0 {
		return fmt.Errorf("pool: no round lines in %s", strings.Join(names, ", "))
	}
	e := &env{out: stdout}
	fmt.Fprintf(stdout, "```\ngo run ./cmd/loadrun pool %s\n```\n\n", strings.Join(args, " "))
	fmt.Fprintf(stdout, "Ratio to direct Redis in the same round, pooled over %d runs: the median over all their rounds, "+
		"then each run's own median; the rounds at %.1f× or above, and those in which the target served more "+
		"than twemproxy (the median of its requests/s ÷ twemproxy's in brackets).\n\n", len(readers), poolTarget)
	var rows [][]string
	for _, k := range p.order {
		if k.target == "direct Redis" {
			continue
		}
		var all []float64
		var perRun []string
		for _, rs := range p.ratios[k] {
			all = append(all, rs...)
			if len(rs) == 0 {
				perRun = append(perRun, "–")
				continue
			}
			perRun = append(perRun, f2(median(rs))+"×")
		}
		ahead := "–"
		if vs := p.vsTwemproxy[k]; len(vs) > 0 {
			ahead = fmt.Sprintf("%d of %d (%s×)", count(vs, func(r float64) bool { return r > 1 }), len(vs), f2(median(vs)))
		}
		rows = append(rows, []string{k.target, strconv.Itoa(k.pipeline), k.test, strconv.Itoa(len(all)),
			"**" + f3(median(all)) + "×**", strings.Join(perRun, ", "),
			fmt.Sprintf("%.2f–%.2f", quantile(all, 0), quantile(all, 1)),
			fmt.Sprintf("%d of %d", count(all, func(r float64) bool { return r >= poolTarget }), len(all)), ahead})
	}
	e.table([]string{"target", "-P", "test", "rounds", "pooled median", "each run's median", "range",
		fmt.Sprintf("≥ %.1f×", poolTarget), "ahead of twemproxy"}, rows)
	if *after {
		fmt.Fprintf(stdout, "\nThe same ratios by the target that ran just before, in the same round and phase "+
			"(first: right after the previous phase).\n\n")
		e.table([]string{"target", "-P", "test", "ran after", "rounds", "median"}, p.afterRows())
	}
	return nil
}

// afterRows is the table of the ratios by the target that ran before.
func (p pooled) afterRows() [][]string {
	var rows [][]string
	for _, k := range p.order {
		if k.target == "direct Redis" {
			continue
		}
		prevs := slices.Sorted(maps.Keys(p.after[k]))
		for _, prev := range prevs {
			rs := p.after[k][prev]
			name := prev
			if name == "" {
				name = "(first)"
			}
			rows = append(rows, []string{k.target, strconv.Itoa(k.pipeline), k.test, name,
				strconv.Itoa(len(rs)), f2(median(rs)) + "×"})
		}
	}
	return rows
}
