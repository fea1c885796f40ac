package mitigate

import (
	"fmt"
	"testing"
)

// TestScanMatch: the four kinds of names a scan looks for are told apart client side
// exactly as the globs "{hk:copy*", "{hk:sub*", "{hk:t*}stash:*" and "{hk:t*}subs:*" would.
func TestScanMatch(t *testing.T) {
	for _, tc := range []struct {
		name            string
		all, copiesOnly bool
	}{
		{"{hk:copy1:5}k", true, true},
		{"{hk:copy", true, true},
		{"{hk:sub2:9}k", true, false},
		{"{hk:sub", true, false},
		{"{hk:t12}stash:{hk:sub1:3}k", true, false},
		{"{hk:t}stash:", true, false},
		{"{hk:tx}y}stash:z", true, false},
		{"{hk:t12}subs:k", true, false},
		{"{hk:t12}subs:", true, false},
		{"{hk:t12}done:1:k", false, false},
		{"{hk:t12}gen:k", false, false},
		{"{hk:t12}stashed", false, false},
		{"{hk:t12stash:k", false, false},
		{"{hk:other}k", false, false},
		{"hk:claim{hk:copy1:5}k", false, false},
		{"{hotkeyd}sweep", false, false},
		{"{HK:copy1:5}k", false, false},
		{"", false, false},
	} {
		t.Run(fmt.Sprintf("%q", tc.name), func(t *testing.T) {
			if got := scanWanted(tc.name, false); got != tc.all {
				t.Errorf("scanWanted(%q, all kinds): %v; want %v", tc.name, got, tc.all)
			}
			if got := scanWanted(tc.name, true); got != tc.copiesOnly {
				t.Errorf("scanWanted(%q, copies only): %v; want %v", tc.name, got, tc.copiesOnly)
			}
		})
	}
}
