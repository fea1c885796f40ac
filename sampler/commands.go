package sampler

import "strconv"

// Command says how one Redis command touches keys: whether it reads or writes them, and
// where its keys sit among its arguments (args[0] is the command name itself).
type Command struct {
	// Op is OpRead or OpWrite.
	Op Op
	// Counter marks the INCR family on strings (INCR, INCRBY, DECR, DECRBY).
	Counter bool
	// First is the index of the first key; Last the index of the last key, negative
	// counting from the end (-1 is the last argument); Step the distance between keys.
	First, Last, Step int
	// NumKeysAt, when > 0, is the index of an argument that holds the number of keys,
	// which follow it (EVAL script numkeys key…).
	NumKeysAt int
	// Streams marks XREAD: the keys follow the first STREAMS argument (in any case) at or
	// after First, and are the first half of the arguments after it, the IDs the second.
	// KeyRangeOf, which does not see the arguments, finds no keys for it.
	Streams bool
}

// KeyRange returns the indexes into args of this command's keys: first ≤ i ≤ last, in
// steps of step. ok is false when args has no key (too short, bad numkeys).
func (c Command) KeyRange(args [][]byte) (first, last, step int, ok bool) {
	numKeys := -1
	if c.NumKeysAt > 0 && c.NumKeysAt < len(args) {
		if k, err := strconv.Atoi(string(args[c.NumKeysAt])); err == nil {
			numKeys = k
		}
	}
	if c.Streams {
		for i := max(c.First, 1); i < len(args); i++ {
			if isStreams(args[i]) {
				n := len(args) - 1 - i // keys and as many IDs
				if n == 0 || n%2 != 0 {
					return 0, 0, 0, false
				}
				return i + 1, i + n/2, 1, true
			}
		}
		return 0, 0, 0, false
	}
	return c.KeyRangeOf(len(args), numKeys)
}

