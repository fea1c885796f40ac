package agent

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// authDrops returns hotkeyd_samples_dropped_total{source="unknown",reason="auth"}.
func authDrops(a *Agent) float64 {
	return testutil.ToFloat64(a.metrics.drops.WithLabelValues("unknown", sampler.DropAuth))
}

// metricLine returns the value of the series named exactly series (name and labels as
// /metrics writes them), and whether /metrics has it.
func metricLine(t *testing.T, h http.Handler, series string) (string, bool) {
	t.Helper()
	for line := range strings.Lines(do(t, h, "GET", "/metrics", "").Body.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v, true
		}
	}
	return "", false
}

// TestUnauthorizedNotSampleDrops: a request refused for want of the token counts as
// dropped samples only when it carried samples (POST /v1/samples); every refusal counts in
// hotkeyd_http_unauthorized_total by endpoint.
func TestUnauthorizedNotSampleDrops(t *testing.T) {
	a, _, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	event := fmt.Sprintf(`{"id":"e","patterns":["k"],"start":%q,"end":%q}`, t0.Format(time.RFC3339), t0.Add(time.Hour).Format(time.RFC3339))
	refused := []struct{ method, target, body, endpoint string }{
		{"POST", "/v1/registry", event, "/v1/registry"},
		{"PUT", "/v1/registry/e", event, "/v1/registry/{id}"},
		{"DELETE", "/v1/registry/e", "", "/v1/registry/{id}"},
		{"POST", "/v1/plan/overrides", `{"key":"k","kind":"l1","action":"pin"}`, "/v1/plan/overrides"},
		{"DELETE", "/v1/plan/overrides/k", "", "/v1/plan/overrides/{key}"},
	}
	for _, r := range refused {
		if w := do(t, h, r.method, r.target, r.body, "Authorization", "Bearer wrong"); w.Code != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d; want 401", r.method, r.target, w.Code)
		}
	}
	for _, target := range []string{"/v1/topk", "/v1/registry", "/v1/plan/overrides", "/v1/samples"} {
		do(t, h, "OPTIONS", target, "")
	}
	if got := authDrops(a); got != 0 {
		t.Errorf(`after refused mutations and OPTIONS: samples_dropped_total{reason="auth"} = %v; want 0`, got)
	}
	if w := do(t, h, "POST", "/v1/samples", `{"source":"a","samples":[{"key":"k","op":"read"}]}`); w.Code != http.StatusUnauthorized {
		t.Fatalf("POST /v1/samples without a token: %d; want 401", w.Code)
	}
	if got := authDrops(a); got != 1 {
		t.Errorf(`after a refused report: samples_dropped_total{reason="auth"} = %v; want 1`, got)
	}
	want := map[string]int{"/v1/samples": 1}
	for _, r := range refused {
		want[r.endpoint]++
	}
	for endpoint, n := range want {
		series := fmt.Sprintf(`hotkeyd_http_unauthorized_total{endpoint=%q}`, endpoint)
		if got, ok := metricLine(t, h, series); !ok || got != fmt.Sprint(n) {
			t.Errorf("%s = %q (present %v); want %d", series, got, ok, n)
		}
	}
}

// TestKeyShareMatchesTopK: GET /v1/keys/{key} and GET /v1/topk give a key the same share
// at the same moment, also when samples came in since the last evaluation, and never
// more than 1.
func TestKeyShareMatchesTopK(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	drive(a, c, 2*time.Second, true, flow{key: "solo", rate: 5000})
	// Traffic after the evaluation: the view's totals trail the sketch.
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{{Key: []byte("solo"), Op: sampler.OpRead, Count: 500}}})
	top := topkOf(t, h, "n=1")
	if len(top.Keys) != 1 {
		t.Fatalf("topk keys %+v; want solo", top.Keys)
	}
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/solo", ""))
	if k.Share > 1 || top.Keys[0].Share > 1 {
		t.Errorf("share: /v1/keys %v, /v1/topk %v; want ≤ 1", k.Share, top.Keys[0].Share)
	}
	if math.Abs(k.Share-top.Keys[0].Share) > 1e-12 {
		t.Errorf("share of solo: /v1/keys %v, /v1/topk %v; want equal", k.Share, top.Keys[0].Share)
	}

	// Two keys, a third of the traffic each way round.
	a, c, h = newTestAgent(t, Options{})
	drive(a, c, 2*time.Second, true, flow{key: "a", rate: 2000}, flow{key: "b", rate: 1000, write: true})
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{{Key: []byte("b"), Op: sampler.OpWrite, Count: 300}}})
	top = topkOf(t, h, "")
	for _, tk := range top.Keys {
		k := decode[Key](t, do(t, h, "GET", "/v1/keys/"+tk.Key, ""))
		if math.Abs(k.Share-tk.Share) > 1e-12 || math.Abs(k.Rate-tk.Rate) > 1e-9 {
			t.Errorf("%s: /v1/keys rate %v share %v, /v1/topk rate %v share %v; want equal", tk.Key, k.Rate, k.Share, tk.Rate, tk.Share)
		}
	}
}

