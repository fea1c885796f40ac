package mitigate

import (
	"fmt"
	"testing"
)

// TestScanMatch: the four kinds of names a scan looks for are told apart client side
// exactly as the globs "{hk:copy*", "{hk:sub*", "{hk:t*}stash:*" and "{hk:t*}subs:*" would.
func TestScanMatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"{hk:copy1:5}k", true},
		{"{hk:copy", true},
		{"{hk:sub2:9}k", true},
		{"{hk:sub", true},
		{"{hk:t12}stash:{hk:sub1:3}k", true},
		{"{hk:t}stash:", true},
		{"{hk:tx}y}stash:z", true},
		{"{hk:t12}subs:k", true},
		{"{hk:t12}subs:", true},
		{"{hk:t12}done:1:k", false},
		{"{hk:t12}gen:k", false},
		{"{hk:t12}stashed", false},
		{"{hk:t12stash:k", false},
		{"{hk:other}k", false},
		{"hk:claim{hk:copy1:5}k", false},
		{"{hotkeyd}sweep", false},
		{"{hotkeyd}recover", false},
		{"{HK:copy1:5}k", false},
		{"", false},
	} {
		t.Run(fmt.Sprintf("%q", tc.name), func(t *testing.T) {
			if got := scanWanted(tc.name); got != tc.want {
				t.Errorf("scanWanted(%q): %v; want %v", tc.name, got, tc.want)
			}
		})
	}
}
