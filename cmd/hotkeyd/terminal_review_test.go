package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/text/width"

	"github.com/hotkeyd/hotkeyd/agent"
)

// termCellsReview is the width of s on a terminal by Unicode's East Asian Width, which
// terminals follow: wide and fullwidth characters take two cells. It is not top's own
// count, which checkTopFrame uses and so cannot find a character top counts wrong.
func termCellsReview(s string) int {
	w := 0
	for _, r := range s {
		switch k := width.LookupRune(r).Kind(); {
		case k == width.EastAsianWide || k == width.EastAsianFullwidth:
			w += 2
		case runeCells(r) == 0: // combining marks
		default:
			w++
		}
	}
	return w
}

// TestTopFrameWideEmojiReview: keys of emoji outside U+1F300–U+1F64F and U+1F900–U+1F9FF
// (🚀, 🫠, ⚡, ⌛) take two cells each, like the ideographs; a frame of them must still fit
// the terminal, or it wraps and scrolls the header away.
func TestTopFrameWideEmojiReview(t *testing.T) {
	since := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	r := &agent.TopK{TotalRate: 100, WindowSeconds: 10}
	for _, k := range []string{strings.Repeat("🚀", 40), strings.Repeat("🫠", 40), strings.Repeat("⚡", 40), "order:" + strings.Repeat("⌛", 40)} {
		r.Keys = append(r.Keys, agent.Key{Key: k, Rate: 25, Share: 0.25, Hot: true, HotSince: &since})
	}
	for _, cols := range []int{100, 80, 40} {
		var frame bytes.Buffer
		writeFrame(&frame, r, nil, nil, fuzzTopAddr, time.Second, since.Add(time.Hour), cols, 24, true, true)
		for l := range strings.SplitSeq(strings.TrimPrefix(frame.String(), "\x1b[H\x1b[2J"), "\n") {
			if w := termCellsReview(l); w > cols {
				t.Errorf("line of %d cells on a terminal %d wide: %q", w, cols, l)
			}
		}
	}
}

// TestRegistryAddShowEscapeReview: `registry add` prints the id the server answers, and
// `registry show` the event it answers; both are any server's words, and must reach the
// terminal with no control character (C0, DEL, C1), no bidi override and no byte that is
// not UTF-8, as `registry list` and the errors do.
func TestRegistryAddShowEscapeReview(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"ev\u001b]0;pwned\u0007\u001b[2J"}`))
			return
		}
		_, _ = w.Write([]byte("{\"id\":\"ev\",\"name\":\"csi \u009b2J del \x7f bidi \u202e bad \x9b[2J\"}"))
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	for _, args := range [][]string{
		{"registry", "add", "--addr", srv.URL, "--id", "ev", "--pattern", "k", "--start", "2026-12-01T12:00:00Z", "--end", "2026-12-01T13:00:00Z"},
		{"registry", "show", "--addr", srv.URL, "ev"},
	} {
		out, _, err := runCmd(t, ctx, args...)
		if err != nil {
			t.Fatalf("%s: %v", args[1], err)
		}
		if args[1] == "show" && !json.Valid([]byte(out)) {
			t.Errorf("show printed what is not JSON: %q", out)
		}
		if !utf8.ValidString(out) {
			t.Errorf("%s printed bytes that are not UTF-8: %q", args[1], out)
		}
		for _, r := range out {
			if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x202e) {
				t.Errorf("%s printed %U: %q", args[1], r, out)
				break
			}
		}
	}
}
