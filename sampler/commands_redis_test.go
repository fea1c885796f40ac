package sampler

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// keyVectors are calls of every command in the table, several shapes each (one key,
// several, numkeys, STORE, STREAMS, options), and of a few commands without keys that
// take subcommands. Each key is an argument no other argument repeats, so that a key
// Redis names has one index.
var keyVectors = []string{
	// strings
	"get k", "mget k1", "mget k1 k2 k3", "strlen k", "getrange k 0 -1", "substr k 0 1",
	"getbit k 7", "bitcount k", "bitcount k 0 -1 bit", "bitpos k 1", "bitpos k 1 0 -1 byte",
	"lcs k1 k2", "lcs k1 k2 len", "set k v", "set k v ex 10", "set k v nx get", "setnx k v",
	"setex k 10 v", "psetex k 100 v", "getset k v", "getdel k", "getex k", "getex k persist",
	"mset k1 v1", "mset k1 v1 k2 v2", "msetnx k1 v1 k2 v2", "append k v", "setrange k 0 v",
	"setbit k 7 1", "bitfield k set u8 0 1", "bitfield k incrby u8 0 1 get u8 0",
	"bitfield k get u8 0", "bitfield_ro k get u8 0", "bitop and d k1 k2", "bitop not d k1",
	"incr k", "incrby k 2", "decr k", "decrby k 2", "incrbyfloat k 1.5",
	// strings, newer than Redis 7.0 (Redis 8.2 and 8.4, Valkey 9)
	"bitop diff d k1 k2", "msetex 1 k1 v1", "msetex 2 k1 v1 k2 v2 px 100", "delex k",
	"delex k ifeq v", "delifeq k v", "digest k",
	// generic
	"exists k1", "exists k1 k2", "type k", "ttl k", "pttl k", "expiretime k", "pexpiretime k",
	"touch k1 k2", "dump k", "object encoding k", "object freq k", "object idletime k",
	"object refcount k", "object help", "sort_ro k", "sort_ro k by w_* get o_* limit 0 1 alpha",
	"del k1", "del k1 k2", "unlink k1 k2", "expire k 10", "expire k 10 nx", "pexpire k 100",
	"expireat k 100", "pexpireat k 100", "persist k", "rename k1 k2", "renamenx k1 k2",
	"copy k1 k2", "copy k1 k2 db 1 replace", "restore k 0 payload",
	"restore k 0 payload replace absttl", "restore-asking k 0 payload", "move k 1",
	"memory usage k", "memory usage k samples 5", "memory stats",
	// hashes (the field-TTL and HGETDEL family are newer than Redis 7.0)
	"hget h f", "hmget h f1 f2", "hgetall h", "hkeys h", "hvals h", "hlen h", "hexists h f",
	"hstrlen h f", "hrandfield h 2 withvalues", "hscan h 0 match f*", "hset h f v",
	"hset h f1 v1 f2 v2", "hsetnx h f v", "hmset h f v", "hdel h f1 f2", "hincrby h f 1",
	"hincrbyfloat h f 1.5", "httl h fields 1 f", "hexpire h 10 fields 1 f",
	"hpersist h fields 1 f", "hgetdel h fields 1 f", "hgetex h ex 10 fields 1 f",
	"hsetex h fields 1 f v", "hpexpire h 100 fields 1 f", "hexpireat h 100 fields 1 f",
	"hpexpireat h 100 fields 1 f", "hpttl h fields 1 f", "hexpiretime h fields 1 f",
	"hpexpiretime h fields 1 f",
	// lists
	"lrange l 0 -1", "lindex l 0", "llen l", "lpos l e rank 1", "lpush l a b", "rpush l a",
	"lpushx l a", "rpushx l a", "lpop l", "lpop l 2", "rpop l", "lset l 0 v", "lrem l 0 v",
	"ltrim l 0 1", "linsert l before p v", "lmove s d left right", "rpoplpush s d",
	"blmove s d left right 0", "brpoplpush s d 0", "blpop l1 0", "blpop l1 l2 0",
	"brpop l1 l2 0", "lmpop 1 l1 left", "lmpop 2 l1 l2 right count 2",
	"blmpop 0 2 l1 l2 left",
	// sets
	"scard s", "sismember s m", "smismember s m1 m2", "smembers s", "srandmember s 2",
	"sscan s 0", "sunion s1", "sunion s1 s2", "sinter s1 s2", "sdiff s1 s2 s3", "sadd s m",
	"srem s m", "spop s", "spop s 2", "smove s1 s2 m", "sunionstore d s1 s2",
	"sinterstore d s1", "sdiffstore d s1 s2", "sintercard 1 s1", "sintercard 2 s1 s2 limit 1",
	// sorted sets
	"zrange z 0 -1", "zrange z 0 -1 byscore rev limit 0 1 withscores", "zrangebyscore z 0 1",
	"zrangebylex z - +", "zrevrange z 0 -1", "zrevrangebyscore z 1 0", "zrevrangebylex z + -",
	"zscore z m", "zmscore z m1 m2", "zrank z m", "zrevrank z m", "zcard z", "zcount z 0 1",
	"zlexcount z - +", "zrandmember z 1", "zscan z 0", "zunion 2 z1 z2 withscores",
	"zinter 1 z1", "zdiff 2 z1 z2", "zintercard 2 z1 z2 limit 1", "zadd z 1 m",
	"zadd z nx 1 m 2 n", "zrem z m", "zincrby z 1 m", "zpopmin z", "zpopmax z 2",
	"zremrangebyscore z 0 1", "zremrangebyrank z 0 1", "zremrangebylex z - +",
	"bzpopmin z1 z2 0", "bzpopmax z1 0", "zrangestore d z 0 -1",
	"zrangestore d z 0 1 byscore rev", "zmpop 2 z1 z2 min", "bzmpop 0 1 z1 max count 2",
	"zunionstore d 2 z1 z2 weights 1 2", "zinterstore d 1 z1", "zdiffstore d 2 z1 z2",
	// streams
	"xrange x - +", "xrevrange x + - count 1", "xlen x", "xadd x * f v",
	"xadd x maxlen ~ 10 * f v", "xdel x 1-0", "xtrim x maxlen 10", "xread streams x 0",
	"xread count 1 block 0 streams x1 x2 0 0", "xreadgroup group g c streams x 0",
	"xreadgroup group streams streams count 1 block 0 noack streams x1 x2 > >",
	"xack x g 1-0", "xautoclaim x g c 0 0-0", "xclaim x g c 0 1-0", "xpending x g",
	"xpending x g - + 10 c", "xsetid x 1-0", "xgroup create x g $ mkstream",
	"xgroup createconsumer x g c", "xgroup delconsumer x g c", "xgroup destroy x g",
	"xgroup setid x g 0", "xgroup help", "xinfo stream x full", "xinfo groups x",
	"xinfo consumers x g", "xinfo help", "xdelex x ids 1 1-0", "xackdel x g acked ids 2 1-0 2-0",
	// vector sets (Redis 8)
	"vadd v values 2 1 2 e", "vrem v e", "vsetattr v e {}", "vsim v ele e count 3", "vcard v",
	"vdim v", "vemb v e", "vgetattr v e", "vinfo v", "vlinks v e withscores",
	"vrandmember v 2", "vismember v e", "vrange v - + 10",
	// HyperLogLog, geo
	"pfcount h1", "pfcount h1 h2", "pfadd h a b", "pfmerge d h1 h2", "pfdebug getreg h",
	"geopos g m", "geodist g m1 m2", "geohash g m", "geosearch g frommember m byradius 1 km",
	"georadius_ro g 1 2 3 km", "georadiusbymember_ro g m 3 km", "geoadd g 1 2 m",
	"geosearchstore d g fromlonlat 1 2 bybox 1 1 km storedist",
	// SORT and GEORADIUS
	"sort k", "sort k by w_* get o_* limit 0 1 desc alpha store d", "sort k store d1 store d2",
	"sort k get store store d", "georadius g 1 2 3 km",
	"georadius g 1 2 3 km withdist count 5 store d", "georadius g 1 2 3 km storedist d",
	"georadius g 1 2 3 km store d storedist e", "georadiusbymember g m 3 km store d",
	// scripts and functions
	"eval s 0", "eval s 1 k", "eval s 2 k1 k2 a", "evalsha sha 1 k", "eval_ro s 1 k",
	"evalsha_ro sha 2 k1 k2", "fcall f 1 k", "fcall_ro f 2 k1 k2 a",
	// subcommands without keys
	"client list", "config get maxmemory", "function list", "script exists sha",
}

