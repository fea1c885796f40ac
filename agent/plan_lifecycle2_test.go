package agent

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestOverridesBinaryKey: JSON cannot carry bytes that are not UTF-8, and encoding/json
// reads each of them as U+FFFD. An override posted with such a key would silently apply
// to another key (an operator's forbid of report on "bin\xff" hiding nothing, or a pin
// landing on "bin\uFFFD"): it must be refused, naming the problem. The key can still be
// cleared by path, escaped.
func TestOverridesBinaryKey(t *testing.T) {
	a, _, h := newTestAgent(t, Options{})
	w := do(t, h, "POST", "/v1/plan/overrides", "{\"key\":\"bin\xff\",\"kind\":\"report\",\"action\":\"forbid\"}")
	if e := decode[map[string]string](t, w); w.Code != http.StatusBadRequest || !strings.Contains(e["error"], "UTF-8") {
		t.Errorf("POST with a key that is not UTF-8: %d %q, overrides %v; want 400 saying the body is not UTF-8",
			w.Code, e["error"], a.planner.Overrides())
	}
	if err := a.planner.Forbid("bin\xff", mitigate.Report); err != nil {
		t.Fatal(err)
	}
	if w := do(t, h, "DELETE", "/v1/plan/overrides/bin%FF", ""); w.Code != http.StatusOK {
		t.Errorf("DELETE /v1/plan/overrides/bin%%FF: %d %s; want 200", w.Code, w.Body)
	}
	if o := a.planner.Overrides(); len(o) != 0 {
		t.Errorf("after DELETE: overrides %v; want none", o)
	}
}
