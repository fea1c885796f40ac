package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const poolRun1 = `building hotkeyd
round 1 -P 1 direct Redis                 map[GET:100 SET:200] rps in 1.2s
round 1 -P 1 hotkeyd proxy                map[GET:90 SET:100] rps in 1.3s
round 2 -P 1 hotkeyd proxy                map[GET:50 SET:200] rps in 2s
round 2 -P 1 direct Redis                 map[GET:100 SET:100] rps in 1s
round 1 -P 16 direct Redis                map[GET:1000] rps in 1s
round 1 -P 16 hotkeyd proxy, multiplex off map[GET:400] rps in 1s
| a table | that is not a round |
`

const poolRun2 = `round 1 -P 1 direct Redis map[GET:200 SET:100] rps in 1s
round 1 -P 1 hotkeyd proxy map[GET:220 SET:80] rps in 1s
round 1 -P 1 twemproxy map[GET:200 SET:100] rps in 1s
`

func TestPoolRatios(t *testing.T) {
	p, err := poolRatios([]io.Reader{strings.NewReader(poolRun1), strings.NewReader(poolRun2)})
	if err != nil {
		t.Fatal(err)
	}
	ratios, order := p.ratios, p.order
	want := map[poolKey][][]float64{
		{1, "direct Redis", "GET"}:                  {{1, 1}, {1}},
		{1, "direct Redis", "SET"}:                  {{1, 1}, {1}},
		{1, "hotkeyd proxy", "GET"}:                 {{0.9, 0.5}, {1.1}},
		{1, "hotkeyd proxy", "SET"}:                 {{0.5, 2}, {0.8}},
		{1, "twemproxy", "GET"}:                     {nil, {1}},
		{1, "twemproxy", "SET"}:                     {nil, {1}},
		{16, "direct Redis", "GET"}:                 {{1}},
		{16, "hotkeyd proxy, multiplex off", "GET"}: {{0.4}},
	}
	if !reflect.DeepEqual(ratios, want) {
		t.Errorf("poolRatios = %v; want %v", ratios, want)
	}
	if len(order) != len(want) || order[0].pipeline != 1 || order[len(order)-1].pipeline != 16 {
		t.Errorf("order %v; want every cell, -P 1 first", order)
	}
	wantAfter := map[poolKey]map[string][]float64{
		{1, "direct Redis", "GET"}:                  {"": {1, 1}, "hotkeyd proxy": {1}},
		{1, "direct Redis", "SET"}:                  {"": {1, 1}, "hotkeyd proxy": {1}},
		{1, "hotkeyd proxy", "GET"}:                 {"direct Redis": {0.9, 1.1}, "": {0.5}},
		{1, "hotkeyd proxy", "SET"}:                 {"direct Redis": {0.5, 0.8}, "": {2}},
		{1, "twemproxy", "GET"}:                     {"hotkeyd proxy": {1}},
		{1, "twemproxy", "SET"}:                     {"hotkeyd proxy": {1}},
		{16, "direct Redis", "GET"}:                 {"": {1}},
		{16, "hotkeyd proxy, multiplex off", "GET"}: {"direct Redis": {0.4}},
	}
	if !reflect.DeepEqual(p.after, wantAfter) {
		t.Errorf("by the target before: %v; want %v", p.after, wantAfter)
	}
	// Only run 2 ran twemproxy: the rounds without it have nothing to compare.
	wantVs := map[poolKey][]float64{
		{1, "direct Redis", "GET"}:  {1},
		{1, "direct Redis", "SET"}:  {1},
		{1, "hotkeyd proxy", "GET"}: {1.1},
		{1, "hotkeyd proxy", "SET"}: {0.8},
	}
	if !reflect.DeepEqual(p.vsTwemproxy, wantVs) {
		t.Errorf("against twemproxy: %v; want %v", p.vsTwemproxy, wantVs)
	}

	dir := t.TempDir()
	var names []string
	for i, log := range []string{poolRun1, poolRun2} {
		name := filepath.Join(dir, "run"+string(rune('1'+i))+".log")
		if err := os.WriteFile(name, []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	var out bytes.Buffer
	if err := poolLogs(names, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "ran after") {
		t.Errorf("pool without -after printed the table by the target before:\n%s", out.String())
	}
	var byBefore bytes.Buffer
	if err := poolLogs(append([]string{"-after"}, names...), &byBefore, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| hotkeyd proxy | 1 | GET | direct Redis | 2 | 1.00× |",
		"| hotkeyd proxy | 1 | SET | (first) | 1 | 2.00× |",
	} {
		if !strings.Contains(byBefore.String(), row) {
			t.Errorf("pool -after printed no row %q:\n%s", row, byBefore.String())
		}
	}
	for _, row := range []string{
		"| hotkeyd proxy | 1 | GET | 3 | **0.900×** | 0.70×, 1.10× | 0.50–1.10 | 2 of 3 | 1 of 1 (1.10×) |",
		"| hotkeyd proxy | 1 | SET | 3 | **0.800×** | 1.25×, 0.80× | 0.50–2.00 | 1 of 3 | 0 of 1 (0.80×) |",
		"| twemproxy | 1 | GET | 1 | **1.000×** | –, 1.00× | 1.00–1.00 | 1 of 1 | – |",
		"| hotkeyd proxy, multiplex off | 16 | GET | 1 | **0.400×** | 0.40× | 0.40–0.40 | 0 of 1 | – |",
	} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("pool printed no row %q:\n%s", row, out.String())
		}
	}
	if strings.Contains(out.String(), "| direct Redis |") {
		t.Errorf("pool printed direct Redis, whose ratio is 1 by definition:\n%s", out.String())
	}
}

func TestPoolErrors(t *testing.T) {
	_, err := poolRatios([]io.Reader{strings.NewReader("round 1 -P 1 direct Redis map[GET:fast] rps in 1s\n")})
	if err == nil || !strings.Contains(err.Error(), `log 1, line 1: "GET:fast"`) {
		t.Errorf("a malformed round line: %v; want an error naming the log, the line and the field", err)
	}
	if err := poolLogs(nil, io.Discard, io.Discard); err == nil {
		t.Error("pool with no logs: nil error")
	}
	if err := poolLogs([]string{"-before", "run1.log"}, io.Discard, io.Discard); err == nil {
		t.Error("pool -before (no such flag): nil error")
	}
	empty := filepath.Join(t.TempDir(), "empty.log")
	if err := os.WriteFile(empty, []byte("nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := poolLogs([]string{empty}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no round lines") {
		t.Errorf("pool of a log without rounds: %v; want an error", err)
	}
}
