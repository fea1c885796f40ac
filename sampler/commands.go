package sampler

import "strconv"

// Command says how one Redis command touches keys: whether it reads or writes them, and
// where its keys sit among its arguments (args[0] is the command name itself). Keys
// finds them in a call's arguments.
type Command struct {
	// Op is OpRead or OpWrite: what the command does to its keys. A command with a
	// destination (Dest or Store) is OpWrite, though it writes only the destination and
	// reads its other keys, so that a caller that looks at Op alone takes it for a write.
	Op Op
	// Counter marks the INCR family on strings (INCR, INCRBY, DECR, DECRBY).
	Counter bool
	// First is the index of the first key; Last the index of the last key, negative
	// counting from the end (-1 is the last argument); Step the distance between keys.
	First, Last, Step int
	// NumKeysAt, when > 0, is the index of an argument that holds the number of keys,
	// which follow it (EVAL script numkeys key…), in steps of Step when it is above 1
	// (MSETEX numkeys key value key value…).
	NumKeysAt int
	// Streams marks XREAD and XREADGROUP: the keys follow the first STREAMS argument (in
	// any case) at or after First, and are the first half of the arguments after it, the
	// IDs the second. KeysOf, which does not see the arguments, finds no keys for them.
	Streams bool
	// Dest, when > 0, is the index of the one key the command writes, its destination;
	// the keys at First…Last or after NumKeysAt, its sources, are read (COPY src dst,
	// SUNIONSTORE dst src…, ZUNIONSTORE dst numkeys src…).
	Dest int
	// Store, when > 0, marks SORT and GEORADIUS: their options start at index Store, and
	// the key they write, if any, follows the last STORE (or STOREDIST) option; the keys
	// at First…Last are read. KeysOf, which does not see the arguments, finds no keys
	// for them.
	Store int
}

// Keys is where the keys of one call that it touches alike sit among its arguments, and
// what it does to them. It has four fields at most, the most the compiler keeps in
// registers: a larger struct is copied through memory on every return.
type Keys struct {
	// First, Last and Step: args[i] is a key for First ≤ i ≤ Last in steps of Step
	// (≥ 1). First > Last when the call has only a destination (PFMERGE dst).
	First, Last, Step int
	// Op is what the call does to these keys.
	Op Op
}

// Keys returns where the keys of a call of this command with arguments args sit, and
// what the call does to them; dest, when > 0, is the index of a key it writes besides
// them, outside k: the destination of a call that reads the others (COPY src dst, SORT
// key STORE dst). ok is false when the call has no key (too short, bad numkeys). A call
// Redis would refuse may still be found to have keys (SET k).
func (c Command) Keys(args [][]byte) (k Keys, dest int, ok bool) {
	switch {
	case c.Streams:
		for i := max(c.First, 1); i < len(args); i++ {
			if isWord(args[i], "STREAMS") {
				n := len(args) - 1 - i // keys and as many IDs
				if n == 0 || n%2 != 0 {
					return Keys{}, 0, false
				}
				return Keys{First: i + 1, Last: i + n/2, Step: 1, Op: c.Op}, 0, true
			}
		}
		return Keys{}, 0, false
	case c.Store > 0:
		k, ok = fixedKeys(c.First, c.Last, c.Step, len(args))
		if !ok {
			return Keys{}, 0, false
		}
		k.Op = OpRead
		return k, storeDest(args, c.Store), true
	}
	numKeys := -1
	if c.NumKeysAt > 0 && c.NumKeysAt < len(args) {
		if n, err := strconv.Atoi(string(args[c.NumKeysAt])); err == nil {
			numKeys = n
		}
	}
	return c.KeysOf(len(args), numKeys)
}

// KeysOf is Keys for a call of n arguments (the name included) whose argument at
// NumKeysAt holds numKeys (-1 when it is not a number; ignored by commands without
// NumKeysAt). Callers with arguments in another form (go-redis's []any) use it. It finds
// no keys for the commands whose keys depend on other arguments (Streams, Store).
func (c Command) KeysOf(n, numKeys int) (k Keys, dest int, ok bool) {
	if c.Streams || c.Store > 0 {
		return Keys{}, 0, false
	}
	if c.NumKeysAt > 0 {
		step := max(c.Step, 1)
		if c.NumKeysAt >= n || numKeys <= 0 || numKeys > (n-1-c.NumKeysAt)/step { // no overflow
			return Keys{}, 0, false
		}
		first := c.NumKeysAt + 1
		k, ok = Keys{First: first, Last: first + (numKeys-1)*step, Step: step}, true
	} else {
		k, ok = fixedKeys(c.First, c.Last, c.Step, n)
	}
	if c.Dest == 0 {
		k.Op = c.Op
		return k, 0, ok
	}
	if c.Dest >= n {
		return Keys{}, 0, false // too short to name its destination
	}
	if !ok {
		k = Keys{First: 1, Last: 0, Step: 1} // a destination alone
	}
	k.Op = OpRead
	return k, c.Dest, true
}

