package agent

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// TestKeyMitigatedSeries: a ranked key with an enforced mitigation has a
// hotkeyd_key_mitigated series for its kind; a ranked key without one has none, so that
// HotkeydSurpriseHotKey joins on the key and a mitigation for one key does not silence
// another. The series goes with the key's other per-key series.
func TestKeyMitigatedSeries(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	body := `{"key":"a","kind":"l1","action":"pin","mode":"enforce"}`
	if w := do(t, h, "POST", "/v1/plan/overrides", body); w.Code != http.StatusCreated {
		t.Fatalf("POST pin: %d %s; want 201", w.Code, w.Body)
	}
	feed(a, c, "a", 5000, 500*time.Millisecond)
	feed(a, c, "b", 5000, 500*time.Millisecond)
	m := do(t, h, "GET", "/metrics", "").Body.String()
	if !strings.Contains(m, `hotkeyd_key_mitigated{key="a",kind="l1"} 1`) {
		t.Errorf("/metrics lacks hotkeyd_key_mitigated for key a (pinned l1, enforce):\n%s", grepLines(m, "hotkeyd_key_"))
	}
	if strings.Contains(m, `hotkeyd_key_mitigated{key="b"`) {
		t.Errorf("/metrics has hotkeyd_key_mitigated for key b, which has no mitigation")
	}
	if !strings.Contains(m, `hotkeyd_key_hot{key="b"}`) {
		t.Fatalf("key b not ranked:\n%s", grepLines(m, "hotkeyd_key_"))
	}
}

// TestLabelledCountersPrecreated: the counters whose label values are known in advance
// exist at 0 from the start, so that rate() and increase() see their first increment.
func TestLabelledCountersPrecreated(t *testing.T) {
	_, _, h := newTestAgent(t, Options{})
	m := do(t, h, "GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`hotkeyd_hot_key_transitions_total{to="hot"} 0`,
		`hotkeyd_hot_key_transitions_total{to="cool"} 0`,
		`hotkeyd_samples_dropped_total{reason="malformed",source="unknown"} 0`,
		`hotkeyd_samples_dropped_total{reason="too_large",source="unknown"} 0`,
		`hotkeyd_samples_dropped_total{reason="overload",source="unknown"} 0`,
		`hotkeyd_samples_dropped_total{reason="auth",source="unknown"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// noiseKeys sends one read sample (1 in 100) of each of n keys "noise:i": the background
// of a real top-k, each key worth ~100/s, a tenth of the default read threshold.
func noiseKeys(a *Agent, n int) {
	b := sampler.Batch{Source: "t", Rate: 0.01}
	for i := range n {
		b.Samples = append(b.Samples, sampler.Sample{Key: fmt.Appendf(nil, "noise:%d", i), Op: sampler.OpRead, Count: 1})
	}
	a.Accept(b)
}

// evaluateLate evaluates 5 ms after a tick boundary passed without an evaluation, as the
// loop's ticker does (it never fires early): the window then covers slightly more than
// its span, so that a key seen in one sample is at 99.5/s, as the review measured
// 99.98/s, not at exactly 100/s.
func evaluateLate(a *Agent, c *clock) {
	c.add(a.opts.Detector.Tick + 5*time.Millisecond)
	a.evaluate()
}

// keySeries returns the keys with a hotkeyd_key_hot series in a /metrics body.
func keySeries(body string) map[string]bool {
	keys := map[string]bool{}
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, `hotkeyd_key_hot{key="`); ok {
			keys[rest[:strings.Index(rest, `"}`)]] = true
		}
	}
	return keys
}

// TestKeySeriesSkipNoise: with the default key_min_ratio (0.3), a hot key has per-key
// series and the keys seen in one sample, at just under a tenth of their threshold, have
// none (of any per-key metric), while /v1/topk still lists them all.
func TestKeySeriesSkipNoise(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	drive(a, c, time.Second, true, flow{key: "hot:1", rate: 5000, sampleRate: 0.01})
	noiseKeys(a, 50)
	evaluateLate(a, c)
	m := do(t, h, "GET", "/metrics", "").Body.String()
	for _, want := range []string{`hotkeyd_key_hot{key="hot:1"} 1`, `hotkeyd_key_rate{key="hot:1",op="read"}`, `hotkeyd_key_share{key="hot:1"}`, `hotkeyd_key_threshold_ratio{key="hot:1"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "hotkeyd_key_"))
		}
	}
	if n := strings.Count(m, `key="noise:`); n != 0 {
		t.Errorf("/metrics has %d per-key series of noise keys; want 0:\n%s", n, grepLines(m, `key="noise:`))
	}
	top := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=100", ""))
	if len(top.Keys) != 51 {
		t.Errorf("/v1/topk lists %d keys; want 51 (the hot key and 50 noise keys)", len(top.Keys))
	}
}

// TestKeySeriesEveryRankedKey: a negative KeyMinRatio (key_min_ratio 0 in the config)
// exports every ranked key, as before the ratio existed.
func TestKeySeriesEveryRankedKey(t *testing.T) {
	a, c, h := newTestAgent(t, Options{KeyMinRatio: -1})
	drive(a, c, time.Second, true, flow{key: "hot:1", rate: 5000, sampleRate: 0.01})
	noiseKeys(a, 50)
	evaluateLate(a, c)
	got := keySeries(do(t, h, "GET", "/metrics", "").Body.String())
	if len(got) != 51 || !got["hot:1"] || !got["noise:0"] || !got["noise:49"] {
		t.Errorf("%d keys with series; want 51, hot:1 and noise:0..49", len(got))
	}
}

// TestKeySeriesMattering: keys far below the ratio keep their series while a registry
// event that is armed predicts them or while a mitigation is enforced for them.
func TestKeySeriesMattering(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	body := fmt.Sprintf(`{"id":"sale","patterns":["sale:*"],"start":%q,"end":%q,"owner":"shop"}`,
		t0.Format(time.RFC3339), t0.Add(time.Hour).Format(time.RFC3339))
	if w := do(t, h, "POST", "/v1/registry", body); w.Code != http.StatusCreated {
		t.Fatalf("POST /v1/registry: %d %s; want 201", w.Code, w.Body)
	}
	if w := do(t, h, "POST", "/v1/plan/overrides", `{"key":"pinned","kind":"l1","action":"pin","mode":"enforce"}`); w.Code != http.StatusCreated {
		t.Fatalf("POST pin: %d %s; want 201", w.Code, w.Body)
	}
	drive(a, c, time.Second, true,
		flow{key: "sale:1", rate: 50}, // 0.05 of its threshold, under min_rate
		flow{key: "pinned", rate: 50},
		flow{key: "plain", rate: 50})
	m := do(t, h, "GET", "/metrics", "").Body.String()
	got := keySeries(m)
	if !got["sale:1"] || !got["pinned"] || got["plain"] {
		t.Errorf("keys with series %v; want sale:1 (predicted) and pinned (enforced l1), not plain:\n%s", got, grepLines(m, "hotkeyd_key_"))
	}
	if !strings.Contains(m, `hotkeyd_key_mitigated{key="pinned",kind="l1"} 1`) {
		t.Errorf("/metrics lacks hotkeyd_key_mitigated for pinned:\n%s", grepLines(m, "hotkeyd_key_"))
	}
	if top := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=100", "")); len(top.Keys) != 3 {
		t.Errorf("/v1/topk lists %d keys; want 3", len(top.Keys))
	}
}