// isStreams reports whether arg is STREAMS in any case.
func isStreams(arg []byte) bool {
	const kw = "STREAMS"
	if len(arg) != len(kw) {
		return false
	}
	for i, c := range arg {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}

// KeyRangeOf is KeyRange for a command of n arguments (the name included) whose
// argument at NumKeysAt holds numKeys (-1 when it is not a number; ignored by commands
// without NumKeysAt). Callers with arguments in another form (go-redis's []any) use it.
func (c Command) KeyRangeOf(n, numKeys int) (first, last, step int, ok bool) {
	if c.Streams {
		return 0, 0, 0, false
	}
	if c.NumKeysAt > 0 {
		if c.NumKeysAt >= n || numKeys <= 0 || numKeys >= n-c.NumKeysAt { // no overflow
			return 0, 0, 0, false
		}
		return c.NumKeysAt + 1, c.NumKeysAt + numKeys, 1, true
	}
	first, last, step = c.First, c.Last, c.Step
	if last < 0 {
		last = n + last
	}
	if first <= 0 || first >= n || last < first || last >= n || step <= 0 {
		return 0, 0, 0, false
	}
	return first, last, step, true
}

// maxCommandName bounds the command names LookupCommand considers.
const maxCommandName = 24

// LookupCommand finds a command by name, in any case, without allocating.
func LookupCommand(name []byte) (Command, bool) {
	var buf [maxCommandName]byte
	upper, ok := upperName(&buf, name)
	if !ok {
		return Command{}, false
	}
	c, ok := commands[string(upper)]
	return c, ok
}

// upperName writes name in upper case into buf and returns that part of it; false when
// name is empty or longer than any command name.
func upperName(buf *[maxCommandName]byte, name []byte) ([]byte, bool) {
	if len(name) == 0 || len(name) > maxCommandName {
		return nil, false
	}
	for i, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	return buf[:len(name)], true
}

func rd(first, last, step int) Command {
	return Command{Op: OpRead, First: first, Last: last, Step: step}
}
func wr(first, last, step int) Command {
	return Command{Op: OpWrite, First: first, Last: last, Step: step}
}

var (
	one      = rd(1, 1, 1)  // a read of the key in args[1]
	all      = rd(1, -1, 1) // a read of every argument
	wone     = wr(1, 1, 1)
	wall     = wr(1, -1, 1)
	wtwo     = wr(1, 2, 1)
	counter  = Command{Op: OpWrite, Counter: true, First: 1, Last: 1, Step: 1}
	blocking = wr(1, -2, 1) // BLPOP k1 k2 timeout
	script   = Command{Op: OpWrite, NumKeysAt: 2}
	rdNum1   = Command{Op: OpRead, NumKeysAt: 1}  // ZUNION numkeys key…
	wrNum1   = Command{Op: OpWrite, NumKeysAt: 1} // LMPOP numkeys key…
	wrNum2   = Command{Op: OpWrite, NumKeysAt: 2} // BLMPOP timeout numkeys key…
	sub      = rd(2, 2, 1)                        // OBJECT ENCODING key
)

// commands is the command table. Commands without keys (PING, INFO, AUTH, SELECT, …) are
// absent: a source samples nothing for them.
var commands = map[string]Command{
	// strings
	"GET": one, "MGET": all, "STRLEN": one, "GETRANGE": one, "SUBSTR": one, "GETBIT": one,
	"BITCOUNT": one, "BITPOS": one, "LCS": rd(1, 2, 1),
	"SET": wone, "SETNX": wone, "SETEX": wone, "PSETEX": wone, "GETSET": wone, "GETDEL": wone,
	"GETEX": wone, "MSET": wr(1, -1, 2), "MSETNX": wr(1, -1, 2), "APPEND": wone,
	"SETRANGE": wone, "SETBIT": wone, "BITFIELD": wone, "BITOP": wr(2, -1, 1),
	"INCR": counter, "INCRBY": counter, "DECR": counter, "DECRBY": counter,
	"INCRBYFLOAT": wone,
	// generic
	"EXISTS": all, "TYPE": one, "TTL": one, "PTTL": one, "EXPIRETIME": one,
	"PEXPIRETIME": one, "TOUCH": all, "DUMP": one,
	"OBJECT": sub, "SORT_RO": one,
	"DEL": wall, "UNLINK": wall, "EXPIRE": wone, "PEXPIRE": wone, "EXPIREAT": wone,
	"PEXPIREAT": wone, "PERSIST": wone, "RENAME": wtwo, "RENAMENX": wtwo, "COPY": wtwo,
	"RESTORE": wone,
	// hashes
	"HGET": one, "HMGET": one, "HGETALL": one, "HKEYS": one, "HVALS": one, "HLEN": one,
	"HEXISTS": one, "HSTRLEN": one, "HRANDFIELD": one, "HSCAN": one, "HTTL": one,
	"HSET": wone, "HSETNX": wone, "HMSET": wone, "HDEL": wone, "HINCRBY": wone,
	"HINCRBYFLOAT": wone, "HGETDEL": wone, "HGETEX": wone, "HSETEX": wone,
	"HEXPIRE": wone, "HPERSIST": wone,
	// lists
	"LRANGE": one, "LINDEX": one, "LLEN": one, "LPOS": one,
	"LPUSH": wone, "RPUSH": wone, "LPUSHX": wone, "RPUSHX": wone, "LPOP": wone,
	"RPOP": wone, "LSET": wone, "LREM": wone, "LTRIM": wone, "LINSERT": wone,
	"LMOVE": wtwo, "RPOPLPUSH": wtwo, "BLMOVE": wtwo, "BRPOPLPUSH": wtwo,
	"BLPOP": blocking, "BRPOP": blocking, "LMPOP": wrNum1, "BLMPOP": wrNum2,
	// sets
	"SCARD": one, "SISMEMBER": one, "SMISMEMBER": one, "SMEMBERS": one,
	"SRANDMEMBER": one, "SSCAN": one, "SUNION": all, "SINTER": all, "SDIFF": all,
	"SADD": wone, "SREM": wone, "SPOP": wone, "SMOVE": wtwo, "SUNIONSTORE": wall,
	"SINTERSTORE": wall, "SDIFFSTORE": wall, "SINTERCARD": rdNum1,
	// sorted sets
	"ZRANGE": one, "ZRANGEBYSCORE": one, "ZRANGEBYLEX": one, "ZREVRANGE": one,
	"ZREVRANGEBYSCORE": one, "ZREVRANGEBYLEX": one, "ZSCORE": one, "ZMSCORE": one,
	"ZRANK": one, "ZREVRANK": one, "ZCARD": one, "ZCOUNT": one, "ZLEXCOUNT": one,
	"ZRANDMEMBER": one, "ZSCAN": one, "ZUNION": rdNum1, "ZINTER": rdNum1, "ZDIFF": rdNum1,
	"ZINTERCARD": rdNum1, "ZADD": wone, "ZREM": wone, "ZINCRBY": wone, "ZPOPMIN": wone, "ZPOPMAX": wone,
	"ZREMRANGEBYSCORE": wone, "ZREMRANGEBYRANK": wone, "ZREMRANGEBYLEX": wone,
	"BZPOPMIN": blocking, "BZPOPMAX": blocking, "ZRANGESTORE": wtwo, "ZMPOP": wrNum1,
	"BZMPOP": wrNum2,
	// streams, HyperLogLog, geo
	"XRANGE": one, "XREVRANGE": one, "XLEN": one, "XADD": wone, "XDEL": wone, "XTRIM": wone,
	"XREAD": {Op: OpRead, First: 1, Streams: true}, "PFCOUNT": all, "PFADD": wone, "PFMERGE": wall,
	"GEOPOS": one, "GEODIST": one, "GEOHASH": one, "GEOSEARCH": one, "GEORADIUS_RO": one,
	"GEORADIUSBYMEMBER_RO": one, "GEOADD": wone,
	// scripts and functions: keys follow numkeys
	"EVAL": script, "EVALSHA": script, "EVAL_RO": script, "EVALSHA_RO": script,
	"FCALL": script, "FCALL_RO": script,
}