// TestHeadAnswersAsGet: every endpoint that answers GET answers HEAD with the same status,
// with or without a token configured.
func TestHeadAnswersAsGet(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		a, c, h := newTestAgent(t, Options{AuthToken: token})
		event := fmt.Sprintf(`{"id":"e","patterns":["k"],"start":%q,"end":%q}`, t0.Format(time.RFC3339), t0.Add(time.Hour).Format(time.RFC3339))
		if w := do(t, h, "POST", "/v1/registry", event, "Authorization", "Bearer "+token); w.Code != http.StatusCreated {
			t.Fatalf("POST /v1/registry: %d %s", w.Code, w.Body)
		}
		feed(a, c, "k", 2000, time.Second)
		for _, target := range []string{"/v1/topk", "/v1/topk?n=0", "/v1/keys/k", "/v1/keys/none", "/v1/plan", "/v1/registry",
			"/v1/registry/e", "/v1/registry/none", "/v1/plan/overrides", "/metrics", "/healthz", "/readyz"} {
			get, head := do(t, h, "GET", target, ""), do(t, h, "HEAD", target, "")
			if head.Code != get.Code {
				t.Errorf("token %q: HEAD %s: %d %s; want %d as GET", token, target, head.Code, head.Body, get.Code)
			}
		}
	}
}

// TestOptions: OPTIONS needs no token anywhere; it is answered 405 with the Allow header
// of the endpoint.
func TestOptions(t *testing.T) {
	a, _, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	for _, tt := range []struct{ target, allow string }{
		{"/v1/topk", "GET, HEAD"},
		{"/v1/keys/k", "GET, HEAD"},
		{"/v1/plan", "GET, HEAD"},
		{"/v1/samples", "POST"},
		{"/v1/registry", "GET, HEAD, POST"},
		{"/v1/registry/e", "DELETE, GET, HEAD, PUT"},
		{"/v1/plan/overrides", "DELETE, GET, HEAD, POST"}, // DELETE without a key: 400
		{"/v1/plan/overrides/k", "DELETE"},
		{"/metrics", "GET, HEAD"},
	} {
		w := do(t, h, "OPTIONS", tt.target, "")
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != tt.allow {
			t.Errorf("OPTIONS %s: %d, Allow %q; want 405, Allow %q", tt.target, w.Code, w.Header().Get("Allow"), tt.allow)
		}
	}
	if got := authDrops(a); got != 0 {
		t.Errorf(`samples_dropped_total{reason="auth"} = %v after OPTIONS; want 0`, got)
	}
}

// TestErrorBodiesOneFormat: every {"error":"…"} body has one format, whichever part of
// the API writes it: compact JSON and a newline, with the same headers.
func TestErrorBodiesOneFormat(t *testing.T) {
	_, _, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	for _, tt := range []struct {
		method, target, body string
		hdr                  []string
		code                 int
	}{
		{"POST", "/v1/registry", "{}", nil, 401},
		{"POST", "/v1/samples", "{}", nil, 401},
		{"GET", "/v1/topk?n=0", "", nil, 400},
		{"GET", "/v1/topk?op=x", "", nil, 400},
		{"POST", "/v1/samples", "not json", auth, 400},
		{"POST", "/v1/samples", `{"source":"a","samples":[{"key":"k","op":"zap"}]}`, auth, 400},
		{"GET", "/v1/keys/never", "", nil, 404},
		{"GET", "/v1/nothing", "", nil, 404},
		{"POST", "/v1/topk", "", nil, 405},
		{"GET", "/v1/plan?wait=x", "", nil, 400},
		{"POST", "/v1/registry", "{", auth, 400},
		{"GET", "/v1/registry/none", "", nil, 404},
		{"POST", "/v1/plan/overrides", `{"key":""}`, auth, 400},
	} {
		w := do(t, h, tt.method, tt.target, tt.body, tt.hdr...)
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" || w.Code != tt.code {
			t.Errorf("%s %s: %d %q; want %d {\"error\":\"…\"}", tt.method, tt.target, w.Code, w.Body, tt.code)
			continue
		}
		want, _ := json.Marshal(e)
		if got := w.Body.String(); got != string(want)+"\n" {
			t.Errorf("%s %s: body %q; want %q", tt.method, tt.target, got, string(want)+"\n")
		}
		if ct, nosniff := w.Header().Get("Content-Type"), w.Header().Get("X-Content-Type-Options"); ct != "application/json" || nosniff != "nosniff" {
			t.Errorf("%s %s: Content-Type %q, X-Content-Type-Options %q; want application/json, nosniff", tt.method, tt.target, ct, nosniff)
		}
	}
}