// keyVectorExceptions are the calls where the table knowingly departs from Redis's
// COMMAND GETKEYSANDFLAGS: what the table finds (as tableKeys renders it), and why.
var keyVectorExceptions = map[string]struct{ table, why string }{
	// The table gives a command one op. BITFIELD with GET operations alone is a read, a
	// write with any other; BITFIELD_RO is its read form. A write is the safe side: the
	// plan hook drops what it caches of the key, the sampler counts a write.
	"bitfield k get u8 0": {"1 k write", "BITFIELD with GET alone reads; the table takes every BITFIELD for a write"},
	// XREADGROUP is a write command (refused by replicas, propagated as XCLAIM and XGROUP
	// SETID): it moves the group's last-delivered ID and adds to its pending list, which
	// XPENDING and XINFO read and DUMP carries. Redis 7.0 flags the stream RO all the same.
	"xreadgroup group g c streams x 0": {"5 x write", "XREADGROUP changes the group's state: a write on the server"},
	"xreadgroup group streams streams count 1 block 0 noack streams x1 x2 > >": {"10 x1 write, 11 x2 write",
		"XREADGROUP changes the group's state: a write on the server"},
	// PFCOUNT caches the cardinality it computes in the HyperLogLog's header, so Redis
	// flags its keys RW, yet the command is read-only (allowed on replicas) and leaves
	// the registers, what the key holds, as they were. Taken for a read: a key hot with
	// PFCOUNTs is read-hot, and its split copies answer PFCOUNT alike, without the
	// plan hook mirroring the key on every count.
	"pfcount h1":    {"1 h1 read", "PFCOUNT only caches its result in the value: a read"},
	"pfcount h1 h2": {"1 h1 read, 2 h2 read", "PFCOUNT only caches its result in the value: a read"},
	// GEORADIUS's key specs find every STORE and STOREDIST option; the command writes
	// only after the last one (TestGeoradiusWritesLastStore runs it).
	"georadius g 1 2 3 km store d storedist e": {"1 g read, 9 e write", "GEORADIUS writes only the key after its last STORE or STOREDIST"},
}

