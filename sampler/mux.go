package sampler

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// Multiplexing: see Proxy for what it does and loop_linux.go for how.

// muxOpen is how many bytes of commands may wait for the shared connection before the
// proxy stops reading clients until Redis has taken them; muxSpareOut is how many bytes
// of the chunks that hold the replies waiting for clients the loop keeps for reuse;
// muxOwed is how many replies a client may be owed: the proxy reads and parses no more
// of it until Redis has answered some (far above what clients pipeline, save a long
// pipeline sent at once; see parseMore).
//
// muxFlushAt is how many bytes of commands a turn of the loop gathers for a shared
// connection before it sends them on, rather than waiting for the end of the turn: Redis
// starts on the first clients' commands while the loop reads the others'. Redis reads
// at most 16 KiB from a connection per pass of its event loop; sending half of that at
// a time took pipelined GETs from 0.75–0.81× to 0.77–0.96× of direct Redis in A/B runs
// (docs/BENCHMARKS.md). Unpipelined turns rarely gather this much.
const (
	muxOpen     = 4 << 20
	muxSpareOut = 1 << 20
	muxFlushAt  = 8 << 10
	muxOwed     = 1024
	muxWindow   = 16 // replies a client may be owed before its parsing stops, at first (see parseMore)
	// muxIdleBufs is how many input buffers the loop keeps for the clients that send
	// next; beyond that they go to the garbage collector.
	muxIdleBufs = 64
)

// muxRetry is how long the proxy gives every new client its own connection after a
// shared connection could not be opened or was refused (Redis wants AUTH, or refuses the
// configured credentials, say).
const muxRetry = 10 * time.Second

// muxCommands are the commands a client may send on the shared connection, each with
// whether it goes to the writes connection: those of the command table that neither
// block (Redis answers nothing after a blocked command on its connection until it
// returns) nor run scripts, plus PING and ECHO; XREAD, which blocks with its BLOCK
// option, is left to muxRoute. XREADGROUP blocks with its BLOCK option too, which comes
// after GROUP group consumer and is not looked for: it is never shared. The writes
// connection takes the commands Redis holds back under CLIENT PAUSE WRITE, which are the
// writes and PFCOUNT (it may replicate a cache update).
var muxCommands = func() map[string]bool {
	m := map[string]bool{"PING": false, "ECHO": false}
	for name, cmd := range commands {
		switch name {
		case "BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BZPOPMIN", "BZPOPMAX", "BLMPOP", "BZMPOP", "XREAD", "XREADGROUP", // block
			"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO": // scripts may SELECT (Redis < 7) and run long
			continue
		}
		m[name] = cmd.Op == OpWrite || name == "PFCOUNT"
	}
	return m
}()

// muxRoute reports whether a command may go over the shared connection, from its name,
// its second argument and its number of arguments, and whether it goes to the writes
// connection; byName says the name alone decided. Besides muxCommands, three commands
// that clients send when they connect are no-ops there: CLIENT SETINFO (library name
// and version, which redis-py, Jedis, node-redis and go-redis send) only labels the
// shared connection in CLIENT LIST; CLIENT MAINT_NOTIFICATIONS (go-redis v9 sends it by
// default) is refused by a Redis without it, which go-redis takes, and on one with it
// turns on pushes that answer no command, which the shared connections skip; and SELECT
// 0 selects the database it is always on. XREAD is
// shared when its second argument is STREAMS: it has no BLOCK option then, and never
// blocks; the BLOCK option may come after COUNT, which is not looked at.
func muxRoute(name, sub []byte, nargs int) (shared, write, byName bool) {
	var buf [maxCommandName]byte
	upper, ok := upperName(&buf, name)
	if !ok {
		return false, false, false
	}
	if write, ok := muxCommands[string(upper)]; ok {
		return true, write, true
	}
	switch string(upper) {
	case "CLIENT":
		return bytes.EqualFold(sub, []byte("SETINFO")) || bytes.EqualFold(sub, []byte("MAINT_NOTIFICATIONS")), false, false
	case "SELECT":
		return nargs == 2 && string(sub) == "0", false, false
	case "XREAD":
		return bytes.EqualFold(sub, []byte("STREAMS")), false, false
	}
	return false, false, false
}

