package mitigate

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// Tests of what active mitigations and the topology do when a real 3-primary cluster
// changes under them: failovers, slot migrations, nodes that stop answering.

// primaryAt returns the node of c listening on addr.
func primaryAt(t *testing.T, c *redistest.Cluster, addr string) *redistest.Server {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	t.Fatalf("no node of the cluster at %s", addr)
	return nil
}

// others returns the primaries of c other than n.
func others(c *redistest.Cluster, n *redistest.Server) []*redistest.Server {
	var out []*redistest.Server
	for _, m := range c.Nodes() {
		if m != n {
			out = append(out, m)
		}
	}
	return out
}

// TestTopologyRefreshPastHungPrimary: a primary stops answering (SIGSTOP: its port still
// accepts connections, as a hung host or a black-holed network does) and its replica takes
// over. Run must learn the new primary from the nodes that answer, even though the hung one
// is the first it asks: a refresh gives each node a share of RefreshTimeout, not all of it.
func TestTopologyRefreshPastHungPrimary(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var mu sync.Mutex // guards changes
	var changes [][3][]string
	topo := newTopology(t, TopologyOptions{Seeds: c.Addrs(), RefreshInterval: 100 * time.Millisecond,
		OnChange: func(primaries, added, removed []string) {
			mu.Lock()
			changes = append(changes, [3][]string{primaries, added, removed})
			mu.Unlock()
		}})
	hung := primaryAt(t, c, topo.PrimaryAddrs()[0]) // Refresh asks the known primaries in this order
	replica := c.AddReplica(t, hung)
	hung.Pause(t)
	c.Failover(t, replica, "TAKEOVER", others(c, hung)...)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { topo.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(8 * time.Second)
	for !slices.Contains(topo.PrimaryAddrs(), replica.Addr()) {
		if time.Now().After(deadline) {
			t.Fatalf("8s after the failover, primaries %v (last refresh: %v); want %s in place of the hung %s",
				topo.PrimaryAddrs(), topo.Err(), replica.Addr(), hung.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if slices.Contains(topo.PrimaryAddrs(), hung.Addr()) {
		t.Errorf("primaries %v still list the hung %s", topo.PrimaryAddrs(), hung.Addr())
	}
	checkCovers(t, topo, topo.PrimaryAddrs())
	// OnChange told of the failover once: the primaries now, the one that came, the one
	// that went.
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 1 || !slices.Equal(changes[0][0], topo.PrimaryAddrs()) ||
		!slices.Equal(changes[0][1], []string{replica.Addr()}) || !slices.Equal(changes[0][2], []string{hung.Addr()}) {
		t.Errorf("OnChange calls %v; want one: the primaries now, [%s] added, [%s] removed", changes, replica.Addr(), hung.Addr())
	}
}
