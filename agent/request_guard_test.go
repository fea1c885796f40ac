package agent

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// mutation is one request of each route that changes something, with a body that works.
type mutation struct{ method, target, body, endpoint string }

func mutations() []mutation {
	event := fmt.Sprintf(`{"id":"e","patterns":["k"],"start":%q,"end":%q}`, t0.Format(time.RFC3339), t0.Add(time.Hour).Format(time.RFC3339))
	return []mutation{
		{"POST", "/v1/samples", `{"source":"a","samples":[{"key":"k","op":"read"}]}`, "/v1/samples"},
		{"POST", "/v1/registry", event, "/v1/registry"},
		{"PUT", "/v1/registry/e", event, "/v1/registry/{id}"},
		{"DELETE", "/v1/registry/e", "", "/v1/registry/{id}"},
		{"POST", "/v1/plan/overrides", `{"key":"k","kind":"l1","action":"pin"}`, "/v1/plan/overrides"},
		{"DELETE", "/v1/plan/overrides/k", "", "/v1/plan/overrides/{key}"},
	}
}

// state is what the mutations change: samples received, events, overrides.
func state(t *testing.T, a *Agent, h http.Handler) string {
	t.Helper()
	snap := a.det.Snapshot(a.now(), detector.All, 1)
	return fmt.Sprintf("detector counts %d reads; registry %s; overrides %s", snap.Reads,
		do(t, h, "GET", "/v1/registry", "").Body, do(t, h, "GET", "/v1/plan/overrides", "").Body)
}

// TestCrossSiteRefused: a request that changes something and comes from a web page (it
// carries Origin or Sec-Fetch-Site, which only browsers send and page scripts cannot
// remove) is refused 403 before anything happens, with or without a token configured,
// and counted; the same requests without those headers work as before.
func TestCrossSiteRefused(t *testing.T) {
	browser := [][]string{
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
		{"Origin", "http://evil.example:9736", "Host", "evil.example:9736"}, // DNS rebinding
		{"Origin", "http://127.0.0.1:9736"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-origin"},
	}
	for _, token := range []string{"", "s3cret"} {
		a, _, h := newTestAgent(t, Options{AuthToken: token})
		auth := []string{"Authorization", "Bearer " + token}
		before := state(t, a, h)
		for _, m := range mutations() {
			for _, hdr := range browser {
				w := do(t, h, m.method, m.target, m.body, append(hdr, auth...)...)
				if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "web page") {
					t.Errorf("token %q: %s %s with %q: %d %s; want 403 saying requests from web pages are refused", token, m.method, m.target, hdr, w.Code, w.Body)
				}
			}
		}
		if after := state(t, a, h); after != before {
			t.Errorf("token %q: refused requests changed the agent: %s; was %s", token, after, before)
		}
		want := map[string]int{}
		for _, m := range mutations() {
			want[m.endpoint] += len(browser)
		}
		for endpoint, n := range want {
			series := fmt.Sprintf(`hotkeyd_http_unauthorized_total{endpoint=%q}`, endpoint)
			if got, ok := metricLine(t, h, series); !ok || got != fmt.Sprint(n) {
				t.Errorf("token %q: %s = %q; want %d", token, series, got, n)
			}
		}
		if got, want := authDrops(a), float64(len(browser)); got != want {
			t.Errorf(`token %q: samples_dropped_total{source="unknown",reason="auth"} = %v; want %v (the refused reports)`, token, got, want)
		}
		// Without them, as before: the SDK, the CLI and curl send neither.
		wantCode := map[string]int{"/v1/samples": 202, "/v1/registry": 201, "/v1/registry/e": 200, "/v1/plan/overrides": 201, "/v1/plan/overrides/k": 200}
		for _, m := range mutations() {
			if w := do(t, h, m.method, m.target, m.body, auth...); w.Code != wantCode[m.target] {
				t.Errorf("token %q: %s %s without Origin: %d %s; want %d", token, m.method, m.target, w.Code, w.Body, wantCode[m.target])
			}
		}
		// Reads from a page are not refused: GET and HEAD change nothing.
		if w := do(t, h, "GET", "/v1/topk", "", "Origin", "https://evil.example"); w.Code != http.StatusOK {
			t.Errorf("token %q: GET /v1/topk with Origin: %d; want 200", token, w.Code)
		}
	}
}

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write([]byte(s))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestContentEncodingRefused: every endpoint that reads a body answers 415 to a body in a
// Content-Encoding other than identity, naming the header, instead of reading compressed
// bytes as JSON (or plain bytes labelled br as if they were not); identity is taken.
func TestContentEncodingRefused(t *testing.T) {
	a, _, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	before := state(t, a, h)
	for _, m := range mutations() {
		if m.method == "DELETE" {
			continue // reads no body
		}
		for _, tt := range []struct{ encoding, body string }{
			{"gzip", gzipped(t, m.body)},
			{"br", m.body},
			{"GZIP", m.body},
			{"identity, gzip", m.body},
		} {
			w := do(t, h, m.method, m.target, tt.body, append([]string{"Content-Encoding", tt.encoding}, auth...)...)
			if w.Code != http.StatusUnsupportedMediaType || !strings.Contains(w.Body.String(), "Content-Encoding") || !strings.Contains(w.Body.String(), "identity") {
				t.Errorf("%s %s, Content-Encoding %s: %d %s; want 415 naming Content-Encoding and identity", m.method, m.target, tt.encoding, w.Code, w.Body)
			}
		}
	}
	if after := state(t, a, h); after != before {
		t.Errorf("refused bodies changed the agent: %s; was %s", after, before)
	}
	if got := testutil.ToFloat64(a.metrics.drops.WithLabelValues("unknown", sampler.DropMalformed)); got != 4 {
		t.Errorf(`samples_dropped_total{source="unknown",reason="malformed"} = %v; want 4 (the refused reports)`, got)
	}
	wantCode := map[string]int{"/v1/samples": 202, "/v1/registry": 201, "/v1/registry/e": 200, "/v1/plan/overrides": 201}
	for _, m := range mutations() {
		if m.method == "DELETE" {
			continue
		}
		if w := do(t, h, m.method, m.target, m.body, append([]string{"Content-Encoding", "Identity"}, auth...)...); w.Code != wantCode[m.target] {
			t.Errorf("%s %s, Content-Encoding identity: %d %s; want %d", m.method, m.target, w.Code, w.Body, wantCode[m.target])
		}
	}
}

// TestBearerSchemeAnyCase: the scheme of Authorization is case-insensitive (RFC 7235
// §2.1); the token is not.
func TestBearerSchemeAnyCase(t *testing.T) {
	_, _, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	body := `{"source":"a","samples":[{"key":"k","op":"read"}]}`
	for _, tt := range []struct {
		auth string
		code int
	}{
		{"Bearer s3cret", 202},
		{"bearer s3cret", 202},
		{"BEARER s3cret", 202},
		{"bEaReR s3cret", 202},
		{"Bearer  s3cret", 202}, // 1*SP
		{"bearer S3CRET", 401},
		{"bearer s3cre", 401},
		{"bearer s3crett", 401},
		{"Bearers3cret", 401},
		{"Basic s3cret", 401},
		{"s3cret", 401},
		{"bearer", 401},
		{"", 401},
	} {
		if w := do(t, h, "POST", "/v1/samples", body, "Authorization", tt.auth); w.Code != tt.code {
			t.Errorf("Authorization %q: %d %s; want %d", tt.auth, w.Code, w.Body, tt.code)
		}
	}
}
