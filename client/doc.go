// Package client is the Go SDK that applications embed to work with hotkeyd: it reports
// the app's Redis traffic to the agent and follows the agent's plan (docs/plan.md) for
// the hot keys it names. Three lines add both to a go-redis v9 client (*redis.Client or
// *redis.ClusterClient; one Client per go-redis client, and no *redis.Ring):
//
//	c, err := client.Attach(rdb, client.Options{Agent: "http://127.0.0.1:9736", Source: "checkout"})
//	if err != nil { … }
//	defer c.Close()
//
// The agent's URL must name its port (Attach refuses one without it): the plan comes
// from it over HTTP, and the samples go to the same host and port over UDP.
//
// # Reporting
//
// The Reporter samples one command in SampleEvery through a go-redis hook and sends the
// samples to the agent in UDP datagrams (the report protocol of package sampler,
// docs/protocol.md). It never slows the command path down or fails it: the draw is
// lock-free, samples go into a bounded buffer without waiting and are dropped (and
// counted) when it is full or the agent is away. A Reporter can be used alone
// (NewReporter, rdb.AddHook(r.Hook())); Attach makes one that marks its reports as
// coming from a client that follows the plan.
//
// # Following the plan
//
// A background goroutine long-polls GET /v1/plan?after=V&generated=T&wait=30s (V and T
// the version and generated of the plan held, so that an agent that restarted and counted
// versions up to V again sends its own plan), decodes each new plan with
// mitigate.DecodePlan and publishes it in an atomic pointer that the command path reads
// without a lock. Only entries in mode "enforce" are applied, each for its lease
// (Expires − Generated, at most mitigate.MaxLease (1h) whatever Expires says, counted
// from when the plan arrived on the client's clock). Fail
// open: when the agent is unreachable, slow or answers garbage, the client keeps its plan
// until the leases run out (30–60s with the agent's defaults), then behaves as plain
// Redis; it retries with a backoff of 1s doubling to 30s, but tries again a second before
// the held plan's leases run out, so that an agent back by then renews them in time. No
// command ever waits for the agent. Each failed fetch is logged at Warn, the leases
// running out once at Warn, and taking a plan again after either once at Info
// (Options.Logger, slog.Default() unless set).
//
// L1 (entries of kind l1): a GET of the key is answered from an in-process cache, for
// the entry's TTL, without calling Redis. A miss loads the key once per process however
// many callers miss together (single-flight); a failed load is shared by its waiters and
// not cached. XFetch (Vattani, Chierichetti, Lowenstein, VLDB 2015) refreshes a value
// early, in the background, with probability exp(−t/(δβ)) per read at time t before it
// expires (δ: how long its last load took). Departure from the paper: the draw is made
// only in the last tenth of the TTL, since at a million reads/s every read being a trial
// would refresh a slowly loaded key right after each load. After the
// TTL (soft expiry) the stale value is served while one background refresh runs, also
// when refreshes fail (stale-if-error), but never after the hard TTL (HardFactor × TTL,
// default 2×). TTLs are jittered by ±10 %. A write of the key through this client (any
// write per sampler.LookupCommand, a key of any command with a destination such as
// SUNIONSTORE or SORT … STORE, or any unknown command naming it) drops the local
// value at once, and a load in progress for it is not cached. Staleness bound: a GET
// through this client never returns a value older than the hard TTL; it returns a value
// written by another process at most TTL × 1.1 (jitter) + one load after the write
// while Redis answers, at most the hard TTL while it does not.
// Only GET is cached (not MGET, HGET, nor pipelines); every other command of an L1 key
// goes to Redis.
//
// Copies (entries of kind copies): a read of one key (GET, HGET, LRANGE, …) goes to a
// random copy; a copy that fails or answers as for a missing key (nil, empty, 0, -2: the
// agent may not have written it yet) is read again on the original. A copy's node that
// does not answer (a timeout, a refused connection) turns the key's copy reads off in
// this client, as a write of unknown outcome does (below), until a repair finds every
// copy's node answering. Reads whose reply
// type the client does not know go to the original. A single-key write (SET family, DEL, EXPIRE, INCR,
// HSET, …) goes to the original; once it succeeds the copies are set to the original's
// value, type and TTL (DUMP and RESTORE, or DEL when the original is gone), so they
// converge on the original whatever the command was. The app sees the original's result;
// errors on copies are counted (Stats, metrics) and logged. Writes of one key through one
// client are ordered by a striped lock held from the original's write to the copies'
// update, so: a read through any client that starts after a write through this client
// has returned sees that write or a later one. Reads made while the write is under way
// may see it on one copy and not yet on the next (the copies are written at once, not
// in one step): two such reads can go back in time until the write returns. Writes to
// the same key from several
// processes at once can leave the copies with the older of two values until the next
// write through an SDK or the agent's refresh of the copies; writes by clients without
// the SDK reach the copies only by that refresh. A write the client cannot mirror safely
// — a multi-key write touching a split key (MSET, DEL a b, RENAME, …), MULTI/EXEC,
// scripts (EVAL, FCALL), blocking pops, unknown commands naming the key — goes to the
// original only. It, and a write whose outcome is unknown (a timeout, a broken
// connection) or whose copying failed, turns the key's copy reads off in this client,
// since the copies may be older than the original, until a repair in the background
// (one per key, 50ms doubling to 2s between attempts, ended by Close or the end of the
// copies' lease; a new plan version carries the mark and the repair over, renamed copies
// included) has copied the original, as it is then, to the copies. Each attempt first
// asks the original's node and the copies' whether the keys exist, then holds the key's
// stripe from reading the original to writing the copies; writes of the key through
// this client meanwhile wait for it, then go to the original only and keep the reads off
// until the next repair, as does a write marked unknown after a repair began. So a
// copy's node that hangs fails the attempt's first step and holds no write up; the first
// write it fails to copy waits for the copying to give up, and so does a write behind an
// attempt whose node hung after its first step: go-redis's read timeout, with its
// retries, within Options.Cache.LoadTimeout (2s by default), which bounds each copying
// and repair. Reads thus never return a value older than
// one a read of the original returned after the write, except when the write itself
// reaches Redis after the repair's commands, sent after it failed (a command delayed in
// the network, not queued in the server). A plan that starts splitting a key, or
// renames its copies or adds one, reaches the agent's executor, which writes the
// copies, and the clients at about the same time: a write that this client made under
// the plan before
// and that was under way when the new plan came turns copy reads off until a repair, as
// above, but one that ended before it, after the agent had written the copies, reaches
// them only with the agent's refresh (mitigate.copy_refresh, 1s by default), and reads
// of the copies may return the older value until then. In a plain pipeline, reads go to
// the original and single-key writes are mirrored after the pipeline. On a connection in
// MULTI or with keys watched (a Conn, or the Tx of Client.Watch or ClusterClient.Watch),
// every read goes to Redis and to the original, never to L1 or a copy. A write of a
// split key whose context ends while it waits for an earlier write of a key of its
// stripe returns the context's error unsent.
//
// With a ClusterClient, go-redis sends each command through the client of the node it
// goes to, and runs Watch's transaction on a Tx of that node client, which does not pass
// the ClusterClient's hooks. So Attach also adds a hook to every node client, primaries
// and replicas: to those the ClusterClient makes later (OnNewNode) and to those it
// already holds, which Attach finds with ForEachShard (one CLUSTER SLOTS, in the
// background, before it starts following the plan). That hook applies the rules above
// to the commands that did not pass the ClusterClient's hooks, Watch's transactions and
// app code using a node client directly (ForEachShard, MasterForKey): their writes drop
// this client's L1 values of their keys, before and after, and are mirrored to the
// copies or turn the key's copy reads off (inside MULTI) as on a Client; their reads go
// to the node, never to L1 or a copy. So a GET through the ClusterClient after Watch
// has returned sees the transaction's write. Every other command is processed once,
// by the ClusterClient's hook. Limits: a node client made before Attach by a
// ClusterClient that has never loaded the cluster's slots (Redis unreachable) is hooked
// only when Attach's retry (1s doubling to 30s) finds it; the reporter does not sample
// the commands of Watch's transactions.
//
// Counters (entries of kinds sharded_counter and batched_counter) are not applied by the
// hook: they change what INCR returns, so they have an explicit API, Client.Counter:
// Add and Get, plain INCRBY/GET without an entry, one INCRBY per key per flush interval
// under batched_counter (Close flushes; while Redis is unreachable the sums wait for it,
// see MaxFlushTries; a crash loses the sums not flushed yet: one interval's, or all since
// Redis became unreachable), a random
// sub-counter under sharded_counter with exact reads of base + Σ sub-counters.
//
// Sharded counters and fail open: increments made under a sharded_counter entry stay in
// its sub-counters until the agent folds them back into the key, so they outlive the
// entry's lease when the agent is away. Writes fail open (after the lease, Add is INCRBY
// of the key). Reads stay exact because a writer lists each sub-counter in the key's list
// before it first increments it, and the agent takes it off only after folding it: any
// Counter.Get, in any process, with or without a plan, reads the key and its list in one
// round trip, and the listed sub-counters too when there are any (about three round trips
// then, instead of one). A process that holds the entry (or did within two leases) reads
// the entry's sub-counters too, listed or not, so that a listing lost in a failover of
// the key's primary does not hide them from it; other processes depend on the list.
//
// Known limitation: a plain GET of the key, through this client or any other, reads the
// key alone and misses the increments not yet folded. Read a sharded counter with
// Counter.Get (or mitigate.ReadListedCounter), or keep sharded_counter in observe or
// recommend mode (the default).
//
// # Cache-aside
//
// Client.Get, and a Cache made with NewCache, give app code the same protection for any
// key: single-flight, XFetch, stale-while-revalidate and stale-if-error, jittered TTLs,
// and a bulkhead (MaxLoads) that caps the loads running at once in the process, so a cold
// start cannot stampede the database. LoadTimeout bounds how long a caller waits for a
// load, even one that ignores its context. Get's cache and the L1 are two caches, each
// bounded by CacheOptions.MaxEntries and MaxBytes: a Client holds up to twice those
// (2 × 64 MiB with the defaults).
//
// A Client, a Cache, a Reporter and their hooks are safe for concurrent use. Close stops
// every goroutine they started.
package client
