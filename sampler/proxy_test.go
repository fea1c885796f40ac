package sampler_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/leaktest"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// recordSink keeps copies of everything a source sends it.
type recordSink struct {
	mu      sync.Mutex // guards the fields below
	samples []recorded
	batches int
	rates   map[float64]int
	sources map[string]int
	drops   map[string]int
}

type recorded struct {
	key     string
	op      sampler.Op
	counter bool
	bytes   uint32
	count   uint32
}

func newRecordSink() *recordSink {
	return &recordSink{rates: map[float64]int{}, sources: map[string]int{}, drops: map[string]int{}}
}

func (s *recordSink) Accept(b sampler.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	s.rates[b.Rate]++
	s.sources[b.Source]++
	for _, x := range b.Samples {
		s.samples = append(s.samples, recorded{string(x.Key), x.Op, x.Counter, x.Bytes, x.Count})
	}
}

func (s *recordSink) Drop(source, reason string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops[reason] += n
}

// find returns the samples of key.
func (s *recordSink) find(key string) []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []recorded
	for _, x := range s.samples {
		if x.key == key {
			out = append(out, x)
		}
	}
	return out
}

func (s *recordSink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.samples)
}

func (s *recordSink) drop(reason string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drops[reason]
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startProxy starts a proxy in front of upstream and closes it when the test ends,
// checking that Serve returns nil.
func startProxy(t testing.TB, o sampler.ProxyOptions) *sampler.Proxy {
	t.Helper()
	p, err := sampler.NewProxy(o)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(context.Background()) }()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: got %v; want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after Close")
		}
	})
	return p
}

