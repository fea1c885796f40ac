package mitigate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestCopiesRefreshKeepsSDKWrite: an SDK client writes the original, then every copy,
// between the round's DUMP of the original and its writes of the copies. The round must
// not overwrite the SDK's copies with the older value it dumped: client/doc.go promises
// read-your-writes, and the copies would serve the old value until the next round.
func TestCopiesRefreshKeepsSDKWrite(t *testing.T) {
	b := startCluster(t)
	ctx := context.Background()
	const key = "race:page"
	copies := b.names(t, key, 2, Copies)
	if err := b.rdb.Do(ctx, "SET", key, "v1").Err(); err != nil {
		t.Fatal(err)
	}
	var dumped, wrote atomic.Bool
	sdkWrite := func(v string) {
		for _, n := range append([]string{key}, nodeNames(copies)...) {
			if err := b.rdb.Do(ctx, "SET", n, v).Err(); err != nil {
				t.Errorf("SET %s: %v", n, err)
			}
		}
	}
	rdb := interposer{Redis: b.rdb, before: func(ctx context.Context, args []any) error {
		switch {
		case isScript(args, dumpOriginal):
			dumped.Store(true)
		case dumped.Load() && !wrote.Swap(true):
			sdkWrite("v2") // right after the DUMP, before the first copy is written
		}
		return nil
	}}
	e, err := NewExecutor(ExecutorOptions{Redis: rdb, RefreshPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, copies))); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !wrote.Load() {
		t.Fatal("the SDK write did not run")
	}
	for _, c := range copies {
		if got := b.rdb.Do(ctx, "GET", c.Name).Val(); got != "v2" {
			t.Errorf("copy %s after the round: %q; want the SDK's \"v2\", written after the round's DUMP", c.Name, got)
		}
	}
	// Later rounds keep the copies in step with the original.
	if err := b.rdb.Do(ctx, "SET", key, "v3").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	for _, c := range copies {
		if got := b.rdb.Do(ctx, "GET", c.Name).Val(); got != "v3" {
			t.Errorf("copy %s after a refresh: %q; want the original's \"v3\"", c.Name, got)
		}
	}
}