// routeMemo is muxRoute that remembers the last name the name alone decided, byte for
// byte as sent: clients send runs of one command, and comparing a few bytes costs less
// than upper-casing, hashing and a map look-up for each (3.6 % of the proxy's time
// under pipelined GETs before it).
type routeMemo struct {
	name  [maxCommandName]byte
	len   int // 0: nothing remembered
	write bool
}

func (m *routeMemo) route(name, sub []byte, nargs int) (shared, write bool) {
	if m.len > 0 && string(name) == string(m.name[:m.len]) {
		return true, m.write
	}
	shared, write, byName := muxRoute(name, sub, nargs)
	if byName {
		m.len = copy(m.name[:], name)
		m.write = write
	}
	return shared, write
}

// muxLoop returns the event loop of the shared upstream connection, starting one when
// there is none or the last one ended; nil when multiplexing is off, the proxy is
// closing, or Redis cannot be shared now (then the client gets a connection of its own).
func (p *Proxy) muxLoop() *muxLoop {
	if !p.multiplex {
		return nil
	}
	p.muxMu.Lock()
	if p.ctx.Err() != nil || p.draining.Load() || time.Now().Before(p.muxRetryAt) {
		p.muxMu.Unlock()
		return nil
	}
	if l := p.loop; l != nil && l.alive() {
		p.muxMu.Unlock()
		// The shared connection was let in when it was opened; a Redis that has wanted
		// AUTH (or other credentials) since still serves it, but must not serve a new
		// client that has not authenticated. So a new client passes only once a
		// connection opened after it came has been let in without AUTH, or with the
		// configured credentials; clients that come together share that check
		// (probeGate).
		ran, err := p.probes.pass(p.checkShareable)
		if err != nil {
			if ran && p.ctx.Err() == nil { // not a check that Close cut short
				p.sharedFailed(err)
			}
			return nil
		}
		if ran {
			p.muxMu.Lock()
			p.sharedBackLocked() // after a check that failed: Redis wanted AUTH, say
			p.muxMu.Unlock()
		}
		return l
	}
	defer p.muxMu.Unlock()
	p.loop = nil
	start := p.probes.start()
	l, err := p.startLoop()
	if err != nil {
		p.sharedFailedLocked(err)
		return nil
	}
	if l != nil {
		p.probes.passedAt(start) // its connections were let in
	}
	if l != nil {
		p.sharedBackLocked()
	}
	p.loop = l
	return l
}

// sharedBackLocked says so when new clients share Redis again after sharedFailed.
func (p *Proxy) sharedBackLocked() {
	if p.sharedDown {
		p.sharedDown = false
		p.log.Info("proxy: upstream answers again; clients share its connections again", "upstream", p.upstream)
	}
}

// sharedFailed logs that Redis could not be shared and gives every client its own
// connection for muxRetry.
func (p *Proxy) sharedFailed(err error) {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	p.sharedFailedLocked(err)
}

func (p *Proxy) sharedFailedLocked(err error) {
	p.stats.sharedFailures.Add(1)
	p.muxRetryAt = time.Now().Add(p.muxRetry)
	p.sharedDown = true
	p.log.Warn("proxy: cannot open a shared upstream connection; until the retry, each new client gets a connection of its own (with the upstream down, that fails too; with a Redis that wants AUTH the tap lacks, each client authenticates there itself)",
		"upstream", p.upstream, "err", err, "retry_in", p.muxRetry)
}

// checkShareable opens and closes a connection to Redis: an error when a new connection
// cannot be shared now (Redis wants AUTH and no credentials are configured, or refuses
// the configured ones, say).
func (p *Proxy) checkShareable() error {
	conn, err := p.openShared(false)
	if err == nil {
		_ = conn.Close()
	}
	return err
}

// errNoResp3 is openShared's error when Redis does not speak RESP3 (HELLO 3 fails):
// clients that ask for it get connections of their own.
var errNoResp3 = errors.New("the server does not switch to RESP3 (HELLO 3)")

