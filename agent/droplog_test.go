package agent

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
)

// TestDroppedReportsLogged: the agent hands its logger to both report transports, so that
// a sender other than the Go SDK can learn from the log why its reports are dropped.
func TestDroppedReportsLogged(t *testing.T) {
	var buf logbuf.Buffer
	a, err := New(Options{HTTPListen: "127.0.0.1:0", UDPListen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	conn, err := net.Dial("udp", a.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("not a report"))
	resp, err := http.Post("http://"+a.HTTPAddr().String()+"/v1/samples", "application/json", strings.NewReader(`{"source":"sh","samples":[{"op":"read"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := []string{
		"transport=udp reason=malformed from=" + conn.LocalAddr().String() + " source=unknown",
		"transport=http reason=malformed from=127.0.0.1:",
	}
	waitFor(t, func() bool {
		for _, w := range want {
			if !strings.Contains(buf.String(), w) {
				return false
			}
		}
		return true
	})
}
