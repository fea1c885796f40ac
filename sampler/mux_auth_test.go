package sampler_test

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// These tests put the proxy in front of a Redis that wants AUTH, with the credentials
// of the shared connections configured (ProxyOptions.UpstreamPassword): a client that
// authenticates with exactly those credentials shares them; any other client gets a
// connection of its own and exactly what Redis answers it there.

// authPass is the password of the Redis in these tests: requirepass, the user default's.
const authPass = "s3cret-tap-pw-1f0b"

// authProxy starts a Redis that wants authPass, and a proxy in front of it whose shared
// connections authenticate as user with pass and that logs at debug level to logs.
func authProxy(t *testing.T, user, pass string, logs *logbuf.Buffer) (*redistest.Server, *sampler.Proxy) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("multiplexing is Linux only")
	}
	srv := redistest.Start(t, redistest.Options{Password: authPass})
	if user != "" && user != "default" {
		if _, err := redistest.Command(srv.Addr(), authPass, "ACL", "SETUSER", user, "on", ">"+pass, "~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	p := startProxy(t, sampler.ProxyOptions{
		Upstream: srv.Addr(), Sink: newRecordSink(), UpstreamUsername: user, UpstreamPassword: pass,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return srv, p
}

// checkNoSecret fails t when logs hold one of secrets.
func checkNoSecret(t *testing.T, logs *logbuf.Buffer, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the proxy's log shows the password %q:\n%s", s, logs.String())
		}
	}
}

// TestMuxAuthShared: clients that AUTH with the configured password share the proxy's
// connections (Redis sees only those), in RESP2 and, for go-redis v9 (HELLO 3 AUTH
// default pass), in RESP3; none is pinned.
func TestMuxAuthShared(t *testing.T) {
	var logs logbuf.Buffer
	srv, p := authProxy(t, "", authPass, &logs)
	addr := p.Addr().String()
	ctx := context.Background()

	var clients []*muxConn
	for i := range 6 {
		c := muxDial(t, addr)
		key := "auth:k" + strconv.Itoa(i)
		switch i {
		case 0: // the user named
			c.expect(t, muxOK, "AUTH", "default", authPass)
		case 1: // AUTH and commands in one write
			c.send(t, muxCmd("AUTH", authPass)+muxCmd("PING"))
			if got := c.reply(t) + c.reply(t); got != muxOK+"+PONG\r\n" {
				t.Fatalf("AUTH and PING in one write: got %q; want +OK, +PONG", got)
			}
		case 2: // HELLO 2 AUTH
			if got := c.do(t, "HELLO", "2", "AUTH", "default", authPass); !strings.HasPrefix(got, "*") {
				t.Fatalf("HELLO 2 AUTH default pass: got %q; want an array", muxShort(got))
			}
		default:
			c.expect(t, muxOK, "AUTH", authPass)
		}
		c.expect(t, muxOK, "SET", key, "v"+strconv.Itoa(i))
		c.expect(t, muxBulk("v"+strconv.Itoa(i)), "GET", key)
		clients = append(clients, c)
	}
	for i, c := range clients {
		c.expect(t, muxBulk("v"+strconv.Itoa(i)), "GET", "auth:k"+strconv.Itoa(i))
	}

	// go-redis v9 sends HELLO 3 AUTH default pass, CLIENT SETINFO and CLIENT
	// MAINT_NOTIFICATIONS, all shared.
	gc := redis.NewClient(&redis.Options{Addr: addr, Password: authPass, PoolSize: 1})
	defer gc.Close()
	if err := gc.Set(ctx, "auth:go", "g", 0).Err(); err != nil {
		t.Fatalf("go-redis with the password, SET: %v", err)
	}
	if got, err := gc.Get(ctx, "auth:go").Result(); err != nil || got != "g" {
		t.Fatalf("go-redis with the password, GET: got %q, %v; want g", got, err)
	}
	if got, err := gc.HGetAll(ctx, "auth:none").Result(); err != nil || len(got) != 0 {
		t.Fatalf("go-redis with the password, HGETALL: got %v, %v; want an empty map", got, err)
	}

	st := p.Stats()
	if st.SharedClients != int64(len(clients))+1 || st.OwnClients != 0 || st.SharedFailures != 0 {
		t.Errorf("stats %+v; want %d clients shared, none on its own connection", st, len(clients)+1)
	}
	for reason, n := range st.Pins {
		if n != 0 {
			t.Errorf("pins %s: %d; want 0", reason, n)
		}
	}
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: authPass})
	defer direct.Close()
	// The shared connections (reads and writes, RESP2 and RESP3); the checks' connections
	// are closed, but Redis may not have seen it yet.
	waitFor(t, "Redis to see only the shared connections", func() bool { return len(muxClientIDs(t, direct)) <= 4 })
	checkNoSecret(t, &logs, authPass)
}