func TestProxyCommands(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: "pw"})
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{
		Upstream: srv.Addr(), SampleEvery: 1, Sink: sink, FlushInterval: 10 * time.Millisecond,
	})
	ctx := context.Background()
	// DB 3 makes go-redis send AUTH and SELECT on every new connection.
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr().String(), Password: "pw", DB: 3})
	defer viaProxy.Close()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "pw", DB: 3})
	defer direct.Close()

	t.Run("auth required", func(t *testing.T) {
		noAuth := redis.NewClient(&redis.Options{Addr: p.Addr().String(), MaxRetries: -1})
		defer noAuth.Close()
		err := noAuth.Get(ctx, "x").Err()
		if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("GET without AUTH: got %v; want NOAUTH", err)
		}
	})

	t.Run("pipeline", func(t *testing.T) {
		cmds, err := viaProxy.Pipelined(ctx, func(pl redis.Pipeliner) error {
			pl.Set(ctx, "p:str", "hello", 0)
			pl.Get(ctx, "p:str")
			pl.Incr(ctx, "p:n")
			pl.IncrBy(ctx, "p:n", 41)
			pl.MSet(ctx, "p:a", "1", "p:b", "22")
			pl.MGet(ctx, "p:a", "p:b", "p:none")
			pl.Del(ctx, "p:a")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := cmds[1].(*redis.StringCmd).Val(); got != "hello" {
			t.Errorf("GET p:str: got %q; want hello", got)
		}
		if got := cmds[3].(*redis.IntCmd).Val(); got != 42 {
			t.Errorf("INCRBY p:n: got %d; want 42", got)
		}
		if got := fmt.Sprint(cmds[5].(*redis.SliceCmd).Val()); got != "[1 22 <nil>]" {
			t.Errorf("MGET: got %s; want [1 22 <nil>]", got)
		}
		// SELECT 3 took effect: the keys are in DB 3, as seen directly.
		if got, err := direct.Get(ctx, "p:n").Result(); err != nil || got != "42" {
			t.Errorf("direct GET p:n in DB 3: got %q, %v; want 42", got, err)
		}
	})

	t.Run("blpop", func(t *testing.T) {
		got := make(chan []string, 1)
		go func() {
			v, err := viaProxy.BLPop(ctx, 5*time.Second, "p:queue").Result()
			if err != nil {
				v = []string{err.Error()}
			}
			got <- v
		}()
		// Push once the BLPOP is blocked on the server.
		waitFor(t, "BLPOP to block", func() bool {
			info, _ := direct.Info(ctx, "clients").Result()
			return strings.Contains(info, "blocked_clients:1")
		})
		if err := direct.RPush(ctx, "p:queue", "job").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-got:
			if fmt.Sprint(v) != "[p:queue job]" {
				t.Fatalf("BLPOP: got %v; want [p:queue job]", v)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("BLPOP did not return")
		}
	})

	t.Run("pubsub", func(t *testing.T) {
		sub := viaProxy.Subscribe(ctx, "p:chan")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
			t.Fatal(err)
		}
		if err := direct.Publish(ctx, "p:chan", "news").Err(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg, err := sub.ReceiveMessage(rctx)
		if err != nil || msg.Payload != "news" {
			t.Fatalf("message: got %v, %v; want news", msg, err)
		}
	})

	t.Run("multi exec", func(t *testing.T) {
		cmds, err := viaProxy.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			pl.Set(ctx, "p:tx", "a", 0)
			pl.Append(ctx, "p:tx", "bc")
			pl.Get(ctx, "p:tx")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := cmds[2].(*redis.StringCmd).Val(); got != "abc" {
			t.Fatalf("GET in MULTI/EXEC: got %q; want abc", got)
		}
	})

	t.Run("samples", func(t *testing.T) {
		tests := []struct {
			key     string
			op      sampler.Op
			counter bool
			n       int // samples at least
			bytes   uint32
		}{
			{"p:str", sampler.OpWrite, false, 1, 5}, // SET p:str hello
			{"p:n", sampler.OpWrite, true, 2, 0},    // INCR, INCRBY
			{"p:b", sampler.OpWrite, false, 1, 2},   // MSET p:a 1 p:b 22
			{"p:none", sampler.OpRead, false, 1, 0}, // MGET
			{"p:queue", sampler.OpWrite, false, 1, 0},
			{"p:tx", sampler.OpWrite, false, 3, 1}, // SET, APPEND, GET
		}
		for _, tt := range tests {
			waitFor(t, "samples of "+tt.key, func() bool { return len(sink.find(tt.key)) >= tt.n })
			got := sink.find(tt.key)
			if got[0].op != tt.op || got[0].counter != tt.counter || got[0].bytes != tt.bytes || got[0].count != 1 {
				t.Errorf("%s: got op %v counter %v bytes %d count %d; want op %v counter %v bytes %d count 1",
					tt.key, got[0].op, got[0].counter, got[0].bytes, got[0].count, tt.op, tt.counter, tt.bytes)
			}
		}
		// Commands without keys (AUTH, SELECT, PING, SUBSCRIBE, PUBLISH, MULTI) make no
		// samples, and AUTH's password never becomes a key.
		if got := sink.find("pw"); len(got) != 0 {
			t.Errorf("samples of the password: got %d; want 0", len(got))
		}
		if got := sink.find("p:chan"); len(got) != 0 {
			t.Errorf("samples of the channel: got %d; want 0", len(got))
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if sink.rates[1] != sink.batches || sink.sources["proxy"] != sink.batches {
			t.Errorf("batches: got rates %v sources %v; want all Rate 1, Source proxy", sink.rates, sink.sources)
		}
	})
}

// TestProxyDestinationCommands runs commands that write one key from others through the
// proxy to a real server: each samples its destination as a write and the keys it reads
// as reads.
func TestProxyDestinationCommands(t *testing.T) {
	srv := redistest.Start(t)
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{
		Upstream: srv.Addr(), SampleEvery: 1, Sink: sink, FlushInterval: 10 * time.Millisecond,
	})
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr().String()})
	defer viaProxy.Close()
	direct.SAdd(ctx, "d:a", "1", "2")
	direct.SAdd(ctx, "d:b", "2", "3")
	direct.ZAdd(ctx, "d:z", redis.Z{Score: 1, Member: "m"})
	direct.RPush(ctx, "d:list", "3", "1", "2")

	if n, err := viaProxy.SUnionStore(ctx, "d:union", "d:a", "d:b").Result(); err != nil || n != 3 {
		t.Fatalf("SUNIONSTORE: got %d, %v; want 3", n, err)
	}
	if n, err := viaProxy.ZUnionStore(ctx, "d:zunion", &redis.ZStore{Keys: []string{"d:z"}, Weights: []float64{2}}).Result(); err != nil || n != 1 {
		t.Fatalf("ZUNIONSTORE: got %d, %v; want 1", n, err)
	}
	if n, err := viaProxy.SortStore(ctx, "d:list", "d:sorted", &redis.Sort{Order: "ASC"}).Result(); err != nil || n != 3 {
		t.Fatalf("SORT … STORE: got %d, %v; want 3", n, err)
	}
	if got, err := viaProxy.Sort(ctx, "d:list", &redis.Sort{Order: "DESC"}).Result(); err != nil || fmt.Sprint(got) != "[3 2 1]" {
		t.Fatalf("SORT: got %v, %v; want [3 2 1]", got, err)
	}
	if got, err := direct.SMembers(ctx, "d:union").Result(); err != nil || len(got) != 3 {
		t.Fatalf("members of d:union, read directly: got %v, %v; want 3", got, err)
	}
	tests := []struct {
		key string
		ops []sampler.Op // in the order of the commands above
	}{
		{"d:union", []sampler.Op{sampler.OpWrite}},
		{"d:a", []sampler.Op{sampler.OpRead}},
		{"d:b", []sampler.Op{sampler.OpRead}},
		{"d:zunion", []sampler.Op{sampler.OpWrite}},
		{"d:z", []sampler.Op{sampler.OpRead}},
		{"d:sorted", []sampler.Op{sampler.OpWrite}},
		{"d:list", []sampler.Op{sampler.OpRead, sampler.OpRead}},
	}
	for _, tt := range tests {
		waitFor(t, "samples of "+tt.key, func() bool { return len(sink.find(tt.key)) >= len(tt.ops) })
		got := sink.find(tt.key)
		var ops []sampler.Op
		for _, s := range got {
			ops = append(ops, s.op)
			if s.bytes != 0 || s.counter || s.count != 1 {
				t.Errorf("%s: sample %+v; want no bytes, no counter, count 1", tt.key, s)
			}
		}
		if fmt.Sprint(ops) != fmt.Sprint(tt.ops) {
			t.Errorf("%s: got ops %v; want %v", tt.key, ops, tt.ops)
		}
	}
	// The arguments that are not keys are not sampled.
	for _, notKey := range []string{"1", "2", "WEIGHTS", "STORE", "ASC", "DESC"} {
		if got := sink.find(notKey); len(got) != 0 {
			t.Errorf("samples of %q: got %d; want 0", notKey, len(got))
		}
	}
}

