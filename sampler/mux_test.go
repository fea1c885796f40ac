package sampler_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// These tests drive the proxy's multiplexing through its public API against a real
// redis-server: clients' plain commands share one upstream connection, any other command
// pins the client to a connection of its own, and either way every client must see
// exactly what it would see talking to Redis directly. Most tests run twice, multiplexed
// (the default) and with ConnPerClient, which must behave the same.

// muxDeadline bounds every raw connection's I/O, so that a stalled proxy fails a test
// instead of hanging it. Nothing here comes near it when the proxy works.
const muxDeadline = 10 * time.Second

// muxMode is a way a proxy serves its clients.
type muxMode struct {
	name      string
	perClient bool // ConnPerClient
	noURing   bool // NoIOUring: the loop's one system call for each read and write
}

// muxModes are the ways a proxy serves its clients. Where io_uring is not to be had,
// "shared" takes the same path as "NoIOUring".
var muxModes = []muxMode{
	{name: "shared"},
	{name: "NoIOUring", noURing: true},
	{name: "ConnPerClient", perClient: true},
}

// sharedMode is the default: multiplexed, through io_uring where it is to be had.
var sharedMode = muxModes[0]

// forMuxModes runs test as a subtest for each of muxModes, with a fresh Redis and a
// proxy in front of it (BufferSize bufSize, 0 for the default) at addr.
func forMuxModes(t *testing.T, bufSize int, test func(t *testing.T, srv *redistest.Server, addr string)) {
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Start(t)
			test(t, srv, muxProxy(t, srv, m, bufSize).Addr().String())
		})
	}
}

// muxProxy starts a proxy in front of srv, closed when the test ends.
func muxProxy(t *testing.T, srv *redistest.Server, m muxMode, bufSize int) *sampler.Proxy {
	t.Helper()
	return startProxy(t, sampler.ProxyOptions{
		Upstream: srv.Addr(), Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing, BufferSize: bufSize,
	})
}

// RESP encodings of commands and of the replies they must get.

// muxCmd encodes a command as a RESP array of bulk strings.
func muxCmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func muxBulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

func muxInt(n int64) string { return ":" + strconv.FormatInt(n, 10) + "\r\n" }

const (
	muxOK  = "+OK\r\n"
	muxNil = "$-1\r\n"
)

// muxReadReply reads one whole reply, RESP2 or RESP3, and returns its bytes verbatim.
func muxReadReply(r *bufio.Reader) (string, error) {
	var b strings.Builder
	err := muxReadInto(&b, r, 0)
	return b.String(), err
}

func muxReadInto(b *strings.Builder, r *bufio.Reader, depth int) error {
	if depth > 16 {
		return errors.New("reply nested too deep")
	}
	line, err := r.ReadString('\n')
	b.WriteString(line)
	if err != nil {
		return err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return fmt.Errorf("malformed reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '!', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad bulk length in %q", line)
		}
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		k, err := io.ReadFull(r, buf)
		b.Write(buf[:k])
		return err
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad aggregate length in %q", line)
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range n {
			if err := muxReadInto(b, r, depth+1); err != nil {
				return err
			}
		}
		if line[0] == '|' { // an attribute comes before the reply it annotates
			return muxReadInto(b, r, depth+1)
		}
		return nil
	}
	return fmt.Errorf("unknown reply type in %q", line)
}

// muxConn is a raw client connection.
type muxConn struct {
	*net.TCPConn
	r *bufio.Reader
}

