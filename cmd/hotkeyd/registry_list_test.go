package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRegistryListLargeReply: a listing past 4 MiB (well within what an agent sends under
// its limits) is read whole; a reply cut short says so, not "unexpected end of JSON input".
func TestRegistryListLargeReply(t *testing.T) {
	ctx := context.Background()
	note := strings.Repeat("n", 4000)
	var b strings.Builder
	b.WriteString(`{"events":[`)
	for i := range 1500 { // about 6 MB
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":"ev%04d","patterns":["k:%d"],"start":"2026-12-01T19:30:00Z","end":"2026-12-01T21:30:00Z","note":%q}`, i, i, note)
	}
	b.WriteString(`]}`)
	body := b.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("cut") != "" {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.Write([]byte(body[:len(body)/2]))
			return
		}
		w.Write([]byte(body))
	}))
	defer srv.Close()
	out, _, err := runCmd(t, ctx, "registry", "list", "--addr", srv.URL)
	if err != nil || !strings.Contains(out, "ev1499") {
		t.Errorf("registry list of a %d-byte reply: %v; want every event listed", len(body), err)
	}
	c := &apiClient{http: srv.Client()}
	var reply any
	err = c.do(ctx, http.MethodGet, srv.URL+"/v1/registry?cut=1", nil, &reply)
	if err == nil || !strings.Contains(err.Error(), "cut") {
		t.Errorf("a reply cut short: %v; want an error saying it was cut", err)
	}
}