// TestProxySampleRate checks that 1 in SampleEvery commands is sampled, and that the
// batches say so.
func TestProxySampleRate(t *testing.T) {
	srv := redistest.Start(t)
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), SampleEvery: 10, Sink: sink, Seed: 7})
	c := redis.NewClient(&redis.Options{Addr: p.Addr().String()})
	defer c.Close()
	ctx := context.Background()
	const n = 20000
	for i := 0; i < n; i += 1000 {
		if _, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for j := range 1000 {
				pl.Get(ctx, "k"+strconv.Itoa((i+j)%100))
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil { // flushes the last batch
		t.Fatal(err)
	}
	// Binomial(20000, 0.1): mean 2000, standard deviation 42.
	if got := sink.len(); math.Abs(float64(got)-n/10) > 5*math.Sqrt(n*0.1*0.9) {
		t.Fatalf("samples: got %d; want 2000 ± 212", got)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.rates) != 1 || sink.rates[0.1] == 0 {
		t.Fatalf("batch rates: got %v; want all 0.1", sink.rates)
	}
}

// TestProxyRedisBenchmark runs redis-benchmark directly and through the proxy against
// two fresh servers and checks that both end with the same data and command counts.
func TestProxyRedisBenchmark(t *testing.T) {
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) { testProxyRedisBenchmark(t, m) })
	}
}

func testProxyRedisBenchmark(t *testing.T, m muxMode) {
	direct, proxied := redistest.Start(t), redistest.Start(t)
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{Upstream: proxied.Addr(), SampleEvery: 100, Sink: sink, ConnPerClient: m.perClient, NoIOUring: m.noURing})
	const n = 10000
	args := func(extra ...string) []string {
		return append([]string{"-n", strconv.Itoa(n), "-r", "1000", "-c", "20", "-t", "set,get,incr,lpush,mset", "-q"}, extra...)
	}
	for _, pipeline := range []string{"1", "16"} {
		redistest.RunBenchmark(t, direct.Addr(), args("-P", pipeline)...)
		redistest.RunBenchmark(t, p.Addr().String(), args("-P", pipeline)...)
	}
	ctx := context.Background()
	for _, srv := range []*redistest.Server{direct, proxied} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer c.Close()
		checkBenchmarkEffects(ctx, t, c, srv.Addr(), 2*n)
	}
	if sink.drop(sampler.DropMalformed) != 0 {
		t.Errorf("malformed drops %d; want 0", sink.drop(sampler.DropMalformed))
	}
	// 2 runs × 5 tests × n commands, MSET carrying 10 keys: about 2*n*14/100 samples.
	waitFor(t, "samples", func() bool { return sink.len() > 2*n*14/100/2 })
}

// commandCalls returns INFO commandstats calls by lower-case command name.
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	re := regexp.MustCompile(`cmdstat_([a-z|]+):calls=(\d+)`)
	for _, m := range re.FindAllStringSubmatch(info, -1) {
		calls[m[1]], _ = strconv.Atoi(m[2])
	}
	return calls
}

// sumKeys adds value(k) over the keys matching pattern.
func sumKeys(t *testing.T, c *redis.Client, pattern string, value func(string) int64) int64 {
	t.Helper()
	keys, err := c.Keys(context.Background(), pattern).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("KEYS %s: got %d keys, %v; want some", pattern, len(keys), err)
	}
	var sum int64
	for _, k := range keys {
		sum += value(k)
	}
	return sum
}