// muxDial connects to addr, with muxDeadline on all I/O; the test closes it when it ends.
func muxDial(t testing.TB, addr string) *muxConn {
	t.Helper()
	c, err := muxDialErr(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func muxDialErr(addr string) (*muxConn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(muxDeadline))
	return &muxConn{conn.(*net.TCPConn), bufio.NewReader(conn)}, nil
}

// redisWith starts a Redis holding the given keys and values.
func redisWith(t *testing.T, values map[string]string) *redistest.Server {
	t.Helper()
	srv := redistest.Start(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	for k, v := range values {
		if err := direct.Set(context.Background(), k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// dialSmallBuffer connects to addr with a receive buffer of 4 KiB, as a client that reads
// its replies slowly, or not at all, would leave them waiting; closed when the test ends.
func dialSmallBuffer(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// muxClients runs n clients of addr at once, client i calling run on its own connection,
// and reports each error run returns.
func muxClients(t *testing.T, addr string, n int, run func(i int, c *muxConn) error) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			c, err := muxDialErr(addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			errs <- run(i, c)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// send writes s, failing the test when it cannot.
func (c *muxConn) send(t testing.TB, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write %q: %v", muxShort(s), err)
	}
}

// reply reads one reply, failing the test when it cannot.
func (c *muxConn) reply(t testing.TB) string {
	t.Helper()
	got, err := muxReadReply(c.r)
	if err != nil {
		t.Fatalf("read reply: got %q, %v; want a whole reply", muxShort(got), err)
	}
	return got
}

// do sends a command and returns its reply.
func (c *muxConn) do(t testing.TB, args ...string) string {
	t.Helper()
	c.send(t, muxCmd(args...))
	return c.reply(t)
}

// expect sends a command and checks its reply.
func (c *muxConn) expect(t testing.TB, want string, args ...string) {
	t.Helper()
	if got := c.do(t, args...); got != want {
		t.Fatalf("%s: got %q; want %q", strings.Join(args, " "), muxShort(got), muxShort(want))
	}
}

// expectEOF reads the rest of the stream and checks that it is empty and ends cleanly.
func (c *muxConn) expectEOF(t testing.TB) {
	t.Helper()
	rest, err := io.ReadAll(c.r)
	if len(rest) > 0 || err != nil {
		t.Fatalf("after the last reply: got %q, %v; want end of file", muxShort(string(rest)), err)
	}
}

// muxShort shortens s for a message.
func muxShort(s string) string {
	if len(s) > 200 {
		return s[:100] + fmt.Sprintf("…(%d bytes)…", len(s)-200) + s[len(s)-100:]
	}
	return s
}

// muxModel is a client's view of its own keys: what each reply must be.
type muxModel struct {
	prefix string
	vals   [4]*string // keys prefix:k0..k3
	n      int64      // key prefix:n, a counter
}

func muxKey(prefix string, j int) string { return prefix + ":k" + strconv.Itoa(j) }

// muxOp is one command of a pipeline and the reply it must get.
type muxOp struct {
	args   []string
	inline bool   // may be sent as an inline command: no argument needs quoting
	want   string // the reply, RESP2
	// For go-redis: what the command returns.
	kind string // "set", "get", "incr", "mget", "del", "lrange"
	str  *string
	num  int64
	strs []*string
	err  string // an error reply's message
}

// Redis's error replies to the commands of muxModel.pipeline.
const (
	muxNotInteger = "ERR value is not an integer or out of range"
	muxWrongType  = "WRONGTYPE Operation against a key holding the wrong kind of value"
)

// pipeline returns depth random commands on m's keys, applied to m.
func (m *muxModel) pipeline(rng *rand.Rand, tag string, depth int) []muxOp {
	ops := make([]muxOp, 0, depth)
	for i := range depth {
		j := rng.IntN(4)
		k := muxKey(m.prefix, j)
		switch rng.IntN(7) {
		case 0:
			v := fmt.Sprintf("%s.%s.%d", m.prefix, tag, i)
			plain := true
			switch rng.IntN(16) {
			case 0, 1: // bytes that look like RESP
				v += "\r\n$3\r\n*1\r\n:5\r\n"
				plain = false
			case 2: // a value that spans reads
				v += strings.Repeat("0123456789abcdef", 200)
			}
			m.vals[j] = &v
			ops = append(ops, muxOp{args: []string{"SET", k, v}, inline: plain, want: muxOK, kind: "set"})
		case 1:
			want := muxNil
			if m.vals[j] != nil {
				want = muxBulk(*m.vals[j])
			}
			ops = append(ops, muxOp{args: []string{"GET", k}, inline: true, want: want, kind: "get", str: m.vals[j]})
		case 2:
			m.n++
			ops = append(ops, muxOp{args: []string{"INCR", m.prefix + ":n"}, inline: true, want: muxInt(m.n), kind: "incr", num: m.n})
		case 3:
			args := []string{"MGET"}
			want := "*4\r\n"
			for jj := range 4 {
				args = append(args, muxKey(m.prefix, jj))
				if m.vals[jj] == nil {
					want += muxNil
				} else {
					want += muxBulk(*m.vals[jj])
				}
			}
			ops = append(ops, muxOp{args: args, inline: true, want: want, kind: "mget", strs: slices.Clone(m.vals[:])})
		case 4:
			var n int64
			if m.vals[j] != nil {
				n = 1
			}
			m.vals[j] = nil
			ops = append(ops, muxOp{args: []string{"DEL", k}, inline: true, want: muxInt(n), kind: "del", num: n})
		case 5: // an error reply when the value is not a number
			op := muxOp{args: []string{"INCR", k}, inline: true, kind: "incr"}
			var n int64
			var err error
			if m.vals[j] != nil {
				n, err = strconv.ParseInt(*m.vals[j], 10, 64)
			}
			if err != nil {
				op.want, op.err = "-"+muxNotInteger+"\r\n", muxNotInteger
			} else {
				v := strconv.FormatInt(n+1, 10)
				m.vals[j] = &v
				op.want, op.num = muxInt(n+1), n+1
			}
			ops = append(ops, op)
		case 6: // an empty array, or an error reply
			op := muxOp{args: []string{"LRANGE", k, "0", "-1"}, inline: true, want: "*0\r\n", kind: "lrange"}
			if m.vals[j] != nil {
				op.want, op.err = "-"+muxWrongType+"\r\n", muxWrongType
			}
			ops = append(ops, op)
		}
	}
	return ops
}

// muxRawRound sends ops on c — in one write, split in two writes at a random byte, or
// one write per command — and checks every reply. It returns an I/O error as ioErr, and a
// wrong reply as wrong.
func muxRawRound(c *muxConn, rng *rand.Rand, ops []muxOp) (ioErr, wrong error) {
	_ = c.SetDeadline(time.Now().Add(muxDeadline))
	var req strings.Builder
	var cmds []string
	for _, op := range ops {
		var s string
		if op.inline && rng.IntN(4) == 0 {
			s = strings.Join(op.args, " ") + "\r\n"
		} else {
			s = muxCmd(op.args...)
		}
		cmds = append(cmds, s)
		req.WriteString(s)
	}
	var writes []string
	switch all := req.String(); rng.IntN(3) {
	case 0:
		writes = []string{all}
	case 1:
		k := 1 + rng.IntN(len(all)-1)
		writes = []string{all[:k], all[k:]}
	default:
		writes = cmds
	}
	for i, w := range writes {
		if i > 0 {
			time.Sleep(time.Millisecond) // let the proxy read the first part alone
		}
		if _, err := io.WriteString(c, w); err != nil {
			return err, nil
		}
	}
	for i, op := range ops {
		got, err := muxReadReply(c.r)
		if err != nil {
			return fmt.Errorf("reply %d of %d: %w", i, len(ops), err), nil
		}
		if got != op.want {
			return nil, fmt.Errorf("reply %d of %d, to %q: got %q; want %q",
				i, len(ops), muxShort(strings.Join(op.args, " ")), muxShort(got), muxShort(op.want))
		}
	}
	return nil, nil
}

// muxCheckGoRedis checks the result of a go-redis command against op.
func muxCheckGoRedis(cmd redis.Cmder, op muxOp) error {
	var got, want string
	switch op.kind {
	case "set":
		v, err := cmd.(*redis.StatusCmd).Result()
		got, want = fmt.Sprintf("%s %v", v, err), "OK <nil>"
	case "get":
		v, err := cmd.(*redis.StringCmd).Result()
		got = fmt.Sprintf("%q %v", v, err)
		if op.str == nil {
			want = fmt.Sprintf("%q %v", "", redis.Nil)
		} else {
			want = fmt.Sprintf("%q <nil>", *op.str)
		}
	case "incr", "del":
		v, err := cmd.(*redis.IntCmd).Result()
		got, want = fmt.Sprintf("%d %v", v, err), fmt.Sprintf("%d <nil>", op.num)
		if op.err != "" {
			want = "0 " + op.err
		}
	case "lrange":
		v, err := cmd.(*redis.StringSliceCmd).Result()
		got, want = fmt.Sprintf("%q %v", v, err), "[] <nil>"
		if op.err != "" {
			want = "[] " + op.err
		}
	case "mget":
		v, err := cmd.(*redis.SliceCmd).Result()
		got = fmt.Sprintf("%q %v", v, err)
		w := make([]any, len(op.strs))
		for i, s := range op.strs {
			if s != nil {
				w[i] = *s
			}
		}
		want = fmt.Sprintf("%q <nil>", w)
	}
	if got != want {
		return fmt.Errorf("%q: got %s; want %s", muxShort(strings.Join(op.args, " ")), muxShort(got), muxShort(want))
	}
	return nil
}

// muxClientIDs returns the ids of the connections Redis has, but the caller's.
func muxClientIDs(t *testing.T, direct *redis.Client) map[string]bool {
	t.Helper()
	list, err := direct.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for line := range strings.Lines(list) {
		if strings.Contains(line, " cmd=client|list ") {
			continue
		}
		for f := range strings.FieldsSeq(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				ids[id] = true
			}
		}
	}
	return ids
}

// TestMuxDemux has 32 clients, raw and go-redis, pipeline random mixes of commands on
// keys of their own, each reply checked exactly, and checks first that multiplexing is
// on: many raw clients, four upstream connections (reads and writes, RESP2 and RESP3).
func TestMuxDemux(t *testing.T) {
	for _, m := range []struct {
		muxMode
		bufSize int
	}{
		{muxModes[0], 0},
		{muxMode{name: "shared/BufferSize=1024"}, 1024},
		{muxModes[1], 0},
		{muxMode{name: "NoIOUring/BufferSize=1024", noURing: true}, 1024},
		{muxModes[2], 0},
	} {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := muxProxy(t, srv, m.muxMode, m.bufSize)
			direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer direct.Close()

			// Multiplexing carries all the raw clients over the four shared connections.
			const idle = 16
			for range idle {
				muxDial(t, p.Addr().String()).expect(t, "+PONG\r\n", "PING")
			}
			want := 4
			if m.perClient {
				want = idle
			}
			waitFor(t, fmt.Sprintf("%d upstream connections", want), func() bool {
				return len(muxClientIDs(t, direct)) == want
			})

			testMuxDemux(t, p.Addr().String())
		})
	}
}

func testMuxDemux(t *testing.T, addr string) {
	const (
		raw     = 24 // clients on raw connections; the rest use go-redis
		clients = 32
		rounds  = 40
	)
	var wg sync.WaitGroup
	for id := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(id)))
			m := &muxModel{prefix: fmt.Sprintf("demux:%02d", id)}
			if id < raw {
				c, err := muxDialErr(addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				for round := range rounds {
					ops := m.pipeline(rng, strconv.Itoa(round), 1+rng.IntN(32))
					ioErr, wrong := muxRawRound(c, rng, ops)
					if err := errors.Join(ioErr, wrong); err != nil {
						t.Errorf("raw client %d, round %d: %v", id, round, err)
						return
					}
				}
				return
			}
			c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
			defer c.Close()
			ctx := context.Background()
			for round := range rounds {
				ops := m.pipeline(rng, strconv.Itoa(round), 1+rng.IntN(32))
				cmds, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
					for _, op := range ops {
						switch op.kind {
						case "set":
							pl.Set(ctx, op.args[1], op.args[2], 0)
						case "get":
							pl.Get(ctx, op.args[1])
						case "incr":
							pl.Incr(ctx, op.args[1])
						case "mget":
							pl.MGet(ctx, op.args[1:]...)
						case "del":
							pl.Del(ctx, op.args[1])
						case "lrange":
							pl.LRange(ctx, op.args[1], 0, -1)
						}
					}
					return nil
				})
				if rerr := redis.Error(nil); err != nil && !errors.As(err, &rerr) { // replies are checked below
					t.Errorf("go-redis client %d, round %d: %v", id, round, err)
					return
				}
				for i, op := range ops {
					if err := muxCheckGoRedis(cmds[i], op); err != nil {
						t.Errorf("go-redis client %d, round %d, command %d: %v", id, round, i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestMuxPinning checks that commands that keep state on their connection work through
// the proxy as on a connection of one's own, and that their state stays with the client
// that made it.
func TestMuxPinning(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		testMuxPinning(t, srv, addr)
	})
}

func testMuxPinning(t *testing.T, srv *redistest.Server, addr string) {
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	blocked := func() string {
		info, err := direct.Info(ctx, "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if strings.HasPrefix(line, "blocked_clients:") {
				return strings.TrimSpace(line)
			}
		}
		return "no blocked_clients in INFO"
	}

	t.Run("select", func(t *testing.T) {
		a, b := muxDial(t, addr), muxDial(t, addr)
		b.expect(t, muxOK, "SET", "sel:k", "zero")
		a.expect(t, muxOK, "SELECT", "1")
		a.expect(t, muxOK, "SET", "sel:k", "one")
		b.expect(t, muxBulk("zero"), "GET", "sel:k")
		a.expect(t, muxBulk("one"), "GET", "sel:k")
		// A fresh client is in DB 0 too.
		muxDial(t, addr).expect(t, muxBulk("zero"), "GET", "sel:k")
		if got, err := direct.Get(ctx, "sel:k").Result(); err != nil || got != "zero" {
			t.Fatalf("direct GET sel:k in DB 0: got %q, %v; want zero", got, err)
		}
	})

	t.Run("client setname", func(t *testing.T) {
		a, b := muxDial(t, addr), muxDial(t, addr)
		b.expect(t, muxNil, "GET", "name:none") // b starts out shared
		a.expect(t, muxOK, "CLIENT", "SETNAME", "alice")
		a.expect(t, muxBulk("alice"), "CLIENT", "GETNAME")
		// b pins with a shared reply owed, in one write.
		b.send(t, muxCmd("GET", "name:none")+muxCmd("CLIENT", "GETNAME"))
		if got := b.reply(t) + b.reply(t); got != muxNil+muxNil {
			t.Fatalf("GET, CLIENT GETNAME on another client: got %q; want %q", got, muxNil+muxNil)
		}
	})

	t.Run("multi exec", func(t *testing.T) {
		const (
			txs      = 50
			hammers  = 4
			hRounds  = 25
			hPerPipe = 10
		)
		a := muxDial(t, addr)
		var wg sync.WaitGroup
		for h := range hammers {
			c := muxDial(t, addr)
			wg.Go(func() {
				last := int64(0)
				for range hRounds {
					if _, err := io.WriteString(c, strings.Repeat(muxCmd("INCR", "tx:ctr"), hPerPipe)); err != nil {
						t.Errorf("hammer %d: %v", h, err)
						return
					}
					for range hPerPipe {
						got, err := muxReadReply(c.r)
						n, perr := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(got, ":"), "\r\n"), 10, 64)
						if err != nil || perr != nil || n <= last {
							t.Errorf("hammer %d INCR: got %q, %v; want an integer over %d", h, got, err, last)
							return
						}
						last = n
					}
				}
			})
		}
		for i := range txs {
			a.send(t, "MULTI\r\nINCR tx:ctr\r\nINCR tx:ctr\r\nGET tx:ctr\r\nEXEC\r\n")
			var got []string
			for range 5 {
				got = append(got, a.reply(t))
			}
			if fmt.Sprint(got[:4]) != fmt.Sprint([]string{muxOK, "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n"}) {
				t.Fatalf("transaction %d: got %q; want +OK and 3 × +QUEUED", i, got[:4])
			}
			// EXEC: [n, n+1, "n+1"], whatever the other clients did meanwhile.
			parts := strings.Split(got[4], "\r\n")
			x, err := strconv.ParseInt(strings.TrimPrefix(parts[min(1, len(parts)-1)], ":"), 10, 64)
			if want := "*3\r\n" + muxInt(x) + muxInt(x+1) + muxBulk(strconv.FormatInt(x+1, 10)); err != nil || got[4] != want {
				t.Fatalf("transaction %d EXEC: got %q; want [n n+1 \"n+1\"]", i, got[4])
			}
		}
		wg.Wait()
		want := strconv.Itoa(2*txs + hammers*hRounds*hPerPipe)
		muxDial(t, addr).expect(t, muxBulk(want), "GET", "tx:ctr")
	})

	t.Run("watch", func(t *testing.T) {
		a, b := muxDial(t, addr), muxDial(t, addr)
		b.expect(t, muxOK, "SET", "watch:k", "before")
		a.expect(t, muxOK, "WATCH", "watch:k")
		b.expect(t, muxOK, "SET", "watch:k", "changed")
		a.send(t, "MULTI\r\nSET watch:k mine\r\nEXEC\r\n")
		if got := a.reply(t) + a.reply(t) + a.reply(t); got != muxOK+"+QUEUED\r\n*-1\r\n" {
			t.Fatalf("MULTI, SET, EXEC after the watched key changed: got %q; want the EXEC aborted (*-1)", got)
		}
		b.expect(t, muxBulk("changed"), "GET", "watch:k")
		// Unchanged, the transaction runs.
		a.expect(t, muxOK, "WATCH", "watch:k")
		a.send(t, "MULTI\r\nSET watch:k mine\r\nEXEC\r\n")
		if got := a.reply(t) + a.reply(t) + a.reply(t); got != muxOK+"+QUEUED\r\n*1\r\n+OK\r\n" {
			t.Fatalf("MULTI, SET, EXEC: got %q; want the EXEC run", got)
		}
		b.expect(t, muxBulk("mine"), "GET", "watch:k")
	})

	t.Run("blpop", func(t *testing.T) {
		a, b := muxDial(t, addr), muxDial(t, addr)
		b.expect(t, muxOK, "SET", "blpop:k", "v")
		if got := blocked(); got != "blocked_clients:0" {
			t.Fatalf("before BLPOP: got %s; want blocked_clients:0", got)
		}
		a.send(t, muxCmd("BLPOP", "blpop:q", "0"))
		waitFor(t, "BLPOP to block", func() bool { return blocked() == "blocked_clients:1" })
		for i := range 100 {
			if got := b.do(t, "GET", "blpop:k"); got != muxBulk("v") {
				t.Fatalf("GET %d while another client is blocked: got %q; want %q", i, got, muxBulk("v"))
			}
		}
		if got := blocked(); got != "blocked_clients:1" {
			t.Fatalf("after 100 GETs: got %s; want blocked_clients:1", got)
		}
		b.expect(t, muxInt(1), "LPUSH", "blpop:q", "job")
		if got, want := a.reply(t), "*2\r\n"+muxBulk("blpop:q")+muxBulk("job"); got != want {
			t.Fatalf("BLPOP: got %q; want %q", got, want)
		}
	})

	t.Run("subscribe", func(t *testing.T) {
		a, b := muxDial(t, addr), muxDial(t, addr)
		b.expect(t, muxNil, "GET", "sub:none")
		a.expect(t, "*3\r\n"+muxBulk("subscribe")+muxBulk("sub:ch")+muxInt(1), "SUBSCRIBE", "sub:ch")
		b.expect(t, muxInt(1), "PUBLISH", "sub:ch", "news")
		if got, want := a.reply(t), "*3\r\n"+muxBulk("message")+muxBulk("sub:ch")+muxBulk("news"); got != want {
			t.Fatalf("message: got %q; want %q", got, want)
		}
		muxDial(t, addr).expect(t, muxNil, "GET", "sub:none")
	})

	t.Run("hello 3", func(t *testing.T) {
		a, b := muxDial(t, addr), muxDial(t, addr)
		b.expect(t, muxInt(1), "HSET", "hello:h", "f", "v")
		hello := a.do(t, "HELLO", "3")
		if !strings.HasPrefix(hello, "%") || !strings.Contains(hello, muxBulk("proto")+":3\r\n") {
			t.Fatalf("HELLO 3: got %q; want a map with proto 3", hello)
		}
		resp3 := "%1\r\n" + muxBulk("f") + muxBulk("v")
		resp2 := "*2\r\n" + muxBulk("f") + muxBulk("v")
		a.expect(t, resp3, "HGETALL", "hello:h")
		a.expect(t, "_\r\n", "GET", "hello:none")
		b.expect(t, resp2, "HGETALL", "hello:h")
		b.expect(t, muxNil, "GET", "hello:none")
		muxDial(t, addr).expect(t, resp2, "HGETALL", "hello:h")
	})

	t.Run("quit", func(t *testing.T) {
		a := muxDial(t, addr)
		a.send(t, "PING\r\nQUIT\r\n")
		if got := a.reply(t) + a.reply(t); got != "+PONG\r\n"+muxOK {
			t.Fatalf("PING, QUIT: got %q; want +PONG +OK", got)
		}
		a.expectEOF(t)
	})

	t.Run("order across the pin", func(t *testing.T) {
		for _, tt := range []struct {
			req   string
			split int // when not 0, where the request is cut in two writes
			want  []string
		}{
			{"SET x 1\r\nGET x\r\nSELECT 0\r\nGET x\r\nINCR x\r\n", 0,
				[]string{muxOK, muxBulk("1"), muxOK, muxBulk("1"), muxInt(2)}},
			// SELECT 1 pins for sure; GET x must read DB 1, and SELECT 0 come back.
			{"SET x 1\r\nGET x\r\nSELECT 1\r\nGET x\r\nSELECT 0\r\nINCR x\r\n", 0,
				[]string{muxOK, muxBulk("1"), muxOK, muxNil, muxOK, muxInt(2)}},
			{"SET x 1\r\nGET x\r\nSELECT 1\r\nGET x\r\nSELECT 0\r\nINCR x\r\n", len("SET x 1\r\nGET x\r\nSEL"),
				[]string{muxOK, muxBulk("1"), muxOK, muxNil, muxOK, muxInt(2)}},
			{"SET x 1\r\nGET x\r\nCLIENT SETNAME x\r\nGET x\r\nINCR x\r\n", 0,
				[]string{muxOK, muxBulk("1"), muxOK, muxBulk("1"), muxInt(2)}},
		} {
			a := muxDial(t, addr)
			if tt.split > 0 {
				a.send(t, tt.req[:tt.split])
				time.Sleep(time.Millisecond) // let the proxy read the first part alone
				a.send(t, tt.req[tt.split:])
			} else {
				a.send(t, tt.req)
			}
			var got []string
			for range tt.want {
				got = append(got, a.reply(t))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("%q: got %q; want %q", tt.req, got, tt.want)
			}
			a.expect(t, muxInt(3), "INCR", "x")
		}
	})
}

