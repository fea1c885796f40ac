package mitigate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestTopologyRunBacksOff: refreshes asked for by reports that the cluster does not
// confirm (each finds the table the previous one found) come ever further apart, so a
// client that keeps disagreeing with the cluster does not make the topology read it every
// MinRefreshGap; a refresh that finds a change brings the gap back.
func TestTopologyRunBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex          // guards asked and port
		asked, port := 0, int64(1) // the owner of every slot is 127.0.0.1:port
		topo, _ := TopologyFromRanges([]SlotRange{{0, SlotCount - 1, "127.0.0.1:1"}})
		topo.opts = TopologyOptions{
			Seeds:           []string{"127.0.0.1:1"},
			RefreshInterval: 30 * time.Second,
			MinRefreshGap:   250 * time.Millisecond,
			RefreshTimeout:  time.Second,
			Conn: NodeCommanderFunc(func(ctx context.Context, addr string, args ...any) (any, error) {
				if args[1] == "SHARDS" {
					return nil, errors.New("ERR unknown subcommand 'SHARDS'")
				}
				mu.Lock()
				defer mu.Unlock()
				asked++
				return []any{[]any{int64(0), int64(SlotCount - 1), []any{"127.0.0.1", port}}}, nil
			}),
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return asked }
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go topo.Run(ctx)
		kick := func(d time.Duration) {
			for range int(d / (100 * time.Millisecond)) {
				topo.askRefresh()
				time.Sleep(100 * time.Millisecond)
			}
			synctest.Wait()
		}
		// Gaps 250ms, 500ms, 1s, 2s, 4s: refreshes at 0.25, 0.75, 1.75, 3.75, 7.75s.
		kick(10 * time.Second)
		if got := count(); got != 5 {
			t.Errorf("refreshes in 10s of reports the cluster does not confirm: %d; want 5 (gap doubling from 250ms)", got)
		}
		// The cluster changes: the next refresh finds it, and the gap is back to 250ms.
		mu.Lock()
		port = 2
		mu.Unlock()
		before := count()
		kick(10 * time.Second) // the refresh due at 15.75s finds the change…
		kick(time.Second)      // …then reports are served every 250ms, then 500ms
		if got := topo.PrimaryOf(0); got != "127.0.0.1:2" {
			t.Errorf("PrimaryOf(0) = %q; want the changed owner 127.0.0.1:2", got)
		}
		if got := count() - before; got < 3 {
			t.Errorf("refreshes from 10s to 21s, the change found at 15.75s: %d; want the gap back to 250ms after it (at least 3)", got)
		}
	})
}
