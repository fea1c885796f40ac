package mitigate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeCommander runs one command on the Redis node at addr ("host:port") and returns its
// reply as go-redis decodes it: string, int64, []any, map[any]any or nil, in RESP2 or
// RESP3. A Redis error reply comes back as an error whose text is the reply without its
// leading '-' (for example "ERR This instance has cluster support disabled"). It is what a
// Topology needs from Redis; NodeClients implements it with go-redis.
type NodeCommander interface {
	NodeDo(ctx context.Context, addr string, args ...any) (any, error)
}

// NodeCommanderFunc adapts a function to NodeCommander.
type NodeCommanderFunc func(ctx context.Context, addr string, args ...any) (any, error)

// NodeDo calls f.
func (f NodeCommanderFunc) NodeDo(ctx context.Context, addr string, args ...any) (any, error) {
	return f(ctx, addr, args...)
}

// NodeClients is a NodeCommander backed by go-redis: one *redis.Client per address, made
// on first use from a copy of the base options with Addr replaced. It is safe for
// concurrent use. Clients are kept until Close.
type NodeClients struct {
	base redis.Options

	mu      sync.Mutex // guards clients and closed
	clients map[string]*redis.Client
	closed  bool
}

// NewNodeClients returns NodeClients whose clients use base (password, TLS, timeouts,
// protocol…) with Addr set per node. A nil base means go-redis defaults with a pool of two
// connections per node, and ContextTimeoutEnabled, so that a node that does not answer is
// given up at the context's deadline (Topology.Refresh gives each node a share of its own)
// rather than after go-redis's read timeout and retries. A base without it makes a hung
// node hold a refresh for those instead.
func NewNodeClients(base *redis.Options) *NodeClients {
	c := &NodeClients{clients: make(map[string]*redis.Client)}
	if base != nil {
		c.base = *base
	} else {
		c.base = redis.Options{PoolSize: 2, ContextTimeoutEnabled: true}
	}
	return c
}

// NodeDo runs args on the node at addr.
func (c *NodeClients) NodeDo(ctx context.Context, addr string, args ...any) (any, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("mitigate: node clients closed")
	}
	cl := c.clients[addr]
	if cl == nil {
		o := c.base
		o.Addr = addr
		cl = redis.NewClient(&o)
		c.clients[addr] = cl
	}
	c.mu.Unlock()
	return cl.Do(ctx, args...).Result()
}

// Close closes every client; later NodeDo calls fail.
func (c *NodeClients) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for _, cl := range c.clients {
		errs = append(errs, cl.Close())
	}
	clear(c.clients)
	return errors.Join(errs...)
}

// TopologyOptions configure NewTopology. Only Seeds is required.
type TopologyOptions struct {
	// Seeds are "host:port" addresses of Redis nodes (any primary or replica of a
	// cluster, or a standalone server) to learn the topology from. Refresh asks the
	// primaries it already knows first, then the seeds, and uses the first answer.
	// Required: at least one.
	Seeds []string
	// Conn runs the CLUSTER commands. Default: NewNodeClients(nil), closed by Close.
	Conn NodeCommander
	// RefreshInterval is how often Run refreshes the topology. Default: 30s.
	RefreshInterval time.Duration
	// MinRefreshGap is the shortest time between two refreshes that Run makes because a
	// MOVED redirect was reported, so that a resharding does not turn every redirect into
	// a round of CLUSTER SHARDS. Default: 250ms.
	MinRefreshGap time.Duration
	// RefreshTimeout bounds each refresh that Run makes, shared among the nodes it asks
	// (see Refresh). Default: 5s.
	RefreshTimeout time.Duration
	// OnError, when set, receives the error of each failed refresh made by Run (the
	// previous slot table stays in use). Default: errors are dropped; Err reports the last.
	OnError func(error)
	// OnChange, when set, receives the primaries after each refresh made by Run that
	// finds another set of them (a failover, a node added or removed), with those that
	// came and those that went, for the operator's log. Default: nothing.
	OnChange func(primaries, added, removed []string)
}

