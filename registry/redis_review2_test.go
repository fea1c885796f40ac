package registry

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestRedisVersionNotReusedAfterLaggedFailover: agents' clocks differ (here by a
// minute; NTP keeps them milliseconds apart, and two changes within that time do the
// same). A change by the agent whose clock is behind gets the stored version plus one,
// not its clock; a failover to a replica that missed that change, followed by another
// change by the same agent, must not give the new set of events that same version:
// agents compare versions for equality (agent.refreshIndex), and would keep arming the
// lost event and never arm the new one.
func TestRedisVersionNotReusedAfterLaggedFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	primary, replica := redistest.Start(t), redistest.Start(t)
	rrdb := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rrdb.Close()
	if err := rrdb.Do(ctx, "replicaof", "127.0.0.1", strconv.Itoa(primary.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	a := fleetRedis(t, primary.Addr())
	a.now = func() time.Time { return time.Now().Add(time.Minute) } // A's clock is ahead
	b := fleetRedis(t, primary.Addr())
	if _, err := a.Create(ctx, testEvent("x")); err != nil {
		t.Fatal(err)
	}
	v1 := mustVersion(t, a)
	_, ver := a.Keys()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, ierr := rrdb.Info(ctx, "replication").Result()
		got, gerr := rrdb.Get(ctx, ver).Uint64()
		linked := strings.Contains(info, "master_link_status:up")
		if got == v1 && linked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the replica has version %d (%v), link up %v (%v); want version %d and the link up",
				got, gerr, linked, ierr, v1)
		}
	}
	if err := rrdb.Do(ctx, "replicaof", "no", "one").Err(); err != nil { // it lags from here on
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, testEvent("y")); err != nil {
		t.Fatal(err)
	}
	v2 := mustVersion(t, b) // what every agent reads for {x, y}
	// Failover: the primary is gone, the replica (with x only) takes over.
	primary.Stop()
	b2 := fleetRedis(t, replica.Addr())
	if _, err := b2.Create(ctx, testEvent("z")); err != nil {
		t.Fatal(err)
	}
	v3 := mustVersion(t, b2)
	if v3 == v2 {
		t.Errorf("version %d for {x y} before the failover and %d for {x z} after; want a version never seen before", v2, v3)
	}
}
