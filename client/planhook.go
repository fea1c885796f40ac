package client

import (
	"context"
	"errors"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// internalKey marks the contexts of the commands the client sends itself (copying a
// write to the copies): the hooks pass them through and the reporter does not sample them.
type internalKey struct{}

func isInternal(ctx context.Context) bool { return ctx.Value(internalKey{}) != nil }

// internal marks ctx as a context of commands the client sends itself.
func internal(ctx context.Context) context.Context {
	return context.WithValue(ctx, internalKey{}, true)
}

// appliedKey marks the contexts of the commands the plan hook of c, attached to a
// ClusterClient, has applied the plan to: c's node hooks pass them through, so that no
// command is processed twice. Each Client has its own key: the hooks of a Client closed
// earlier stay installed (go-redis cannot remove them) beside those of the Client
// attached after it.
type appliedKey struct{ c *Client }

// applied returns ctx marked as seen by c's plan hook when c follows a ClusterClient,
// ctx itself otherwise (a plain Client has no node hooks, and needs no mark).
func (c *Client) applied(ctx context.Context) context.Context {
	if c.nodes == nil {
		return ctx
	}
	return context.WithValue(ctx, appliedKey{c}, true)
}

// isApplied reports whether c's plan hook has applied the plan to the commands of ctx.
func (c *Client) isApplied(ctx context.Context) bool { return ctx.Value(appliedKey{c}) != nil }

// planHook applies the plan to each command: L1 for GET, reads from copies, writes to
// the original and its copies.
type planHook struct{ c *Client }

// DialHook returns next.
func (planHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook applies the plan to a single command. With no plan and an empty L1 it is
// a look at the command's name, three loads and a comparison.
//
// go-redis builds a chain of hooks for each Conn and Tx (Client.Watch), so the function
// made here for one of them sees the commands of its one connection: sess follows that
// connection's MULTI and WATCH (see session).
func (h planHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	c := h.c
	var sess session
	return func(ctx context.Context, cmd redis.Cmder) error {
		var buf [1]string
		var p *parsed // set when the command has been looked up already, for process
		if c.counter.owed.Load() > 0 && !isInternal(ctx) && !isCounterWrite(ctx) {
			pc := c.parse(cmd, buf[:0])
			p = &pc
			if err := c.counter.beforeWriteOf(ctx, pc.w); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		// Not inside MULTI: the command runs at EXEC, if at all.
		if c.counter.nsharded.Load() > 0 && !isInternal(ctx) && !isCounterWrite(ctx) && !sess.multi.Load() {
			if err := c.counter.beforeKeyOp(ctx, cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		if sess.track(cmd) {
			return c.processSession(c.applied(ctx), cmd, &sess, next)
		}
		ix := c.follower.cur.Load()
		if (ix == nil || len(ix.keys) == 0) && c.l1.size.Load() == 0 {
			err := next(ctx, cmd)
			// A plan came during the command (rare: checked only then, since the
			// context's value costs more than the command's hook otherwise).
			if c.follower.cur.Load() != ix && !c.closed.Load() && !isInternal(ctx) {
				if p == nil {
					pc := c.parse(cmd, buf[:0])
					p = &pc
				}
				if p.w.write {
					c.splitMeanwhile(ix, p.w.keys)
				}
			}
			return err
		}
		if c.closed.Load() || isInternal(ctx) {
			return next(ctx, cmd)
		}
		return c.process(ctx, cmd, ix, next, p)
	}
}

// nodeHook is the hook Attach installs on every node client of a ClusterClient (the
// *redis.Client go-redis keeps per node), for the commands that reach a node without
// passing the ClusterClient's hooks: the transaction of ClusterClient.Watch, which
// go-redis runs on a Tx of the node's client, and app code using a node client directly
// (ForEachShard, MasterForKey). It applies the rules of a transaction on a plain
// Client: writes drop the L1 values of their keys before and after, and are mirrored
// to the copies as process and ProcessPipelineHook do, or turn the key's copy reads off
// until a repair (inside MULTI); reads go to the node, never to L1 or a copy.
//
// Every ordinary command of the ClusterClient passes a node client's hooks too, after
// the plan hook: the node hook passes through those the plan hook marked (applied:
// writes, pipelines, sessions) and reads, which it never changes. A command the plan
// hook let through unmarked because it held no plan then is processed here if a plan
// arrived in between, so once either way.
type nodeHook struct{ c *Client }

// DialHook returns next.
func (nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook applies the transaction rules to a command that did not pass the plan
// hook. As for planHook, go-redis builds a chain for each Tx, so sess follows the
// MULTI and WATCH of one Tx.
func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	c := h.c
	var sess session
	return func(ctx context.Context, cmd redis.Cmder) error {
		var buf [1]string
		var p *parsed // set when the command has been looked up already, for process
		if c.counter.owed.Load() > 0 && !c.isApplied(ctx) && !isInternal(ctx) && !isCounterWrite(ctx) {
			pc := c.parse(cmd, buf[:0])
			p = &pc
			if err := c.counter.beforeWriteOf(ctx, pc.w); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		name := cmdName(cmd)
		if len(name) >= 4 && len(name) <= 7 && sessionName(name) || sess.multi.Load() || sess.watch.Load() {
			// The plan hook marks the session commands it sees (an app's Do("multi")
			// on the ClusterClient): they must not start a session of the node client.
			if c.isApplied(ctx) || isInternal(ctx) {
				return next(ctx, cmd)
			}
			if sess.track(cmd) {
				return c.processSession(ctx, cmd, &sess, next)
			}
		}
		ix := c.follower.cur.Load()
		if (ix == nil || len(ix.keys) == 0) && c.l1.size.Load() == 0 || c.closed.Load() ||
			isRead(name) || c.isApplied(ctx) || isInternal(ctx) {
			return next(ctx, cmd)
		}
		return c.process(ctx, cmd, ix, next, p) // a write or an unknown command: no L1, no copy
	}
}

// cmdName returns the name of cmd as go-redis sends it.
func cmdName(cmd redis.Cmder) string {
	if args := cmd.Args(); len(args) > 0 {
		name, _ := args[0].(string)
		return name
	}
	return ""
}

// sessionName reports whether name is one of the commands session.track follows.
func sessionName(name string) bool {
	for _, s := range [...]string{"multi", "watch", "unwatch", "exec", "discard", "reset"} {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}

// ProcessPipelineHook applies the plan to a pipeline or transaction that did not pass
// the plan hook (a Tx's TxPipelined), as planHook's does.
func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	c := h.c
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.isApplied(ctx) {
			return next(ctx, cmds)
		}
		if err := c.flushBeforePipeline(ctx, cmds); err != nil {
			return err
		}
		return c.processPipeline(ctx, cmds, next)
	}
}

// isRead reports whether the command named name is a read in the command table, which
// process may answer from L1 or a copy.
func isRead(name string) bool {
	if name == "get" { // as go-redis spells it: the hot path, without a table lookup
		return true
	}
	spec, ok := sampler.LookupCommand([]byte(name))
	return ok && spec.Op == sampler.OpRead
}

// session is the state of a connection that sent MULTI (its commands are queued and run
// at EXEC) or WATCH (EXEC fails if a watched original changed). Reads there go to the
// original: L1 would answer a queued GET without queuing it, and neither L1 nor a copy
// is what WATCH guards. A split key written inside MULTI is not mirrored (the write
// happens at EXEC): from EXEC, this client reads it from the original until a repair
// has copied the original to the copies.
type session struct {
	multi  atomic.Bool // MULTI sent, EXEC or DISCARD not yet
	watch  atomic.Bool // WATCH sent, EXEC, DISCARD or UNWATCH not yet
	mu     sync.Mutex  // guards queued
	queued []string    // keys written inside MULTI, their L1 values dropped again at EXEC
}

// track notes the session commands among cmd and reports whether cmd must be handled as
// part of a session (processSession).
func (s *session) track(cmd redis.Cmder) bool {
	args := cmd.Args()
	name := ""
	if len(args) > 0 {
		name, _ = args[0].(string)
	}
	if len(name) >= 4 && len(name) <= 7 {
		switch {
		case strings.EqualFold(name, "multi"):
			s.multi.Store(true)
		case strings.EqualFold(name, "watch"):
			s.watch.Store(true)
		case strings.EqualFold(name, "unwatch"):
			s.watch.Store(false)
			return true
		case strings.EqualFold(name, "exec"), strings.EqualFold(name, "discard"), strings.EqualFold(name, "reset"):
			m, w := s.multi.Swap(false), s.watch.Swap(false)
			return m || w
		}
	}
	return s.multi.Load() || s.watch.Load()
}

// processSession sends a command of a connection in MULTI or WATCH: reads to the
// original, writes inside MULTI queued as they are (their L1 values dropped now and at
// EXEC; a split key's copy reads off from EXEC until a repair), writes outside MULTI as
// process does.
func (c *Client) processSession(ctx context.Context, cmd redis.Cmder, s *session, next redis.ProcessHook) error {
	ix := c.follower.cur.Load()
	if c.closed.Load() || isInternal(ctx) {
		return next(ctx, cmd)
	}
	name, _ := cmd.Args()[0].(string)
	if strings.EqualFold(name, "exec") || strings.EqualFold(name, "discard") || strings.EqualFold(name, "reset") {
		s.mu.Lock()
		keys := s.queued
		s.queued = nil
		s.mu.Unlock()
		err := next(ctx, cmd)
		if strings.EqualFold(name, "exec") {
			c.wroteUnmirrored(ix, keys)
		}
		c.invalidate(ix, keys)
		return err
	}
	var buf [1]string
	p := c.parse(cmd, buf[:0])
	w := p.w
	if !w.write || strings.EqualFold(name, "watch") || strings.EqualFold(name, "unwatch") {
		return next(ctx, cmd)
	}
	if !s.multi.Load() {
		return c.process(ctx, cmd, ix, next, &p)
	}
	s.mu.Lock()
	s.queued = append(s.queued, w.keys...)
	s.mu.Unlock()
	c.invalidate(ix, w.keys)
	return next(ctx, cmd)
}

// wroteUnmirrored marks unsure each split key of keys that a write the client cannot
// mirror (a multi-key write, a script, MULTI/EXEC…) has just written, under ix or under
// a plan that came meanwhile: reads of it go to the original until a repair has copied
// the original to the copies.
func (c *Client) wroteUnmirrored(ix *planIndex, keys []string) {
	cur := c.follower.cur.Load()
	now := c.now()
	for _, key := range keys {
		kp := ix.lookup(key)
		if !kp.split(now) {
			kp = cur.lookup(key)
		}
		if kp.split(now) {
			c.unmirrored.Add(1)
			c.unsure(key, kp)
		}
	}
}

// splitMeanwhile marks unsure the keys of a write made under ix that a plan which came
// during the write splits into other copies: not split under ix (the write went to the
// original only), or split into copies of other names or number (it was mirrored to
// those). The agent may have written the new copies before the write.
func (c *Client) splitMeanwhile(ix *planIndex, keys []string) {
	cur := c.follower.cur.Load()
	if cur == ix {
		return
	}
	now := c.now()
	for _, key := range keys {
		kp, was := cur.lookup(key), ix.lookup(key)
		if kp.split(now) && (!was.split(now) || !slices.Equal(was.copies, kp.copies)) {
			c.unsure(key, kp)
		}
	}
}

// ProcessPipelineHook applies the plan to pipelines and transactions: reads go to the
// original and are not cached; writes invalidate L1; a single-key write to a split key is
// copied to the copies after a plain pipeline, while in a transaction (MULTI/EXEC) it
// turns the key's copy reads off until a repair has copied the original to them.
func (h planHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	c := h.c
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := c.flushBeforePipeline(ctx, cmds); err != nil {
			return err
		}
		return c.processPipeline(ctx, cmds, next)
	}
}

// flushBeforePipeline flushes the pending batched sums of the keys the commands of a
// pipeline or transaction write (Counter.beforeWrite), before any of them is sent. When
// that fails, none is sent: each gets the error.
func (c *Client) flushBeforePipeline(ctx context.Context, cmds []redis.Cmder) error {
	if c.counter.owed.Load() == 0 || isInternal(ctx) || isCounterWrite(ctx) {
		return nil
	}
	err := c.counter.beforeWrite(ctx, cmds...)
	if err != nil {
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
	}
	return err
}

// processPipeline applies the plan to a pipeline or transaction (see ProcessPipelineHook).
func (c *Client) processPipeline(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	ix := c.follower.cur.Load()
	if (ix == nil || len(ix.keys) == 0) && c.l1.size.Load() == 0 {
		err := next(ctx, cmds)
		if c.follower.cur.Load() != ix && !c.closed.Load() && !isInternal(ctx) { // a plan came during the pipeline
			for _, cmd := range cmds {
				var buf [1]string
				if w := c.parse(cmd, buf[:0]).w; w.write {
					c.splitMeanwhile(ix, w.keys)
				}
			}
		}
		return err
	}
	if c.closed.Load() || isInternal(ctx) {
		return next(ctx, cmds)
	}
	ctx = c.applied(ctx)
	tx := len(cmds) > 0 && cmds[0].Name() == "multi"
	now := c.now()
	type written struct {
		key string
		kp  *keyPlan
		cmd redis.Cmder
	}
	var toCopy []written
	var keys, unmirrored []string
	for _, cmd := range cmds {
		var buf [1]string
		w := c.parse(cmd, buf[:0]).w
		if !w.write {
			continue
		}
		for _, key := range w.keys {
			keys = append(keys, key)
			kp := ix.lookup(key)
			if kp == nil || !kp.split(now) {
				continue
			}
			if tx || !w.mirrorable {
				unmirrored = append(unmirrored, key)
				continue
			}
			toCopy = append(toCopy, written{key, kp, cmd})
		}
	}
	// The stripes of the keys to copy are held from before the writes, as in process:
	// a repair that read the original before a write and cleared the mark after it
	// would leave copies without the write, read while the pipeline copies them.
	var held uint64
	for _, w := range toCopy {
		held |= 1 << c.stripeIndex(w.key)
	}
	if err := c.lockStripes(ctx, held); err != nil {
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	}
	defer c.unlockStripes(held)
	c.invalidate(ix, keys)
	err := next(ctx, cmds)
	defer c.invalidate(ix, keys) // once the copies took the writes, as in process
	defer c.splitMeanwhile(ix, keys)
	c.wroteUnmirrored(ix, unmirrored)
	for _, w := range toCopy {
		if w.kp.copyState.Load()&copyUnsure != 0 {
			c.unsure(w.key, w.kp) // left to the repair, as in process
		} else {
			c.afterWrite(ctx, w.key, w.kp, w.cmd.Err())
		}
	}
	return err
}

// lockStripes takes the stripes whose indexes are set in mask, in their order (so that
// two pipelines never wait for each other), or none and ctx's error if ctx ends first.
func (c *Client) lockStripes(ctx context.Context, mask uint64) error {
	for m := mask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if err := c.stripes[i].lock(ctx); err != nil {
			c.unlockStripes(mask &^ m) // those taken: the bits below i
			return err
		}
	}
	return nil
}

// unlockStripes releases the stripes whose indexes are set in mask.
func (c *Client) unlockStripes(mask uint64) {
	for m := mask; m != 0; m &= m - 1 {
		c.stripes[bits.TrailingZeros64(m)].unlock()
	}
}

// lookup returns the plan of key, nil when it has none.
func (p *planIndex) lookup(key string) *keyPlan {
	if p == nil {
		return nil
	}
	return p.keys[key]
}

// write is what the client knows of a command that may change keys.
type write struct {
	write      bool     // the command writes, or is unknown and may
	keys       []string // the keys it writes; for an unknown command, every argument
	mirrorable bool     // a single-key write whose result can be copied to copies
}

// parsed is what the hooks know of a command: its entry in the command table (spec,
// known) and what it writes. The hooks look a command up once and pass this on.
type parsed struct {
	spec  sampler.Command
	known bool
	w     write
}

// parse looks cmd up in the command table and says whether it writes which keys, and
// whether its effect on a split key can be copied (reads and commands without keys are
// not writes). The keys it writes are appended to keys, an empty slice: with a
// one-element array behind it a single-key write allocates nothing.
func (c *Client) parse(cmd redis.Cmder, keys []string) (p parsed) {
	args := cmd.Args()
	if len(args) < 2 {
		return parsed{}
	}
	name, _ := args[0].(string)
	p.spec, p.known = sampler.LookupCommand([]byte(name))
	p.w = classifyArgs(args, name, p.spec, p.known, keys)
	return p
}

// classifyArgs is parse's write for a command whose arguments are args (at least two),
// its name name, and its entry in the command table spec (known: it has one). The keys go
// into keys, an empty slice.
func classifyArgs(args []any, name string, spec sampler.Command, known bool, keys []string) write {
	if !known {
		if noKeys(name) {
			return write{}
		}
		// An unknown command (MIGRATE, a module's): any argument may be a key it
		// writes.
		return writeAll(args, keys)
	}
	if spec.Op != sampler.OpWrite {
		return write{}
	}
	if spec.Store > 0 {
		// SORT and GEORADIUS write only with a STORE or STOREDIST option; with one, as
		// when they were not in the table, any argument may be a key they write.
		for _, a := range args[2:] {
			if s := argString(a); strings.EqualFold(s, "store") || strings.EqualFold(s, "storedist") {
				return writeAll(args, keys)
			}
		}
		return write{}
	}
	if spec.Streams {
		// XREADGROUP, whose keys follow its STREAMS option, which KeysOf does not look
		// for: as when it was not in the table, any argument may be a key it writes.
		return writeAll(args, keys)
	}
	k, dest, ok := callKeys(spec, args)
	if !ok {
		if spec.Dest > 0 && spec.Dest < len(args) {
			// A bad numkeys: Redis refuses the command, but its destination is the key
			// it would write.
			return write{write: true, keys: append(keys, argString(args[spec.Dest]))}
		}
		return write{}
	}
	w := write{write: true, keys: keys}
	if dest > 0 {
		w.keys = append(w.keys, argString(args[dest]))
	}
	// The keys a command with a destination only reads (SUNIONSTORE dst src…) are taken
	// for written too, as before the table told them apart: their L1 values are dropped
	// and a split one is read from the original until a repair.
	for i := k.First; i <= k.Last; i += k.Step {
		w.keys = append(w.keys, argString(args[i]))
	}
	w.mirrorable = len(w.keys) == 1 && spec.NumKeysAt == 0 && !blocking(name)
	return w
}

// writeAll is a command that may write any of its arguments, appended to keys.
func writeAll(args []any, keys []string) write {
	w := write{write: true, keys: keys}
	for _, a := range args[1:] {
		w.keys = append(w.keys, argString(a))
	}
	return w
}

// noKeys lists commands without keys that the command table leaves out and that are
// common enough to be worth not scanning.
func noKeys(name string) bool {
	switch strings.ToLower(name) {
	case "ping", "info", "auth", "select", "hello", "client", "cluster", "config",
		"command", "echo", "time", "dbsize", "publish", "subscribe", "multi", "exec",
		"discard", "unwatch", "script", "function", "readonly", "readwrite", "quit":
		return true
	}
	return false
}

// blocking reports the blocking pops, which could hold a key's writes back for their
// whole timeout: they are not mirrored.
func blocking(name string) bool {
	switch strings.ToLower(name) {
	case "blpop", "brpop", "bzpopmin", "bzpopmax", "blmove", "brpoplpush", "blmpop", "bzmpop":
		return true
	}
	return false
}

// callKeys is sampler.Command.Keys on go-redis arguments.
func callKeys(c sampler.Command, args []any) (k sampler.Keys, dest int, ok bool) {
	numKeys := -1
	if c.NumKeysAt > 0 && c.NumKeysAt < len(args) {
		switch v := args[c.NumKeysAt].(type) {
		case int:
			numKeys = v
		case int64:
			numKeys = int(v)
		default:
			if k, err := strconv.Atoi(argString(v)); err == nil {
				numKeys = k
			}
		}
	}
	return c.KeysOf(len(args), numKeys)
}

// argString returns an argument as Redis receives it.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return string(appendArg(nil, a))
}

// process applies the plan to one command; p is what parse said of it, nil when the
// caller has not looked it up.
func (c *Client) process(ctx context.Context, cmd redis.Cmder, ix *planIndex, next redis.ProcessHook, p *parsed) error {
	args := cmd.Args()
	if len(args) < 2 {
		return next(ctx, cmd)
	}
	name, _ := args[0].(string)
	var buf [1]string
	if p == nil {
		pc := c.parse(cmd, buf[:0])
		p = &pc
	}
	if spec := p.spec; p.known && spec.Op == sampler.OpRead {
		// A read of one key, its key at args[1]: GET, HGET, LRANGE, ZRANGE, …
		if spec.First != 1 || spec.Last != 1 || spec.NumKeysAt != 0 {
			return next(ctx, cmd)
		}
		key, ok := args[1].(string)
		kp := ix.lookup(key)
		if !ok || kp == nil {
			return next(ctx, cmd)
		}
		now := c.now()
		if ttl := kp.l1(now); ttl > 0 && strings.EqualFold(name, "get") {
			switch cmd.(type) {
			case *redis.StringCmd, *redis.Cmd:
				return c.getL1(ctx, cmd, key, ttl, kp, now, next)
			}
		}
		if names := kp.readCopies(now); names != nil {
			if _, known := absentReply(cmd); known {
				return c.readCopy(ctx, cmd, key, kp, names, next)
			}
		}
		return next(ctx, cmd)
	}
	w := p.w
	if !w.write {
		return next(ctx, cmd)
	}
	ctx = c.applied(ctx)
	var now time.Time // read at the first key the plan names: most writes name none
	timed := false
	var split *keyPlan
	nsplit := 0
	for _, key := range w.keys {
		kp := ix.lookup(key)
		if kp == nil {
			continue
		}
		if !timed {
			now, timed = c.now(), true
		}
		if kp.split(now) {
			split = kp
			nsplit++
		}
	}
	if nsplit == 0 {
		c.invalidate(ix, w.keys)
		err := next(ctx, cmd)
		c.splitMeanwhile(ix, w.keys)
		c.invalidate(ix, w.keys)
		return err
	}
	// The L1 is invalidated before the write and again once the copies are settled: an
	// L1 load reads a copy, and one that began before the copies took the write (or before
	// the key was marked to be read from the original) would otherwise keep the old value
	// after the write returned.
	if !w.mirrorable {
		// Goes to the original only; this client reads those keys from the original
		// until a repair has copied them.
		c.invalidate(ix, w.keys)
		err := next(ctx, cmd)
		c.wroteUnmirrored(ix, w.keys)
		c.invalidate(ix, w.keys)
		return err
	}
	key := w.keys[0]
	st := c.stripe(key)
	if err := st.lock(ctx); err != nil {
		cmd.SetErr(err)
		return err
	}
	defer st.unlock()
	c.invalidate(ix, w.keys)
	err := next(ctx, cmd)
	if split.copyState.Load()&copyUnsure != 0 {
		// Its copy reads are off until a repair: the copies are left to it, and the key
		// marked again so that it copies this write too. A copy's node that hangs holds
		// up the repairs, not each write. The stripe, held, keeps the repair from racing
		// the writes: under a steady load of them it would never win.
		c.unsure(key, split)
	} else {
		c.afterWrite(ctx, key, split, err)
	}
	c.splitMeanwhile(ix, w.keys)
	c.invalidate(ix, w.keys)
	return err
}

// stripe returns the lock that orders the writes of key and the copying of their result.
func (c *Client) stripe(key string) *stripe {
	return &c.stripes[c.stripeIndex(key)]
}

// stripeIndex returns the index of key's stripe in c.stripes.
func (c *Client) stripeIndex(key string) int {
	return int(xxhash.Sum64String(key) & uint64(len(c.stripes)-1))
}

// stripe is a lock whose waiters give up when their context ends. It guards the copies
// of the keys that hash to it: held from a write of the original to the copying of its
// result.
type stripe struct {
	token chan struct{} // capacity 1, made by Attach; holds a token while locked
	_     [56]byte
}

// lock takes the stripe, or returns ctx's error if ctx ends first.
func (s *stripe) lock(ctx context.Context) error {
	select {
	case s.token <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.token <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stripe) unlock() { <-s.token }

// invalidate drops the L1 values of keys being written, when the L1 may hold them.
func (c *Client) invalidate(ix *planIndex, keys []string) {
	if (ix == nil || !ix.l1) && c.l1.size.Load() == 0 {
		return
	}
	for _, k := range keys {
		c.l1.invalidate(k)
	}
}

// getL1 answers a GET of an L1 key from the cache, loading it (single-flight, through
// the copies when the key has some) on a miss.
func (c *Client) getL1(ctx context.Context, cmd redis.Cmder, key string, ttl time.Duration, kp *keyPlan, now time.Time, next redis.ProcessHook) error {
	s, e, v, state := c.l1.lookup(key, now)
	if state != found {
		var err error
		v, err = c.l1.resolve(ctx, s, e, v, state, key, ttl, func(lctx context.Context) (string, bool, error) {
			lc := redis.NewStringCmd(lctx, "get", key)
			var err error
			if names := kp.readCopies(c.now()); names != nil {
				err = c.readCopy(lctx, lc, key, kp, names, next)
			} else {
				err = next(lctx, lc)
			}
			if err == redis.Nil {
				return "", true, nil
			}
			return lc.Val(), false, err
		})
		if err != nil {
			cmd.SetErr(err)
			return err
		}
	}
	if v.absent {
		cmd.SetErr(redis.Nil)
		return redis.Nil
	}
	switch cmd := cmd.(type) {
	case *redis.StringCmd:
		cmd.SetVal(v.data)
	case *redis.Cmd:
		cmd.SetVal(v.data)
	}
	return nil
}

// readCopy sends a one-key read of key, planned kp, to a random copy: it rewrites the
// key argument for the call and puts it back. A read the copy fails, or answers as Redis
// does for a missing key (nil, empty, 0, -2: the agent may not have written the copy
// yet, or has deleted it already), is repeated on the original. A copy's node that does
// not answer (a timeout, a refused or broken connection) turns the key's copy reads off
// as a write of unknown outcome does, until a repair finds every copy's node answering
// again: each read sent to a hung node would otherwise wait for the read timeout.
func (c *Client) readCopy(ctx context.Context, cmd redis.Cmder, key string, kp *keyPlan, names []string, next redis.ProcessHook) error {
	args := cmd.Args()
	orig, name := args[1], names[c.pick(len(names))]
	args[1] = name
	err := next(ctx, cmd)
	args[1] = orig
	if missing, _ := absentReply(cmd); err == nil && !missing {
		c.copyReads.Add(1)
		return nil
	}
	c.copyFallbacks.Add(1)
	if unanswered(err) && ctx.Err() == nil && c.unsure(key, kp) {
		c.log.Warn("hotkeyd: reading a key's copy failed; this client reads the key from the original until every copy's node answers again",
			"key", key, "copy", name, "err", err)
	}
	cmd.SetErr(nil)
	forgetSlot(cmd) // routed by the copy's name: route it by the original's
	return next(ctx, cmd)
}

// absentReply reports whether cmd's reply is one Redis gives for a key that does not
// exist (an empty string, list, hash, set or zset, 0, false, -2, "none"), which a read of
// a copy not written yet gets; known is false for reply types it does not know, whose
// reads go to the original only.
func absentReply(cmd redis.Cmder) (absent, known bool) {
	switch c := cmd.(type) {
	case *redis.Cmd:
		switch v := c.Val().(type) {
		case nil:
			return true, true
		case string:
			return v == "", true
		case int64:
			return v == 0, true
		case []any:
			return len(v) == 0, true
		case map[any]any:
			return len(v) == 0, true
		}
		return false, true
	case *redis.StringCmd:
		return c.Val() == "", true
	case *redis.StatusCmd:
		return c.Val() == "" || c.Val() == "none", true
	case *redis.IntCmd:
		return c.Val() == 0, true
	case *redis.DurationCmd:
		return c.Val() == -2, true
	case *redis.BoolCmd:
		return !c.Val(), true
	case *redis.FloatCmd:
		return c.Val() == 0, true
	case *redis.StringSliceCmd:
		return len(c.Val()) == 0, true
	case *redis.SliceCmd:
		return !slices.ContainsFunc(c.Val(), func(v any) bool { return v != nil }), true
	case *redis.FloatSliceCmd:
		return !slices.ContainsFunc(c.Val(), func(v float64) bool { return v != 0 }), true
	case *redis.BoolSliceCmd:
		return !slices.Contains(c.Val(), true), true
	case *redis.IntSliceCmd:
		return !slices.ContainsFunc(c.Val(), func(v int64) bool { return v != 0 }), true
	case *redis.MapStringStringCmd:
		return len(c.Val()) == 0, true
	case *redis.MapStringIntCmd:
		return len(c.Val()) == 0, true
	case *redis.ZSliceCmd:
		return len(c.Val()) == 0, true
	case *redis.ScanCmd:
		keys, _ := c.Val()
		return len(keys) == 0, true
	case *redis.XMessageSliceCmd:
		return len(c.Val()) == 0, true
	case *redis.GeoLocationCmd:
		return len(c.Val()) == 0, true
	case *redis.GeoPosCmd:
		return !slices.ContainsFunc(c.Val(), func(p *redis.GeoPos) bool { return p != nil }), true
	case *redis.KeyValueSliceCmd:
		return len(c.Val()) == 0, true
	}
	return false, false
}

// dumpOriginal reads a key's value and remaining time in one step (as mitigate's
// executor does): {-2} when the key does not exist, else {pttl, payload}.
var dumpOriginal = redis.NewScript(`
local t = redis.call('PTTL', KEYS[1])
if t == -2 then return {-2} end
return {t, redis.call('DUMP', KEYS[1])}`)

// afterWrite brings the copies of key up to date after a write of the original that
// ended with err: they get the original's value, type and TTL (DUMP and RESTORE), or are
// deleted when the original is gone. The caller holds the key's stripe, so copies end
// as the original does. When the write's outcome is unknown (a timeout, a broken
// connection) or copying fails, this client reads the key from the original until a
// repair has copied the original to the copies (see unsure).
func (c *Client) afterWrite(ctx context.Context, key string, kp *keyPlan, err error) {
	if err != nil && err != redis.Nil {
		if unanswered(err) {
			c.mirrorErrors.Add(1)
			c.unsure(key, kp) // the write may or may not have happened
		}
		return // else Redis refused the write: nothing changed
	}
	ictx, cancel := context.WithTimeout(context.WithValue(context.WithoutCancel(ctx), internalKey{}, true), c.timeout)
	defer cancel()
	if err := c.copyOriginal(ictx, key, kp.copies); err != nil {
		c.mirrorErrors.Add(1)
		// Logged once per episode: during an outage every write of the key fails so.
		if c.unsure(key, kp) {
			c.log.Warn("hotkeyd: writing a key's copies failed; this client reads the key from the original until it has copied the original to them",
				"key", key, "err", err)
		}
		return
	}
	c.mirrors.Add(1)
}

// unanswered reports whether err, a command's, says that its node did not answer (a
// timeout, a refused or broken connection, go-redis's pool timeout) rather than that
// Redis answered with an error.
func unanswered(err error) bool {
	var rerr redis.Error
	return err != nil && err != redis.Nil && (!errors.As(err, &rerr) || isNetError(err))
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// copyOriginal sets every copy to the original's value and TTL, or deletes them when the
// original does not exist.
func (c *Client) copyOriginal(ctx context.Context, key string, copies []string) error {
	reply, err := dumpOriginal.Run(ctx, c.rdb, []string{key}).Slice()
	if err != nil {
		return err
	}
	pttl, ok := reply[0].(int64)
	if !ok || (pttl != -2 && len(reply) != 2) {
		return errors.New("unexpected reply to DUMP")
	}
	return c.pipelined(ctx, func(p redis.Pipeliner) error {
		for _, name := range copies {
			switch {
			case pttl == -2:
				p.Del(ctx, name)
			case pttl == -1:
				p.Do(ctx, "restore", name, 0, reply[1], "replace")
			default:
				p.Do(ctx, "restore", name, max(pttl, 1), reply[1], "replace")
			}
		}
		return nil
	})
}

// pipelined runs fn's commands in one pipeline on the client and returns the first
// command's error, or the pipeline's when no command has one.
func (c *Client) pipelined(ctx context.Context, fn func(redis.Pipeliner) error) error {
	cmds, err := c.rdb.Pipelined(ctx, fn)
	if err != nil {
		for _, cmd := range cmds {
			if cmd.Err() != nil {
				return cmd.Err()
			}
		}
	}
	return err
}