// Topology knows which primary owns each slot of a Redis Cluster, or that Redis is a
// single standalone server. It is safe for concurrent use: readers load an immutable slot
// table through an atomic pointer and never wait for a refresh or a MOVED update, which
// build a new table and swap it in.
//
// A Topology is also the Namer the planner uses: see Names.
type Topology struct {
	opts    TopologyOptions
	ownConn bool // Close closes opts.Conn

	table atomic.Pointer[slotTable]
	kick  chan struct{} // a MOVED report asks Run for a refresh; buffered, holds at most one

	mu      sync.Mutex // guards writes of table (the load-modify-store of MOVED updates and refresh swaps) and lastErr
	lastErr error
}

// slotTable is one immutable view of the cluster.
type slotTable struct {
	cluster bool
	addrs   []string         // the primaries that own at least one slot, sorted; one address when standalone
	owner   [SlotCount]int16 // index into addrs of each slot's owner; -1 when no primary owns it (cluster only)
	slots   []int            // number of slots each of addrs owns
}

// SlotRange is a range of slots, both ends included, and the primary that owns it.
type SlotRange struct {
	Start, End int
	Primary    string
}

// NewTopology checks opts, learns the topology from the seeds with Refresh, and returns
// it. Call Run in a goroutine to keep it fresh, and Close when done.
func NewTopology(ctx context.Context, opts TopologyOptions) (*Topology, error) {
	if len(opts.Seeds) == 0 {
		return nil, errors.New("mitigate: topology: no seed addresses: give at least one \"host:port\"")
	}
	for _, s := range opts.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("mitigate: topology: seed %q: want \"host:port\": %v", s, err)
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"refresh interval", &opts.RefreshInterval, 30 * time.Second},
		{"min refresh gap", &opts.MinRefreshGap, 250 * time.Millisecond},
		{"refresh timeout", &opts.RefreshTimeout, 5 * time.Second},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("mitigate: topology: %s %v: must be positive, or 0 for the default %v", d.name, *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	opts.Seeds = slices.Clone(opts.Seeds)
	t := &Topology{opts: opts, kick: make(chan struct{}, 1)}
	if t.opts.Conn == nil {
		t.opts.Conn = NewNodeClients(nil)
		t.ownConn = true
	}
	if err := t.Refresh(ctx); err != nil {
		_ = t.Close()
		return nil, err
	}
	return t, nil
}

// StandaloneTopology returns the fixed topology of one standalone Redis server at addr.
// It never refreshes.
func StandaloneTopology(addr string) *Topology {
	t := &Topology{kick: make(chan struct{}, 1)}
	t.table.Store(standaloneTable(addr))
	return t
}

// TopologyFromRanges returns a fixed cluster topology in which each range's slots belong
// to its primary; slots in no range have no owner. It never refreshes. It is meant for
// tests, tools and plans computed offline.
func TopologyFromRanges(ranges []SlotRange) (*Topology, error) {
	var owners [SlotCount]string
	for _, r := range ranges {
		if r.Start < 0 || r.End >= SlotCount || r.Start > r.End {
			return nil, fmt.Errorf("mitigate: slot range %d-%d: want 0 ≤ start ≤ end ≤ %d", r.Start, r.End, SlotCount-1)
		}
		if r.Primary == "" {
			return nil, fmt.Errorf("mitigate: slot range %d-%d: no primary address", r.Start, r.End)
		}
		for s := r.Start; s <= r.End; s++ {
			owners[s] = r.Primary
		}
	}
	tab, err := clusterTable(&owners)
	if err != nil {
		return nil, err
	}
	t := &Topology{kick: make(chan struct{}, 1)}
	t.table.Store(tab)
	return t, nil
}

func standaloneTable(addr string) *slotTable {
	return &slotTable{addrs: []string{addr}, slots: []int{SlotCount}}
}