// absentKeyCommands are the commands with keys that Redis lists and the table leaves out
// on purpose, each with why. A subcommand counts as its container (OBJECT ENCODING as
// OBJECT).
var absentKeyCommands = map[string]string{
	"WATCH": "reads no value and writes none: it marks keys for EXEC's check; the reads and " +
		"writes of the transaction are sampled themselves, and the plan hook follows WATCH as a session",
	"MIGRATE": "its key is args[3], or, when that is empty, the arguments after KEYS: a shape " +
		"the table does not have; the plan hook takes every argument of an unknown command for written",
}

// TestCommandTableAgreesWithRedis compares the command table with what a real Redis says
// of the same calls (COMMAND GETKEYSANDFLAGS): the same keys at the same indexes, a key
// Redis flags RO alone read, a key flagged RW, OW or RM written. It also checks that every
// command Redis lists with keys is in the table or in absentKeyCommands, and that every
// command in the table Redis knows has calls in keyVectors.
func TestCommandTableAgreesWithRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed: the command table is not compared with Redis")
	}
	srv := redistest.Start(t)
	rc := dialRedis(t, srv.Addr())

	known, withKeys := redisCommands(t, rc)
	var missing []string
	for name := range withKeys {
		if _, ok := commands[name]; !ok && absentKeyCommands[name] == "" {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("commands Redis lists with keys that the table lacks: %v; want them in the table or in absentKeyCommands with a reason", missing)
	}
	for name := range absentKeyCommands {
		if _, ok := commands[name]; ok || !withKeys[name] {
			t.Errorf("absentKeyCommands has %s: in the table %v, has keys in Redis %v; want absent from the table, with keys", name, ok, withKeys[name])
		}
	}

	covered := map[string]bool{}
	var unknown []string
	for _, line := range keyVectors {
		args := fieldArgs(line)
		name := strings.ToUpper(string(args[0]))
		covered[name] = true
		if !known[name] {
			unknown = append(unknown, name)
			continue
		}
		want, err := redisKeys(rc, args)
		if err != nil {
			t.Errorf("%q: COMMAND GETKEYSANDFLAGS: %v", line, err)
			continue
		}
		got := tableKeys(t, args)
		ex, excepted := keyVectorExceptions[line]
		switch {
		case !excepted && got != want:
			t.Errorf("%q: table %q; Redis %q", line, got, want)
		case excepted && got != ex.table:
			t.Errorf("%q: table %q; want %q (Redis %q), an exception: %s", line, got, ex.table, want, ex.why)
		case excepted && got == want:
			t.Errorf("%q: table and Redis agree (%q); want the exception %q removed", line, got, ex.why)
		case excepted:
			t.Logf("%q: table %q, Redis %q: %s", line, got, want, ex.why)
		}
	}
	for line := range keyVectorExceptions {
		if !slices.Contains(keyVectors, line) {
			t.Errorf("exception %q is not in keyVectors", line)
		}
	}
	for name := range commands {
		if known[name] && !covered[name] {
			t.Errorf("%s: in the table, known to Redis, and no call of it in keyVectors", name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		t.Logf("not compared, unknown to this Redis: %v", slices.Compact(unknown))
	}
}

// TestGeoradiusWritesLastStore checks the exception keyVectorExceptions makes for
// GEORADIUS: of two STORE and STOREDIST options, Redis writes only after the last.
func TestGeoradiusWritesLastStore(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	srv := redistest.Start(t)
	rc := dialRedis(t, srv.Addr())
	for _, line := range []string{
		"geoadd g 15 37 m",
		"georadius g 15 37 200 km store d storedist e",
		"georadius g 15 37 200 km storedist f store h",
	} {
		if _, err := rc.do(fieldArgs(line)...); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	for key, want := range map[string]int64{"d": 0, "e": 1, "f": 0, "h": 1} {
		n, err := rc.do([]byte("EXISTS"), []byte(key))
		if err != nil || n != want {
			t.Errorf("EXISTS %s: got %v, %v; want %d", key, n, err, want)
		}
	}
}

// tableKeys renders the keys the table finds in args as redisKeys renders Redis's:
// "1 k1 read, 2 k2 write", in argument order; "" for none.
func tableKeys(t *testing.T, args [][]byte) string {
	c, ok := LookupCommand(args[0])
	if !ok {
		return ""
	}
	k, dest, ok := c.Keys(args)
	if !ok {
		return ""
	}
	describeKeys(t, k, dest, args) // checks the indexes
	var keys []string
	for i := k.First; i <= k.Last; i += k.Step {
		keys = append(keys, fmt.Sprintf("%d %s %v", i, args[i], k.Op))
	}
	if dest > 0 {
		keys = append(keys, fmt.Sprintf("%d %s %v", dest, args[dest], OpWrite))
	}
	return sortedKeys(keys)
}

func sortedKeys(keys []string) string {
	slices.SortFunc(keys, func(a, b string) int {
		i, _ := strconv.Atoi(strings.Fields(a)[0])
		j, _ := strconv.Atoi(strings.Fields(b)[0])
		return i - j
	})
	return strings.Join(keys, ", ")
}

// redisKeys asks Redis for the keys of args and their flags, and renders them as
// tableKeys does: a key flagged RW, OW or RM is written, one flagged RO alone read.
// Redis's "has no key arguments" is no keys.
func redisKeys(rc *redisConn, args [][]byte) (string, error) {
	reply, err := rc.do(append([][]byte{[]byte("COMMAND"), []byte("GETKEYSANDFLAGS")}, args...)...)
	if err != nil {
		if strings.Contains(err.Error(), "has no key arguments") {
			return "", nil
		}
		return "", err
	}
	entries, _ := reply.([]any)
	var keys []string
	for _, e := range entries {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			return "", fmt.Errorf("reply entry %v: want [key, flags]", e)
		}
		key, _ := pair[0].(string)
		flags, _ := pair[1].([]any)
		var op Op
		for _, f := range flags {
			switch f {
			case "RW", "OW", "RM":
				op = OpWrite
			case "RO":
				op = max(op, OpRead)
			}
		}
		if op == 0 {
			return "", fmt.Errorf("key %q flags %v: none of RO, RW, OW, RM", key, flags)
		}
		i := -1
		for j, a := range args[1:] {
			if string(a) == key {
				if i >= 0 {
					return "", fmt.Errorf("key %q appears twice in the call: its index is ambiguous", key)
				}
				i = j + 1
			}
		}
		if i < 0 {
			return "", fmt.Errorf("key %q is not among the arguments", key)
		}
		keys = append(keys, fmt.Sprintf("%d %s %v", i, key, op))
	}
	return sortedKeys(keys), nil
}

// redisCommands reads COMMAND: the names of the commands Redis knows, in upper case, and
// of those that take keys (a key spec not flagged not_key, the shard channels of
// SPUBLISH), a subcommand by its container's name.
func redisCommands(t *testing.T, rc *redisConn) (known, withKeys map[string]bool) {
	t.Helper()
	reply, err := rc.do([]byte("COMMAND"))
	if err != nil {
		t.Fatalf("COMMAND: %v", err)
	}
	known, withKeys = map[string]bool{}, map[string]bool{}
	var walk func(c []any, container string)
	walk = func(c []any, container string) {
		if len(c) < 10 {
			t.Fatalf("COMMAND entry %v: want 10 fields", c)
		}
		name, _ := c[0].(string)
		known[strings.ToUpper(name)] = true
		specs, _ := c[8].([]any)
		for _, s := range specs {
			fields, _ := s.([]any)
			for i := 0; i+1 < len(fields); i += 2 {
				if fields[i] == "flags" {
					flags, _ := fields[i+1].([]any)
					if !slices.Contains(flags, any("not_key")) {
						withKeys[container] = true
					}
				}
			}
		}
		subs, _ := c[9].([]any)
		for _, sc := range subs {
			sub, _ := sc.([]any)
			walk(sub, container)
		}
	}
	for _, e := range reply.([]any) {
		c, _ := e.([]any)
		if len(c) == 0 {
			t.Fatalf("COMMAND entry %v: empty", e)
		}
		name, _ := c[0].(string)
		walk(c, strings.ToUpper(name))
	}
	if len(known) < 100 || len(withKeys) < 50 {
		t.Fatalf("COMMAND: %d commands, %d with keys; want a full list", len(known), len(withKeys))
	}
	return known, withKeys
}

// redisConn is one RESP2 connection that reads nested replies, which
// redistest.Command flattens.
type redisConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRedis(t *testing.T, addr string) *redisConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &redisConn{c: c, r: bufio.NewReader(c)}
}

// do sends one command and returns its reply: a string, an int64, nil, or a []any of
// them; a Redis error reply as an error.
func (rc *redisConn) do(args ...[]byte) (any, error) {
	var b []byte
	b = fmt.Appendf(b, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = rc.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write(b); err != nil {
		return nil, err
	}
	return readRESPValue(rc.r, 0)
}

func readRESPValue(r *bufio.Reader, depth int) (any, error) {
	if depth > 16 {
		return nil, errors.New("reply nested too deep")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, 0, n)
		for range n {
			v, err := readRESPValue(r, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply line %q", line)
}