// TestMuxBigCommand sends a value 25 times the proxy's read buffer, so the command does
// not fit the buffer and pins the client, and checks it and the commands around it.
func TestMuxBigCommand(t *testing.T) {
	forMuxModes(t, 4096, func(t *testing.T, srv *redistest.Server, addr string) {
		rng := rand.New(rand.NewPCG(2, 3))
		big := make([]byte, 100<<10)
		for i := range big {
			big[i] = "ab\r\n$*:0"[rng.IntN(8)]
		}
		value := string(big)
		b := muxDial(t, addr)
		b.expect(t, muxOK, "SET", "big:s", "1")

		// Small commands, the big one and more, in one write.
		a := muxDial(t, addr)
		a.send(t, muxCmd("SET", "big:t", "1")+muxCmd("GET", "big:t")+muxCmd("SET", "big:v", value)+
			muxCmd("GET", "big:v")+muxCmd("GET", "big:t"))
		var got []string
		for range 5 {
			got = append(got, a.reply(t))
		}
		if want := []string{muxOK, muxBulk("1"), muxOK, muxBulk(value), muxBulk("1")}; !slices.Equal(got, want) {
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("reply %d: got %q; want %q", i, muxShort(got[i]), muxShort(want[i]))
				}
			}
		}
		a.expect(t, "+PONG\r\n", "PING")
		a.expect(t, muxInt(2), "INCR", "big:t")

		// The big command first, sent in 1 KiB writes.
		c := muxDial(t, addr)
		cmd := muxCmd("SET", "big:w", value)
		for len(cmd) > 0 {
			n := min(len(cmd), 1024)
			c.send(t, cmd[:n])
			cmd = cmd[n:]
		}
		if got := c.reply(t); got != muxOK {
			t.Fatalf("SET big:w: got %q; want +OK", got)
		}
		c.expect(t, muxBulk(value), "GET", "big:w")

		// Another client reads the big value, many times in one pipeline: big replies
		// over the shared connection.
		b.send(t, strings.Repeat(muxCmd("GET", "big:v"), 8)+muxCmd("GET", "big:s"))
		for i := range 8 {
			if got := b.reply(t); got != muxBulk(value) {
				t.Fatalf("GET big:v %d from another client: got %q; want the value set", i, muxShort(got))
			}
		}
		if got := b.reply(t); got != muxBulk("1") {
			t.Fatalf("GET big:s: got %q; want %q", got, muxBulk("1"))
		}
		// go-redis too.
		gc := redis.NewClient(&redis.Options{Addr: addr})
		defer gc.Close()
		ctx := context.Background()
		if err := gc.Set(ctx, "big:g", value, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := gc.Get(ctx, "big:g").Result(); err != nil || got != value {
			t.Fatalf("go-redis GET big:g: got %d bytes, %v; want the %d bytes set", len(got), err, len(value))
		}
	})
}

// muxMalformed are requests that end in bytes Redis rejects or reads oddly, after good
// commands. Through the proxy each must get exactly what Redis sends when it is sent
// directly.
var muxMalformed = []struct {
	name  string
	bytes string
	ends  bool // Redis closes the connection or answers ECHO end; else the test sends ECHO end after
}{
	{"integer argument", "*1\r\n:x\r\n", true},
	{"bad array length", "*abc\r\n", true},
	{"unbalanced quotes", "SET mal:q \"abc\r\n", true},
	{"text after closing quote", "GET \"mal:k\"x\r\n", true},
	{"bulk length with leading zero", "*2\r\n$03\r\nGET\r\n$5\r\nmal:k\r\n", true},
	{"array length with leading zero", "*02\r\n$3\r\nGET\r\n$5\r\nmal:k\r\n", true},
	{"array length -0", "*-0\r\n*1\r\n$4\r\nPING\r\n", true},
	{"bulk length -0", "*2\r\n$3\r\nGET\r\n$-0\r\n\r\n", true},
	{"bulk length -1", "*2\r\n$3\r\nGET\r\n$-1\r\n", true},
	{"ignored requests", "\r\n*0\r\n*-1\r\n   \r\n*1\r\n$4\r\nPING\r\n", false},
	{"bulk string outside an array", "$3\r\nfoo\r\n", false},
	{"payload longer than its length", "*1\r\n$4\r\nPINGX\r\n", false},
	// Redis looks for an inline command's end with strchr, which stops at the NUL: it
	// waits for the line to end until the buffer holds 64 KiB, then gives up.
	{"NUL in an inline command", "PING\x00junk\r\n" + strings.Repeat("ECHO end\r\n", 6600), true},
}