// clusterTable builds a cluster slot table from each slot's owner ("" for none).
func clusterTable(owners *[SlotCount]string) (*slotTable, error) {
	tab := &slotTable{cluster: true}
	for _, a := range owners {
		if a != "" && !slices.Contains(tab.addrs, a) {
			tab.addrs = append(tab.addrs, a)
		}
	}
	if len(tab.addrs) == 0 {
		return nil, errors.New("mitigate: topology: no slot has a primary; a cluster needs slots assigned (CLUSTER ADDSLOTS)")
	}
	if len(tab.addrs) > 1<<14 {
		return nil, fmt.Errorf("mitigate: topology: %d primaries: at most %d allowed", len(tab.addrs), 1<<14)
	}
	slices.Sort(tab.addrs)
	tab.slots = make([]int, len(tab.addrs))
	for s, a := range owners {
		if a == "" {
			tab.owner[s] = -1
			continue
		}
		i, _ := slices.BinarySearch(tab.addrs, a)
		tab.owner[s] = int16(i)
		tab.slots[i]++
	}
	return tab, nil
}

// IsCluster reports whether Redis is a cluster (false for a standalone server).
func (t *Topology) IsCluster() bool { return t.table.Load().cluster }

// Primaries returns how many primaries own slots (1 for standalone Redis).
func (t *Topology) Primaries() int { return len(t.table.Load().addrs) }

// PrimaryAddrs returns the addresses of the primaries that own slots, sorted (the one
// server for standalone Redis).
func (t *Topology) PrimaryAddrs() []string { return slices.Clone(t.table.Load().addrs) }

// PrimaryOf returns the address of the primary that owns slot, "" when no primary owns it
// or slot is outside [0, 16383]. For standalone Redis it returns the server's address for
// every slot. It does not allocate.
func (t *Topology) PrimaryOf(slot int) string {
	tab := t.table.Load()
	if slot < 0 || slot >= SlotCount {
		return ""
	}
	if !tab.cluster {
		return tab.addrs[0]
	}
	if i := tab.owner[slot]; i >= 0 {
		return tab.addrs[i]
	}
	return ""
}

// PrimaryOfKey returns PrimaryOf(Slot(key)). It does not allocate.
func (t *Topology) PrimaryOfKey(key string) string { return t.PrimaryOf(Slot(key)) }

// SlotsOf returns how many slots the primary at addr owns (16384 for the standalone server).
func (t *Topology) SlotsOf(addr string) int {
	tab := t.table.Load()
	if i, ok := slices.BinarySearch(tab.addrs, addr); ok {
		return tab.slots[i]
	}
	return 0
}

// Ranges returns the owned slot ranges in slot order, adjacent slots of one primary
// merged; for standalone Redis, one range 0-16383 on the server.
func (t *Topology) Ranges() []SlotRange {
	tab := t.table.Load()
	if !tab.cluster {
		return []SlotRange{{0, SlotCount - 1, tab.addrs[0]}}
	}
	var rs []SlotRange
	for s := 0; s < SlotCount; {
		i := tab.owner[s]
		e := s
		for e+1 < SlotCount && tab.owner[e+1] == i {
			e++
		}
		if i >= 0 {
			rs = append(rs, SlotRange{s, e, tab.addrs[i]})
		}
		s = e + 1
	}
	return rs
}

// Err returns the error of the last refresh, nil when it succeeded.
func (t *Topology) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

// Close releases the connections the Topology made itself (none when Options.Conn was
// given). Stop Run before closing.
func (t *Topology) Close() error {
	if t.ownConn {
		if c, ok := t.opts.Conn.(*NodeClients); ok {
			return c.Close()
		}
	}
	return nil
}

// Refresh asks the known primaries, then the seeds, for the cluster's slots — CLUSTER
// SHARDS, or CLUSTER SLOTS from a Redis older than 7 — and swaps in the first answer. A
// node that answers that cluster support is disabled makes the topology standalone, with
// that node as its server. When no node answers, the previous table stays and Refresh
// returns every node's error. When ctx has a deadline, each node asked gets an equal share
// of the time left, so a node that accepts connections but does not answer (hung, or its
// network black-holed, as before a failover) does not keep the others from being asked.
// A fixed topology (StandaloneTopology, TopologyFromRanges) returns nil without asking
// anything.
func (t *Topology) Refresh(ctx context.Context) error {
	_, err := t.refresh(ctx)
	return err
}

