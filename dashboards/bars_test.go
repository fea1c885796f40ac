package dashboards

import (
	"math"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// minBarInterval is the least min interval a count-per-bar panel may set: two scrapes at
// the 15 s scrape interval docs/dashboards.md configures, so that each bar's window holds
// at least two samples (increase needs two).
const minBarInterval = 30 * time.Second

// TestBarsDoNotOverlap: a panel that draws a count per bar (increase or changes of a
// counter) must count over windows that do not overlap, or the bars add up to more than
// happened. Grafana draws a bar every $__interval, while $__rate_interval is at least four
// scrape intervals: increase(x[$__rate_interval]) bars at a 15 s step count every event
// about four times. So the window must be $__interval, and the panel must set a min
// interval of at least two scrapes, so that $__interval never falls under it.
func TestBarsDoNotOverlap(t *testing.T) {
	var n int
	for _, b := range loadBoards(t) {
		for _, pr := range allPanels(b.m) {
			p := pr.p
			for _, tg := range list(p["targets"]) {
				expr := str(tg.(map[string]any)["expr"])
				if !strings.Contains(expr, "increase(") && !strings.Contains(expr, "changes(") {
					continue
				}
				if strings.Contains(expr, "[10m]") || strings.Contains(expr, "[5m]") || strings.Contains(expr, "[1h]") {
					continue // a fixed window, not one per bar
				}
				n++
				where := filepath.Base(b.file) + ": panel " + str(p["title"])
				if strings.Contains(expr, "$__rate_interval") || !strings.Contains(expr, "[$__interval]") {
					t.Errorf("%s: %s: counts over overlapping windows; want [$__interval]", where, expr)
				}
				iv, err := time.ParseDuration(str(p["interval"]))
				if err != nil || iv < minBarInterval {
					t.Errorf("%s: min interval %q; want at least %v (two scrapes)", where, p["interval"], minBarInterval)
				}
			}
		}
	}
	if n < 4 {
		t.Errorf("%d count-per-bar queries; want at least 4 (transitions, plan changes, actions, surprises)", n)
	}
}

// checkBarsAddUp runs, against the test's Prometheus (scraping every second), the form the
// count-per-bar panels use, sum(increase(x[$__interval])) drawn every $__interval, on a
// counter that grows steadily (the malformed reports the test traffic sends twice a
// second), and checks that the bars add up to what the counter grew by over their range.
// step is $__interval, the distance between bars: 4 s, as the boards' min interval, 1
// minute, is four scrapes at 15 s.
func checkBarsAddUp(t *testing.T, p *prometheus, form string, step time.Duration) {
	t.Helper()
	bars := int(24 * time.Second / step)
	metric := `hotkeyd_samples_dropped_total{job="hotkeyd",reason="malformed"}`
	waitUntil(t, 40*time.Second, "Prometheus to hold 30 s of scrapes", func() bool {
		r, err := p.query(`count_over_time(up{job="hotkeyd"}[30s]) >= 28`)
		return err == nil && len(r) > 0
	})
	end := time.Now().Add(-2 * time.Second).Truncate(time.Second)
	start := end.Add(-time.Duration(bars) * step)
	at := func(q string, ts time.Time) float64 {
		var d struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		}
		if err := p.api("/api/v1/query", url.Values{"query": {q}, "time": {strconv.FormatInt(ts.Unix(), 10)}}, &d); err != nil || len(d.Result) != 1 {
			t.Fatalf("%s at %v: %v, %d results; want 1", q, ts, err, len(d.Result))
		}
		f, _ := strconv.ParseFloat(d.Result[0].Value[1].(string), 64)
		return f
	}
	truth := at("sum("+metric+")", end) - at("sum("+metric+")", start)
	q := strings.ReplaceAll(form, "$m", metric)
	q = strings.ReplaceAll(q, "$__interval", step.String())
	q = strings.ReplaceAll(q, "$__rate_interval", (4 * time.Second).String()) // Grafana: at least four scrapes
	var d struct {
		Result []struct {
			Values [][]any `json:"values"`
		} `json:"result"`
	}
	// Grafana draws a bar every $__interval, at the end of the interval it counts.
	params := url.Values{"query": {q}, "start": {strconv.FormatInt(start.Add(step).Unix(), 10)},
		"end": {strconv.FormatInt(end.Unix(), 10)}, "step": {step.String()}}
	if err := p.api("/api/v1/query_range", params, &d); err != nil || len(d.Result) != 1 {
		t.Fatalf("%s: %v, %d series; want 1", q, err, len(d.Result))
	}
	var sum float64
	for _, v := range d.Result[0].Values {
		f, _ := strconv.ParseFloat(v[1].(string), 64)
		sum += f
	}
	t.Logf("bars of %s every %v over %v: sum %.1f; the counter grew by %.0f", q, step, end.Sub(start), sum, truth)
	if truth < 10 {
		t.Fatalf("the counter grew by %.0f in %v; want a steady counter (10 or more)", truth, end.Sub(start))
	}
	if math.Abs(sum-truth) > 0.25*truth+2 {
		t.Errorf("bars of %s add up to %.1f; want the counter's growth, %.0f (±25 %%)", q, sum, truth)
	}
}