// muxReadAll reads replies until Redis closes the connection or answers ECHO end, and
// names how the stream ended.
func muxReadAll(c *muxConn) []string {
	var got []string
	for {
		r, err := muxReadReply(c.r)
		switch {
		case err == nil:
			got = append(got, r)
			if r == muxBulk("end") {
				return got
			}
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			r += "<timeout: no reply, no end of file>"
		case errors.Is(err, syscall.ECONNRESET):
			r += "<reset>"
		case err == io.EOF:
			r += "<EOF>"
		default:
			r += "<" + err.Error() + ">"
		}
		return append(got, r)
	}
}

// muxExchange sends req on a new connection to addr and reads all the replies (see
// muxReadAll).
func muxExchange(addr, req string) ([]string, error) {
	c, err := muxDialErr(addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		return nil, err
	}
	return muxReadAll(c), nil
}

// TestMuxMalformed sends good commands then bytes that Redis rejects or reads oddly: the
// client gets the good commands' replies, then Redis's own answer, exactly as without the
// proxy, while another client of the same proxy keeps its connection: the bytes never
// reach the shared connection. Each case has a proxy of its own, and they all run at
// once.
func TestMuxMalformed(t *testing.T) {
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Start(t)
			direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer direct.Close()

			type run struct {
				addr      string
				other     *muxConn        // the other client
				otherIDs  map[string]bool // the upstream connections it uses
				otherErr  error
				req       string
				want, got []string
				err       error
			}
			runs := make([]run, len(muxMalformed))
			prev := muxClientIDs(t, direct)
			for i := range runs {
				r := &runs[i]
				r.addr = muxProxy(t, srv, m, 0).Addr().String()
				r.other = muxDial(t, r.addr)
				r.other.expect(t, muxOK, "SET", fmt.Sprintf("mal:%d:k0", i), "start")
				now := muxClientIDs(t, direct)
				r.otherIDs = map[string]bool{}
				for id := range now {
					if !prev[id] {
						r.otherIDs[id] = true
					}
				}
				prev = now
			}

			stop := make(chan struct{})
			var others sync.WaitGroup
			for i := range runs {
				r := &runs[i]
				others.Go(func() {
					rng := rand.New(rand.NewPCG(4, uint64(i)))
					m := &muxModel{prefix: fmt.Sprintf("mal:%d", i)}
					v := "start"
					m.vals[0] = &v
					for round := 0; ; round++ {
						select {
						case <-stop:
							return
						default:
						}
						ioErr, wrong := muxRawRound(r.other, rng, m.pipeline(rng, strconv.Itoa(round), 1+rng.IntN(16)))
						if err := errors.Join(ioErr, wrong); err != nil {
							r.otherErr = fmt.Errorf("round %d: %w", round, err)
							return
						}
					}
				})
			}
			var cases sync.WaitGroup
			for i, tt := range muxMalformed {
				r := &runs[i]
				cases.Go(func() {
					r.req = muxCmd("SET", "mal:k", "v") + muxCmd("GET", "mal:k") + tt.bytes
					if !tt.ends {
						r.req += "ECHO end\r\n"
					}
					if r.want, r.err = muxExchange(srv.Addr(), r.req); r.err == nil {
						r.got, r.err = muxExchange(r.addr, r.req)
					}
				})
			}
			cases.Wait()
			close(stop)
			others.Wait()
			after := muxClientIDs(t, direct)

			for i, tt := range muxMalformed {
				t.Run(tt.name, func(t *testing.T) {
					r := runs[i]
					if r.err != nil {
						t.Fatal(r.err)
					}
					if len(r.want) < 3 || r.want[0] != muxOK || r.want[1] != muxBulk("v") {
						t.Fatalf("directly: got %q; want +OK, the value, then more", r.want)
					}
					if !slices.Equal(r.got, r.want) {
						t.Errorf("%q: got %q; want %q, as from Redis directly", muxShort(r.req), r.got, r.want)
					}
					for id := range r.otherIDs {
						if !after[id] {
							t.Errorf("upstream connection id=%s of another client of the proxy: closed; want it open", id)
						}
					}
					if r.otherErr != nil {
						t.Fatalf("another client of the proxy, meanwhile: %v", r.otherErr)
					}
					_ = r.other.SetDeadline(time.Now().Add(muxDeadline))
					r.other.expect(t, "+PONG\r\n", "PING")
				})
			}
		})
	}
}

// TestMuxRequirePass runs the proxy in front of a Redis that wants a password: the
// proxy cannot share a connection, and each client must AUTH for itself.
func TestMuxRequirePass(t *testing.T) {
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Start(t)
			if _, err := redistest.Command(srv.Addr(), "", "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
				t.Fatal(err)
			}
			noauth := muxDial(t, srv.Addr()).do(t, "GET", "pw:k")
			if !strings.HasPrefix(noauth, "-NOAUTH") {
				t.Fatalf("directly, GET without AUTH: got %q; want -NOAUTH", noauth)
			}
			p := muxProxy(t, srv, m, 0)
			addr := p.Addr().String()

			a := muxDial(t, addr)
			a.expect(t, muxOK, "AUTH", "s3cret")
			a.expect(t, muxOK, "SET", "pw:k", "v")
			a.expect(t, muxBulk("v"), "GET", "pw:k")

			b := muxDial(t, addr)
			b.expect(t, noauth, "GET", "pw:k")
			b.expect(t, noauth, "SET", "pw:k", "stolen")
			a.expect(t, muxBulk("v"), "GET", "pw:k")

			c := muxDial(t, addr)
			c.send(t, "GET pw:k\r\nAUTH s3cret\r\nGET pw:k\r\n")
			if got := []string{c.reply(t), c.reply(t), c.reply(t)}; !slices.Equal(got, []string{noauth, muxOK, muxBulk("v")}) {
				t.Fatalf("GET, AUTH, GET: got %q; want %q", got, []string{noauth, muxOK, muxBulk("v")})
			}
			b.expect(t, noauth, "GET", "pw:k") // still not authenticated

			gc := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret"})
			defer gc.Close()
			if got, err := gc.Get(context.Background(), "pw:k").Result(); err != nil || got != "v" {
				t.Fatalf("go-redis with the password, GET pw:k: got %q, %v; want v", got, err)
			}
		})
	}
}

// TestMuxRequirePassLater sets a password while clients are connected. Redis keeps the
// connections it has authenticated and asks new ones for the password; through the proxy
// a new client must be asked too, not ride on a shared connection opened before.
func TestMuxRequirePassLater(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		oldDirect := muxDial(t, srv.Addr())
		oldDirect.expect(t, muxNil, "GET", "later:k")
		old := muxDial(t, addr)
		old.expect(t, muxNil, "GET", "later:k")

		if _, err := redistest.Command(srv.Addr(), "", "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
			t.Fatal(err)
		}
		noauth := muxDial(t, srv.Addr()).do(t, "GET", "later:k")
		if !strings.HasPrefix(noauth, "-NOAUTH") {
			t.Fatalf("directly, new connection, GET without AUTH: got %q; want -NOAUTH", noauth)
		}
		oldDirect.expect(t, muxNil, "GET", "later:k")

		old.expect(t, muxNil, "GET", "later:k") // as oldDirect
		muxDial(t, addr).expect(t, noauth, "GET", "later:k")
		c := muxDial(t, addr)
		c.expect(t, muxOK, "AUTH", "s3cret")
		c.expect(t, muxNil, "GET", "later:k")
	})
}

// TestMuxAccessCheckTTL: with AccessCheckTTL, a check that Redis lets a new connection
// in admits the clients that connect within the TTL after it, so that clients that
// connect and disconnect often cost Redis no connection each (each cost a dial, a PING
// and a close, and its client 0.5 ms more than directly, docs/BENCHMARKS.md); the first
// client after the TTL is checked again, and one that comes once Redis wants a password
// gets -NOAUTH, as directly.
func TestMuxAccessCheckTTL(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), AccessCheckTTL: time.Minute})
	var mu sync.Mutex
	now := time.Now()
	sampler.SetAccessClock(p, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	addr := p.Addr().String()
	muxDial(t, addr).expect(t, muxNil, "GET", "ttl:k") // the loop and its connections are up, and a check passed
	conns := func() int {
		info, err := redistest.Command(srv.Addr(), "", "INFO", "stats")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`total_connections_received:(\d+)`).FindStringSubmatch(info)
		if m == nil {
			t.Fatalf("INFO stats without total_connections_received: %q", info)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	const clients = 30
	before := conns()
	for range clients {
		c := muxDial(t, addr)
		c.expect(t, muxNil, "GET", "ttl:k")
		_ = c.Close()
	}
	if got := conns() - before - 1; got != 0 { // less the INFO's own
		t.Errorf("%d clients that connected one after the other within the TTL cost Redis %d connections; want 0", clients, got)
	}

	if _, err := redistest.Command(srv.Addr(), "", "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	noauth := muxDial(t, srv.Addr()).do(t, "GET", "ttl:k")
	if !strings.HasPrefix(noauth, "-NOAUTH") {
		t.Fatalf("directly, new connection, GET without AUTH: got %q; want -NOAUTH", noauth)
	}
	advance(59 * time.Second)
	muxDial(t, addr).expect(t, muxNil, "GET", "ttl:k") // within the TTL: the gap it documents
	advance(2 * time.Second)
	late := muxDial(t, addr)
	late.expect(t, noauth, "GET", "ttl:k")
	late.expect(t, muxOK, "AUTH", "s3cret")
	late.expect(t, muxNil, "GET", "ttl:k")
}

// TestMuxSlowReader has a client pipeline GETs of a large value and not read the replies;
// another client's PINGs must still be answered, and the slow client then gets all its
// replies.
func TestMuxSlowReader(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		value := strings.Repeat("slow-reader:0123", 4096) // 64 KiB
		if _, err := redistest.Command(srv.Addr(), "", "SET", "slow:v", value); err != nil {
			t.Fatal(err)
		}
		const gets = 200
		slow := muxDial(t, addr)
		slow.expect(t, muxBulk(value), "GET", "slow:v") // shared, when multiplexing
		slow.send(t, strings.Repeat(muxCmd("GET", "slow:v"), gets))

		fast := muxDial(t, addr)
		for i := range 100 {
			fast.send(t, muxCmd("PING"))
			got, err := muxReadReply(fast.r)
			if err != nil || got != "+PONG\r\n" {
				t.Fatalf("PING %d beside a client that does not read: got %q, %v; want +PONG", i, got, err)
			}
		}
		for i := range gets {
			if got := slow.reply(t); got != muxBulk(value) {
				t.Fatalf("GET %d of the slow client: got %q; want the value", i, muxShort(got))
			}
		}
		slow.expect(t, "+PONG\r\n", "PING")
	})
}

