package sampler_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// TestProxyShutdownClientReply: a client on a connection of its own that turned replies
// off or skipped some (CLIENT REPLY OFF, SKIP) is owed fewer replies than it sent
// commands, and the proxy, which counts commands forwarded against replies, cannot tell
// how many fewer: its parser does not keep CLIENT REPLY's argument, and Redis's rules
// (SKIP then RESET, REPLY OFF inside MULTI) are easy to get wrong in the direction that
// cuts replies. So Shutdown delivers every reply Redis sends such a client and ends it
// at its deadline, not earlier: a known cost (the stop takes DrainTimeout, 5 s, when
// such a client is connected), never a lost reply.
func TestProxyShutdownClientReply(t *testing.T) {
	tests := []struct {
		name string
		req  string // after the pinning CLIENT SETNAME, in one write
		want string // every reply it gets
	}{
		{"OFF", "CLIENT REPLY OFF\r\nSET cr:a 1\r\nGET cr:a\r\n", ""},
		{"OFF then ON", "CLIENT REPLY OFF\r\nSET cr:a 1\r\nCLIENT REPLY ON\r\nGET cr:a\r\n", muxOK + muxBulk("1")},
		{"SKIP", "CLIENT REPLY SKIP\r\nSET cr:a 2\r\nGET cr:a\r\n", muxBulk("2")},
		{"OFF RESET", "CLIENT REPLY OFF\r\nSET cr:a 5\r\nRESET\r\nGET cr:a\r\n", "+RESET\r\n" + muxBulk("5")},
		{"RESP", muxCmd("CLIENT", "REPLY", "OFF") + muxCmd("SET", "cr:a", "6") + muxCmd("client", "reply", "on") + muxCmd("GET", "cr:a"), muxOK + muxBulk("6")},
	}
	for _, perClient := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name
			if perClient {
				name += "/ConnPerClient"
			}
			t.Run(name, func(t *testing.T) {
				srv := redistest.Start(t)
				p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), ConnPerClient: perClient, SampleEvery: 3})
				c := muxDial(t, p.Addr().String())
				c.send(t, "CLIENT SETNAME cr\r\n"+tt.req)
				if got := c.reply(t); got != muxOK {
					t.Fatalf("CLIENT SETNAME: got %q; want +OK", got)
				}
				var got []byte
				if n := len(tt.want); n > 0 {
					got = make([]byte, n)
					if _, err := io.ReadFull(c.r, got); err != nil || string(got) != tt.want {
						t.Fatalf("replies: got %q, %v; want %q", got, err, tt.want)
					}
				}
				// Everything was answered once the GET is: wait for it when not answered.
				time.Sleep(50 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				start := time.Now()
				if err := p.Shutdown(ctx); err != context.DeadlineExceeded {
					t.Fatalf("Shutdown: got %v after %v; want the deadline: the client's replies cannot be counted", err, time.Since(start).Round(time.Millisecond))
				}
				if b, err := c.r.ReadByte(); err != io.EOF {
					t.Fatalf("after Shutdown: read %q, %v; want end of file", b, err)
				}
			})
		}
	}
}