// refresh is Refresh; it also returns the table fetched (nil when none was, or for a
// fixed topology).
func (t *Topology) refresh(ctx context.Context) (*slotTable, error) {
	if t.opts.Conn == nil {
		return nil, nil
	}
	var tried []string
	if cur := t.table.Load(); cur != nil {
		tried = append(tried, cur.addrs...)
	}
	for _, s := range t.opts.Seeds {
		if !slices.Contains(tried, s) {
			tried = append(tried, s)
		}
	}
	var errs []error
	for i, addr := range tried {
		// A node that accepts connections but does not answer (a hung process or host, a
		// black-holed network: what a failover follows) must not use up the whole
		// deadline while the others would answer: each node gets its share of what is left.
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok {
			nctx, cancel = context.WithTimeout(ctx, time.Until(dl)/time.Duration(len(tried)-i))
		}
		tab, err := fetchTable(nctx, t.opts.Conn, addr)
		cancel()
		if err == nil {
			t.mu.Lock()
			t.table.Store(tab)
			t.lastErr = nil
			t.mu.Unlock()
			return tab, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	err := fmt.Errorf("mitigate: topology refresh: no node answered: %w", errors.Join(errs...))
	t.mu.Lock()
	t.lastErr = err
	t.mu.Unlock()
	return nil, err
}

// Run refreshes the topology every RefreshInterval, and soon after a MOVED redirect is
// reported (ReportMoved, NoteRedirect, or a client that Watch watches), until ctx is done.
// A refresh asked for by a report comes at least MinRefreshGap after the previous one,
// and reports in between share it. When such a refresh finds the cluster as the refresh
// before it did (the report told nothing that the refresh could confirm: an address the
// cluster does not announce, say), the gap doubles for the next, up to RefreshInterval,
// and goes back to MinRefreshGap once a refresh finds a change: a client that keeps
// disagreeing with the cluster does not make the topology ask it every MinRefreshGap.
// Failed refreshes go to OnError and keep the previous table. It returns when ctx is
// done; a fixed topology returns at once.
func (t *Topology) Run(ctx context.Context) {
	if t.opts.Conn == nil {
		return
	}
	tick := time.NewTimer(t.opts.RefreshInterval)
	defer tick.Stop()
	last := time.Now()
	gap := t.opts.MinRefreshGap
	fetched := t.table.Load() // what the last refresh found
	for {
		kicked := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-t.kick:
			kicked = true
			if wait := gap - time.Since(last); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-timer.C:
				}
			}
		}
		rctx, cancel := context.WithTimeout(ctx, t.opts.RefreshTimeout)
		tab, err := t.refresh(rctx)
		cancel()
		last = time.Now()
		if err != nil && t.opts.OnError != nil && ctx.Err() == nil {
			t.opts.OnError(err)
		}
		if tab != nil {
			switch {
			case !tab.same(fetched):
				gap = t.opts.MinRefreshGap
				if t.opts.OnChange != nil && fetched != nil && !slices.Equal(tab.addrs, fetched.addrs) {
					t.opts.OnChange(slices.Clone(tab.addrs), minus(tab.addrs, fetched.addrs), minus(fetched.addrs, tab.addrs))
				}
			case kicked:
				gap = min(2*gap, t.opts.RefreshInterval)
			}
			fetched = tab
		}
		tick.Reset(t.opts.RefreshInterval)
	}
}

// same reports whether tab and o describe the same cluster.
func (tab *slotTable) same(o *slotTable) bool {
	return o != nil && tab.cluster == o.cluster && slices.Equal(tab.addrs, o.addrs) && tab.owner == o.owner
}

// ReportMoved records that a node answered MOVED for slot, naming addr as its owner: the
// slot's owner changes at once, and Run is asked for a full refresh. A standalone
// topology keeps its table (a MOVED there means Redis became a cluster, which the refresh
// finds out), and so does an addr with no host (":6380"), which the caller should have
// completed with the host it asked.
func (t *Topology) ReportMoved(slot int, addr string) {
	if slot < 0 || slot >= SlotCount {
		return
	}
	host, _, err := net.SplitHostPort(addr)
	t.mu.Lock()
	cur := t.table.Load()
	i, known := slices.BinarySearch(cur.addrs, addr)
	old := cur.owner[slot]
	switch {
	case err != nil || host == "" || !cur.cluster || t.PrimaryOf(slot) == addr:
	case known && (old < 0 || cur.slots[old] > 1):
		// The common case: a slot moves between primaries that stay primaries.
		tab := &slotTable{cluster: true, addrs: cur.addrs, owner: cur.owner, slots: slices.Clone(cur.slots)}
		tab.owner[slot] = int16(i)
		tab.slots[i]++
		if old >= 0 {
			tab.slots[old]--
		}
		t.table.Store(tab)
	default:
		var owners [SlotCount]string
		for s, i := range cur.owner {
			if i >= 0 {
				owners[s] = cur.addrs[i]
			}
		}
		owners[slot] = addr
		if tab, err := clusterTable(&owners); err == nil {
			t.table.Store(tab)
		}
	}
	t.mu.Unlock()
	t.askRefresh()
}