// TestMuxUpstreamKill kills the proxy's upstream connections: a client owed a reply gets
// end of file, never a reply that is not its own, and new commands work on new
// connections.
func TestMuxUpstreamKill(t *testing.T) {
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := muxProxy(t, srv, m, 0)
			addr := p.Addr().String()
			direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer direct.Close()
			ctx := context.Background()
			kill := func(t *testing.T) {
				t.Helper()
				n, err := direct.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Result()
				if err != nil || n < 1 {
					t.Fatalf("CLIENT KILL TYPE normal: got %d, %v; want at least 1 killed", n, err)
				}
			}

			t.Run("owed a reply", func(t *testing.T) {
				x, y := muxDial(t, addr), muxDial(t, addr)
				x.expect(t, "+PONG\r\n", "PING")
				y.expect(t, "+PONG\r\n", "PING")
				// Writes wait while clients are paused: x's SET stays unanswered.
				unpause := pauseWrites(t, ctx, direct)
				defer unpause()
				x.send(t, muxCmd("SET", "kill:x", "1"))
				waitFor(t, "SET to wait for the pause", func() bool {
					list, err := direct.ClientList(ctx).Result()
					return err == nil && strings.Contains(list, "cmd=set")
				})
				kill(t)
				rest, err := io.ReadAll(x.r)
				if len(rest) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("client owed a reply on a killed connection: got %q, %v; want end of file", rest, err)
				}
				unpause()
				// A new client works, on a new connection.
				z := muxDial(t, addr)
				z.expect(t, "+PONG\r\n", "PING")
				z.expect(t, muxOK, "SET", "kill:z", "1")
				z.expect(t, muxBulk("1"), "GET", "kill:z")
				// A client that was owed nothing goes on when multiplexing; its own
				// connection was killed otherwise.
				if m.perClient {
					y.send(t, muxCmd("PING"))
					if got, err := muxReadReply(y.r); err == nil {
						t.Fatalf("PING on a killed connection: got %q; want end of file", got)
					}
				} else {
					y.expect(t, "+PONG\r\n", "PING")
					y.expect(t, muxBulk("1"), "GET", "kill:z")
				}
			})

			t.Run("under load", func(t *testing.T) {
				const workers = 8
				stop := make(chan struct{})
				var rounds, reconnects atomic.Int64
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(5, uint64(w)))
						for gen := 0; ; gen++ {
							c, err := muxDialErr(addr)
							if err != nil {
								t.Errorf("worker %d: %v", w, err)
								return
							}
							// Fresh keys on every connection: what a lost connection did
							// is unknown.
							m := &muxModel{prefix: fmt.Sprintf("load:%d:%d", w, gen)}
							for round := 0; ; round++ {
								select {
								case <-stop:
									c.Close()
									return
								default:
								}
								ioErr, wrong := muxRawRound(c, rng, m.pipeline(rng, strconv.Itoa(round), 1+rng.IntN(16)))
								if wrong != nil {
									c.Close()
									t.Errorf("worker %d, connection %d, round %d: %v", w, gen, round, wrong)
									return
								}
								if ioErr != nil {
									reconnects.Add(1)
									break
								}
								rounds.Add(1)
							}
							c.Close()
						}
					})
				}
				for range 5 {
					n := rounds.Load()
					waitFor(t, "clients to make progress", func() bool { return rounds.Load() >= n+20 })
					kill(t)
				}
				n := rounds.Load()
				waitFor(t, "clients to make progress after the kills", func() bool { return rounds.Load() >= n+20 })
				close(stop)
				wg.Wait()
				t.Logf("%d rounds, %d reconnects", rounds.Load(), reconnects.Load())
				z := muxDial(t, addr)
				z.expect(t, "+PONG\r\n", "PING")
			})
		})
	}
}

// TestMuxUpstreamBack: with Redis down, a new client's shared connection fails, the
// proxy warns, and the client's command gets an error reply; once Redis is back and the
// retry has passed, a new client shares a connection again, and the proxy says so.
func TestMuxUpstreamBack(t *testing.T) {
	srv := redistest.Start(t)
	upstream := srv.Addr()
	srv.Stop()
	var logs logbuf.Buffer
	p := startProxy(t, sampler.ProxyOptions{
		Upstream: upstream, Sink: newRecordSink(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	sampler.SetSharedRetry(p, 50*time.Millisecond)
	addr := p.Addr().String()

	c, err := muxDialErr(addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, muxCmd("PING"))
	if got, want := c.reply(t), upstreamErr(upstream, "connection refused"); got != want {
		t.Fatalf("PING with Redis down: got %q; want %q", got, want)
	}
	c.expectEOF(t)
	c.Close()
	if !strings.Contains(logs.String(), "cannot open a shared upstream connection") {
		t.Fatalf("logs:\n%s\nwant a warning that the shared connection failed", logs.String())
	}
	if strings.Contains(logs.String(), "answers again") {
		t.Fatalf("logs:\n%s\nsay the upstream answers while it is down", logs.String())
	}

	redistest.StartAt(t, upstream)
	time.Sleep(100 * time.Millisecond) // past the retry
	z := muxDial(t, addr)
	z.expect(t, "+PONG\r\n", "PING")
	if !strings.Contains(logs.String(), "upstream answers again") {
		t.Errorf("logs:\n%s\nwant a line saying the upstream answers again", logs.String())
	}
	if got := p.Stats().SharedFailures; got < 1 {
		t.Errorf("SharedFailures %d; want at least 1", got)
	}
}

// TestMuxSharingBackAfterNoAuth: a Redis that begins to want a password makes the check
// of a new client fail (-NOAUTH), and the proxy warns; once it no longer does, the next
// client after the retry shares again, and the proxy says so, as it does after a
// restart, so that the log does not leave an operator thinking sharing is still off.
func TestMuxSharingBackAfterNoAuth(t *testing.T) {
	srv := redistest.Start(t)
	var logs logbuf.Buffer
	p := startProxy(t, sampler.ProxyOptions{
		Upstream: srv.Addr(), Sink: newRecordSink(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	sampler.SetSharedRetry(p, 50*time.Millisecond)
	addr := p.Addr().String()
	muxDial(t, addr).expect(t, muxNil, "GET", "back:k") // the shared connections are up

	if _, err := redistest.Command(srv.Addr(), "", "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if got := muxDial(t, addr).do(t, "GET", "back:k"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("GET once Redis wants a password: got %q; want -NOAUTH, as directly", got)
	}
	if !strings.Contains(logs.String(), "cannot open a shared upstream connection") {
		t.Fatalf("logs:\n%s\nwant a warning that new clients cannot share", logs.String())
	}
	if _, err := redistest.Command(srv.Addr(), "s3cret", "CONFIG", "SET", "requirepass", ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the retry
	muxDial(t, addr).expect(t, muxNil, "GET", "back:k")
	if !strings.Contains(logs.String(), "upstream answers again") {
		t.Errorf("logs:\n%s\nwant a line saying clients share again", logs.String())
	}
}

// TestMuxHalfClose sends commands and closes its sending side at once, as `nc` does: the
// replies still come, then end of file.
func TestMuxHalfClose(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		for i := range 20 {
			for _, pin := range []bool{false, true} {
				v := strconv.Itoa(i)
				req := "SET a " + v + "\r\nGET a\r\n"
				want := muxOK + muxBulk(v)
				if pin {
					req = "SET a " + v + "\r\nCLIENT SETNAME hc\r\nGET a\r\n"
					want = muxOK + muxOK + muxBulk(v)
				}
				c := muxDial(t, addr)
				c.send(t, req)
				if err := c.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(c.r)
				if string(got) != want || err != nil {
					t.Fatalf("%q then end of file: got %q, %v; want %q then end of file", req, got, err, want)
				}
				c.Close()
			}
		}
	})
}

// TestMuxPauseWrite pauses writes: a client's write waits, and another client's GET must
// still be answered at once, as it is on a connection of its own; also when the write
// was pipelined behind reads, which would otherwise take it onto the shared reads
// connection and hold every client's reads behind it. The writer's replies come in order
// once the pause ends, and commands it sent behind the write run after it.
func TestMuxPauseWrite(t *testing.T) {
	tests := []struct {
		name    string
		send    string   // the writer's commands, in one write, while writes are paused
		waits   string   // the command Redis holds (CLIENT LIST's cmd=)
		replies []string // the writer's replies after the pause
	}{
		{"write", muxCmd("SET", "pause:k", "2"), "set", []string{muxOK}},
		{"write behind reads",
			muxCmd("GET", "pause:k") + muxCmd("INCR", "pause:k") + muxCmd("GET", "pause:k") + muxCmd("INCR", "pause:k"),
			"incr", []string{muxBulk("1"), ":2\r\n", muxBulk("2"), ":3\r\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
				direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				defer direct.Close()
				ctx := context.Background()
				w, r := muxDial(t, addr), muxDial(t, addr)
				w.expect(t, muxOK, "SET", "pause:k", "1")
				r.expect(t, muxBulk("1"), "GET", "pause:k")
				unpause := pauseWrites(t, ctx, direct)
				defer unpause()
				w.send(t, tt.send)
				waitFor(t, tt.waits+" to wait for the pause", func() bool {
					list, err := direct.ClientList(ctx).Result()
					return err == nil && strings.Contains(list, "cmd="+tt.waits)
				})
				_ = r.SetDeadline(time.Now().Add(5 * time.Second))
				start := time.Now()
				for i := range 3 {
					r.send(t, muxCmd("GET", "pause:k"))
					if got, err := muxReadReply(r.r); got != muxBulk("1") {
						t.Fatalf("GET %d while another client's %s waits for the pause: got %q, %v after %v; want %q at once",
							i, tt.waits, got, err, time.Since(start).Round(time.Millisecond), muxBulk("1"))
					}
				}
				unpause()
				for i, want := range tt.replies {
					if got := w.reply(t); got != want {
						t.Fatalf("writer's reply %d after the pause: got %q; want %q", i, got, want)
					}
				}
			})
		})
	}
}

// TestMuxHeldWriteThenPin: a write held behind a read (see the loop's hold) and a MULTI
// after it, in one go: the MULTI pins the client, and the held write goes first to its
// own connection, so every reply comes in order.
func TestMuxHeldWriteThenPin(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		c := muxDial(t, addr)
		c.expect(t, muxOK, "SET", "hp:k", "a")
		c.send(t, muxCmd("GET", "hp:k")+muxCmd("SET", "hp:k", "b")+muxCmd("GET", "hp:k")+
			muxCmd("MULTI")+muxCmd("APPEND", "hp:k", "c")+muxCmd("EXEC")+muxCmd("GET", "hp:k"))
		for i, want := range []string{muxBulk("a"), muxOK, muxBulk("b"), muxOK, "+QUEUED\r\n", "*1\r\n:2\r\n", muxBulk("bc")} {
			if got := c.reply(t); got != want {
				t.Fatalf("reply %d: got %q; want %q", i, got, want)
			}
		}
	})
}

// TestMuxClientsShareAuthCheck: a new client is let in on the shared connection only
// once a connection opened after it came has been let in without AUTH; clients that come
// together share that check rather than each dialling Redis in turn. Redis holds every
// command for 500 ms, so the first client's check waits and the others come meanwhile:
// they share the next check.
func TestMuxClientsShareAuthCheck(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	addr := muxProxy(t, srv, sharedMode, 0).Addr().String()
	muxDial(t, addr).expect(t, "+PONG\r\n", "PING") // the loop and its connections are up
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	before := commandCalls(t, direct)["ping"] // each check is a PING on a new connection

	if err := direct.Do(ctx, "CLIENT", "PAUSE", "500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	const clients = 20
	muxClients(t, addr, clients, func(i int, c *muxConn) error {
		key := fmt.Sprintf("share:%d", i)
		if _, err := io.WriteString(c, muxCmd("SET", key, "v")+muxCmd("GET", key)); err != nil {
			return err
		}
		for _, want := range []string{muxOK, muxBulk("v")} {
			if got, err := muxReadReply(c.r); err != nil || got != want {
				return fmt.Errorf("client %d: got %q, %v; want %q", i, muxShort(got), err, want)
			}
		}
		return nil
	})
	if checks := commandCalls(t, direct)["ping"] - before; checks < 1 || checks > clients/2 {
		t.Errorf("checks for %d clients that came together: %d; want 1 to %d", clients, checks, clients/2)
	}
}

// TestMuxResp3Pin: a client that switched to RESP3 with HELLO 3 on the shared connection
// and is then pinned (here by WATCH, MULTI, CLIENT SETNAME, SUBSCRIBE) must go on
// speaking RESP3 on its own connection, as it would on a direct one.
func TestMuxResp3Pin(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		for _, tt := range []struct {
			name      string
			pin       []string
			pinReply  string
			sameWrite bool // send HELLO 3 and the pinning command in one write
		}{
			{"client setname", []string{"CLIENT", "SETNAME", "r3"}, muxOK, false},
			{"watch", []string{"WATCH", "r3:k"}, muxOK, false},
			{"select 1", []string{"SELECT", "1"}, muxOK, false},
			{"same write", []string{"CLIENT", "SETNAME", "r3"}, muxOK, true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c := muxDial(t, addr)
				if tt.sameWrite {
					c.send(t, muxCmd("HELLO", "3")+muxCmd(tt.pin...))
				} else {
					c.send(t, muxCmd("HELLO", "3"))
				}
				if hello := c.reply(t); !strings.HasPrefix(hello, "%") {
					t.Fatalf("HELLO 3: got %q; want a RESP3 map", muxShort(hello))
				}
				if !tt.sameWrite {
					c.expect(t, "_\r\n", "GET", "r3:none") // still shared, RESP3
					c.send(t, muxCmd(tt.pin...))
				}
				if got := c.reply(t); got != tt.pinReply {
					t.Fatalf("%s: got %q; want %q", strings.Join(tt.pin, " "), got, tt.pinReply)
				}
				c.expect(t, "_\r\n", "GET", "r3:none")
				c.expect(t, "%0\r\n", "HGETALL", "r3:none")
			})
		}
	})
}

