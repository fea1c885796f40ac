package client

import (
	"context"
	"encoding"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// Hook returns the go-redis hook that samples commands for r; install it with
// rdb.AddHook(r.Hook()) on a *redis.Client or *redis.ClusterClient. The hook calls the
// next hook first and samples afterwards, so it never delays a command; it returns the
// command's own error, never one of its own.
func (r *Reporter) Hook() redis.Hook { return hook{r} }

type hook struct{ r *Reporter }

// DialHook returns next: dialling is not sampled.
func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// unsampled reports the contexts of commands the client sends itself (copies, counter
// flushes, sub-counter increments): they are not the app's, or Counter.Add sampled them.
func unsampled(ctx context.Context) bool { return isInternal(ctx) || isCounterWrite(ctx) }

// ProcessHook samples single commands.
func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	r := h.r
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if r.pick() && !unsampled(ctx) {
			r.record(cmd)
		}
		return err
	}
}

// ProcessPipelineHook samples each command of a pipeline (or transaction) on its own.
func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	r := h.r
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if unsampled(ctx) {
			return err
		}
		for _, cmd := range cmds {
			if r.pick() {
				r.record(cmd)
			}
		}
		return err
	}
}

// sample samples one access to key that the client's own API made with commands the hook
// does not sample (Counter.Get's reads of a counter's list): 1 in SampleEvery, as the
// hook samples commands. A nil Reporter (NoReports) samples nothing.
func (r *Reporter) sample(key string, op sampler.Op) {
	if r != nil && r.pick() && !r.closed.Load() {
		r.enqueue(pending{key: key, op: op})
	}
}

// sampleAdd samples one Counter.Add of key that sent no INCRBY of key itself (batched,
// or sharded to a sub-counter): a counter write, as the hook samples an INCRBY.
func (r *Reporter) sampleAdd(key string) {
	if r != nil && r.pick() && !r.closed.Load() {
		r.enqueue(pending{key: key, op: sampler.OpWrite, counter: true})
	}
}

// pick reports whether to sample a command: true with probability 1/every. It maps a
// random uint64 onto [0, every) with a multiplication (Lemire) and tests for 0, which
// costs no division and no shared write.
func (r *Reporter) pick() bool {
	var x uint64
	if r.rand == nil {
		x = rand.Uint64() // a direct call is cheaper than through a func value
	} else {
		x = r.rand()
	}
	hi, _ := bits.Mul64(x, r.every)
	return hi == 0
}

