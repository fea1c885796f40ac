package sampler_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestMuxXReadGroupBlock: XREADGROUP with a BLOCK option blocks its connection as XREAD
// BLOCK does, so it must not go over a shared connection: there it would hold back every
// other client's writes, the XADD that would wake it among them, for ever.
func TestMuxXReadGroupBlock(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer direct.Close()
		ctx := context.Background()
		if err := direct.XGroupCreateMkStream(ctx, "blk:xg", "g", "$").Err(); err != nil {
			t.Fatal(err)
		}
		a, b := muxDial(t, addr), muxDial(t, addr)
		a.expect(t, "+PONG\r\n", "PING")
		b.expect(t, "+PONG\r\n", "PING")
		a.send(t, muxCmd("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "BLOCK", "0", "STREAMS", "blk:xg", ">"))
		waitFor(t, "XREADGROUP to block", func() bool {
			n, err := direct.Info(ctx, "clients").Result()
			return err == nil && strings.Contains(n, "blocked_clients:1\r\n")
		})
		_ = b.SetDeadline(time.Now().Add(2 * time.Second))
		b.expect(t, muxOK, "SET", "blk:w", "1") // a write, as XREADGROUP is taken for
		b.expect(t, muxInt(1), "INCR", "blk:n")
		if got := b.do(t, "XADD", "blk:xg", "1-1", "f", "v"); got != muxBulk("1-1") {
			t.Fatalf("XADD: got %q; want %q", got, muxBulk("1-1"))
		}
		_ = a.SetDeadline(time.Now().Add(2 * time.Second))
		if got, want := a.reply(t), "*1\r\n*2\r\n$6\r\nblk:xg\r\n"; !strings.HasPrefix(got, want) {
			t.Fatalf("XREADGROUP once woken: got %q; want %q…", got, want)
		}

		// The same with go-redis, whose XReadGroup sends BLOCK after COUNT.
		reader := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1})
		defer reader.Close()
		writer := redis.NewClient(&redis.Options{Addr: addr})
		defer writer.Close()
		read := make(chan error, 1)
		go func() {
			res, err := reader.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: "g", Consumer: "c2", Streams: []string{"blk:xg", ">"}, Count: 1, Block: 0,
			}).Result()
			if err == nil && (len(res) != 1 || len(res[0].Messages) != 1 || res[0].Messages[0].ID != "2-1") {
				err = fmt.Errorf("got %v; want message 2-1", res)
			}
			read <- err
		}()
		waitFor(t, "go-redis XREADGROUP to block", func() bool {
			n, err := direct.Info(ctx, "clients").Result()
			return err == nil && strings.Contains(n, "blocked_clients:1\r\n")
		})
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := writer.Set(wctx, "blk:w", "2", 0).Err(); err != nil {
			t.Fatalf("go-redis SET while another client's XREADGROUP blocks: %v", err)
		}
		if err := writer.XAdd(wctx, &redis.XAddArgs{Stream: "blk:xg", ID: "2-1", Values: []string{"f", "v"}}).Err(); err != nil {
			t.Fatalf("go-redis XADD: %v", err)
		}
		select {
		case err := <-read:
			if err != nil {
				t.Fatalf("go-redis XREADGROUP: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("go-redis XREADGROUP not woken by XADD")
		}
	})
}

// exchange sends req on a new connection to addr, closes its writing side, and returns
// all it reads until end of file.
func exchange(t *testing.T, addr, req string) string {
	t.Helper()
	c := muxDial(t, addr)
	defer c.Close()
	c.send(t, req)
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c.r)
	if err != nil {
		t.Fatalf("%q: read: %v", muxShort(req), err)
	}
	return string(got)
}