// TestMuxResp3PushNotAReply: Redis sends a RESP3 push (here a client-tracking
// invalidation, redirected by another client to the id a shared HELLO 3 reported) to a
// shared RESP3 connection. A push answers no command: it must not be taken for the reply
// of the client whose command comes next, nor end the shared connection.
func TestMuxResp3PushNotAReply(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		z := muxDial(t, addr)
		hello := z.do(t, "HELLO", "3")
		m := regexp.MustCompile(`\$2\r\nid\r\n:(\d+)\r\n`).FindStringSubmatch(hello)
		if m == nil {
			t.Fatalf("HELLO 3: got %q; want a map with an id", muxShort(hello))
		}
		// Another client, straight to Redis, has its invalidations sent to that id.
		tracker := muxDial(t, srv.Addr())
		tracker.expect(t, muxOK, "CLIENT", "TRACKING", "ON", "REDIRECT", m[1])
		tracker.expect(t, muxNil, "GET", "push:k") // tracked from now on

		a := muxDial(t, addr)
		a.send(t, muxCmd("HELLO", "3")+muxCmd("SET", "push:k", "v")+muxCmd("GET", "push:k"))
		if got := a.reply(t); !strings.HasPrefix(got, "%") {
			t.Fatalf("HELLO 3: got %q; want a RESP3 map", muxShort(got))
		}
		if got := a.reply(t); got != muxOK {
			t.Fatalf("SET push:k v: got %q; want %q", got, muxOK)
		}
		if got := a.reply(t); got != muxBulk("v") {
			t.Fatalf("GET push:k: got %q; want %q", got, muxBulk("v"))
		}
		a.expect(t, muxOK, "SET", "push:k", "w")
		a.expect(t, muxBulk("w"), "GET", "push:k")
		muxDial(t, addr).expect(t, muxBulk("w"), "GET", "push:k")
	})
}

// TestMuxBulkLengthOverLimit: a client sends the header of a value longer than Redis
// takes (proto-max-bulk-len, 512 MiB) and waits. Redis answers that at once with a
// protocol error; through the proxy the answer must come too, not wait for a buffer
// that the value could never fit.
func TestMuxBulkLengthOverLimit(t *testing.T) {
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		c := muxDial(t, addr)
		c.expect(t, "+PONG\r\n", "PING")
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		c.send(t, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000000000\r\n")
		if got, err := muxReadReply(c.r); !strings.HasPrefix(got, "-ERR Protocol error") {
			t.Fatalf("SET k with a 1 GB value's header: got %q, %v; want Redis's protocol error", got, err)
		}
		muxDial(t, addr).expect(t, "+PONG\r\n", "PING")
	})
}

// TestMuxCommandOverRedisLimit: Redis was started with a limit lower than the proxy's
// buffer, and a client sends a command that fits the buffer but not the limit. Redis
// refuses it (proto-max-bulk-len: a protocol error; client-query-buffer-limit: it closes
// the connection) and ends the connection it came on; on a shared connection that would
// also end every other client's commands queued there. Only the client that sent it
// may see an error or its connection closed.
//
// Writes are paused, and client b's SET waits on the shared writes connection: Redis
// reads what comes after it there but parses nothing more until the pause ends, so a's
// big SET, then c's SET, are sure to be queued behind b's.
func TestMuxCommandOverRedisLimit(t *testing.T) {
	value := strings.Repeat("v", 2<<20)
	big := muxCmd("SET", "limit:a", value)
	for _, limit := range []string{"proto-max-bulk-len", "client-query-buffer-limit"} {
		for _, m := range muxModes {
			t.Run(limit+"/"+m.name, func(t *testing.T) {
				srv := redistest.Start(t, redistest.Options{Args: []string{"--" + limit, "1mb"}})
				p := muxProxy(t, srv, m, 4<<20)
				addr := p.Addr().String()
				direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				defer direct.Close()
				ctx := context.Background()
				a, b, c := muxDial(t, addr), muxDial(t, addr), muxDial(t, addr)
				for _, x := range []*muxConn{a, b, c} {
					x.expect(t, "+PONG\r\n", "PING")
				}
				// qbuf sums the bytes Redis has read and not parsed, on all connections;
				// sets counts the commands waiting for the pause.
				qbuf := func() (sum int, sets int) {
					list, err := direct.ClientList(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range strings.Fields(list) {
						if n, ok := strings.CutPrefix(f, "qbuf="); ok {
							v, _ := strconv.Atoi(n)
							sum += v
						}
						if f == "cmd=set" {
							sets++
						}
					}
					return sum, sets
				}
				unpause := pauseWrites(t, ctx, direct)
				defer unpause()
				b.send(t, muxCmd("SET", "limit:b", "1"))
				waitFor(t, "b's SET to wait for the pause", func() bool { _, sets := qbuf(); return sets > 0 })

				// a's SET is refused at once on a connection of its own; on the shared one
				// it is queued behind b's, whole, unless Redis already closed it. Redis may
				// refuse it and close the connection before all 2 MB are written: the
				// write then fails, which is the connection closed that the test allows.
				if _, err := io.WriteString(a, big); err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("write a's big SET: %v", err)
				}
				type reply struct {
					got string
					err error
				}
				aReply := make(chan reply, 1)
				go func() {
					got, err := muxReadReply(a.r)
					aReply <- reply{got, err}
				}()
				var ra *reply
				answered := func() bool {
					if ra == nil {
						select {
						case r := <-aReply:
							ra = &r
						default:
						}
					}
					return ra != nil
				}
				waitFor(t, "a's big SET to reach Redis", func() bool {
					sum, sets := qbuf()
					return answered() || sum >= len(big) || sets == 0
				})
				behind, setsBefore := qbuf()
				small := muxCmd("SET", "limit:c", "1")
				c.send(t, small)
				// c's SET waits for the pause: behind b's, or on a connection of its own.
				waitFor(t, "c's SET to reach Redis", func() bool {
					sum, sets := qbuf()
					return sum >= behind+len(small) || sets > setsBefore
				})
				unpause()

				if !answered() {
					r := <-aReply
					ra = &r
				}
				if ra.err == nil && !strings.HasPrefix(ra.got, "-ERR Protocol error") {
					t.Errorf("a, SET over the limit: got %q; want a protocol error or the connection closed", ra.got)
				}
				for _, x := range []struct {
					name string
					c    *muxConn
				}{{"b, queued before a's SET", b}, {"c, queued after a's SET", c}} {
					if got, err := muxReadReply(x.c.r); got != muxOK {
						t.Errorf("%s: got %q, %v; want +OK", x.name, got, err)
					}
				}
				muxDial(t, addr).expect(t, muxBulk("1"), "GET", "limit:c")
			})
		}
	}
}

