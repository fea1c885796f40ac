package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestServeSIGTERMWithReadsQueued: a SIGTERM that reaches the tap's loop in the turn in
// which it batched client reads (io_uring) must not cut a command in two on the shared
// connection. One client has half of a SET waiting in the tap and sends the rest while
// 240 others' pipelines keep the loop busy, six more send a GET each, and the tap gets
// SIGTERM; Redis is paused meanwhile, so that each client is owed a reply. Redis must
// then hold the whole SET or none of it, and each GET answer its own key. When the
// drain began between the reads and their parsing, the SET took the GETs' bytes as its
// value and the GETs got each other's values and errors (8 of 8 runs of a script doing
// this; this test failed 2 of 3 times before the fix).
func TestServeSIGTERMWithReadsQueued(t *testing.T) {
	srv := redistest.Start(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	ctx := context.Background()
	for i := 1; i <= 6; i++ {
		if err := direct.Set(ctx, fmt.Sprint("race:", i), fmt.Sprint("value-of-", i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	proxy := freeAddr(t)
	agent := startServe(t, nil, "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0",
		"--proxy-listen", proxy, "--proxy-upstream", srv.Addr())
	dial := func() net.Conn {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	cmd := func(args ...string) string {
		s := fmt.Sprintf("*%d\r\n", len(args))
		for _, a := range args {
			s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
		}
		return s
	}
	write := func(c net.Conn, s string) {
		if _, err := io.WriteString(c, s); err != nil {
			t.Fatal(err)
		}
	}
	victim := dial()
	var bys, fill []net.Conn
	for range 6 {
		bys = append(bys, dial())
	}
	for range 240 {
		fill = append(fill, dial())
	}
	time.Sleep(300 * time.Millisecond) // all taken in by the loop
	srv.Pause(t)
	second := cmd("SET", "race:b", strings.Repeat("y", 54))
	write(victim, cmd("SET", "race:a", "x")+second[:21])
	for _, c := range bys {
		write(c, cmd("SET", "race:a", "x"))
	}
	time.Sleep(300 * time.Millisecond) // forwarded; Redis owes each a reply
	proc := agent.cmd.Process
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pipeline := strings.Repeat(cmd("GET", "race:f"), 2500)
	for _, c := range fill {
		_ = c.SetWriteDeadline(time.Now().Add(time.Millisecond))
		_, _ = io.WriteString(c, pipeline) // as much as the socket takes
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	write(victim, second[21:])
	for i, c := range bys {
		write(c, cmd("GET", fmt.Sprint("race:", i+1)))
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	srv.Resume(t)
	for i, c := range bys {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		want := fmt.Sprint("value-of-", i+1)
		if strings.Contains(string(got), "value-of-") && !strings.Contains(string(got), want) || strings.Contains(string(got), "-ERR") {
			t.Errorf("client %d: got %q; want +OK, then $%d %s or nothing", i, got, len(want), want)
		}
	}
	if v, err := direct.Get(ctx, "race:b").Result(); err != redis.Nil && (err != nil || v != strings.Repeat("y", 54)) {
		t.Errorf("race:b in Redis: got %q, %v; want 54 y's or no key", v, err)
	}
	for _, c := range append(fill, victim) {
		_ = c.Close()
	}
	if err := agent.wait(t, syscall.SIGTERM); err != nil {
		t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0", err)
	}
}
