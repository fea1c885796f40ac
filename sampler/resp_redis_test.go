package sampler

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestRESPAgreesWithRedis is the property multiplexing rests on: when the parser takes
// bytes for whole commands, Redis takes them for the same number of commands, answers
// each once and keeps the connection open. (The proxy forwards to the shared connection
// only what the parser took; anything it refuses goes to a connection of its own, where
// Redis may judge it as it likes.) Inputs are valid requests with random damage: bytes
// replaced, NULs, leading zeros, signs, quotes, stray spaces and line ends.
func TestRESPAgreesWithRedis(t *testing.T) {
	srv := redistest.Start(t)
	rng := rand.New(rand.NewPCG(7, 11))
	accepted := 0
	for i := range 400 {
		in := damagedRequests(rng)
		p, _ := NewRESPParser(RESPOptions{})
		p.Feed(in)
		n := 0
		for p.Skip() {
			n++
		}
		if p.Err() != nil || p.Offset() != int64(len(in)) || p.st != respCommand {
			continue // refused or incomplete: never shared
		}
		accepted++
		// A sentinel after the input shows Redis is still reading commands.
		replies, last, err := redisReplies(srv.Addr(), append(in, "*1\r\n$4\r\nPING\r\n"...), n+1)
		if err != nil || replies != n+1 || last != "+PONG\r\n" {
			t.Errorf("input %d %q: the parser took %d commands; Redis answered %d replies, the last %q (want %d, the last +PONG for the PING after them): %v",
				i, in, n, replies, last, n+1, err)
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d of 400 inputs parsed whole; want at least 100 for the test to mean much", accepted)
	}
	t.Logf("%d of 400 damaged inputs parsed whole; Redis agreed on each", accepted)
}

// damagedRequests returns a few valid requests, multibulk and inline, with some damage.
func damagedRequests(rng *rand.Rand) []byte {
	cmds := [][]string{{"PING"}, {"ECHO", "a b"}, {"SET", "agree:k", "v\r\n"}, {"GET", "agree:k"},
		{"EXISTS", "agree:k", "x"}, {"ECHO", ""}}
	var b strings.Builder
	for range 1 + rng.IntN(3) {
		c := cmds[rng.IntN(len(cmds))]
		if rng.IntN(3) == 0 && !strings.ContainsAny(strings.Join(c, ""), "\r\n ") && c[len(c)-1] != "" {
			b.WriteString(strings.Join(c, " ") + "\r\n")
			continue
		}
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	in := []byte(b.String())
	damage := []func(){
		func() {
			const junk = "0-+ \"'\x00\r\n*$a"
			in[rng.IntN(len(in))] = junk[rng.IntN(len(junk))]
		},
		func() {
			at := rng.IntN(len(in) + 1)
			inserts := []string{"0", "-", "-0", "\x00", " ", "\"", "'", "\r\n", "\n", "*0\r\n", "*-1\r\n", "+"}
			ins := inserts[rng.IntN(len(inserts))]
			in = append(in[:at], append([]byte(ins), in[at:]...)...)
		},
	}
	for range rng.IntN(3) {
		damage[rng.IntN(len(damage))]()
	}
	return in
}

// redisReplies sends in to Redis on a new connection and reads replies until it has
// want of them, Redis closes the connection, or a second of silence; it returns how many
// it read and the last one.
func redisReplies(addr string, in []byte, want int) (int, string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	if _, err := c.Write(in); err != nil {
		return 0, "", err
	}
	var s replyScanner
	buf := make([]byte, 4096)
	var cur, last []byte
	replies := 0
	for {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		data := buf[:n]
		for len(data) > 0 {
			k, done := s.scan(data)
			if s.err != nil {
				return replies, string(last), s.err
			}
			cur = append(cur, data[:k]...)
			data = data[k:]
			if done {
				replies++
				last, cur = append(last[:0], cur...), cur[:0]
				if replies == want {
					return replies, string(last), nil
				}
			}
		}
		if err != nil {
			return replies, string(last), err
		}
	}
}
