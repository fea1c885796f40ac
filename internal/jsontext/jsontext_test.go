package jsontext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLoneSurrogate(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{`{"key":"plain"}`, -1},
		{`{"key":"\u00e9\n\"\\"}`, -1},
		{`{"key":"\ud83d\ude00"}`, -1},                   // a pair: 😀
		{`{"key":"\uD83D\uDE00 and \ud800"}`, 25},        // upper-case hex, then a lone high half
		{`{"key":"\ud800"}`, 8},                          // a lone high half
		{`{"key":"\udc00"}`, 8},                          // a lone low half
		{`{"key":"\ud800\u0041"}`, 8},                    // a high half followed by no low one
		{`{"key":"\ud800\ud800\udc00"}`, 8},              // two highs: the first is alone
		{`{"key":"\\ud800"}`, -1},                        // an escaped backslash, then text
		{`{"key":"\\\ud800"}`, 10},                       // an escaped backslash, then an escape
		{`{"key":"\ud8`, -1},                             // cut short: not an escape
		{`{"key":"\udbff\udfff","b":"\udfff"}`, 27},      // the last pair, then a lone low half
		{`{"a":"\u0000","b":"\uffff","c":"\ud7ff"}`, -1}, // not surrogates
	} {
		if got := LoneSurrogate([]byte(tc.text)); got != tc.want {
			t.Errorf("LoneSurrogate(%s) = %d; want %d", tc.text, got, tc.want)
		}
	}
}

// FuzzLoneSurrogate: for a JSON string, LoneSurrogate finds an escape exactly when
// encoding/json decodes the string to something that does not encode back to it: a
// U+FFFD the text did not spell.
func FuzzLoneSurrogate(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud800"`, `"\ud83d\ude00"`, `"\\ud800"`, `"\ufffd"`, `"\udc00\ud800"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var s string
		if !utf8.ValidString(text) || json.Unmarshal([]byte(text), &s) != nil {
			return
		}
		at := LoneSurrogate([]byte(text))
		spelled := strings.Count(strings.ToLower(text), `\ufffd`) + strings.Count(text, "\ufffd")
		replaced := strings.Count(s, "\ufffd") > spelled
		if (at >= 0) != replaced {
			t.Errorf("LoneSurrogate(%s) = %d; decoded %q (U+FFFD spelled %d times, decoded %d)", text, at, s, spelled, strings.Count(s, "\ufffd"))
		}
		if at >= 0 && !strings.HasPrefix(text[at:], `\u`) {
			t.Errorf("LoneSurrogate(%s) = %d: not at an escape", text, at)
		}
	})
}
