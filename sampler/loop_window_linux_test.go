package sampler

import "testing"

// TestNextWindow: a client's window grows to what muxWindowBytes holds at the mean size
// of its replies, never by less than doubling and never past muxOwed.
func TestNextWindow(t *testing.T) {
	for _, tc := range []struct {
		name            string
		window          int
		rbytes, replies int64
		want            int
	}{
		{"no reply yet: doubles", muxWindow, 0, 0, 2 * muxWindow},
		{"9-byte replies: all at once", muxWindow, 9 * 16, 16, muxOwed},
		{"1 KiB replies: all at once", muxWindow, 16 << 10, 16, muxOwed},
		{"10 KB replies: 104", muxWindow, 160_000, 16, 104},
		{"100 KB replies: doubles", muxWindow, 1_600_000, 16, 2 * muxWindow},
		{"1 MB replies: doubles", 64, 64_000_000, 64, 128},
		{"empty replies counted whole", muxWindow, 0, 16, muxOwed},
		{"at muxOwed: stays", muxOwed, 1 << 30, 1024, muxOwed},
	} {
		c := &loopClient{window: tc.window, rbytes: tc.rbytes, replies: tc.replies}
		if got := c.nextWindow(); got != tc.want {
			t.Errorf("%s: window %d after %d bytes in %d replies: %d; want %d", tc.name, tc.window, tc.rbytes, tc.replies, got, tc.want)
		}
	}
}
