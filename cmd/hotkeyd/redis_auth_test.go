package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/agent"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestServeRedisWithAuth: a Redis that wants AUTH, with redis.password from the
// environment: the agent learns the topology, keeps the registry in Redis, publishes its
// plan there and reads INFO, all authenticated; without the password it says Redis
// refuses it, and detection goes on.
func TestServeRedisWithAuth(t *testing.T) {
	const pw = "s3cret-redis-pw"
	srv := redistest.Start(t, redistest.Options{Password: pw})
	p := startServe(t, []string{"HOTKEYD_HTTP_LISTEN=127.0.0.1:0", "HOTKEYD_UDP_LISTEN=127.0.0.1:0",
		"HOTKEYD_REDIS_ADDRS=" + srv.Addr(), "HOTKEYD_REDIS_PASSWORD=" + pw, "HOTKEYD_REDIS_INFO_INTERVAL=1s"})
	base := "http://" + startedRE.FindStringSubmatch(p.log.String())[1]
	eventually(t, "the topology known and the registry in Redis", func() bool {
		return strings.Contains(p.log.String(), "redis topology known") && strings.Contains(p.log.String(), "registry_store=redis")
	})
	resp, err := http.Post(base+"/v1/plan/overrides", "application/json",
		strings.NewReader(`{"key":"score:match42","kind":"l1","action":"pin","mode":"enforce"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: pw})
	t.Cleanup(func() { rdb.Close() })
	eventually(t, "the plan published in Redis, and the server's INFO read", func() bool {
		plan, _ := rdb.Get(context.Background(), agent.PlanKey).Result()
		return strings.Contains(plan, "score:match42") && nodeHasRedisLoad(t, base)
	})
	if strings.Contains(p.log.String(), pw) || strings.Contains(p.log.String(), "NOAUTH") || strings.Contains(p.log.String(), "WRONGPASS") {
		t.Errorf("log shows the password or an AUTH failure:\n%s", p.log)
	}

	bare := startServe(t, []string{"HOTKEYD_HTTP_LISTEN=127.0.0.1:0", "HOTKEYD_UDP_LISTEN=127.0.0.1:0",
		"HOTKEYD_REDIS_ADDRS=" + srv.Addr(), "HOTKEYD_REGISTRY_FILE="})
	eventually(t, "the agent without the password to say Redis refuses it", func() bool {
		return strings.Contains(bare.log.String(), "redis unreachable") && strings.Contains(bare.log.String(), "NOAUTH")
	})
}

// nodeHasRedisLoad reports whether GET /v1/nodes shows a node with its INFO load.
func nodeHasRedisLoad(t *testing.T, base string) bool {
	t.Helper()
	resp, err := http.Get(base + "/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var n agent.Nodes
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(fmt.Errorf("GET /v1/nodes: %w: %s", err, b))
	}
	return len(n.Nodes) == 1 && n.Nodes[0].Redis != nil
}