// openShared dials Redis, authenticates the connection with the configured credentials
// (AUTH) when there are some, and checks with a PING that the connection can be shared:
// a Redis that wants AUTH answers -NOAUTH, and then each client must authenticate
// itself. With resp3 it switches the connection to RESP3 with HELLO 3. Its errors never
// show the password.
func (p *Proxy) openShared(resp3 bool) (net.Conn, error) {
	conn, err := p.dialUpstream()
	if err != nil {
		return nil, err
	}
	setNoDelay(conn)
	_ = conn.SetDeadline(time.Now().Add(p.dialer.Timeout))
	var reply []byte
	if a := p.auth; a != nil {
		// AUTH, not HELLO 3 AUTH for the RESP3 pair: a refusal is then plainly the
		// credentials', and HELLO 3's that Redis has no RESP3.
		if reply, err = roundTrip(conn, "AUTH", a.auth); err != nil {
			err = fmt.Errorf("AUTH as user %q with the configured password: %w", a.user, err)
		} else if string(reply) != "+OK\r\n" {
			err = fmt.Errorf("AUTH as user %q with the configured password answered %q; want +OK",
				a.user, a.redact(reply[:min(len(reply), 200)]))
		}
	}
	// A Redis that wants AUTH answers the PING with -NOAUTH.
	if err == nil {
		if reply, err = roundTrip(conn, "PING", encodeCommand("PING")); err == nil && string(reply) != "+PONG\r\n" {
			err = fmt.Errorf("PING answered %q; want +PONG", reply)
		}
	}
	if err == nil && resp3 {
		reply, err = roundTrip(conn, "HELLO 3", helloResp3)
		switch {
		case err != nil:
			// twemproxy, which knows no HELLO, closes the connection.
			err = fmt.Errorf("%w: %w", errNoResp3, err)
		case reply[0] != '%':
			err = fmt.Errorf("%w: answered %q; want a RESP3 map", errNoResp3, reply[:min(len(reply), 120)])
		}
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// Redis's defaults for the limits redisLimits asks for.
const (
	redisProtoMaxBulkLen     = 512 << 20 // proto-max-bulk-len
	redisClientQueryBufLimit = 1 << 30   // client-query-buffer-limit
)

// redisLimits are the limits of Redis that the loop heeds.
type redisLimits struct {
	// maxCmd is the longest command Redis takes from a client: the lower of
	// proto-max-bulk-len (a longer bulk string is a protocol error) and
	// client-query-buffer-limit (a longer query buffer makes Redis close the connection).
	// Either ends the connection the command came on, and with it, on a shared
	// connection, every other client's commands queued after it, so the loop pins a
	// client whose command is longer.
	maxCmd int64
	// maxOut is the hard limit of client-output-buffer-limit for normal clients, 0 for
	// none. Redis applies it to a shared connection as a whole, which the loop warns of.
	maxOut int64
	// evictClients is maxmemory-clients when it is set (Redis 7+: "4mb" as bytes, or a
	// share of maxmemory such as "10%"), "" when it is 0 or not known. Redis counts a
	// shared connection as one client, which the loop warns of.
	evictClients string
}

// defaultRedisLimits are Redis's defaults.
var defaultRedisLimits = redisLimits{maxCmd: min(redisProtoMaxBulkLen, redisClientQueryBufLimit)}

// redisLimits asks Redis on conn, a new shared connection, for its limits. Where CONFIG
// GET is refused (renamed, or denied by an ACL) Redis's defaults stand, which no command
// within BufferSize reaches. An error only when conn fails, which is what a server that
// closes a connection on a command it does not know (twemproxy) does.
func (p *Proxy) redisLimits(conn net.Conn) (redisLimits, error) {
	_ = conn.SetDeadline(time.Now().Add(p.dialer.Timeout))
	lim := redisLimits{maxCmd: math.MaxInt64}
	for _, param := range [...]struct {
		name string
		def  int64
	}{
		{"proto-max-bulk-len", redisProtoMaxBulkLen},
		{"client-query-buffer-limit", redisClientQueryBufLimit},
	} {
		reply, err := roundTrip(conn, "CONFIG GET", encodeCommand("CONFIG", "GET", param.name))
		if err != nil {
			return redisLimits{}, err
		}
		v, ok := configValue(reply)
		if !ok {
			v = param.def
		}
		lim.maxCmd = min(lim.maxCmd, v)
	}
	reply, err := roundTrip(conn, "CONFIG GET", encodeCommand("CONFIG", "GET", "client-output-buffer-limit"))
	if err != nil {
		return redisLimits{}, err
	}
	s, _ := configString(reply)
	lim.maxOut, _ = normalHardLimit(s) // 0, none, when not given
	if reply, err = roundTrip(conn, "CONFIG GET", encodeCommand("CONFIG", "GET", "maxmemory-clients")); err != nil {
		return redisLimits{}, err
	}
	if s, ok := configString(reply); ok && s != "0" && s != "0%" {
		lim.evictClients = s
	}
	_ = conn.SetDeadline(time.Time{})
	return lim, nil
}

// configString returns the value in a reply to a CONFIG GET of one parameter, an array
// (RESP2) or a map (RESP3) of its name and its value; ok is false for an error or an
// empty reply (no such parameter).
func configString(reply []byte) (v string, ok bool) {
	if len(reply) == 0 || reply[0] != '*' && reply[0] != '%' {
		return "", false
	}
	body, ok := bytes.CutSuffix(reply, []byte("\r\n"))
	i := bytes.LastIndex(body, []byte("\r\n"))
	if !ok || i < 0 {
		return "", false
	}
	return string(body[i+2:]), true
}

// configValue is configString's value as a positive integer; ok is false for any other.
func configValue(reply []byte) (v int64, ok bool) {
	s, ok := configString(reply)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return v, true
}

// normalHardLimit returns the hard limit of the normal class in a value of
// client-output-buffer-limit ("normal 0 0 0 replica 268435456 67108864 60 pubsub …", in
// bytes as CONFIG GET gives it); ok is false when it holds none.
func normalHardLimit(v string) (limit int64, ok bool) {
	f := strings.Fields(v)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "normal" {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}

// helloResp3 is HELLO 3, which switches a connection to RESP3.
var helloResp3 = encodeCommand("HELLO", "3")

// encodeCommand encodes a command as a RESP array of bulk strings.
func encodeCommand(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, arg := range args {
		b.WriteString("$" + strconv.Itoa(len(arg)) + "\r\n" + arg + "\r\n")
	}
	return b.String()
}

// roundTrip sends one command on conn and reads its whole reply, with the replyScanner
// that splits the shared connections' replies. Redis answers nothing else on a new
// connection, so bytes after the reply are an error. Errors call the command name, not
// command, which may hold a password.
func roundTrip(conn net.Conn, name, command string) ([]byte, error) {
	if _, err := io.WriteString(conn, command); err != nil {
		return nil, err
	}
	var s replyScanner
	var reply []byte
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		k, done := s.scan(buf[:n])
		reply = append(reply, buf[:k]...)
		switch {
		case done && k != n:
			return nil, fmt.Errorf("%s answered with more than one reply", name)
		case done:
			return reply, nil
		case s.err != nil:
			return nil, s.err
		case err != nil:
			return nil, err
		}
	}
}

// helloProto reports the protocol a plain HELLO 2 or HELLO 3 asks for: one without AUTH
// or SETNAME, which changes nothing but the protocol of the connection.
func helloProto(name, sub []byte, nargs int) (proto int, ok bool) {
	if nargs != 2 || !bytes.EqualFold(name, []byte("HELLO")) {
		return 0, false
	}
	switch string(sub) {
	case "2":
		return 2, true
	case "3":
		return 3, true
	}
	return 0, false
}

// drainShared makes the event loop drain its clients and end (see Shutdown); the check
// in muxLoop, under the same lock, starts no loop after it.
func (p *Proxy) drainShared() {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	if p.loop != nil {
		p.loop.drain()
	}
}

// closeShared stops the event loop at once, when Shutdown's time is up.
func (p *Proxy) closeShared() {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	if p.loop != nil {
		p.loop.close()
	}
}