// NoteRedirect looks at an error from a Redis command and, when it is a MOVED redirect,
// reports it with ReportMoved and returns true. Other errors, ASK redirects (which move
// one command, not the slot) and nil return false.
func (t *Topology) NoteRedirect(err error) bool {
	r, ok := ParseRedirect(err)
	if !ok || r.Ask {
		return false
	}
	t.ReportMoved(r.Slot, r.Addr)
	return true
}

// Watch makes the topology learn from what c meets: a node's MOVED reply (which c then
// follows itself) is reported with ReportMoved, and so is a keyed command that a node
// known as a primary served although the topology gives its slot to another primary (c
// learned a move before the topology did, from a MOVED it met on a pipeline or its own
// reload of the slot table). A command served by a node the topology does not know as a
// primary — a replica promoted by a failover, which c finds with its own reloads
// (ClusterOptions.ClusterStateReloadInterval) — asks Run for a refresh instead. So a
// change of the slots c works on shows in the topology within MinRefreshGap, not at the
// next periodic refresh, at no cost when nothing changed: the check is a slot computation
// per command, and nothing is sent to Redis but the refresh that Run makes (rate-limited
// as Run says). c must send its keyed commands to primaries (no ReadOnly).
//
// Call it before c sends its first command: it hooks each node client c makes from then
// on (ClusterClient.OnNewNode).
func (t *Topology) Watch(c *redis.ClusterClient) {
	c.OnNewNode(func(n *redis.Client) { n.AddHook(watchHook{t, n.Options().Addr}) })
}

// watchHook is the hook Watch adds to the client of the node at addr.
type watchHook struct {
	t    *Topology
	addr string
}

func (h watchHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h watchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.t.saw(h.addr, cmd.Args(), cmd.Err(), true)
		return err
	}
}

// ProcessPipelineHook reports MOVED replies only: a pipeline that succeeds may be ASKING
// and a command on a slot being imported, which the node does not own yet.
func (h watchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.t.saw(h.addr, cmd.Args(), cmd.Err(), false)
		}
		return err
	}
}

// saw looks at one command the node at addr answered with err: a MOVED, or (when served
// counts) a keyed command served, whose slot the table gives to another primary.
func (t *Topology) saw(addr string, args []any, err error, served bool) {
	tab := t.table.Load()
	if tab == nil || !tab.cluster {
		return
	}
	if r, ok := ParseRedirect(err); ok {
		if r.Ask {
			return
		}
		if host, port, e := net.SplitHostPort(r.Addr); e == nil && host == "" {
			h, _, _ := net.SplitHostPort(addr)
			r.Addr = net.JoinHostPort(h, port)
		}
		if t.PrimaryOf(r.Slot) != r.Addr {
			t.ReportMoved(r.Slot, r.Addr)
		}
		return
	}
	if !served || (err != nil && !errors.Is(err, redis.Nil)) {
		return
	}
	slot := cmdSlot(args)
	if slot < 0 || t.PrimaryOf(slot) == addr {
		return
	}
	if _, known := slices.BinarySearch(tab.addrs, addr); known {
		t.ReportMoved(slot, addr)
		return
	}
	t.askRefresh()
}

