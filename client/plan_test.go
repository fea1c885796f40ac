package client

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// TestPlanIndexLeaseCap: a plan whose lease is longer than any agent gives (mitigate.lease
// is at most an hour) is held for an hour at most, so that a client that lost its agent
// still drops the entries in bounded time.
func TestPlanIndexLeaseCap(t *testing.T) {
	p := mitigate.Plan{Version: 1, Generated: planNow, Primaries: 1, Entries: []mitigate.Entry{
		l1Entry("a", time.Second, 100*time.Hour),
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	received := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newPlanIndex(p, received).lookup("a")
	if got := a.l1(received.Add(mitigate.MaxLease - time.Second)); got != time.Second {
		t.Errorf("L1 TTL before an hour: %v; want 1s", got)
	}
	if got := a.l1(received.Add(mitigate.MaxLease)); got != 0 {
		t.Errorf("L1 TTL an hour after the plan came, with a 100 h lease: %v; want 0 (dropped)", got)
	}
}

// TestPlanIndex: only enforced entries are applied, each for its lease counted from
// when the plan arrived on the client's clock; counter entries are kept for the Counter
// API (leased).
func TestPlanIndex(t *testing.T) {
	rec := l1Entry("rec", time.Second, time.Minute)
	rec.Mode = mitigate.Recommend
	batched := mitigate.Entry{Key: "likes", Kind: mitigate.BatchedCounter, Mode: mitigate.Enforce, Reason: "test",
		Since: planNow.Add(-time.Second), Expires: planNow.Add(10 * time.Second), FlushInterval: mitigate.Duration(100 * time.Millisecond)}
	p := mitigate.Plan{Version: 7, Generated: planNow, Primaries: 3, Entries: []mitigate.Entry{
		l1Entry("a", 2*time.Second, 30*time.Second),
		copiesEntry("a", copyNames("a", 2), 20*time.Second),
		batched,
		rec,
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	// The client's clock is far from the agent's: only Expires − Generated counts.
	received := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ix := newPlanIndex(p, received)
	at := func(d time.Duration) time.Time { return received.Add(d) }
	if ix.lookup("rec") != nil {
		t.Error("a recommended entry was indexed; clients apply only enforced ones")
	}
	a := ix.lookup("a")
	if got := a.l1(at(29 * time.Second)); got != 2*time.Second {
		t.Errorf("L1 TTL before the lease ends: %v; want 2s", got)
	}
	if got := a.l1(at(30 * time.Second)); got != 0 {
		t.Errorf("L1 TTL at the lease's end: %v; want 0 (dropped)", got)
	}
	if got := a.readCopies(at(19 * time.Second)); len(got) != 2 {
		t.Errorf("copies before the lease ends: %v; want 2", got)
	}
	if a.readCopies(at(20*time.Second)) != nil || a.split(at(20*time.Second)) {
		t.Error("copies still applied after their lease")
	}
	a.markUnsure()
	if a.readCopies(at(time.Second)) != nil || !a.split(at(time.Second)) {
		t.Error("unsure: reads must go to the original, writes still to the copies")
	}
	if e, ok := ix.leased("likes", mitigate.BatchedCounter, at(9*time.Second)); !ok || e.FlushInterval != batched.FlushInterval {
		t.Errorf("leased batched counter: %+v, %v; want the entry", e, ok)
	}
	if _, ok := ix.leased("likes", mitigate.BatchedCounter, at(10*time.Second)); ok {
		t.Error("leased returned an entry past its lease")
	}
	if got := ix.live(at(15 * time.Second)); got != 2 {
		t.Errorf("live entries at 15s: %d; want 2 (L1 and copies of a)", got)
	}
}

// TestReporterFollowsPlan: the FollowsPlan option marks every report, and only then.
func TestReporterFollowsPlan(t *testing.T) {
	for _, follows := range []bool{false, true} {
		got := make(chan bool, 16)
		r := newTestReporter(t, ReporterOptions{SampleEvery: 1, FollowsPlan: follows, FlushInterval: time.Millisecond},
			func(data []byte) error {
				var b sampler.Batch
				if _, err := sampler.DecodeReport(&b, data); err != nil {
					return err
				}
				got <- b.FollowsPlan
				return nil
			})
		ctx := context.Background()
		r.Hook().ProcessHook(nop)(ctx, redis.NewStringCmd(ctx, "get", "k"))
		select {
		case g := <-got:
			if g != follows {
				t.Errorf("FollowsPlan option %v: report flag %v", follows, g)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no report within 5s")
		}
	}
}