// TestMuxCommandLimitRefused: where CONFIG GET is refused (renamed, or denied by an ACL),
// the proxy takes Redis's default limits: Redis is still shared, and a command within
// BufferSize stays on the shared connection.
func TestMuxCommandLimitRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"renamed", []string{"--rename-command", "CONFIG", "hidden-config"}},
		{"ACL", []string{"--user", "default", "on", "nopass", "~*", "&*", "+@all", "-config"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{Args: tt.args})
			p := muxProxy(t, srv, sharedMode, 4<<20)
			c := muxDial(t, p.Addr().String())
			value := strings.Repeat("v", 2<<20)
			c.expect(t, muxOK, "SET", "refused:k", value)
			c.expect(t, muxBulk(value), "GET", "refused:k")
			st := p.Stats()
			if st.SharedClients != 1 || st.Pins[sampler.PinTooLarge] != 0 || st.SharedFailures != 0 {
				t.Fatalf("stats: %d shared clients, %d pinned as too large, %d shared failures; want 1, 0, 0",
					st.SharedClients, st.Pins[sampler.PinTooLarge], st.SharedFailures)
			}
		})
	}
}

// TestMuxBlockingCommands: a command that blocks until another client writes (BLMPOP,
// BZMPOP, XREAD with BLOCK, wherever BLOCK comes) must not hold back other clients'
// commands, as it would on a shared connection, where Redis answers nothing after it
// until it returns.
func TestMuxBlockingCommands(t *testing.T) {
	tests := []struct {
		name    string
		block   []string // blocks until wake
		other   []string // another client's command, of the same kind (read or write)
		want    string   // its reply
		wake    []string
		replied string // the start of the blocked command's reply
	}{
		{"BLMPOP", []string{"BLMPOP", "0", "1", "blk:list", "LEFT"}, []string{"SET", "blk:w", "1"}, muxOK,
			[]string{"RPUSH", "blk:list", "x"}, "*2\r\n$8\r\nblk:list\r\n"},
		{"BZMPOP", []string{"BZMPOP", "0", "1", "blk:zset", "MIN"}, []string{"SET", "blk:w", "1"}, muxOK,
			[]string{"ZADD", "blk:zset", "1", "m"}, "*2\r\n$8\r\nblk:zset\r\n"},
		{"XREAD BLOCK", []string{"XREAD", "BLOCK", "0", "STREAMS", "blk:s1", "$"}, []string{"GET", "blk:r"}, muxNil,
			[]string{"XADD", "blk:s1", "*", "f", "v"}, "*1\r\n*2\r\n$6\r\nblk:s1\r\n"},
		{"XREAD COUNT BLOCK", []string{"XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "blk:s2", "$"}, []string{"GET", "blk:r"}, muxNil,
			[]string{"XADD", "blk:s2", "*", "f", "v"}, "*1\r\n*2\r\n$6\r\nblk:s2\r\n"},
	}
	forMuxModes(t, 0, func(t *testing.T, srv *redistest.Server, addr string) {
		direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer direct.Close()
		ctx := context.Background()
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				a, b := muxDial(t, addr), muxDial(t, addr)
				a.expect(t, "+PONG\r\n", "PING")
				b.expect(t, "+PONG\r\n", "PING")
				a.send(t, muxCmd(tt.block...))
				waitFor(t, tt.name+" to block", func() bool {
					n, err := direct.Info(ctx, "clients").Result()
					return err == nil && strings.Contains(n, "blocked_clients:1\r\n")
				})
				b.expect(t, tt.want, tt.other...)
				b.do(t, tt.wake...)
				if got := a.reply(t); !strings.HasPrefix(got, tt.replied) {
					t.Fatalf("%s once woken: got %q; want %q…", tt.name, got, tt.replied)
				}
			})
		}
	})
}

// TestMuxConnectionCommands: commands that change or end the connection they come on,
// each sent by a client that was on the shared connections, with commands of its own
// before and after in one write. Each pins it, so none reaches a shared connection: a
// client that stayed shared gets exactly its replies, before and after, and no shared
// connection fails.
func TestMuxConnectionCommands(t *testing.T) {
	tests := []struct {
		name string
		req  string // after "SET conn:a 1"
		skip int    // replies after its +OK not looked at
		want string // the replies after those; then end of file when eof
		eof  bool
	}{
		{"QUIT", "QUIT\r\nGET conn:a\r\n", 0, muxOK, true},
		{"RESET", "RESET\r\nGET conn:a\r\n", 0, "+RESET\r\n" + muxBulk("1"), false},
		{"CLIENT REPLY OFF", "CLIENT REPLY OFF\r\nGET conn:a\r\nCLIENT REPLY ON\r\nGET conn:a\r\n", 0, muxOK + muxBulk("1"), false},
		{"CLIENT REPLY SKIP", "CLIENT REPLY SKIP\r\nGET conn:a\r\nGET conn:a\r\n", 0, muxBulk("1"), false},
		{"CLIENT SETNAME", "CLIENT SETNAME x\r\nCLIENT GETNAME\r\n", 0, muxOK + muxBulk("x"), false},
		{"CLIENT TRACKING", "CLIENT TRACKING ON\r\nGET conn:a\r\n", 0, muxOK + muxBulk("1"), false},
		{"CLIENT NO-EVICT", "CLIENT NO-EVICT ON\r\nGET conn:a\r\n", 0, muxOK + muxBulk("1"), false},
		{"HELLO SETNAME", "HELLO 2 SETNAME x\r\nCLIENT GETNAME\r\n", 1, muxBulk("x"), false}, // HELLO's map skipped
		{"AUTH wrong", "AUTH nosuchuser wrong\r\nGET conn:a\r\n", 0, "-WRONGPASS invalid username-password pair or user is disabled.\r\n" + muxBulk("1"), false},
		{"READONLY", "READONLY\r\nGET conn:a\r\n", 0, "-ERR This instance has cluster support disabled\r\n" + muxBulk("1"), false},
		{"WAIT", "WAIT 0 0\r\nGET conn:a\r\n", 0, muxInt(0) + muxBulk("1"), false},
	}
	srv := redistest.Start(t)
	p := muxProxy(t, srv, sharedMode, 0)
	addr := p.Addr().String()
	b := muxDial(t, addr)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := muxDial(t, addr)
			a.expect(t, "+PONG\r\n", "PING")
			pins := p.Stats().Pins[sampler.PinCommand]
			b.send(t, muxCmd("SET", "conn:b", strconv.Itoa(i))+muxCmd("GET", "conn:b"))
			a.send(t, "SET conn:a 1\r\n"+tt.req)
			b.send(t, muxCmd("INCR", "conn:b")+muxCmd("GET", "conn:b"))
			if got := a.reply(t); got != muxOK {
				t.Fatalf("SET before %s: got %q; want +OK", tt.name, got)
			}
			for range tt.skip {
				a.reply(t)
			}
			var got strings.Builder
			for got.Len() < len(tt.want) {
				got.WriteString(a.reply(t))
			}
			if got.String() != tt.want {
				t.Fatalf("%q: got %q; want %q", tt.req, got.String(), tt.want)
			}
			if tt.eof {
				a.expectEOF(t)
			}
			v := strconv.Itoa(i)
			want := []string{muxOK, muxBulk(v), muxInt(int64(i + 1)), muxBulk(strconv.Itoa(i + 1))}
			for j, w := range want {
				if got := b.reply(t); got != w {
					t.Fatalf("another client's reply %d while a sent %s: got %q; want %q", j, tt.name, got, w)
				}
			}
			if st := p.Stats(); st.SharedFailures != 0 || st.SharedClients < 1 || st.Pins[sampler.PinCommand] != pins+1 {
				t.Fatalf("after %s: %d shared failures, %d shared clients, %d more pinned for a command; want 0, at least 1, 1",
					tt.name, st.SharedFailures, st.SharedClients, st.Pins[sampler.PinCommand]-pins)
			}
		})
	}
}

// TestMuxBehindTwemproxy: a server that closes a connection on a command it does not know,
// as twemproxy does on CONFIG, leaves the proxy sharing its connections, with Redis's
// default limits, rather than failing to share them.
func TestMuxBehindTwemproxy(t *testing.T) {
	srv := redistest.Start(t)
	tw := redistest.StartTwemproxy(t, srv.Addr())
	p := startProxy(t, sampler.ProxyOptions{Upstream: tw.Addr(), Sink: newRecordSink()})
	a, b := muxDial(t, p.Addr().String()), muxDial(t, p.Addr().String())
	a.expect(t, muxOK, "SET", "tw:k", "1")
	b.expect(t, muxInt(2), "INCR", "tw:k")
	a.expect(t, muxBulk("2"), "GET", "tw:k")
	st := p.Stats()
	if st.SharedClients != 2 || st.SharedFailures != 0 {
		t.Fatalf("stats: %d shared clients, %d shared failures; want 2, 0", st.SharedClients, st.SharedFailures)
	}
}

