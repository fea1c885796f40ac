package sampler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// These tests cover a tap that has no upstream for a client: Redis is down, or the
// upstream address is the tap's own listener. Either way the client's commands are
// answered with an error that says so, then its connection ends.

// upstreamErr is the reply a client of a tap that cannot reach addr gets, for reason.
func upstreamErr(addr, reason string) string {
	return "-ERR hotkeyd proxy: upstream " + addr + " unreachable: " + reason + "\r\n"
}

// refusedExchange connects to addr, sends req, and returns the whole stream the tap sends
// back, which must end within a few seconds.
func refusedExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("write %q: %v", req, err)
	}
	got, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after %q: got %q, %v; want a reply and end of file", req, got, err)
	}
	return string(got)
}

// TestProxyUpstreamDownReply: a client of a tap whose upstream refuses connections gets
// an error reply to each command, RESP2 or RESP3 (HELLO 3 first), pipelined or not,
// then end of file once it sends nothing more.
func TestProxyUpstreamDownReply(t *testing.T) {
	srv := redistest.Start(t)
	upstream := srv.Addr()
	srv.Stop()
	want := upstreamErr(upstream, "connection refused")
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			p := startProxy(t, sampler.ProxyOptions{Upstream: upstream, Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing})
			addr := p.Addr().String()
			for _, tt := range []struct {
				name, req string
				replies   int
			}{
				{"PING", muxCmd("PING"), 1},
				{"inline PING", "PING\r\n", 1},
				{"HELLO 3", muxCmd("HELLO", "3"), 1},
				{"pipeline", muxCmd("SET", "a", "1") + muxCmd("GET", "a") + "PING\r\n", 3},
			} {
				if got := refusedExchange(t, addr, tt.req); got != strings.Repeat(want, tt.replies) {
					t.Errorf("%s with the upstream down: got %q; want %d × %q, then end of file", tt.name, got, tt.replies, want)
				}
			}
			waitFor(t, "the refused clients to be gone", func() bool {
				s := p.Stats()
				return s.OwnClients == 0 && s.SharedClients == 0
			})
		})
	}
}

// TestProxyUpstreamDownAfterReply: a client that Redis answered and that then loses its
// upstream gets no reply from the tap, only end of file, as on a direct connection.
func TestProxyUpstreamDownAfterReply(t *testing.T) {
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := muxProxy(t, srv, m, 0)
			c := muxDial(t, p.Addr().String())
			c.expect(t, "+PONG\r\n", "PING")
			srv.Stop()
			c.send(t, muxCmd("PING"))
			rest, err := io.ReadAll(c.r)
			if len(rest) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("PING after Redis answered and stopped: got %q, %v; want end of file", rest, err)
			}
		})
	}
}

// freeLoopbackPort returns a port free on 127.0.0.1 just now.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestProxyUpstreamIsItself: a tap whose upstream reaches its own listener does not
// accept its own dials as clients again and again (each would dial once more): it
// answers each client's commands with an error, logs one error that names
// proxy.upstream, and holds no connection once its clients are gone.
func TestProxyUpstreamIsItself(t *testing.T) {
	for _, m := range muxModes {
		for _, tt := range []struct{ name, listen, upstream string }{
			{"same address", "127.0.0.1:%", "127.0.0.1:%"},
			{"localhost", "127.0.0.1:%", "localhost:%"},
		} {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				port := freeLoopbackPort(t)
				listen := strings.ReplaceAll(tt.listen, "%", port)
				upstream := strings.ReplaceAll(tt.upstream, "%", port)
				var logs logbuf.Buffer
				p := startProxy(t, sampler.ProxyOptions{
					Listen: listen, Upstream: upstream, Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing,
					Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				})
				sampler.SetSharedRetry(p, 20*time.Millisecond)
				want := upstreamErr(upstream, "it reaches this proxy itself")
				for i := range 3 {
					if got := refusedExchange(t, p.Addr().String(), muxCmd("PING")); got != want {
						t.Fatalf("PING %d through a tap whose upstream is itself: got %q; want %q, then end of file", i, got, want)
					}
					time.Sleep(30 * time.Millisecond) // past the shared connection's retry
				}
				waitFor(t, "the clients to be gone", func() bool {
					s := p.Stats()
					return s.OwnClients == 0 && s.SharedClients == 0
				})
				if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "proxy.upstream") {
					t.Errorf("logs:\n%s\ngot %d errors; want one that names proxy.upstream", logs.String(), n)
				}
			})
		}
	}
}

// TestProxyUpstreamSameHost: a Redis on the tap's host, on another port, is not taken
// for the tap itself.
func TestProxyUpstreamSameHost(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			var logs logbuf.Buffer
			p := startProxy(t, sampler.ProxyOptions{
				Upstream: srv.Addr(), Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			c := muxDial(t, p.Addr().String())
			c.expect(t, "+PONG\r\n", "PING")
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Errorf("logs:\n%s\nwant no error", logs.String())
			}
		})
	}
}

// TestProxyUpstreamDownGoRedis: go-redis sends HELLO and CLIENT SETINFO when it connects
// and ignores their errors, so a tap that answered only the first command would leave the
// app's own command an end of file. Each command is answered: the app sees why.
func TestProxyUpstreamDownGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	upstream := srv.Addr()
	srv.Stop()
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			p := startProxy(t, sampler.ProxyOptions{Upstream: upstream, Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing})
			for _, protocol := range []int{2, 3} {
				gc := redis.NewClient(&redis.Options{Addr: p.Addr().String(), Protocol: protocol, MaxRetries: -1})
				err := gc.Ping(context.Background()).Err()
				gc.Close()
				want := strings.TrimSuffix(strings.TrimPrefix(upstreamErr(upstream, "connection refused"), "-"), "\r\n")
				if err == nil || err.Error() != want {
					t.Errorf("go-redis (RESP%d) PING with the upstream down: %v; want %q", protocol, err, want)
				}
			}
		})
	}
}