// TestMuxAuthOthersPinned: a client that does not AUTH, AUTHs with a wrong password, or
// as another ACL user, is never served over the shared connections: it gets a connection
// of its own and exactly what Redis answers it directly — NOAUTH, WRONGPASS, and for the
// other user, that user's permissions only (NOPERM), not the tap's.
func TestMuxAuthOthersPinned(t *testing.T) {
	var logs logbuf.Buffer
	srv, p := authProxy(t, "", authPass, &logs)
	addr := p.Addr().String()
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "ro", "on", ">ro-pw", "~ro:*", "+get"},
		{"SET", "ro:k", "v"},
		{"SET", "rw:k", "w"},
	} {
		if _, err := redistest.Command(srv.Addr(), authPass, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	// What Redis answers directly.
	d := muxDial(t, srv.Addr())
	noauth, pingNoauth, helloNoauth := d.do(t, "GET", "rw:k"), d.do(t, "PING"), d.do(t, "HELLO", "3")
	wrongpass, wrongUser := d.do(t, "AUTH", "nope"), d.do(t, "AUTH", "ro", authPass)
	if !strings.HasPrefix(noauth, "-NOAUTH") || !strings.HasPrefix(wrongpass, "-WRONGPASS") {
		t.Fatalf("directly: GET %q, AUTH nope %q; want -NOAUTH, -WRONGPASS", noauth, wrongpass)
	}
	dro := muxDial(t, srv.Addr())
	dro.expect(t, muxOK, "AUTH", "ro", "ro-pw")
	roSet, roOther := dro.do(t, "SET", "ro:k", "x"), dro.do(t, "GET", "rw:k")
	if !strings.HasPrefix(roSet, "-NOPERM") || !strings.HasPrefix(roOther, "-NOPERM") {
		t.Fatalf("directly as ro: SET %q, GET rw:k %q; want -NOPERM", roSet, roOther)
	}

	none := muxDial(t, addr)
	none.expect(t, noauth, "GET", "rw:k")
	none.expect(t, pingNoauth, "PING")
	none.expect(t, noauth, "SET", "rw:k", "stolen")

	hello := muxDial(t, addr)
	hello.expect(t, helloNoauth, "HELLO", "3")
	hello.expect(t, noauth, "GET", "rw:k")

	wrong := muxDial(t, addr)
	wrong.expect(t, wrongpass, "AUTH", "nope")
	wrong.expect(t, noauth, "GET", "rw:k")
	wrong.expect(t, wrongUser, "AUTH", "ro", authPass)
	wrong.expect(t, noauth, "GET", "rw:k")
	wrong.expect(t, muxOK, "AUTH", authPass) // on its own connection now
	wrong.expect(t, muxBulk("w"), "GET", "rw:k")

	ro := muxDial(t, addr)
	ro.expect(t, muxOK, "AUTH", "ro", "ro-pw")
	ro.expect(t, muxBulk("v"), "GET", "ro:k")
	ro.expect(t, roSet, "SET", "ro:k", "x")
	ro.expect(t, roOther, "GET", "rw:k")

	ro3 := muxDial(t, addr)
	if got := ro3.do(t, "HELLO", "3", "AUTH", "ro", "ro-pw"); !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3 AUTH ro: got %q; want a map", muxShort(got))
	}
	ro3.expect(t, muxBulk("v"), "GET", "ro:k")
	ro3.expect(t, roOther, "GET", "rw:k")

	// Authenticated as the tap's user, then as another: that one's rights from then on.
	both := muxDial(t, addr)
	both.expect(t, muxOK, "AUTH", authPass)
	both.expect(t, muxBulk("w"), "GET", "rw:k")
	both.expect(t, muxOK, "AUTH", "ro", "ro-pw")
	both.expect(t, roOther, "GET", "rw:k")

	none.expect(t, noauth, "GET", "rw:k") // still not authenticated
	if got, _ := redistest.Command(srv.Addr(), authPass, "GET", "rw:k"); got != "w" {
		t.Errorf("rw:k after the clients that did not authenticate: %q; want w", got)
	}
	waitFor(t, "the counts", func() bool {
		st := p.Stats()
		return st.SharedClients == 0 && st.OwnClients == 6 && st.Pins[sampler.PinAuth] == 6 && st.SharedFailures == 0
	})
	checkNoSecret(t, &logs, authPass)
}

