package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzAPIClientReply feeds any answer (status and body) of the agent to the registry
// commands' client, as `registry list` (an object), `registry show` (raw JSON) and
// `registry rm` (nothing) read it, without a network. apiClient.do must never panic; a
// status of 300 or more is an error; a 2xx is an error exactly when its body does not
// decode as asked. Every error names the request (method and URL), and holds no control
// character but a line end and no byte that is not UTF-8: main prints it on the terminal,
// and the server's words are any bytes.
func FuzzAPIClientReply(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"events":[{"id":"final","name":"Final","patterns":["score:*"],"start":"2026-12-01T19:30:00+01:00","end":"2026-12-01T21:30:00+01:00","lead":"10m","expected_read_rate":2e5}]}`},
		{201, `{"id":"gen-1"}`},
		{204, ``},
		{200, `<html>not the agent</html>`},
		{200, `{"events":{}}`},
		{200, `{"events":[{"id":5}]}`},
		{400, `{"error":"patterns: empty: want at least one key"}`},
		{404, `{"error":"event \"x\": not found"}`},
		{401, `{"error":"\u001b]0;pwned\u0007\u001b[2Jauthorization"}`},
		{502, "\x1b[2Jbad gateway"},
		{500, `{"error":"bad \xff\xfe bytes"}`},
		{503, `{"error":""}`},
		{302, ``},
	} {
		f.Add(s.status, []byte(s.body))
	}
	const u = "http://127.0.0.1:9736/v1/registry"
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 999 {
			status = 200 // what net/http accepts
		}
		c := &apiClient{http: &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
				Body: io.NopCloser(bytes.NewReader(body)), Header: http.Header{}, Request: r}, nil
		}), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
		var list struct {
			Events []struct {
				ID, Name, Start, End, Lead, Recurrence string
				Patterns                               []string
				ExpectedReadRate                       float64 `json:"expected_read_rate"`
			} `json:"events"`
		}
		var raw json.RawMessage
		for i, out := range []any{&list, &raw, nil} {
			err := c.do(context.Background(), http.MethodGet, u, nil, out)
			as := [...]string{"registry list", "registry show", "registry rm"}[i]
			switch {
			case status >= 300 && err == nil:
				t.Fatalf("%s: reply %d %q: no error; want one", as, status, body)
			case status < 300 && out == nil && err != nil:
				t.Fatalf("%s: reply %d %q: %v; want no error", as, status, body, err)
			case status < 300 && out != nil && (err == nil) != (json.Unmarshal(body, out) == nil):
				t.Fatalf("%s: reply %d %q: %v; want an error exactly when the body does not decode", as, status, body, err)
			}
			if err == nil {
				continue
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "GET "+u+": ") {
				t.Fatalf("%s: reply %d %q: %q; want the error to start with the request, GET %s", as, status, body, msg, u)
			}
			if !utf8.ValidString(msg) {
				t.Fatalf("%s: reply %d %q: error %q is not UTF-8", as, status, body, msg)
			}
			for _, r := range msg {
				if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f) {
					t.Fatalf("%s: reply %d %q: error %q holds the control character %U", as, status, body, msg, r)
				}
			}
		}
	})
}