// scratch holds a sampled command's arguments as bytes; pooled, so the sampled path
// rarely allocates.
type scratch struct {
	args  [][]byte
	arena []byte
	ends  []int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// record turns a sampled command into one sample per key and queues them. It runs only
// for sampled commands, after the command has completed.
func (r *Reporter) record(cmd redis.Cmder) {
	if r.closed.Load() {
		return
	}
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	name, ok := args[0].(string)
	if !ok {
		return // go-redis always sends the name as a string
	}
	c, ok := sampler.LookupCommand([]byte(name))
	if !ok {
		return // no keys (PING, INFO, MULTI, …) or a command the table does not know
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.arena, sc.ends, sc.args = sc.arena[:0], sc.ends[:0], sc.args[:0]
	for _, a := range args {
		sc.arena = appendArg(sc.arena, a)
		sc.ends = append(sc.ends, len(sc.arena))
	}
	start := 0
	for _, end := range sc.ends {
		sc.args = append(sc.args, sc.arena[start:end:end])
		start = end
	}
	k, dest, ok := c.Keys(sc.args)
	if !ok {
		return
	}
	if dest > 0 {
		// The destination of a command that reads the other keys (SUNIONSTORE dst src…).
		r.enqueue(pending{key: argKey(args, sc, dest), op: sampler.OpWrite})
	}
	valueAt := valueIndex(name, c)
	for i := k.First; i <= k.Last; i += k.Step {
		p := pending{key: argKey(args, sc, i), op: k.Op, counter: c.Counter}
		switch {
		case c.Op == sampler.OpRead: // a read alone, whose reply holds what it read
			p.bytes = replySize(cmd, (i-k.First)/k.Step)
		case k.Op == sampler.OpWrite && valueAt > 0 && i+valueAt < len(sc.args):
			p.bytes = clampSize(len(sc.args[i+valueAt]))
		}
		r.enqueue(p)
	}
	if cap(sc.arena) > 64<<10 { // do not pool a buffer grown by one huge value
		sc.arena = nil
	}
}

// argKey returns the key at args[i], which sc.args holds as bytes.
func argKey(args []any, sc *scratch, i int) string {
	if s, ok := args[i].(string); ok {
		return s // strings are immutable: no copy
	}
	return string(sc.args[i])
}

// valueIndex returns where a write's value sits relative to its key (SET k v: 1), or 0
// when the command's value size is not worth knowing.
func valueIndex(name string, c sampler.Command) int {
	switch {
	case c.Op != sampler.OpWrite || c.Counter:
		return 0
	case c.Step == 2: // MSET k v k v
		return 1
	case strings.EqualFold(name, "set"), strings.EqualFold(name, "setnx"),
		strings.EqualFold(name, "getset"), strings.EqualFold(name, "append"):
		return 1
	case strings.EqualFold(name, "setex"), strings.EqualFold(name, "psetex"):
		return 2 // SETEX k seconds v
	}
	return 0
}

// replySize returns the size of the value a read returned for its j-th key, 0 when
// unknown: GET and the like (a string reply) and MGET (one reply per key).
func replySize(cmd redis.Cmder, j int) uint32 {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		return clampSize(len(c.Val()))
	case *redis.SliceCmd:
		if v := c.Val(); j < len(v) {
			if s, ok := v[j].(string); ok {
				return clampSize(len(s))
			}
		}
	}
	return 0
}

func clampSize(n int) uint32 { return uint32(min(n, 1<<32-1)) }

// appendArg appends an argument as go-redis writes it to Redis (internal/proto's
// Writer.WriteArg, v9): pointers to the basic types are followed (nil is "" or 0), a
// float32 is widened to float64 first, net.IP is its raw bytes. A type go-redis cannot
// write fails the command; the hook then formats it with fmt, for want of better.
func appendArg(dst []byte, v any) []byte {
	switch v := v.(type) {
	case string:
		return append(dst, v...)
	case []byte:
		return append(dst, v...)
	case nil:
		return dst
	case int:
		return strconv.AppendInt(dst, int64(v), 10)
	case int8:
		return strconv.AppendInt(dst, int64(v), 10)
	case int16:
		return strconv.AppendInt(dst, int64(v), 10)
	case int32:
		return strconv.AppendInt(dst, int64(v), 10)
	case int64:
		return strconv.AppendInt(dst, v, 10)
	case uint:
		return strconv.AppendUint(dst, uint64(v), 10)
	case uint8:
		return strconv.AppendUint(dst, uint64(v), 10)
	case uint16:
		return strconv.AppendUint(dst, uint64(v), 10)
	case uint32:
		return strconv.AppendUint(dst, uint64(v), 10)
	case uint64:
		return strconv.AppendUint(dst, v, 10)
	case uintptr:
		return strconv.AppendUint(dst, uint64(v), 10)
	case float32:
		return strconv.AppendFloat(dst, float64(v), 'f', -1, 64) // as go-redis: widened
	case float64:
		return strconv.AppendFloat(dst, v, 'f', -1, 64)
	case bool:
		if v {
			return append(dst, '1')
		}
		return append(dst, '0')
	case time.Time:
		return v.AppendFormat(dst, time.RFC3339Nano)
	case time.Duration:
		return strconv.AppendInt(dst, v.Nanoseconds(), 10)
	case encoding.BinaryMarshaler:
		if b, err := v.MarshalBinary(); err == nil {
			return append(dst, b...)
		}
		return dst
	case net.IP:
		return append(dst, v...)
	}
	return appendPointerArg(dst, v)
}

// appendPointerArg is appendArg for pointers to the basic types, which go-redis follows;
// kept apart so that the common cases above stay small.
func appendPointerArg(dst []byte, v any) []byte {
	switch v := v.(type) {
	case *string:
		if v == nil {
			return dst
		}
		return append(dst, *v...)
	case *int:
		return strconv.AppendInt(dst, int64(deref(v)), 10)
	case *int8:
		return strconv.AppendInt(dst, int64(deref(v)), 10)
	case *int16:
		return strconv.AppendInt(dst, int64(deref(v)), 10)
	case *int32:
		return strconv.AppendInt(dst, int64(deref(v)), 10)
	case *int64:
		return strconv.AppendInt(dst, deref(v), 10)
	case *uint:
		return strconv.AppendUint(dst, uint64(deref(v)), 10)
	case *uint8:
		return strconv.AppendUint(dst, uint64(deref(v)), 10)
	case *uint16:
		return strconv.AppendUint(dst, uint64(deref(v)), 10)
	case *uint32:
		return strconv.AppendUint(dst, uint64(deref(v)), 10)
	case *uint64:
		return strconv.AppendUint(dst, deref(v), 10)
	case *uintptr:
		return strconv.AppendUint(dst, uint64(deref(v)), 10)
	case *float32:
		return strconv.AppendFloat(dst, float64(deref(v)), 'f', -1, 64)
	case *float64:
		return strconv.AppendFloat(dst, deref(v), 'f', -1, 64)
	case *bool:
		if deref(v) {
			return append(dst, '1')
		}
		return append(dst, '0')
	case *time.Time:
		return deref(v).AppendFormat(dst, time.RFC3339Nano)
	case *time.Duration:
		return strconv.AppendInt(dst, deref(v).Nanoseconds(), 10)
	}
	return fmt.Append(dst, v)
}

// deref returns *p, or the zero value for nil, as go-redis writes a nil pointer.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