// TestMuxAuthACLUser: the tap configured with an ACL user shares with clients that
// AUTH as that user, with AUTH or HELLO; a client that AUTHs with only that user's
// password authenticates as user default, so it gets a connection of its own.
func TestMuxAuthACLUser(t *testing.T) {
	var logs logbuf.Buffer
	srv, p := authProxy(t, "app", "app-pw-77", &logs)
	addr := p.Addr().String()
	d := muxDial(t, srv.Addr())
	wrongpass := d.do(t, "AUTH", "app-pw-77")

	a := muxDial(t, addr)
	a.expect(t, muxOK, "AUTH", "app", "app-pw-77")
	a.expect(t, muxOK, "SET", "acl:k", "v")
	a3 := muxDial(t, addr)
	if got := a3.do(t, "HELLO", "3", "AUTH", "app", "app-pw-77"); !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3 AUTH app: got %q; want a map", muxShort(got))
	}
	a3.expect(t, muxBulk("v"), "GET", "acl:k")
	if st := p.Stats(); st.SharedClients != 2 || st.OwnClients != 0 {
		t.Fatalf("stats %+v; want both app clients shared", st)
	}

	legacy := muxDial(t, addr)
	legacy.expect(t, wrongpass, "AUTH", "app-pw-77")
	def := muxDial(t, addr)
	def.expect(t, muxOK, "AUTH", authPass) // user default, on its own connection
	def.expect(t, muxBulk("v"), "GET", "acl:k")
	waitFor(t, "the counts", func() bool {
		st := p.Stats()
		return st.SharedClients == 2 && st.OwnClients == 2 && st.Pins[sampler.PinAuth] == 2
	})
	checkNoSecret(t, &logs, authPass, "app-pw-77")
}

// TestMuxAuthPinnedAuthenticated: a client that authenticated on the shared connections
// and is then pinned (MULTI, BLPOP, SUBSCRIBE, WATCH) gets its own connection
// authenticated with the same credentials, in RESP2 and in RESP3, so its commands work
// there as on a direct connection.
func TestMuxAuthPinnedAuthenticated(t *testing.T) {
	var logs logbuf.Buffer
	srv, p := authProxy(t, "", authPass, &logs)
	addr := p.Addr().String()

	m := muxDial(t, addr)
	m.expect(t, muxOK, "AUTH", authPass)
	m.expect(t, muxOK, "MULTI")
	m.expect(t, "+QUEUED\r\n", "SET", "pin:k", "1")
	m.expect(t, "+QUEUED\r\n", "INCR", "pin:k")
	m.expect(t, "*2\r\n"+muxOK+muxInt(2), "EXEC")
	m.expect(t, muxBulk("2"), "GET", "pin:k")

	// AUTH and MULTI in one write: AUTH is answered on the shared connection.
	one := muxDial(t, addr)
	one.send(t, muxCmd("AUTH", authPass)+muxCmd("MULTI")+muxCmd("GET", "pin:k")+muxCmd("EXEC"))
	if got := one.reply(t) + one.reply(t) + one.reply(t) + one.reply(t); got != muxOK+muxOK+"+QUEUED\r\n*1\r\n"+muxBulk("2") {
		t.Fatalf("AUTH, MULTI, GET, EXEC in one write: got %q", got)
	}

	b, w := muxDial(t, addr), muxDial(t, addr)
	b.expect(t, muxOK, "AUTH", authPass)
	w.expect(t, muxOK, "AUTH", authPass)
	b.send(t, muxCmd("BLPOP", "pin:list", "10"))
	waitFor(t, "BLPOP to block", func() bool {
		info, err := redistest.Command(srv.Addr(), authPass, "INFO", "clients")
		return err == nil && strings.Contains(info, "blocked_clients:1")
	})
	w.expect(t, muxInt(1), "RPUSH", "pin:list", "x")
	if got, want := b.reply(t), "*2\r\n"+muxBulk("pin:list")+muxBulk("x"); got != want {
		t.Fatalf("BLPOP once woken: got %q; want %q", got, want)
	}

	s := muxDial(t, addr)
	s.expect(t, muxOK, "AUTH", "default", authPass)
	s.expect(t, "*3\r\n"+muxBulk("subscribe")+muxBulk("pin:ch")+muxInt(1), "SUBSCRIBE", "pin:ch")
	w.expect(t, muxInt(1), "PUBLISH", "pin:ch", "hi")
	if got, want := s.reply(t), "*3\r\n"+muxBulk("message")+muxBulk("pin:ch")+muxBulk("hi"); got != want {
		t.Fatalf("message: got %q; want %q", got, want)
	}

	r3 := muxDial(t, addr)
	if got := r3.do(t, "HELLO", "3", "AUTH", "default", authPass); !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3 AUTH: got %q; want a map", muxShort(got))
	}
	r3.expect(t, "_\r\n", "GET", "pin:none")
	r3.expect(t, muxOK, "WATCH", "pin:k")
	r3.expect(t, muxOK, "MULTI")
	r3.expect(t, "+QUEUED\r\n", "HGETALL", "pin:none")
	r3.expect(t, "*1\r\n%0\r\n", "EXEC")
	r3.expect(t, "_\r\n", "GET", "pin:none")

	// go-redis v9: HELLO 3 AUTH default pass on the shared connections; a transaction
	// (MULTI) pins it, and its own connection gets HELLO 3 AUTH default pass.
	gc := redis.NewClient(&redis.Options{Addr: addr, Password: authPass, PoolSize: 1})
	defer gc.Close()
	ctx := context.Background()
	if _, err := gc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "pin:go", "g", 0)
		return nil
	}); err != nil {
		t.Fatalf("go-redis, pinned by MULTI: SET: %v", err)
	}
	if got, err := gc.HGetAll(ctx, "pin:none").Result(); err != nil || len(got) != 0 {
		t.Fatalf("go-redis, pinned: HGETALL: got %v, %v; want an empty map", got, err)
	}
	if got, err := gc.Get(ctx, "pin:go").Result(); err != nil || got != "g" {
		t.Fatalf("go-redis, pinned: GET: got %q, %v; want g", got, err)
	}

	// Pinned by a command: MULTI twice, BLPOP, SUBSCRIBE, PUBLISH, WATCH and
	// go-redis's MULTI; none for AUTH.
	waitFor(t, "the counts", func() bool {
		st := p.Stats()
		return st.Pins[sampler.PinCommand] == 7 && st.Pins[sampler.PinAuth] == 0 && st.SharedFailures == 0
	})
	checkNoSecret(t, &logs, authPass)
}

