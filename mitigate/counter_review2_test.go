package mitigate

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// commandCalls returns the calls of every command since the last CONFIG RESETSTAT.
func commandCalls(t *testing.T, c Redis) map[string]int {
	t.Helper()
	info, err := c.Do(context.Background(), "INFO", "commandstats").Text()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		if err != nil {
			t.Fatalf("INFO commandstats line %q: calls: %v", l, err)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestEmptyFoldCostReview2: folding a sub-counter that holds nothing (what every round
// does for each draining sub-counter, for a whole grace period) writes nothing, so it
// needs no replica check: one script call, not a script, CLUSTER MYID, ROLE or CLUSTER
// REPLICAS and WAIT.
func TestEmptyFoldCostReview2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t)
	c := b.rdb
	const key = "rv2:likes"
	subs := b.names(t, key, 2, ShardedCounter)
	if _, err := foldSub(ctx, c, key, subs[0].Name); err != nil { // loads the script
		t.Fatalf("foldSub: %v", err)
	}
	mustDo(t, c, "CONFIG", "RESETSTAT")
	const folds = 10
	for range folds {
		if _, err := foldSub(ctx, c, key, subs[0].Name); err != nil {
			t.Fatalf("foldSub: %v", err)
		}
	}
	calls := commandCalls(t, c)
	n := 0
	for _, name := range []string{"evalsha", "eval", "cluster|myid", "cluster|replicas", "role", "wait"} {
		n += calls[name] // calls made inside the script are counted apart
	}
	if n != folds {
		t.Errorf("commands for %d folds of an empty sub-counter: got %d round trips (%v); want %d", folds, n, calls, folds)
	}
}

// TestFoldWithoutAdminCommands: a Redis user without the @admin commands (ROLE, CLUSTER
// REPLICAS), which the executor otherwise does not need, still folds: the fold cannot
// learn the replicas to wait for, and goes on without waiting, as it did before it waited.
func TestFoldWithoutAdminCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t)
	admin := b.rdb
	mustDo(t, admin, "ACL", "SETUSER", "hk", "on", ">pw", "~*", "+@all", "-@admin")
	c := redis.NewClient(&redis.Options{Addr: b.addrs[0], Username: "hk", Password: "pw"})
	defer c.Close()
	const key = "noadmin:likes"
	subs := b.names(t, key, 2, ShardedCounter)
	mustDo(t, admin, "SET", subs[0].Name, "5")
	if _, err := foldSub(ctx, c, key, subs[0].Name); err != nil {
		t.Fatalf("foldSub as a user without @admin: %v; want the fold done without waiting for replicas", err)
	}
	if v, err := admin.Do(ctx, "GET", key).Int(); err != nil || v != 5 {
		t.Errorf("%s after the fold: %d, %v; want 5", key, v, err)
	}
}
