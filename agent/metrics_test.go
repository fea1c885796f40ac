package agent

import (
	"net/http"
	"strings"
	"testing"
	"time"
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