// TestMuxAuthWrongConfigured: with a password configured that Redis refuses, no shared
// connection opens, the log says AUTH failed without showing the password, and clients
// get connections of their own, where their own AUTH works.
func TestMuxAuthWrongConfigured(t *testing.T) {
	var logs logbuf.Buffer
	_, p := authProxy(t, "", "not-the-pw-93", &logs)
	c := muxDial(t, p.Addr().String())
	c.expect(t, muxOK, "AUTH", authPass)
	c.expect(t, muxOK, "SET", "wrong:k", "v")
	c.expect(t, muxBulk("v"), "GET", "wrong:k")
	if st := p.Stats(); st.SharedFailures == 0 || st.SharedClients != 0 || st.OwnClients != 1 {
		t.Errorf("stats %+v; want a shared failure and the client on its own connection", st)
	}
	if !strings.Contains(logs.String(), "AUTH") || !strings.Contains(logs.String(), "WRONGPASS") {
		t.Errorf("log does not say AUTH failed:\n%s", logs.String())
	}
	checkNoSecret(t, &logs, "not-the-pw-93", authPass)
}

// TestProxyRedisBenchmarkAuth: redis-benchmark -a through the proxy configured with the
// password, unpipelined and pipelined, has identical results to direct Redis, and every
// benchmark client is shared (none pinned for AUTH).
func TestProxyRedisBenchmarkAuth(t *testing.T) {
	var logs logbuf.Buffer
	proxied, p := authProxy(t, "", authPass, &logs)
	direct := redistest.Start(t, redistest.Options{Password: authPass})
	const n = 10000
	args := func(extra ...string) []string {
		return append([]string{"-a", authPass, "-n", strconv.Itoa(n), "-r", "1000", "-c", "20", "-t", "set,get,incr,lpush,mset", "-q"}, extra...)
	}
	for _, pipeline := range []string{"1", "16"} {
		redistest.RunBenchmark(t, direct.Addr(), args("-P", pipeline)...)
		redistest.RunBenchmark(t, p.Addr().String(), args("-P", pipeline)...)
	}
	ctx := context.Background()
	for _, srv := range []*redistest.Server{direct, proxied} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: authPass})
		defer c.Close()
		checkBenchmarkEffects(ctx, t, c, srv.Addr(), 2*n)
	}
	if st := p.Stats(); st.Pins[sampler.PinAuth] != 0 || st.SharedFailures != 0 {
		t.Errorf("stats %+v; want no client pinned for AUTH, no shared failure", st)
	}
	checkNoSecret(t, &logs, authPass)
}