// TestBinaryKeysB64: a key that is not valid UTF-8 is listed with key_b64, its bytes in
// standard base64, so that two such keys stay apart and can be looked up again; a UTF-8
// key has none, nor does a hashed name.
func TestBinaryKeysB64(t *testing.T) {
	keys := []string{"\xff\x00key", "\xfe\x00key", "plain"}
	a, c, h := newTestAgent(t, Options{})
	for i, k := range keys {
		a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{{Key: []byte(k), Op: sampler.OpRead, Count: uint32(30 - i)}}})
	}
	c.add(time.Second / 2)
	a.evaluate()
	var top struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(do(t, h, "GET", "/v1/topk", "").Body.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Keys) != len(keys) {
		t.Fatalf("/v1/topk: %d keys; want %d", len(top.Keys), len(keys))
	}
	for i, k := range keys {
		want := base64.StdEncoding.EncodeToString([]byte(k))
		got, has := top.Keys[i]["key_b64"]
		switch {
		case utf8.ValidString(k) && has:
			t.Errorf("/v1/topk: %q has key_b64 %v; want none", k, got)
		case !utf8.ValidString(k) && got != want:
			t.Errorf("/v1/topk: %q has key_b64 %v; want %q", k, got, want)
		}
	}
	for i, target := range []string{
		"/v1/keys/?key_b64=" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(keys[0]))),
		"/v1/keys/?key_b64=" + base64.StdEncoding.EncodeToString([]byte(keys[0])), // "+" and "/" unescaped
		"/v1/keys/?key_b64=" + base64.RawURLEncoding.EncodeToString([]byte(keys[0])),
		"/v1/keys/" + url.PathEscape(keys[0]),
	} {
		w := do(t, h, "GET", target, "")
		var got map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
			t.Errorf("lookup %d, GET %s: %d %s; want 200", i, target, w.Code, w.Body)
			continue
		}
		if got["key_b64"] != "/wBrZXk=" || got["read_rate"] != 60.0 {
			t.Errorf("GET %s: key_b64 %v read_rate %v; want /wBrZXk=, 60", target, got["key_b64"], got["read_rate"])
		}
	}
	for _, target := range []string{"/v1/keys/?key_b64=%21%21", "/v1/keys/k?key_b64=aw=="} {
		if w := do(t, h, "GET", target, ""); w.Code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s; want 400", target, w.Code, w.Body)
		}
	}

	a, c, h = newTestAgent(t, Options{HashKeys: true})
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{{Key: []byte(keys[0]), Op: sampler.OpRead, Count: 30}}})
	c.add(time.Second / 2)
	a.evaluate()
	if body := do(t, h, "GET", "/v1/topk", "").Body.String(); strings.Contains(body, "key_b64") {
		t.Errorf("/v1/topk with hash_keys shows key_b64:\n%s", body)
	}
}