// TestProxyHugeValue sends a 10 MB value through the proxy and checks it arrives whole and
// is sampled with its size.
func TestProxyHugeValue(t *testing.T) {
	srv := redistest.Start(t)
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), SampleEvery: 1, Sink: sink, FlushInterval: 10 * time.Millisecond})
	c := redis.NewClient(&redis.Options{Addr: p.Addr().String()})
	defer c.Close()
	ctx := context.Background()
	value := strings.Repeat("0123456789", 1<<20)
	if err := c.Set(ctx, "big", value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "big").Result()
	if err != nil || got != value {
		t.Fatalf("GET big: got %d bytes, %v; want the %d bytes set", len(got), err, len(value))
	}
	waitFor(t, "samples of big", func() bool { return len(sink.find("big")) == 2 })
	if s := sink.find("big")[0]; s.op != sampler.OpWrite || s.bytes != uint32(len(value)) {
		t.Fatalf("SET big: got op %v bytes %d; want write, %d", s.op, s.bytes, len(value))
	}
}

// TestProxyMalformed sends bytes that are not RESP: the server's error comes back through
// the proxy, sampling of that connection stops with one malformed drop, and other
// connections are unaffected.
func TestProxyMalformed(t *testing.T) {
	srv := redistest.Start(t)
	sink := newRecordSink()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), SampleEvery: 1, Sink: sink, FlushInterval: 10 * time.Millisecond})
	conn, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n:x\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	want := []string{"$-1", "-ERR Protocol error: expected '$', got ':'"}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("replies: got %q; want %q", lines, want)
	}
	waitFor(t, "a malformed drop", func() bool { return sink.drop(sampler.DropMalformed) == 1 })
	waitFor(t, "the sample of k, before the error", func() bool { return len(sink.find("k")) == 1 })

	c := redis.NewClient(&redis.Options{Addr: p.Addr().String()})
	defer c.Close()
	if err := c.Set(context.Background(), "after", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "samples of after", func() bool { return len(sink.find("after")) == 1 })
}

// TestProxyHalfClose pipes commands and closes the sending side, as `redis-cli < file`
// and `nc` do: every reply still arrives.
func TestProxyHalfClose(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink()})
	conn, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "SET a 1\r\nINCR a\r\nGET a\r\n"); err != nil {
		t.Fatal(err)
	}
	// Give Redis the requests before the FIN: it drops a client's pending replies when
	// it reads end of file, through a proxy or not.
	r := bufio.NewReader(conn)
	var replies []string
	for range 3 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, strings.TrimSpace(line))
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	rest, _ := io.ReadAll(r)
	if got := fmt.Sprint(replies, string(rest)); got != "[+OK :2 $1]2\r\n" {
		t.Fatalf("replies: got %q; want \"[+OK :2 $1]2\\r\\n\"", got)
	}
}

// TestProxyCloseLeaks closes a proxy with open, idle and blocked connections, shared
// and pinned, and checks that every goroutine it started returns.
func TestProxyCloseLeaks(t *testing.T) {
	for _, m := range muxModes {
		t.Run(m.name, func(t *testing.T) { testProxyCloseLeaks(t, m) })
	}
}

func testProxyCloseLeaks(t *testing.T, m muxMode) {
	srv := redistest.Start(t)
	base := runtime.NumGoroutine()
	p, err := sampler.NewProxy(sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(context.Background()) }()
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", p.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	_, _ = io.WriteString(conns[0], "BLPOP q 0\r\n")
	_, _ = io.WriteString(conns[1], "PING\r\n")
	if got, err := bufio.NewReader(conns[1]).ReadString('\n'); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING: got %q, %v; want +PONG", got, err)
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	waitFor(t, "BLPOP to block", func() bool {
		list, err := rc.ClientList(context.Background()).Result()
		return err == nil && strings.Contains(list, "cmd=blpop")
	})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: got %v; want nil", err)
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// The proxy closed the connection: end of file, or a reset when the client had
		// sent bytes not yet read.
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("client read after Close: got %v; want EOF or a reset", err)
		}
		c.Close()
	}
	rc.Close()
	waitFor(t, "goroutines to return", func() bool { return runtime.NumGoroutine() <= base })
	if _, err := net.Dial("tcp", p.Addr().String()); err == nil {
		t.Fatalf("dial after Close: got nil error; want refused")
	}
}