// pauseWrites holds Redis's writes (CLIENT PAUSE WRITE, 20 s at most) and returns the
// unpause, which acts once however often it is called.
func pauseWrites(t *testing.T, ctx context.Context, direct *redis.Client) (unpause func()) {
	t.Helper()
	if err := direct.Do(ctx, "CLIENT", "PAUSE", "20000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if err := direct.ClientUnpause(ctx).Err(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestMuxSlowReaderCut: multiplexed clients that send GETs of a large value and do not
// read the replies: once the replies waiting for the tap's clients pass MaxOutputBytes,
// the tap stops reading Redis, and after a second in which the clients read almost
// nothing the client holding the most is disconnected, rather than holding the others
// up or piling replies up in the tap's memory. A slow client holding less keeps its
// connection and gets every reply whole; another client is answered (its reply waits
// in Redis for that second at most); the shared connection stays up; the warning names
// the client cut.
func TestMuxSlowReaderCut(t *testing.T) {
	value := strings.Repeat("v", 1<<20)
	srv := redisWith(t, map[string]string{"slow:big": value})
	const budget = 8 << 20
	var logs logbuf.Buffer
	p := startProxy(t, sampler.ProxyOptions{
		Upstream: srv.Addr(), Sink: newRecordSink(), MaxOutputBytes: budget,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	addr := p.Addr().String()
	fast := muxDial(t, addr)
	fast.expect(t, muxOK, "SET", "slow:small", "s")

	// Slow clients: small receive buffers, and they do not read.
	dial := func() net.Conn { return dialSmallBuffer(t, addr) }
	// The one holding less: 3 replies, 3 MiB, some of it in the sockets' buffers.
	less := dial()
	const lessGets = 3
	if _, err := io.WriteString(less, strings.Repeat(muxCmd("GET", "slow:big"), lessGets)); err != nil {
		t.Fatal(err)
	}
	fast.expect(t, muxBulk("s"), "GET", "slow:small")
	time.Sleep(100 * time.Millisecond)
	// The one holding the most: 16 GETs in one go, 16 MiB of replies. (Sent one at a
	// time, they would be few: a client is not read while its replies wait, and if it
	// sends more, the rest of its commands go to a connection of its own, where Redis
	// keeps their replies. Nor would more in one go add any: a client's first 16
	// commands go to Redis, the rest once their replies went out, or with it to a
	// connection of its own.)
	most := dial()
	if _, err := io.WriteString(most, strings.Repeat(muxCmd("GET", "slow:big"), 16)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().OutputCuts == 0 && time.Now().Before(deadline) {
		fast.expect(t, muxBulk("s"), "GET", "slow:small")
	}
	waitFor(t, "a slow client to be cut", func() bool { return p.Stats().OutputCuts == 1 })
	_ = most.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, most); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("reading the cut client's connection to its end: %v; want its end (EOF or reset)", err)
	}
	// The other slow client reads now: every reply, whole.
	_ = less.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(less)
	for i := range lessGets {
		if got, err := muxReadReply(r); got != muxBulk(value) {
			t.Fatalf("reply %d to the slow client that held less: %d bytes, %v; want the value whole", i, len(got), err)
		}
	}
	fast.expect(t, muxBulk("s"), "GET", "slow:small")
	waitFor(t, "no reply waiting", func() bool { return p.Stats().OutputBytes == 0 })
	if s := p.Stats(); s.SharedFailures != 0 || s.OutputCuts != 1 {
		t.Errorf("shared connection failures %d, cuts %d; want 0 and 1", s.SharedFailures, s.OutputCuts)
	}
	log := logs.String()
	for _, want := range []string{"client disconnected", "client=" + most.LocalAddr().String(), fmt.Sprintf("max_output_bytes=%d", budget), "proxy.max_output_bytes"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestMuxSlowReaderHoldsNoOneUp: a client that reads, but slower than Redis answers
// the large replies it pipelined, keeps the tap paused, and with it every client of the
// shared connections; once a pause has lasted a second the client holding the most is
// cut, so that the others go on. Another client is answered, rightly, after that.
func TestMuxSlowReaderHoldsNoOneUp(t *testing.T) {
	value := strings.Repeat("w", 1<<20)
	srv := redisWith(t, map[string]string{"slowread:big": value})
	const budget = 8 << 20
	var logs logbuf.Buffer
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), MaxOutputBytes: budget,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	addr := p.Addr().String()
	other := muxDial(t, addr)
	other.expect(t, muxOK, "SET", "slowread:small", "s")
	slow := muxDial(t, addr)
	slow.send(t, strings.Repeat(muxCmd("GET", "slowread:big"), 64))
	// It reads 16 KiB every 10 ms: 1.6 MB/s, while 64 MB are owed to it.
	done := make(chan int64, 1)
	go func() {
		var n int64
		buf := make([]byte, 16<<10)
		for {
			k, err := slow.Read(buf)
			n += int64(k)
			if err != nil {
				done <- n
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	other.expect(t, muxBulk("s"), "GET", "slowread:small")
	var read int64
	select {
	case read = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow reader was not cut within 30 s")
	}
	if s := p.Stats(); s.OutputCuts != 1 {
		t.Errorf("cuts %d; want 1, the slow reader", s.OutputCuts)
	}
	if read >= int64(64*len(value)) {
		t.Errorf("the slow reader read all %d bytes; want it cut before", read)
	}
	if !strings.Contains(logs.String(), "client="+slow.LocalAddr().String()) {
		t.Errorf("log:\n%s\nwant a warning naming the slow reader", logs.String())
	}
	other.expect(t, muxBulk("s"), "GET", "slowread:small")
	waitFor(t, "no reply waiting", func() bool { return p.Stats().OutputBytes == 0 })
}

// TestMuxRedisGoneWhilePaused: Redis stopping while the tap holds replies for a client
// that does not read (and so has stopped reading Redis) is seen at once, not after the
// pause's second: the clients owed replies are disconnected before any is cut, and the
// held replies are let go.
func TestMuxRedisGoneWhilePaused(t *testing.T) {
	srv := redisWith(t, map[string]string{"gone:big": strings.Repeat("g", 1<<20)})
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), MaxOutputBytes: 4 << 20})
	sampler.SetPauseLimit(p, time.Minute) // so that nothing but Redis's going ends the pause
	addr := p.Addr().String()
	muxDial(t, addr).expect(t, "+PONG\r\n", "PING")
	slow := dialSmallBuffer(t, addr)
	if _, err := io.WriteString(slow, strings.Repeat(muxCmd("GET", "gone:big"), 64)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the budget to fill", func() bool { return p.Stats().OutputBytes > 2<<20 })
	srv.Stop()
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, slow); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the client owed replies to its end: %v; want its end", err)
	}
	if s := p.Stats(); s.OutputCuts != 0 {
		t.Errorf("cuts %d; want 0: Redis's going, seen at once, ends the client first", s.OutputCuts)
	}
	waitFor(t, "no reply held", func() bool { return p.Stats().OutputBytes == 0 })
}

// TestMuxLargeRepliesNotCut: clients that read as fast as they can, fetching together
// eight times MaxOutputBytes of large values at once, pipelined and not, are all served
// whole and none is cut: past the budget the tap stops reading Redis, which keeps the
// rest as it would for clients of its own, until the clients have read what it holds.
func TestMuxLargeRepliesNotCut(t *testing.T) {
	values := map[string]string{"large:0": strings.Repeat("a", 3<<20), "large:1": strings.Repeat("b", 5<<20)}
	srv := redisWith(t, values)
	const budget = 2 << 20
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), MaxOutputBytes: budget})
	addr := p.Addr().String()
	muxClients(t, addr, 4, func(i int, c *muxConn) error {
		keys := []string{"large:0", "large:1", "large:0", "large:1"}
		if i%2 == 0 { // pipelined
			var b strings.Builder
			for _, k := range keys {
				b.WriteString(muxCmd("GET", k))
			}
			if _, err := io.WriteString(c, b.String()); err != nil {
				return err
			}
		}
		for j, k := range keys {
			if i%2 == 1 {
				if _, err := io.WriteString(c, muxCmd("GET", k)); err != nil {
					return err
				}
			}
			got, err := muxReadReply(c.r)
			if err != nil || got != muxBulk(values[k]) {
				return fmt.Errorf("client %d, reply %d (%s): %d bytes, %v; want the value whole", i, j, k, len(got), err)
			}
		}
		return nil
	})
	if s := p.Stats(); s.OutputCuts != 0 || s.SharedFailures != 0 {
		t.Errorf("cuts %d, shared failures %d; want none", s.OutputCuts, s.SharedFailures)
	}
	waitFor(t, "no reply waiting", func() bool { return p.Stats().OutputBytes == 0 })
}

// TestMuxRedisOutputLimitWarned: a Redis that limits its normal clients' replies
// (client-output-buffer-limit normal) applies that limit to a shared connection as a
// whole; the tap says so when it opens the shared connections.
func TestMuxRedisOutputLimitWarned(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	if err := direct.ConfigSet(ctx, "client-output-buffer-limit", "normal 8388608 0 0").Err(); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	muxDial(t, p.Addr().String()).expect(t, "+PONG\r\n", "PING")
	waitFor(t, "the warning", func() bool { return strings.Contains(logs.String(), "client-output-buffer-limit normal") })
	if log := logs.String(); !strings.Contains(log, "limit_bytes=8388608") || strings.Count(log, "client-output-buffer-limit normal") != 1 {
		t.Errorf("log:\n%s\nwant one warning of the limit, with limit_bytes=8388608", log)
	}
}

// TestMuxClientEvictionWarned: a Redis that evicts clients past maxmemory-clients counts a
// shared connection as one client, and evicting it disconnects every client on it; the
// tap says so when it opens the shared connections, and says nothing when it is off.
func TestMuxClientEvictionWarned(t *testing.T) {
	ctx := context.Background()
	for _, setting := range []string{"0", "64mb"} {
		srv := redistest.Start(t)
		direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer direct.Close()
		if err := direct.ConfigSet(ctx, "maxmemory-clients", setting).Err(); err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		muxDial(t, p.Addr().String()).expect(t, "+PONG\r\n", "PING")
		if setting == "0" {
			if log := logs.String(); strings.Contains(log, "maxmemory-clients") {
				t.Errorf("maxmemory-clients 0: log:\n%s\nwant no warning", log)
			}
			continue
		}
		waitFor(t, "the warning", func() bool { return strings.Contains(logs.String(), "maxmemory-clients") })
		if log := logs.String(); !strings.Contains(log, "maxmemory_clients=67108864") || strings.Count(log, "pass maxmemory-clients") != 1 {
			t.Errorf("maxmemory-clients 64mb: log:\n%s\nwant one warning, with maxmemory_clients=67108864", log)
		}
	}
}

// TestMuxPinLogged: at debug level each pin is logged with the client's address, the
// reason and the command, so that an operator can tell which app keeps its own
// connection and why.
func TestMuxPinLogged(t *testing.T) {
	srv := redistest.Start(t)
	var logs logbuf.Buffer
	p := startProxy(t, sampler.ProxyOptions{
		Upstream: srv.Addr(), Sink: newRecordSink(),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	c := muxDial(t, p.Addr().String())
	c.expect(t, muxOK, "SET", "pl:k", "v")
	c.expect(t, muxOK, "MULTI")
	c.expect(t, "+QUEUED\r\n", "GET", "pl:k")
	c.expect(t, "*1\r\n"+muxBulk("v"), "EXEC")
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "client pinned") {
			line = l
		}
	}
	for _, want := range []string{"level=DEBUG", "client=" + c.LocalAddr().String(), "reason=command", "command=MULTI"} {
		if !strings.Contains(line, want) {
			t.Errorf("pin log line %q lacks %q; log:\n%s", line, want, logs.String())
		}
	}
}
