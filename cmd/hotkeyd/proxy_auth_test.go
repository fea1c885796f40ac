package main

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestProxyUpstreamPassword: hotkeyd serve with HOTKEYD_PROXY_UPSTREAM_PASSWORD in front
// of a Redis with requirepass shares its upstream connections with the clients that
// AUTH with that password; a client that does not gets Redis's -NOAUTH; the password is
// never in the log.
func TestProxyUpstreamPassword(t *testing.T) {
	const pw = "tap-upstream-pw-5c1"
	srv := redistest.Start(t, redistest.Options{Password: pw})
	addr, proxy := freeAddr(t), freeAddr(t)
	agent := startServe(t, []string{"HOTKEYD_PROXY_UPSTREAM_PASSWORD=" + pw, "HOTKEYD_LOG_LEVEL=debug"},
		"--http-listen", addr, "--udp-listen", addr, "--proxy-listen", proxy, "--proxy-upstream", srv.Addr())
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{
		Addr: proxy, Password: pw, PoolSize: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the tap: %v", err)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET through the tap: %q, %v; want v", v, err)
	}
	anon := redis.NewClient(&redis.Options{Addr: proxy, Protocol: 2, MaxRetries: -1})
	defer anon.Close()
	if err := anon.Get(ctx, "k").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("GET through the tap without AUTH: %v; want NOAUTH", err)
	}
	m, err := httpGet("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := metricValue(m, `hotkeyd_proxy_clients{conn="shared"}`); v != 1 {
		t.Errorf(`hotkeyd_proxy_clients{conn="shared"} = %v; want 1`, v)
	}
	if v, _ := metricValue(m, `hotkeyd_proxy_pins_total{reason="auth"}`); v != 1 {
		t.Errorf(`hotkeyd_proxy_pins_total{reason="auth"} = %v; want 1`, v)
	}
	if v, _ := metricValue(m, "hotkeyd_proxy_shared_failures_total"); v != 0 {
		t.Errorf("hotkeyd_proxy_shared_failures_total = %v; want 0", v)
	}
	if err := agent.signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0", err)
	}
	log := agent.log.String()
	if strings.Contains(log, pw) {
		t.Errorf("the log shows the password:\n%s", log)
	}
	if !strings.Contains(log, "upstream_auth=true") {
		t.Errorf("log lacks upstream_auth=true:\n%s", log)
	}
}
