package client

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// TestCounterAddSampledAsWrite: every Add is sampled as a counter write of its key,
// whatever path it takes. A batched Add calls no Redis command, so the hook alone would
// see one INCRBY per flush interval: the agent would see the key go cold while the app
// adds as fast as ever, end the entry, and the key would turn hot again a minute later.
// A sharded Add increments a sub-counter, which the hook would report under the
// sub-counter's name.
func TestCounterAddSampledAsWrite(t *testing.T) {
	srv := redistest.Start(t)
	ps := startPlanServer(t)
	const batched, sharded = "sampled:batched", "sampled:sharded"
	subs := []mitigate.Node{{Name: "{hk:sub1:1}" + sharded}, {Name: "{hk:sub2:1}" + sharded}}
	ps.publish(batchedEntry(batched, 5*time.Second, time.Minute), shardedEntry(sharded, subs, time.Minute))
	c, rec := attachSampled(t, srv.Addr(), ps)
	waitVersion(t, c, 2)
	ctx := context.Background()
	for _, k := range []string{batched, batched, sharded, sharded, "sampled:plain"} {
		if err := c.Counter().Add(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Counter().Stats(); st.Batched != 2 || st.Sharded != 2 || st.Plain != 1 {
		t.Fatalf("stats %+v; want 2 batched, 2 sharded, 1 plain Add", st)
	}
	if err := c.Close(); err != nil { // flushes the sum, sends what is pending
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // anything more than the five would come meanwhile
	got := rec.wait(t, 5)
	slices.Sort(got)
	want := []string{
		"app write " + batched + " counter", "app write " + batched + " counter",
		"app write sampled:plain counter",
		"app write " + sharded + " counter", "app write " + sharded + " counter",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("samples of five Adds (and the flush at Close): %q; want %q", got, want)
	}
}