// TestProxyServeContext stops the proxy by cancelling Serve's context.
func TestProxyServeContext(t *testing.T) {
	p, err := sampler.NewProxy(sampler.ProxyOptions{Sink: newRecordSink()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx) }()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: got %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if err := p.Serve(context.Background()); err == nil {
		t.Fatalf("second Serve: got nil; want an error")
	}
}

// TestProxyUpstreamDown: a go-redis client of a proxy whose upstream refuses connections
// gets an error, and the proxy keeps serving. (go-redis v9 reports EOF: the proxy's error
// reply answers its HELLO, which it passes over; TestProxyUpstreamDownReply checks the
// reply.)
func TestProxyUpstreamDown(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	p := startProxy(t, sampler.ProxyOptions{Upstream: addr, Sink: newRecordSink()})
	c := redis.NewClient(&redis.Options{Addr: p.Addr().String(), MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatalf("PING with the upstream down: got nil; want an error")
	}
}

func TestNewProxyErrors(t *testing.T) {
	sink := newRecordSink()
	tests := []struct {
		o    sampler.ProxyOptions
		want string
	}{
		{sampler.ProxyOptions{}, "Sink is nil"},
		{sampler.ProxyOptions{Sink: sink, SampleEvery: -1}, "SampleEvery -1: must be ≥ 1"},
		{sampler.ProxyOptions{Sink: sink, BufferSize: 10}, "BufferSize 10: must be between 512"},
		{sampler.ProxyOptions{Sink: sink, MaxOutputBytes: 4096}, "MaxOutputBytes 4096: must be between 1048576 and 1073741824"},
		{sampler.ProxyOptions{Sink: sink, BatchSize: -1}, "BatchSize -1"},
		{sampler.ProxyOptions{Sink: sink, FlushInterval: -1}, "FlushInterval -1ns"},
		{sampler.ProxyOptions{Sink: sink, DialTimeout: -1}, "DialTimeout -1ns"},
		{sampler.ProxyOptions{Sink: sink, DrainTimeout: -1}, "DrainTimeout -1ns: must be > 0"},
		{sampler.ProxyOptions{Sink: sink, MaxKeyBytes: -1}, "MaxKeyBytes -1"},
		{sampler.ProxyOptions{Sink: sink, SchedPolicy: 3}, "SchedPolicy SchedPolicy(3): must be SchedOff, SchedAuto or SchedBatch"},
		{sampler.ProxyOptions{Sink: sink, SchedInterval: time.Microsecond}, "SchedInterval 1µs: must be between 1ms and 1m"},
		{sampler.ProxyOptions{Sink: sink, Upstream: "nohost"}, `Upstream "nohost": must be host:port`},
		{sampler.ProxyOptions{Sink: sink, Listen: "256.0.0.1:0"}, "256.0.0.1"},
	}
	for _, tt := range tests {
		p, err := sampler.NewProxy(tt.o)
		if err == nil {
			p.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewProxy(%+v): got %v; want an error containing %q", tt.o, err, tt.want)
		}
	}
}

// BenchmarkProxyPipeline measures pipelined GETs of 100 commands per round trip, straight
// to Redis, through the proxy (sampling 1 in 100), and through a proxy that gives each
// client a connection of its own (ConnPerClient: the pinned clients' path, which parses
// the commands and counts the replies), from one connection.
func BenchmarkProxyPipeline(b *testing.B) {
	srv := redistest.Start(b)
	sink := sampler.SinkFunc(func(sampler.Batch) {})
	p := startProxy(b, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: sink})
	own := startProxy(b, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: sink, ConnPerClient: true})
	const depth = 100
	req := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$5\r\nkey:1\r\n", depth))
	for _, target := range []struct{ name, addr string }{
		{"direct", srv.Addr()}, {"proxy", p.Addr().String()}, {"proxy-own", own.Addr().String()},
	} {
		b.Run(target.name, func(b *testing.B) {
			conn, err := net.Dial("tcp", target.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			reply := make([]byte, 5*depth) // "$-1\r\n" per GET
			b.ReportAllocs()
			for b.Loop() {
				if _, err := conn.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(conn, reply); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*depth), "ns/cmd")
		})
	}
}

