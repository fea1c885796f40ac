package client

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// benchClusterClient is a Client attached to a ClusterClient that talks to nothing (it
// knows no slots, so it dials no node), with a plan of entries installed directly.
func benchClusterClient(b *testing.B, entries ...mitigate.Entry) *Client {
	b.Helper()
	return benchAttach(b, redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"},
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) { return nil, nil }}), entries...)
}

// clusterChain is the hook chain of a ClusterClient's command: its plan hook, then the
// node client's hook, then Redis (redisNext).
func clusterChain(c *Client) redis.ProcessHook {
	return planHook{c}.ProcessHook(nodeHook{c}.ProcessHook(redisNext))
}

// BenchmarkClusterPlanHook measures what the hooks add to a command of a ClusterClient,
// with a stand-in for Redis at the end of the chain: the plan hook of the ClusterClient
// and, below it, the hook of the node client the command goes to (clusterChain). The
// cases are those of BenchmarkPlanHook.
func BenchmarkClusterPlanHook(b *testing.B) {
	benchHookCases(b, benchClusterClient, clusterChain)
}