// fixedKeys returns the keys at first…last (last negative: from the end) in steps of
// step of a call of n arguments. It takes ints, not a Command, which would be copied.
func fixedKeys(first, last, step, n int) (Keys, bool) {
	if last < 0 {
		last = n + last
	}
	if first <= 0 || first >= n || last < first || last >= n || step <= 0 {
		return Keys{}, false
	}
	return Keys{First: first, Last: last, Step: step}, true
}

// storeDest returns the index of the key after the last STORE or STOREDIST option of
// SORT or GEORADIUS, whose options start at index from; 0 when there is none. It steps
// over the arguments of LIMIT offset count, BY pattern, GET pattern and COUNT n, which
// may be spelled STORE. Each command knows only some of these options, and Redis
// refuses a call with another one, which this does not check.
func storeDest(args [][]byte, from int) int {
	dest := 0
	for i := from; i < len(args); i++ {
		switch a := args[i]; {
		case isWord(a, "STORE"), isWord(a, "STOREDIST"):
			if i+1 < len(args) {
				dest = i + 1
			}
			i++
		case isWord(a, "LIMIT"):
			i += 2
		case isWord(a, "BY"), isWord(a, "GET"), isWord(a, "COUNT"):
			i++
		}
	}
	return dest
}

// isWord reports whether arg is kw, which is in upper case, in any case.
func isWord(arg []byte, kw string) bool {
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

// into is a command that writes the key at dest and reads the keys at first…last.
func into(dest, first, last int) Command {
	return Command{Op: OpWrite, Dest: dest, First: first, Last: last, Step: 1}
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
	scriptRO = Command{Op: OpRead, NumKeysAt: 2}           // EVAL_RO: Redis refuses its writes
	rdNum1   = Command{Op: OpRead, NumKeysAt: 1}           // ZUNION numkeys key…
	wrNum1   = Command{Op: OpWrite, NumKeysAt: 1}          // LMPOP numkeys key…
	wrNum2   = Command{Op: OpWrite, NumKeysAt: 2}          // BLMPOP timeout numkeys key…
	sub      = rd(2, 2, 1)                                 // OBJECT ENCODING key
	wsub     = wr(2, 2, 1)                                 // XGROUP CREATE key group id
	setStore = into(1, 2, -1)                              // SUNIONSTORE dst src…
	zStore   = Command{Op: OpWrite, Dest: 1, NumKeysAt: 2} // ZUNIONSTORE dst numkeys src…
)

// commands is the command table. Commands without keys (PING, INFO, AUTH, SELECT, …) are
// absent: a source samples nothing for them. So are WATCH, which neither reads nor writes
// a value, and MIGRATE, whose keys are at args[3] or after KEYS. A key Redis flags RO
// (COMMAND GETKEYSANDFLAGS) is read here, one it flags RW, OW or RM written, but for
// BITFIELD with GET alone and XREADGROUP, taken for writes, and PFCOUNT, taken for a read
// (commands_redis_test.go). Commands newer than the Redis the tests run (7.0: hash field
// expiry, vector sets, MSETEX, XDELEX, Valkey's DELIFEQ) follow the key specs of their
// documentation; that test compares them too when run against a Redis that has them.
var commands = map[string]Command{
	// strings
	"GET": one, "MGET": all, "STRLEN": one, "GETRANGE": one, "SUBSTR": one, "GETBIT": one,
	"BITCOUNT": one, "BITPOS": one, "LCS": rd(1, 2, 1),
	"SET": wone, "SETNX": wone, "SETEX": wone, "PSETEX": wone, "GETSET": wone, "GETDEL": wone,
	"GETEX": wone, "MSET": wr(1, -1, 2), "MSETNX": wr(1, -1, 2), "APPEND": wone,
	"SETRANGE": wone, "SETBIT": wone, "BITFIELD": wone, "BITOP": into(2, 3, -1),
	"INCR": counter, "INCRBY": counter, "DECR": counter, "DECRBY": counter,
	"INCRBYFLOAT": wone, "BITFIELD_RO": one, "DIGEST": one, "DELEX": wone, "DELIFEQ": wone,
	"MSETEX": {Op: OpWrite, NumKeysAt: 1, Step: 2}, // MSETEX numkeys key value…
	// generic
	"EXISTS": all, "TYPE": one, "TTL": one, "PTTL": one, "EXPIRETIME": one,
	"PEXPIRETIME": one, "TOUCH": all, "DUMP": one,
	"OBJECT": sub, "MEMORY": sub, "SORT_RO": one,
	"DEL": wall, "UNLINK": wall, "EXPIRE": wone, "PEXPIRE": wone, "EXPIREAT": wone,
	"PEXPIREAT": wone, "PERSIST": wone, "RENAME": wtwo, "RENAMENX": wtwo, "COPY": into(2, 1, 1),
	"RESTORE": wone, "RESTORE-ASKING": wone, "MOVE": wone,
	// hashes
	"HGET": one, "HMGET": one, "HGETALL": one, "HKEYS": one, "HVALS": one, "HLEN": one,
	"HEXISTS": one, "HSTRLEN": one, "HRANDFIELD": one, "HSCAN": one, "HTTL": one,
	"HSET": wone, "HSETNX": wone, "HMSET": wone, "HDEL": wone, "HINCRBY": wone,
	"HINCRBYFLOAT": wone, "HGETDEL": wone, "HGETEX": wone, "HSETEX": wone,
	"HEXPIRE": wone, "HPEXPIRE": wone, "HEXPIREAT": wone, "HPEXPIREAT": wone, "HPERSIST": wone,
	"HPTTL": one, "HEXPIRETIME": one, "HPEXPIRETIME": one,
	// lists
	"LRANGE": one, "LINDEX": one, "LLEN": one, "LPOS": one,
	"LPUSH": wone, "RPUSH": wone, "LPUSHX": wone, "RPUSHX": wone, "LPOP": wone,
	"RPOP": wone, "LSET": wone, "LREM": wone, "LTRIM": wone, "LINSERT": wone,
	"LMOVE": wtwo, "RPOPLPUSH": wtwo, "BLMOVE": wtwo, "BRPOPLPUSH": wtwo,
	"BLPOP": blocking, "BRPOP": blocking, "LMPOP": wrNum1, "BLMPOP": wrNum2,
	// sets
	"SCARD": one, "SISMEMBER": one, "SMISMEMBER": one, "SMEMBERS": one,
	"SRANDMEMBER": one, "SSCAN": one, "SUNION": all, "SINTER": all, "SDIFF": all,
	"SADD": wone, "SREM": wone, "SPOP": wone, "SMOVE": wtwo, "SUNIONSTORE": setStore,
	"SINTERSTORE": setStore, "SDIFFSTORE": setStore, "SINTERCARD": rdNum1,
	// sorted sets
	"ZRANGE": one, "ZRANGEBYSCORE": one, "ZRANGEBYLEX": one, "ZREVRANGE": one,
	"ZREVRANGEBYSCORE": one, "ZREVRANGEBYLEX": one, "ZSCORE": one, "ZMSCORE": one,
	"ZRANK": one, "ZREVRANK": one, "ZCARD": one, "ZCOUNT": one, "ZLEXCOUNT": one,
	"ZRANDMEMBER": one, "ZSCAN": one, "ZUNION": rdNum1, "ZINTER": rdNum1, "ZDIFF": rdNum1,
	"ZINTERCARD": rdNum1, "ZADD": wone, "ZREM": wone, "ZINCRBY": wone, "ZPOPMIN": wone, "ZPOPMAX": wone,
	"ZREMRANGEBYSCORE": wone, "ZREMRANGEBYRANK": wone, "ZREMRANGEBYLEX": wone,
	"BZPOPMIN": blocking, "BZPOPMAX": blocking, "ZRANGESTORE": into(1, 2, 2), "ZMPOP": wrNum1,
	"BZMPOP": wrNum2, "ZUNIONSTORE": zStore, "ZINTERSTORE": zStore, "ZDIFFSTORE": zStore,
	// streams, HyperLogLog, geo
	"XRANGE": one, "XREVRANGE": one, "XLEN": one, "XADD": wone, "XDEL": wone, "XTRIM": wone,
	"XPENDING": one, "XINFO": sub, "XACK": wone, "XCLAIM": wone, "XAUTOCLAIM": wone, "XSETID": wone,
	"XGROUP": wsub, "XDELEX": wone, "XACKDEL": wone, "XREAD": {Op: OpRead, First: 1, Streams: true},
	"XREADGROUP": {Op: OpWrite, First: 4, Streams: true}, // it moves the group's cursor
	// PFCOUNT caches the count it computes in the value, which leaves what the key holds as it
	// was: a read, which a copy answers alike (commands_redis_test.go)
	"PFCOUNT": all, "PFADD": wone, "PFMERGE": into(1, 2, -1), "PFDEBUG": wsub,
	"GEOPOS": one, "GEODIST": one, "GEOHASH": one, "GEOSEARCH": one, "GEORADIUS_RO": one,
	"GEORADIUSBYMEMBER_RO": one, "GEOADD": wone, "GEOSEARCHSTORE": into(1, 2, 2),
	// vector sets
	"VADD": wone, "VREM": wone, "VSETATTR": wone, "VSIM": one, "VCARD": one, "VDIM": one,
	"VEMB": one, "VGETATTR": one, "VINFO": one, "VLINKS": one, "VRANDMEMBER": one,
	"VISMEMBER": one, "VRANGE": one,
	// SORT and GEORADIUS write only with STORE (or STOREDIST), after their options
	"SORT":              {Op: OpWrite, First: 1, Last: 1, Step: 1, Store: 2},
	"GEORADIUS":         {Op: OpWrite, First: 1, Last: 1, Step: 1, Store: 6},
	"GEORADIUSBYMEMBER": {Op: OpWrite, First: 1, Last: 1, Step: 1, Store: 5},
	// scripts and functions: keys follow numkeys
	"EVAL": script, "EVALSHA": script, "EVAL_RO": scriptRO, "EVALSHA_RO": scriptRO,
	"FCALL": script, "FCALL_RO": scriptRO,
}