// TestProxyStats: Stats counts the clients on the shared connection and on their own, and
// why each pinned one was pinned.
func TestProxyStats(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("multiplexing is Linux only")
	}
	srv := redistest.Start(t)
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), BufferSize: 4096})
	dial := func(send string, replies int) *muxConn {
		t.Helper()
		c := muxDial(t, p.Addr().String())
		c.send(t, send)
		for range replies {
			c.reply(t)
		}
		return c
	}
	dial("CLIENT SETINFO LIB-NAME x\r\nSELECT 0\r\nGET a\r\n", 3) // stays shared
	dial("GET a\r\nSELECT 1\r\n", 2)                              // a command pins it
	dial("SET big "+strings.Repeat("v", 8192)+"\r\n", 1)          // too large to share
	dial("GET a\r\nGET \"a\r\n", 2).expectEOF(t)                  // malformed: Redis closes it
	want := map[string]uint64{sampler.PinCommand: 1, sampler.PinTooLarge: 1, sampler.PinMalformed: 1, sampler.PinAuth: 0, sampler.PinBacklog: 0}
	waitFor(t, "the counts", func() bool {
		s := p.Stats()
		return s.SharedClients == 1 && s.OwnClients == 2 && fmt.Sprint(s.Pins) == fmt.Sprint(want) && s.SharedFailures == 0
	})
}

// TestProxyResp3Shared: a client that opens with HELLO 3 stays on the shared connections,
// in RESP3, beside a RESP2 client; HELLO 3 after other commands pins the client instead.
func TestProxyResp3Shared(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("multiplexing is Linux only")
	}
	srv := redistest.Start(t)
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink()})
	addr := p.Addr().String()
	r3, r2 := muxDial(t, addr), muxDial(t, addr)
	r3.send(t, "HELLO 3\r\nHSET h3 f v\r\nHGETALL h3\r\nGET nokey\r\n")
	if hello := r3.reply(t); !strings.HasPrefix(hello, "%") {
		t.Fatalf("HELLO 3: got %q; want a RESP3 map", muxShort(hello))
	}
	if got := r3.reply(t) + r3.reply(t) + r3.reply(t); got != ":1\r\n%1\r\n$1\r\nf\r\n$1\r\nv\r\n_\r\n" {
		t.Fatalf("RESP3 client: got %q; want :1, a map and the null _", got)
	}
	r2.send(t, "HGETALL h3\r\nGET nokey\r\n")
	if got := r2.reply(t) + r2.reply(t); got != "*2\r\n$1\r\nf\r\n$1\r\nv\r\n$-1\r\n" {
		t.Fatalf("RESP2 client beside it: got %q; want an array and $-1", got)
	}
	if s := p.Stats(); s.SharedClients != 2 || s.OwnClients != 0 {
		t.Fatalf("stats %+v; want both clients shared", s)
	}
	// HELLO 3 after a command of the same write: the client is pinned, and HELLO works.
	late := muxDial(t, addr)
	late.send(t, "GET nokey\r\nHELLO 3\r\n")
	if got := late.reply(t) + late.reply(t); !strings.HasPrefix(got, "$-1\r\n%") {
		t.Fatalf("GET then HELLO 3: got %q; want $-1 then a map", muxShort(got))
	}
	waitFor(t, "the late client pinned", func() bool { return p.Stats().Pins[sampler.PinCommand] == 1 })
}

// TestProxyNoResp3: behind a Redis that does not switch to RESP3 (HELLO renamed away),
// plain clients are still shared, and a client that opens with HELLO 3 is pinned and
// gets Redis's own answer.
func TestProxyNoResp3(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("multiplexing is Linux only")
	}
	srv := redistest.Start(t, redistest.Options{Args: []string{"--rename-command", "HELLO", ""}})
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink()})
	addr := p.Addr().String()
	plain := muxDial(t, addr)
	plain.expect(t, "+PONG\r\n", "PING")
	hello := muxDial(t, addr)
	if got := hello.do(t, "HELLO", "3"); !strings.HasPrefix(got, "-ERR unknown command") {
		t.Fatalf("HELLO 3: got %q; want Redis's unknown command error", got)
	}
	hello.expect(t, "+PONG\r\n", "PING")
	if s := p.Stats(); s.SharedClients != 1 || s.OwnClients != 1 || s.Pins[sampler.PinCommand] != 1 || s.SharedFailures != 0 {
		t.Fatalf("stats %+v; want the plain client shared, the HELLO 3 one pinned, no failure", s)
	}
}

// drainModes are the ways a client is served, for the Shutdown tests: over the shared
// connection, on a connection of its own after a first command that pins it (sent in
// the same write as what follows, so that the commands after it reach its own connection
// from what the shared one's loop had read), over the shared connection with
// NoIOUring, and with ConnPerClient.
var drainModes = []drainMode{
	{name: "shared"},
	{name: "pinned", first: "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$5\r\ndrain\r\n", firstReply: "+OK\r\n"},
	{name: "NoIOUring", noURing: true},
	{name: "ConnPerClient", perClient: true},
}

type drainMode struct {
	name       string
	perClient  bool
	noURing    bool   // NoIOUring
	first      string // sent first
	firstReply string // its reply
}