// TestMuxInlineDifferential sends byte streams that mix inline and RESP commands, in odd
// spellings, to Redis directly and through the proxy, and wants the same bytes back
// from both, with every client that stays shared still on the shared connection.
func TestMuxInlineDifferential(t *testing.T) {
	big := strings.Repeat("x", 70<<10)
	tests := []struct {
		name string
		req  string
	}{
		{"inline CRLF", "SET in:a 1\r\nGET in:a\r\n"},
		{"inline LF", "SET in:a 2\nGET in:a\n"},
		{"mixed", "SET in:a 3\r\n" + muxCmd("GET", "in:a") + "incr in:n\n" + muxCmd("get", "in:n")},
		{"empty lines", "\r\n\r\nGET in:a\r\n\r\n   \r\n\n\tSET in:a 4\r\nGET in:a\r\n"},
		{"empty arrays", "*0\r\n*-1\r\nSET in:a 5\r\n*0\r\nGET in:a\r\n"},
		{"quoted", "SET \"in:q a\" 'x y'\r\nGET \"in:q a\"\r\nSET in:\"x\" \"\\x41\\n\"\r\nGET in:x\r\n"},
		{"mixed case", "sEt in:a 6\r\nGeT in:a\r\nPiNg\r\neCHo hi\r\n"},
		{"unknown", "SET in:a 7\r\nNOSUCH a b\r\nGET in:a\r\n"},
		{"errors mid pipeline", "SET in:a 8\r\nINCR in:a\r\nLPUSH in:a x\r\nGET\r\nGET in:a\r\nHGET in:a f\r\nGET in:a\r\n"},
		{"wrong arity", muxCmd("GET", "in:a", "extra") + muxCmd("SET", "in:a") + muxCmd("GET", "in:a")},
		{"unbalanced quotes", "SET in:a 9\r\nGET \"in:a\r\nGET in:a\r\n"},
		{"huge inline", "SET in:a 10\r\nGET " + big + "\r\nGET in:a\r\n"},
		{"CR only", "SET in:a 11\rGET in:a\r\n"},
		{"CR CR LF", "SET in:a 12\r\r\nGET in:a\r\r\n"},
		{"NUL", "SET in:a 13\r\nGET in\x00a\r\nGET in:a\r\n"},
		{"leading spaces", "   SET in:a 14\r\n\t GET in:a  \r\n"},
		{"key introspection", "SET in:a 15\r\nOBJECT FREQ in:a\r\nOBJECT ENCODING in:a\r\nMEMORY USAGE in:a\r\nTYPE in:a\r\nGET in:a\r\n"},
		{"streams", "XADD in:s 1-1 f v\r\nXGROUP CREATE in:s g 0\r\nXREADGROUP GROUP g c COUNT 1 STREAMS in:s >\r\nXINFO STREAM in:s\r\nXPENDING in:s g\r\nGET in:a\r\n"},
	}
	srv := redistest.Start(t)
	p := muxProxy(t, srv, sharedMode, 0)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	ctx := context.Background()
	other := muxDial(t, p.Addr().String())
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := direct.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			want := exchange(t, srv.Addr(), tt.req)
			if err := direct.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if got := exchange(t, p.Addr().String(), tt.req); got != want {
				t.Fatalf("%q through the proxy: got %q; want %q, as from Redis", muxShort(tt.req), muxShort(got), muxShort(want))
			}
			// A client that stayed shared all along is answered.
			v := strconv.Itoa(i)
			other.expect(t, muxOK, "SET", "in:other", v)
			other.expect(t, muxBulk(v), "GET", "in:other")
			if st := p.Stats(); st.SharedFailures != 0 {
				t.Fatalf("SharedFailures %d; want 0", st.SharedFailures)
			}
		})
	}
}

// TestMuxHitAndRun: clients that send commands and close at once (nc -q0; some with a
// reset) while others pipeline over the same shared connection. The replies the closed
// clients are owed are dropped, and every other client still gets exactly its own.
func TestMuxHitAndRun(t *testing.T) {
	srv := redistest.Start(t)
	p := muxProxy(t, srv, sharedMode, 0)
	addr := p.Addr().String()
	const pipeliners, rounds, depth, runners = 4, 60, 40, 300
	var wg sync.WaitGroup
	errs := make(chan error, pipeliners+1)
	for w := range pipeliners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := muxDialErr(addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			var req, want strings.Builder
			for r := range rounds {
				req.Reset()
				want.Reset()
				for j := range depth {
					k, v := "hr:"+strconv.Itoa(w)+":"+strconv.Itoa(j%5), strconv.Itoa(r*depth+j)
					req.WriteString(muxCmd("SET", k, v) + muxCmd("GET", k))
					want.WriteString(muxOK + muxBulk(v))
				}
				if _, err := io.WriteString(c, req.String()); err != nil {
					errs <- err
					return
				}
				got := make([]byte, want.Len())
				if _, err := io.ReadFull(c.r, got); err != nil || string(got) != want.String() {
					errs <- fmt.Errorf("pipeliner %d round %d: got %q, %v; want %q", w, r, muxShort(string(got)), err, muxShort(want.String()))
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range runners {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			req := "GET hr:run\r\n"
			if i%3 == 1 {
				req = strings.Repeat(muxCmd("SET", "hr:run", strconv.Itoa(i))+muxCmd("GET", "hr:run"), 50)
			}
			_, _ = io.WriteString(c, req)
			if i%2 == 1 {
				_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a FIN
			}
			_ = c.Close()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c := muxDial(t, addr)
	c.expect(t, "+PONG\r\n", "PING")
	waitFor(t, "the closed clients to be gone", func() bool { return p.Stats().SharedClients == 1 })
	if st := p.Stats(); st.SharedFailures != 0 {
		t.Errorf("SharedFailures %d; want 0", st.SharedFailures)
	}
}
