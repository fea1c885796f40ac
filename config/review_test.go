package config

import (
	"strings"
	"testing"
)

// TestValidateWidthPerShard: the detector splits detector.width among detector.shards and
// needs at least 64 counters per shard; Validate refuses what the detector would refuse,
// naming detector.width and what is allowed.
func TestValidateWidthPerShard(t *testing.T) {
	c := Default()
	c.Detector.Width, c.Detector.Shards = 64, 4
	err := c.Validate()
	if err == nil {
		t.Fatal("width 64 with 4 shards: got nil; want an error naming detector.width")
	}
	if want := "detector.width: 64"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "256") {
		t.Errorf("got %q; want it to contain %q and the least width allowed, 256", err, want)
	}
}