// checkMode checks that the proxy serves its one client as m says.
func (m drainMode) check(t *testing.T, p *sampler.Proxy) {
	t.Helper()
	if runtime.GOOS != "linux" && !m.perClient {
		return // no multiplexing: every client has its own connection
	}
	want := sampler.ProxyStats{OwnClients: 1}
	if m.name == "shared" || m.noURing {
		want = sampler.ProxyStats{SharedClients: 1}
	}
	waitFor(t, m.name+" client", func() bool {
		s := p.Stats()
		return s.SharedClients == want.SharedClients && s.OwnClients == want.OwnClients
	})
}

// TestProxyShutdownLargeReply: a client reading a 32 MiB reply when Shutdown starts gets
// all of it, then end of file (not a reset), and Shutdown returns nil.
func TestProxyShutdownLargeReply(t *testing.T) {
	for _, m := range drainModes {
		t.Run(m.name, func(t *testing.T) { testProxyShutdownLargeReply(t, m) })
	}
}

func testProxyShutdownLargeReply(t *testing.T, m drainMode) {
	srv := redistest.Start(t)
	const size = 32 << 20 // more than the sockets' buffers hold
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	if err := direct.Set(context.Background(), "big", strings.Repeat("v", size), 0).Err(); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing})
	c := muxDial(t, p.Addr().String())
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	c.send(t, m.first+"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n")
	want := m.firstReply + fmt.Sprintf("$%d\r\n", size) + strings.Repeat("v", size) + "\r\n"
	head := make([]byte, len(m.firstReply)+64<<10)
	if _, err := io.ReadFull(c.r, head); err != nil {
		t.Fatalf("the start of the reply: %v", err)
	}
	m.check(t, p)

	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(context.Background()) }()
	rest, err := io.ReadAll(c.r)
	if got := string(head) + string(rest); err != nil || got != want {
		t.Fatalf("after Shutdown began: the client got %d bytes of its %d (equal: %v), then %v; want all of them, then end of file",
			len(got), len(want), got == want, err)
	}
	_ = c.Close()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: got %v; want nil", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close after Shutdown: got %v; want nil", err)
	}
	leaktest.Wait(t, base)
}

// TestProxyShutdownPipeline: a client pipelines INCRs without pause while Shutdown
// starts. Every command Redis ran is answered, in order and whole; then the client gets
// end of file; the commands it wrote from the drain on get no reply.
func TestProxyShutdownPipeline(t *testing.T) {
	for _, m := range drainModes {
		t.Run(m.name, func(t *testing.T) { testProxyShutdownPipeline(t, m) })
	}
}

func testProxyShutdownPipeline(t *testing.T, m drainMode) {
	srv, direct := startDirect(t)
	base := runtime.NumGoroutine()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing})
	c := muxDial(t, p.Addr().String())
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))

	const batch = 100
	chunk := strings.Repeat("*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", batch)
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	var written atomic.Int64
	go func() {
		first := m.first
		for {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			if _, err := io.WriteString(c, first+chunk); err != nil {
				wrote <- err
				return
			}
			first = ""
			written.Add(batch)
		}
	}()
	if m.firstReply != "" {
		if got := c.reply(t); got != m.firstReply {
			t.Fatalf("first command: got %q; want %q", got, m.firstReply)
		}
	}
	shut := make(chan error, 1)
	var replies int64
	for {
		line, err := c.r.ReadString('\n')
		if err == io.EOF && line == "" {
			break
		}
		if err != nil {
			t.Fatalf("after %d replies: got %q, %v; want whole replies, then end of file", replies, line, err)
		}
		replies++
		if want := ":" + strconv.FormatInt(replies, 10) + "\r\n"; line != want {
			t.Fatalf("reply %d: got %q; want %q", replies, line, want)
		}
		if replies == 1000 {
			m.check(t, p)
			go func() { shut <- p.Shutdown(context.Background()) }()
		}
	}
	close(stop)
	<-wrote // its writes may fail once the proxy has closed the connection
	ran, err := direct.Get(context.Background(), "n").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if ran != replies || replies < 1000 {
		t.Fatalf("Redis ran %d INCRs; the client got %d replies; want every command Redis ran answered", ran, replies)
	}
	t.Logf("%d commands written, %d answered", written.Load()+batch, replies)
	_ = c.Close()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: got %v; want nil", err)
	}
	leaktest.Wait(t, base)
}