// askRefresh asks Run for a refresh.
func (t *Topology) askRefresh() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// cmdSlot returns the slot of the first key of a command that names one where cmdSlot
// knows to find it (the commands of this package, the executor's and the agent's), -1
// for others: a command it does not know may name no key, or a channel (PUBLISH), which
// any node serves.
func cmdSlot(args []any) int {
	if len(args) < 2 {
		return -1
	}
	name, _ := args[0].(string)
	at := 1
	switch strings.ToLower(name) {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
		if len(args) < 4 {
			return -1
		}
		if n, ok := integer(args[2]); !ok || n < 1 {
			return -1
		}
		at = 3
	case "get", "set", "del", "unlink", "exists", "type", "dump", "restore", "pttl", "ttl",
		"expire", "pexpire", "expireat", "pexpireat", "persist",
		"incr", "incrby", "decr", "decrby", "getset", "getdel",
		"sadd", "srem", "smembers", "sismember", "scard",
		"zadd", "zrem", "zrange", "zremrangebyscore", "zcard", "zscore",
		"hget", "hset", "hmget", "hgetall", "hdel":
	default:
		return -1
	}
	switch k := args[at].(type) {
	case string:
		return Slot(k)
	case []byte:
		return SlotBytes(k)
	}
	return -1
}

// Redirect is a MOVED or ASK answer from a cluster node.
type Redirect struct {
	// Ask is true for ASK (the slot is being migrated; retry one command with ASKING on
	// Addr), false for MOVED (Addr owns the slot now).
	Ask bool
	// Slot is the slot of the key the command named.
	Slot int
	// Addr is the "host:port" to ask instead. Redis leaves the host empty (":6380") when
	// it does not know the node's endpoint; the caller then uses the host it asked.
	Addr string
}

// ParseRedirect reads a MOVED or ASK error reply, with or without its leading '-':
// "MOVED 3999 127.0.0.1:6381", "-ASK 3999 127.0.0.1:6381". It reports false for nil, for
// other errors, and for a malformed redirect (a slot outside [0, 16383], no port or one
// that is not a number from 1 to 65535).
func ParseRedirect(err error) (Redirect, bool) {
	if err == nil {
		return Redirect{}, false
	}
	f := strings.Fields(strings.TrimPrefix(err.Error(), "-"))
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return Redirect{}, false
	}
	slot, e := strconv.Atoi(f[1])
	if e != nil || slot < 0 || slot >= SlotCount {
		return Redirect{}, false
	}
	if _, port, e := net.SplitHostPort(f[2]); e != nil || !validPort(port) {
		return Redirect{}, false
	}
	return Redirect{Ask: f[0] == "ASK", Slot: slot, Addr: f[2]}, true
}

// validPort reports whether port is a TCP port number, 1 to 65535, in decimal digits.
func validPort(port string) bool {
	if port == "" || port[0] < '1' || port[0] > '9' {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	n, err := strconv.Atoi(port)
	return err == nil && n <= 65535
}

// fetchTable asks the node at addr for the slot table: CLUSTER SHARDS, falling back to
// CLUSTER SLOTS when the node does not know SHARDS; a standalone table when the node has
// cluster support disabled.
func fetchTable(ctx context.Context, conn NodeCommander, addr string) (*slotTable, error) {
	reply, err := conn.NodeDo(ctx, addr, "CLUSTER", "SHARDS")
	switch {
	case err == nil:
		return parseShards(reply, addr)
	case isClusterDisabled(err):
		return standaloneTable(addr), nil
	case isUnknownCommand(err):
		reply, err = conn.NodeDo(ctx, addr, "CLUSTER", "SLOTS")
		if err != nil {
			if isClusterDisabled(err) {
				return standaloneTable(addr), nil
			}
			return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
		}
		return parseSlots(reply, addr)
	}
	return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
}

func isClusterDisabled(err error) bool {
	return strings.Contains(err.Error(), "cluster support disabled")
}

func isUnknownCommand(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "unknown subcommand") || strings.Contains(s, "unknown command")
}