// TestMetricsNoControlBytes: a scrape of /metrics after keys holding NUL, other control
// bytes and bytes that are not UTF-8 holds no raw control byte: each is written \xNN.
func TestMetricsNoControlBytes(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{ // hot: 10,000/s and 8,000/s, so with series
		{Key: []byte("\xff\x00key"), Op: sampler.OpRead, Count: 5000},
		{Key: []byte("tab\tbell\a\x7f\u0085"), Op: sampler.OpRead, Count: 4000},
	}})
	c.add(time.Second / 2)
	a.evaluate()
	body := do(t, h, "GET", "/metrics", "").Body.String()
	for i, r := range body {
		if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			t.Fatalf("/metrics holds the control character %U at byte %d: %q", r, i, body[max(0, i-40):min(len(body), i+40)])
		}
	}
	for _, want := range []string{`key="\\xff\\x00key"`, `key="tab\\x09bell\\x07\\x7f\\xc2\\x85"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestMetricsKeysDoNotShareALabel: a binary key and a text key that reads like its
// escaped form (a backslash, then xff) each get series of their own: labelValue writes a
// backslash as \\.
func TestMetricsKeysDoNotShareALabel(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{ // both hot
		{Key: []byte("bin:\xff"), Op: sampler.OpRead, Count: 5000},
		{Key: []byte(`bin:\xff`), Op: sampler.OpRead, Count: 4000},
	}})
	c.add(time.Second / 2)
	a.evaluate()
	body := do(t, h, "GET", "/metrics", "").Body.String()
	// The exposition escapes each backslash of a label value once more.
	for _, want := range []string{`hotkeyd_key_hot{key="bin:\\xff"} 1`, `hotkeyd_key_hot{key="bin:\\\\xff"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "hotkeyd_key_hot"))
		}
	}
}

// TestTopKBeyondK: /v1/topk answers at most detector.topk keys, the heaviest, however
// large n is (each shard ranks its own K, and past the K-th their union skips keys); and
// /v1/keys/{key} for a key out of the ranking still has its history, empty.
func TestTopKBeyondK(t *testing.T) {
	a, c, h := newTestAgent(t, Options{Detector: detector.Options{K: 3}})
	var samples []sampler.Sample
	for i := range 40 { // k0 heaviest: 4,000, 3,900, … requests
		samples = append(samples, sampler.Sample{Key: fmt.Appendf(nil, "k%d", i), Op: sampler.OpRead, Count: uint32(4000 - 100*i)})
	}
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: samples})
	c.add(time.Second / 2)
	a.evaluate()
	reply := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=40", ""))
	var got []string
	for _, k := range reply.Keys {
		got = append(got, k.Key)
	}
	if want := []string{"k0", "k1", "k2"}; !slices.Equal(got, want) {
		t.Errorf("/v1/topk?n=40 with detector.topk 3: keys %v; want %v", got, want)
	}
	w := do(t, h, "GET", "/v1/keys/k30", "")
	var fields map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &fields); err != nil || w.Code != http.StatusOK {
		t.Fatalf("/v1/keys/k30: %d %s (%v)", w.Code, w.Body.String(), err)
	}
	if h, ok := fields["history"].([]any); !ok || len(h) != 0 {
		t.Errorf("/v1/keys/k30 (not ranked): history %#v; want []", fields["history"])
	}
}

// TestEmptyKeyLookup: the empty key, which Redis allows and the agent counts, can be
// looked up as /v1/keys/?key_b64= once /v1/topk lists it; /v1/keys/ with nothing names
// that form in its 400.
func TestEmptyKeyLookup(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	a.Accept(sampler.Batch{Source: "t", Rate: 1, Samples: []sampler.Sample{
		{Key: []byte(""), Op: sampler.OpRead, Count: 40},
		{Key: []byte("other"), Op: sampler.OpRead, Count: 10},
	}})
	c.add(time.Second / 2)
	a.evaluate()
	var top struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(do(t, h, "GET", "/v1/topk", "").Body.Bytes(), &top); err != nil || len(top.Keys) == 0 || top.Keys[0]["key"] != "" {
		t.Fatalf("/v1/topk: %v %v; want the empty key first", top.Keys, err)
	}
	w := do(t, h, "GET", "/v1/keys/?key_b64=", "")
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
		t.Fatalf("GET /v1/keys/?key_b64=: %d %s; want 200", w.Code, w.Body)
	}
	if got["key"] != "" || got["read_rate"] != 80.0 {
		t.Errorf("GET /v1/keys/?key_b64=: key %q read_rate %v; want the empty key at 80/s", got["key"], got["read_rate"])
	}
	w = do(t, h, "GET", "/v1/keys/", "")
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "?key_b64= for the empty key") {
		t.Errorf("GET /v1/keys/: %d %s; want 400 naming ?key_b64= for the empty key", w.Code, w.Body)
	}
}
