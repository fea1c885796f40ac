package agent

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestNoRedirects: the mux would redirect a path to its clean form, or to the path with a
// slash added, with a text/html body; the API answers those with a JSON 404 instead, so a
// client that follows redirects never lands on another key or a DELETE that does
// nothing.
func TestNoRedirects(t *testing.T) {
	_, _, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	for _, tt := range []struct {
		method, target string
		code           int
		says           string // in the error
	}{
		{"GET", "//v1/topk", http.StatusNotFound, `nearest path is "/v1/topk"`},
		{"GET", "/v1/./topk", http.StatusNotFound, `nearest path is "/v1/topk"`},
		{"GET", "/v1/plan/../topk", http.StatusNotFound, `nearest path is "/v1/topk"`},
		{"HEAD", "//v1/topk", http.StatusNotFound, ""},
		{"GET", "/v1/keys", http.StatusNotFound, `nearest path is "/v1/keys/"`},
		{"GET", "/v1/registry/", http.StatusNotFound, ""},
		{"DELETE", "/v1/plan/overrides", http.StatusBadRequest, "key: missing"},
		{"DELETE", "/v1/plan/overrides/", http.StatusBadRequest, "key: missing"},
	} {
		w := do(t, h, tt.method, tt.target, "", auth...)
		if w.Code != tt.code {
			t.Errorf("%s %s: %d %s; want %d", tt.method, tt.target, w.Code, w.Body, tt.code)
		}
		if loc := w.Header().Get("Location"); loc != "" {
			t.Errorf("%s %s: Location %q; want none", tt.method, tt.target, loc)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q; want application/json", tt.method, tt.target, ct)
		}
		if tt.method == "HEAD" {
			continue
		}
		if e := decode[map[string]string](t, w); !strings.Contains(e["error"], tt.says) {
			t.Errorf("%s %s: error %q; want it to say %q", tt.method, tt.target, e["error"], tt.says)
		}
	}
}

// TestKeyPathLiteral: /v1/keys/{key} and DELETE /v1/plan/overrides/{key} take the rest of
// the path as the key, slashes and dot segments included, escaped or not.
func TestKeyPathLiteral(t *testing.T) {
	a, c, h := newTestAgent(t, Options{AuthToken: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	keys := []string{"page:https://ex.com/a", "a/../b", "..", "./x/", "a//b/./c"}
	for _, k := range keys {
		feed(a, c, k, 2000, time.Second) // the window is a second: each key in its own
		for _, target := range []string{"/v1/keys/" + k, "/v1/keys/" + strings.ReplaceAll(k, "/", "%2F")} {
			w := do(t, h, "GET", target, "")
			if w.Code != http.StatusOK {
				t.Errorf("GET %s: %d %s; want 200", target, w.Code, w.Body)
				continue
			}
			if got := decode[map[string]any](t, w)["key"]; got != k {
				t.Errorf("GET %s: key %q; want %q", target, got, k)
			}
		}
		body := `{"key":"` + k + `","kind":"l1","action":"pin"}`
		if w := do(t, h, "POST", "/v1/plan/overrides", body, auth...); w.Code != http.StatusCreated {
			t.Fatalf("POST override of %q: %d %s", k, w.Code, w.Body)
		}
		w := do(t, h, "DELETE", "/v1/plan/overrides/"+k, "", auth...)
		if w.Code != http.StatusOK {
			t.Errorf("DELETE /v1/plan/overrides/%s: %d %s; want 200", k, w.Code, w.Body)
		}
	}
	if n := len(a.planner.Overrides()); n != 0 {
		t.Errorf("%d overrides left after deleting each; want 0", n)
	}
}