// parseShards reads a CLUSTER SHARDS reply (RESP2 arrays of name/value pairs or RESP3
// maps): each shard's slot ranges belong to its node whose role is "master". asked is the
// node that answered, whose host stands in for an unknown endpoint.
func parseShards(reply any, asked string) (*slotTable, error) {
	shards, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("CLUSTER SHARDS: reply is %T; want an array of shards", reply)
	}
	var owners [SlotCount]string
	for n, sh := range shards {
		fields, err := pairs(sh)
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SHARDS: shard %d: %w", n, err)
		}
		slotList, _ := fields["slots"].([]any)
		if len(slotList) == 0 {
			continue // a shard with no slots
		}
		if len(slotList)%2 != 0 {
			return nil, fmt.Errorf("CLUSTER SHARDS: shard %d: %d slot bounds; want pairs", n, len(slotList))
		}
		nodes, _ := fields["nodes"].([]any)
		// The primary: the node with role master, and of those one not failing. After a
		// failover the old primary stays listed as a master with health "fail" until it
		// comes back as a replica, in any order with the new one.
		primary, failing := "", false
		for _, nd := range nodes {
			nf, err := pairs(nd)
			if err != nil {
				return nil, fmt.Errorf("CLUSTER SHARDS: shard %d: node: %w", n, err)
			}
			if str(nf["role"]) != "master" {
				continue
			}
			if primary != "" && !failing {
				break
			}
			fail := str(nf["health"]) == "fail"
			if primary != "" && fail {
				continue // a second failing master: keep the first
			}
			host := str(nf["endpoint"])
			if host == "" || host == "?" {
				host = str(nf["ip"])
			}
			port, _ := integer(nf["port"])
			if port == 0 {
				port, _ = integer(nf["tls-port"])
			}
			primary, failing = joinAddr(host, port, asked), fail
		}
		if primary == "" {
			return nil, fmt.Errorf("CLUSTER SHARDS: shard %d owns slots but has no node with role master", n)
		}
		for i := 0; i < len(slotList); i += 2 {
			lo, ok1 := integer(slotList[i])
			hi, ok2 := integer(slotList[i+1])
			if !ok1 || !ok2 || lo < 0 || hi >= SlotCount || lo > hi {
				return nil, fmt.Errorf("CLUSTER SHARDS: shard %d: bad slot range %v-%v", n, slotList[i], slotList[i+1])
			}
			for s := lo; s <= hi; s++ {
				owners[s] = primary
			}
		}
	}
	return clusterTable(&owners)
}

// parseSlots reads a CLUSTER SLOTS reply: [start, end, [host, port, id…], replicas…]….
func parseSlots(reply any, asked string) (*slotTable, error) {
	ranges, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("CLUSTER SLOTS: reply is %T; want an array of ranges", reply)
	}
	var owners [SlotCount]string
	for n, r := range ranges {
		e, ok := r.([]any)
		if !ok || len(e) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: range %d: %v; want [start end [host port …] …]", n, r)
		}
		lo, ok1 := integer(e[0])
		hi, ok2 := integer(e[1])
		node, ok3 := e[2].([]any)
		if !ok1 || !ok2 || !ok3 || len(node) < 2 || lo < 0 || hi >= SlotCount || lo > hi {
			return nil, fmt.Errorf("CLUSTER SLOTS: range %d: %v; want [start end [host port …] …] with 0 ≤ start ≤ end ≤ %d", n, r, SlotCount-1)
		}
		port, _ := integer(node[1])
		primary := joinAddr(str(node[0]), port, asked)
		for s := lo; s <= hi; s++ {
			owners[s] = primary
		}
	}
	return clusterTable(&owners)
}

// joinAddr makes "host:port", taking the host of asked when host is unknown.
func joinAddr(host string, port int, asked string) string {
	if host == "" || host == "?" {
		host, _, _ = net.SplitHostPort(asked)
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// pairs reads a RESP3 map or a RESP2 array of alternating names and values.
func pairs(v any) (map[string]any, error) {
	switch m := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, val := range m {
			out[str(k)] = val
		}
		return out, nil
	case map[string]any:
		return m, nil
	case []any:
		if len(m)%2 != 0 {
			return nil, fmt.Errorf("%d elements; want name/value pairs", len(m))
		}
		out := make(map[string]any, len(m)/2)
		for i := 0; i < len(m); i += 2 {
			out[str(m[i])] = m[i+1]
		}
		return out, nil
	}
	return nil, fmt.Errorf("a %T; want a map or an array of name/value pairs", v)
}

func str(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

func integer(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int:
		return n, true
	case string:
		i, err := strconv.Atoi(n)
		return i, err == nil
	}
	return 0, false
}
