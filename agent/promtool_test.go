package agent

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPromtoolCheckMetrics runs the agent's /metrics, with per-key series present, through
// promtool check metrics (from Debian's prometheus package, which scripts/test.sh installs).
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run ./scripts/test.sh, which installs Debian's prometheus package")
	}
	a, c, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	feed(a, c, "score:match42", 5000, time.Second)
	feed(a, c, "bin:\xff\x00\tkey", 4000, time.Second) // escaped in the key label
	a.Drop("app-1", "malformed", 3)
	do(t, h, "POST", "/v1/plan/overrides", "{}") // no token: hotkeyd_http_unauthorized_total
	body := do(t, h, "GET", "/metrics", "").Body.String()
	for _, want := range []string{"hotkeyd_key_rate{", "hotkeyd_samples_received_total{", "hotkeyd_samples_dropped_total{", "hotkeyd_detection_delay_seconds_bucket",
		`hotkeyd_http_unauthorized_total{endpoint="/v1/plan/overrides"} 1`, `key="bin:\\xff\\x00\\x09key"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
