package client

import (
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestClusterAttachCloseUnreachable: Attach to a ClusterClient whose nodes do not answer
// retries finding its node clients in the background; Close ends that promptly and
// leaves no goroutine behind.
func TestClusterAttachCloseUnreachable(t *testing.T) {
	base := runtime.NumGoroutine()
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	ps := startPlanServer(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	c, err := Attach(rdb, Options{Agent: ps.URL(), NoReports: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the first try failed, a retry is waiting
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v; want it prompt", d)
	}
	rdb.Close()
	ps.srv.Close()
	leaktest.Wait(t, base+2)
}
