package agent

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestPlanWithheldMetric: when more keys are mitigated than fit the plan's size bound,
// the planner leaves some out; operators see how many in hotkeyd_plan_withheld_entries
// (and a warning), instead of wondering why a hot key has no entry.
func TestPlanWithheldMetric(t *testing.T) {
	a, c, h := newTestAgent(t, Options{Planner: mitigate.PlannerOptions{MaxPlanBytes: 64 << 10}})
	var flows []flow
	for i := range 100 {
		flows = append(flows, flow{key: fmt.Sprintf("%03d:%s", i, strings.Repeat("k", 500)), rate: 5000})
	}
	drive(a, c, 2*time.Second, true, flows...)
	w := do(t, h, "GET", "/metrics", "")
	m := regexp.MustCompile(`(?m)^hotkeyd_plan_withheld_entries (\d+)$`).FindStringSubmatch(w.Body.String())
	if m == nil {
		t.Fatalf("/metrics has no hotkeyd_plan_withheld_entries")
	}
	n, _ := strconv.Atoi(m[1])
	if n == 0 || n != a.planner.Withheld() {
		t.Errorf("hotkeyd_plan_withheld_entries %d, planner withheld %d; want them equal and above 0 (100 entries of ~1 KB in 64 KiB)", n, a.planner.Withheld())
	}
	published := len(a.store.Current().Entries)
	if published+n != 100 {
		t.Errorf("plan has %d entries and %d are withheld; want 100 in all", published, n)
	}
	// Withheld entries are not in force: hotkeyd_mitigations and /v1/keys say so.
	body := w.Body.String()
	for mode, want := range map[string]int{"recommend": published, "withheld": n} { // reports: no SDK client here
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^hotkeyd_mitigations\{kind="report",mode=%q\} (\d+)$`, mode))
		if m := re.FindStringSubmatch(body); m == nil || m[1] != strconv.Itoa(want) {
			t.Errorf("hotkeyd_mitigations{kind=\"report\",mode=%q}: %v; want %d\n%s", mode, m, want, grepLines(body, "hotkeyd_mitigations{"))
		}
	}
}

// TestBuildInfo: the build's version is in /metrics, for dashboards and alerts that must
// say which hotkeyd ran.
func TestBuildInfo(t *testing.T) {
	_, _, h := newTestAgent(t, Options{Version: "v1.2.3"})
	body := do(t, h, "GET", "/metrics", "").Body.String()
	if !regexp.MustCompile(`(?m)^hotkeyd_build_info\{goversion="go[^"]+",version="v1\.2\.3"\} 1$`).MatchString(body) {
		t.Errorf("/metrics has no hotkeyd_build_info with version v1.2.3:\n%s", grepLines(body, "build_info"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