// TestProxyShutdownDeadline: a client blocked in BLPOP 0 is owed a reply that does not
// come: it is closed when Shutdown's context ends, without a byte, and Shutdown returns
// the context's error. An idle client beside it gets end of file at once.
func TestProxyShutdownDeadline(t *testing.T) {
	srv, direct := startDirect(t)
	base := runtime.NumGoroutine()
	p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink()})
	idle := muxDial(t, p.Addr().String())
	idle.expect(t, "+PONG\r\n", "PING")
	blocked := muxDial(t, p.Addr().String())
	blocked.send(t, muxCmd("BLPOP", "q", "0"))
	waitFor(t, "BLPOP to block", func() bool {
		list, err := direct.ClientList(context.Background()).Result()
		return err == nil && strings.Contains(list, "cmd=blpop")
	})
	idleDone := make(chan error, 1)
	go func() {
		rest, err := io.ReadAll(idle.r)
		if len(rest) > 0 && err == nil {
			err = fmt.Errorf("got %q", rest)
		}
		_ = idle.Close()
		idleDone <- err
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a client blocked: got %v; want %v", err, context.DeadlineExceeded)
	}
	if err := <-idleDone; err != nil {
		t.Errorf("idle client: %v; want end of file", err)
	}
	// Closed at the deadline: end of file, or a reset; no reply.
	if rest, err := io.ReadAll(blocked.r); len(rest) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("blocked client after the deadline: got %q, %v; want no reply, then end of file or a reset", rest, err)
	}
	_ = blocked.Close()
	leaktest.Wait(t, base)
}

// TestProxyShutdownIdle: Shutdown with no clients returns nil; Close and Shutdown after
// it do nothing, and no goroutine is left.
func TestProxyShutdownIdle(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, m := range muxModes {
		p, err := sampler.NewProxy(sampler.ProxyOptions{Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing})
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- p.Serve(context.Background()) }()
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatalf("%s: Shutdown: got %v; want nil", m.name, err)
		}
		if err := <-served; err != nil {
			t.Fatalf("%s: Serve: got %v; want nil", m.name, err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("%s: Close after Shutdown: got %v; want nil", m.name, err)
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatalf("%s: Shutdown again: got %v; want nil", m.name, err)
		}
		if _, err := net.Dial("tcp", p.Addr().String()); err == nil {
			t.Fatalf("%s: dial after Shutdown: got nil error; want refused", m.name)
		}
	}
	leaktest.Wait(t, base)
}

// TestProxyShutdownIdleClient: a client that holds an idle connection, as a pooled one
// does, and neither reads nor closes it, does not hold the stop: once everything it was
// sent has reached it, Shutdown closes it and returns nil before its context ends. The
// client then reads end of file.
func TestProxyShutdownIdleClient(t *testing.T) {
	for _, m := range drainModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := startProxy(t, sampler.ProxyOptions{Upstream: srv.Addr(), Sink: newRecordSink(), ConnPerClient: m.perClient, NoIOUring: m.noURing})
			c := muxDial(t, p.Addr().String())
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			c.send(t, m.first+"*1\r\n$4\r\nPING\r\n")
			if m.firstReply != "" {
				if got := c.reply(t); got != m.firstReply {
					t.Fatalf("first command: got %q; want %q", got, m.firstReply)
				}
			}
			if got := c.reply(t); got != "+PONG\r\n" {
				t.Fatalf("PING: got %q; want +PONG", got)
			}
			m.check(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown with an idle client: got %v; want nil, without waiting for the client to close", err)
			}
			if b, err := c.r.ReadByte(); err != io.EOF {
				t.Fatalf("the idle client after Shutdown: read %q, %v; want end of file", b, err)
			}
		})
	}
}

// startDirect starts a Redis and a client of its own, which has answered a PING (so that
// its goroutines run before a test counts goroutines) and is closed when the test ends.
func startDirect(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { direct.Close() })
	if err := direct.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return srv, direct
}

// checkBenchmarkEffects checks what redis-benchmark's set, get, incr, lpush and mset
// tests, run for want requests each in all, left on the Redis c is connected to (at
// addr): every request arrived exactly once, no loss and no duplicates.
func checkBenchmarkEffects(ctx context.Context, t *testing.T, c *redis.Client, addr string, want int) {
	t.Helper()
	stats := commandCalls(t, c)
	for _, cmd := range []string{"set", "get", "incr", "lpush", "mset"} {
		if stats[cmd] != want {
			t.Errorf("%s: cmdstat_%s calls %d; want %d", addr, cmd, stats[cmd], want)
		}
	}
	// The INCRs went to counter:__rand_int__ keys; together they count every one.
	if got := sumKeys(t, c, "counter*", func(k string) int64 { v, _ := c.Get(ctx, k).Int64(); return v }); got != int64(want) {
		t.Errorf("%s: sum of counters %d; want %d", addr, got, want)
	}
	if got := sumKeys(t, c, "mylist*", func(k string) int64 { return c.LLen(ctx, k).Val() }); got != int64(want) {
		t.Errorf("%s: sum of list lengths %d; want %d", addr, got, want)
	}
}
