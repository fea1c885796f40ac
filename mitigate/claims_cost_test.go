package mitigate

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClaimsCostFlat: what Redis sends an executor to renew its claim and to retire a
// copy must not grow with the number of other executors on the cluster. A fleet of
// thousands of agents shares one cluster; if every claim check read every agent's claim,
// hotkeyd would make a hot key of its own. The test measures the bytes every primary
// sends (INFO total_net_output_bytes) during one retire step (an entry ends) and one
// renewal round of executor A, first alone, then with 500 other live executors that
// claim copies of the same hot keys, and wants the second within twice the first (plus a
// little for the INFO replies themselves and the client's slot-table reloads).
func TestClaimsCostFlat(t *testing.T) {
	t.Parallel()
	b := startCluster(t)
	alone := claimsCost(t, b, "cost0", 0)
	crowd := claimsCost(t, b, "cost500", 500)
	t.Logf("bytes sent by the primaries: alone retire %d, renew %d; with 500 others retire %d, renew %d",
		alone.retire, alone.renew, crowd.retire, crowd.renew)
	const slack = 4096
	if crowd.retire > 2*alone.retire+slack {
		t.Errorf("retire step with 500 other executors: %d bytes; want ≤ 2 × %d + %d (alone): the cost must not grow with the fleet",
			crowd.retire, alone.retire, slack)
	}
	if crowd.renew > 2*alone.renew+slack {
		t.Errorf("renewal round with 500 other executors: %d bytes; want ≤ 2 × %d + %d (alone): the cost must not grow with the fleet",
			crowd.renew, alone.renew, slack)
	}
}

// stepBytes is what the primaries sent during one retire step and one renewal round.
type stepBytes struct{ retire, renew int64 }

// claimsCost sets up, under prefix, three hot keys that other executors (each with an
// id of its own) enforce with three copies each, and an executor A that enforces them
// and one more key of its own; then it measures A's retire step (its own key's entry
// ends) and A's next renewal round (half a grace period later).
func claimsCost(t *testing.T, b backend, prefix string, others int) stepBytes {
	t.Helper()
	ctx := context.Background()
	clock := newExecClock()
	var shared []Entry
	for i := range 3 {
		key := fmt.Sprintf("%s:hot%d", prefix, i)
		mustDo(t, b.rdb, "SET", key, "v")
		shared = append(shared, execEntry(key, Copies, Enforce, b.names(t, key, 3, Copies)))
	}
	own := prefix + ":own"
	mustDo(t, b.rdb, "SET", own, "v")
	ownNames := b.names(t, own, 3, Copies)
	for i := range others {
		o, err := NewExecutor(ExecutorOptions{Redis: b.rdb, ID: fmt.Sprintf("%s-other-%03d", prefix, i),
			GracePeriod: claimsGrace, RefreshPeriod: time.Hour, Now: clock.Now})
		if err != nil {
			t.Fatalf("NewExecutor: %v", err)
		}
		if err := o.Apply(ctx, execPlan(shared...)); err != nil {
			t.Fatalf("executor %d Apply: %v", i, err)
		}
		// Never closed: its claim stays live for the whole measurement.
	}
	a := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: prefix + "-A", GracePeriod: claimsGrace, Now: clock.Now})
	defer a.Close(ctx)
	if err := a.Apply(ctx, execPlan(append(shared[:3:3], execEntry(own, Copies, Enforce, ownNames))...)); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	b.exist(t, "after A's Apply", ownNames)

	var got stepBytes
	before := netOutput(t, b)
	if err := a.Apply(ctx, execPlan(shared...)); err != nil { // A's own entry ends
		t.Fatalf("A Apply without its own key: %v", err)
	}
	got.retire = netOutput(t, b) - before
	b.absent(t, "A's own copies after its entry ended", ownNames)

	clock.Add(claimsGrace / 2)
	before = netOutput(t, b)
	if err := a.Refresh(ctx); err != nil {
		t.Fatalf("A Refresh: %v", err)
	}
	got.renew = netOutput(t, b) - before
	return got
}

// netOutput returns the sum over b's primaries of INFO stats total_net_output_bytes.
func netOutput(t *testing.T, b backend) int64 {
	t.Helper()
	var sum int64
	for _, addr := range b.addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		info, err := c.Info(context.Background(), "stats").Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("INFO stats on %s: %v", addr, err)
		}
		_, rest, ok := strings.Cut(info, "total_net_output_bytes:")
		line, _, _ := strings.Cut(rest, "\r\n")
		n, err := strconv.ParseInt(line, 10, 64)
		if !ok || err != nil {
			t.Fatalf("INFO stats on %s: no total_net_output_bytes (%q, %v)", addr, line, err)
		}
		sum += n
	}
	return sum
}
