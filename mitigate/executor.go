package mitigate

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Redis is what the executors and the counter protocol need from a Redis client: one
// command, sent to the node that owns its first key. *redis.Client, *redis.ClusterClient
// and redis.UniversalClient have it as is; a ClusterClient routes each command (EVAL and
// EVALSHA by their first key) and follows MOVED and ASK itself. Every script the package
// runs touches the keys of one slot only.
type Redis interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// masters is how Recover reaches every primary of a cluster to SCAN it;
// *redis.ClusterClient has it. A client without it is scanned as one server.
type masters interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// script is a Lua script run with EVALSHA, falling back to EVAL when the node does not
// have it cached.
type script struct{ src, sha string }

func newScript(src string) script {
	h := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(h[:])}
}

// run runs s on keys with args. Through a client that follows redirects (not a
// *redis.Client or *redis.Conn, which talk to one node), a script that meets its slot
// being migrated is tried again until it runs, backing off from 5ms to 200ms, for as long
// as ctx allows and at most MigrationWait: TRYAGAIN (its keys are split between the
// two nodes, which a migration moving them one by one does) and an ASK that the
// client gave up following after its redirects (MaxRedirects) are no answer to give the
// caller, and the script did not run. A slot left migrating for longer (a resharding
// that stopped half-way) fails the call with the last of them.
func (s script) run(ctx context.Context, rdb Redis, keys []string, args ...any) *redis.Cmd {
	a := s.args(keys, args...)
	var deadline time.Time
	wait := 5 * time.Millisecond
	for {
		cmd := rdb.Do(ctx, a...)
		if err := cmd.Err(); err != nil && isNoScript(err) {
			b := slices.Clone(a)
			b[0], b[1] = "EVAL", s.src
			cmd = rdb.Do(ctx, b...)
		}
		if !isMigrating(cmd.Err()) || !followsRedirects(rdb) {
			return cmd
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(MigrationWait)
		}
		if time.Now().Add(wait).After(deadline) {
			return cmd
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return cmd
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// MigrationWait bounds how long a script of this package (a counter's read, a fold's
// step) waits for a slot migration that keeps its keys apart (see script.run).
const MigrationWait = 10 * time.Second

// isMigrating reports whether err says that the command's slot is being migrated:
// TRYAGAIN, or an ASK left unfollowed.
func isMigrating(err error) bool {
	if err == nil {
		return false
	}
	m := strings.TrimPrefix(err.Error(), "-")
	return strings.HasPrefix(m, "TRYAGAIN") || strings.HasPrefix(m, "ASK ")
}

// followsRedirects reports whether rdb may reach another node when asked again: not a
// client of one node.
func followsRedirects(rdb Redis) bool {
	switch rdb.(type) {
	case *redis.Client, *redis.Conn:
		return false
	}
	return true
}

// args returns the EVALSHA command that runs s on keys with args.
func (s script) args(keys []string, args ...any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "EVALSHA", s.sha, strconv.Itoa(len(keys)))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// isNoScript reports whether err says that the node does not have the script cached.
func isNoScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }

// ExecutorOptions configure an Executor. Only Redis is required.
type ExecutorOptions struct {
	// Redis is the client the executor writes copies and folds counters with: a
	// *redis.Client for standalone Redis, a *redis.ClusterClient for a cluster. Required.
	Redis Redis
	// RefreshPeriod is how often Run rewrites every copy from its original (and folds the
	// sub-counters of ended entries). Copies written by a client that bypasses the SDK are
	// stale for at most about this long; see docs/plan.md. Default: 1s.
	RefreshPeriod time.Duration
	// GracePeriod is how long the executor keeps deleting the copies and folding the
	// sub-counters of an entry that ended, counted from the last time it found one
	// written: clients that have not heard of the end still use them for up to the plan's
	// lease. It is also how long after Recover a round scans again for what clients of an
	// earlier run created after Recover's scan, how long this executor's claims on its
	// copies last (renewed every half of it; see ID), and how long a scan at start holds
	// the fleet's lock on them (RecoverKey). Default: DefaultLease (60s).
	GracePeriod time.Duration
	// ID names this executor among all those on the same Redis (one agent per app pod,
	// every agent on one cluster). Its claims — this ID as a member of the claim key
	// "hk:claim" + name of each copy name it uses, a sorted set in the copy's slot — keep
	// other executors from deleting those copies, and it deletes no copy that another
	// live executor claims. It must differ between executors that run at the same time.
	// The Redis user needs the key patterns "{hk:*" and "hk:claim{hk:*" (ZADD, ZREM,
	// ZRANGE, ZREMRANGEBYSCORE, PEXPIRE, DEL, through EVALSHA and EVAL): an executor
	// that cannot check a copy's claims does not delete it (fail safe); SweepKey (SET),
	// without which every executor runs the periodic scan itself, logging an error each
	// time; and RecoverKey (GET and SET, through EVALSHA and EVAL), without which every
	// executor runs its scans at start itself, logging an error each time. Claims last
	// one GracePeriod and are renewed at the first round after half of it, so
	// RefreshPeriod must stay well below GracePeriod/2 (the defaults: 1s and 60s).
	// Default: 16 random hex digits, made by NewExecutor.
	ID string
	// RescanPeriod is how often a round starts a scan of every primary for leftovers, left
	// by an executor that crashed (and whose agent may never start again) or written by a
	// client after every earlier scan: it deletes the copies that neither this executor
	// nor any live claim uses, and folds every sub-counter and completes every stash it
	// finds, as Recover does (a sub-counter another live executor claims is folded, not
	// drained); each wait is
	// RescanPeriod plus up to a quarter of it, drawn from a source seeded by ID. The fleet
	// runs one scan per RescanPeriod between its executors (SweepKey). In Run the scan
	// runs beside the rounds, not inside one. Default: 10 × GracePeriod.
	RescanPeriod time.Duration
	// Registry receives hotkeyd_mitigation_actions_total. Default: no metrics.
	Registry *prometheus.Registry
	// Logger gets one line per action (key, kind, action, reason). Refreshes of copies log
	// at Debug, other actions at Info, errors at Warn. Default: no logging.
	Logger *slog.Logger
	// Now tells the time for grace periods. Default: time.Now.
	Now func() time.Time
}

// DefaultRefreshPeriod is the default ExecutorOptions.RefreshPeriod.
const DefaultRefreshPeriod = time.Second

// Actions counted in hotkeyd_mitigation_actions_total and logged.
const (
	ActionCopyWrite          = "copy_write"           // copies written from the original when an entry starts or its names change
	ActionCopyRefresh        = "copy_refresh"         // a copy rewritten by the periodic refresh
	ActionCopyDelete         = "copy_delete"          // a copy deleted (entry ended, names changed, original gone, left by an earlier run, claimed by nobody)
	ActionCopyKeptClaimed    = "copy_kept_claimed"    // a copy not deleted (nor retired further) because another live executor claims it
	ActionCounterFold        = "counter_fold"         // a sub-counter's value moved into its key
	ActionCounterRecover     = "counter_recover"      // an unfinished fold (a crash) completed
	ActionCounterKeptClaimed = "counter_kept_claimed" // a sub-counter not drained (nor taken off its list) because another live executor claims it
	ActionError              = "error"                // a Redis step failed; it is retried at the next round
)

var errClosed = errors.New("mitigate: executor closed")

// Executor carries out the Redis part of enforced plan entries: it writes and refreshes
// the copies of Copies entries and deletes them when the entry ends, and folds the
// sub-counters of ShardedCounter entries back into their key when the entry ends. Entries
// in Observe or Recommend mode are not executed. It is safe for concurrent use; Redis work
// runs one round at a time, except the SCANs of the scans for leftovers, which run beside
// the rounds (scanJob).
//
// Use: NewExecutor, Offer the current plan and each new one (Store.Subscribe(e.Offer)),
// Run in a goroutine, and Close when the agent stops: Close deletes every copy and folds
// every sub-counter.
//
// Several executors may share one Redis (one agent per app pod): each claims the copies
// it uses (ExecutorOptions.ID, claims.go), and none deletes a copy that another live
// executor claims — not when its own entry ends, not in Recover's scans, not at Close.
// A copy whose claims cannot be checked is not deleted; the next round tries again.
type Executor struct {
	rdb     Redis
	refresh time.Duration
	grace   time.Duration
	id      string // this executor's member in the claim keys of its copies
	now     func() time.Time
	log     *slog.Logger
	actions *prometheus.CounterVec // nil without a registry

	stop     chan struct{} // closed by Close
	stopOnce sync.Once
	kick     chan struct{} // holds at most one wake-up for Run: a plan was offered

	offerMu  sync.Mutex // guards offered and hasOffer
	offered  Plan
	hasOffer bool

	mu       sync.Mutex // guards the fields below; held for each round of Redis work (not a scan's SCANs), so rounds never overlap
	closed   bool
	runDone  chan struct{}       // closed when Run returns; nil when Run is not running
	copies   map[string][]string // key → copy names of each enforced Copies entry
	subs     map[string][]string // key → sub-counter names of each enforced ShardedCounter entry
	retiring map[string]ended    // copy name → its key; deleted every round until quiet for the grace period
	draining map[string]ended    // sub-counter name → its key; folded every round until quiet for the grace period
	// unfinished holds the sub-counters (→ their key) whose last fold failed, folded again
	// every round until one succeeds: a fold interrupted after step b leaves a stash that
	// must be completed within FoldMemory, also when the plan still uses the sub-counter.
	unfinished map[string]string
	// rescan is when a round scans for leftovers of an earlier run again (zero: none due):
	// one grace period after Recover, once clients still holding that run's plan have
	// stopped writing copies and sub-counters that Recover's scan could not see. Like
	// Recover's scan it is skipped while another executor holds RecoverKey.
	rescan time.Time
	// scans counts the scans for leftovers started and not handled yet (scanJob); a round
	// starts none while one is under way.
	scans int

	// Claims (claims.go).
	rescanEvery time.Duration
	rng         *rand.Rand      // jitter of sweep; seeded by id
	sweep       time.Time       // when a round runs the periodic scan next (zero: not scheduled yet)
	claimNext   time.Time       // when the claims are renewed next
	claimDirty  bool            // the copies in use changed (or the last write failed): write the claims at once
	claimed     map[string]bool // copy names whose claim key may hold this executor's id
	// sweepRetry: the last periodic scan failed after this executor took its turn
	// (SweepKey, which it may still hold): the retry runs without taking the turn again.
	sweepRetry bool
	// scanFails counts the scans for leftovers that failed in a row; none starts before
	// scanNotBefore (scanBackoff).
	scanFails     int
	scanNotBefore time.Time
}

// scanBackoff is how long after the nth failed scan in a row the next may start: at the
// next round after the first, then RefreshPeriod doubled at each failure, up to the
// grace period. Each try reads every primary that still answers, so during a long outage
// of one primary the others are not scanned back to back.
func (e *Executor) scanBackoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := e.refresh
	for i := 2; i < n && d < e.grace; i++ {
		d *= 2
	}
	return min(d, e.grace)
}

// ended is a copy or sub-counter of an entry that ended.
type ended struct {
	key   string
	quiet time.Time // since when it has been found empty
	// why is set for a copy retired before its first deletion (its claims could not be
	// checked): the reason its first deletion logs.
	why string
}

// NewExecutor checks o and returns an executor. It does no Redis work: Run starts with
// Recover.
func NewExecutor(o ExecutorOptions) (*Executor, error) {
	if o.Redis == nil {
		return nil, errors.New("mitigate: executor: no Redis client: give a *redis.Client or *redis.ClusterClient")
	}
	if o.RefreshPeriod < 0 {
		return nil, fmt.Errorf("mitigate: executor: refresh period %v: must be positive, or 0 for the default %v", o.RefreshPeriod, DefaultRefreshPeriod)
	}
	if o.GracePeriod < 0 {
		return nil, fmt.Errorf("mitigate: executor: grace period %v: must be positive, or 0 for the default %v", o.GracePeriod, DefaultLease)
	}
	if o.RescanPeriod < 0 {
		return nil, fmt.Errorf("mitigate: executor: rescan period %v: must be positive, or 0 for the default (10 × grace period)", o.RescanPeriod)
	}
	id := o.ID
	if id == "" {
		var err error
		if id, err = randomHex(8, "mitigate: executor: id"); err != nil {
			return nil, err
		}
	}
	e := &Executor{
		id:         id,
		rdb:        o.Redis,
		refresh:    cmp0(o.RefreshPeriod, DefaultRefreshPeriod),
		grace:      cmp0(o.GracePeriod, DefaultLease),
		now:        o.Now,
		log:        o.Logger,
		stop:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
		copies:     make(map[string][]string),
		subs:       make(map[string][]string),
		retiring:   make(map[string]ended),
		draining:   make(map[string]ended),
		unfinished: make(map[string]string),
		claimed:    make(map[string]bool),
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.rescanEvery = cmp0(o.RescanPeriod, 10*e.grace)
	e.rng = rand.New(rand.NewPCG(fnv64(id), 0x68_6b_63_6c_61_69_6d)) // "hkclaim"
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if o.Registry != nil {
		e.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotkeyd_mitigation_actions_total",
			Help: "Actions the agent carried out in Redis for enforced mitigations, by kind (copies, sharded_counter; empty for the scans for leftovers) and action (copy_write, copy_refresh, copy_delete, copy_kept_claimed, counter_fold, counter_recover, counter_kept_claimed, error).",
		}, []string{"kind", "action"})
		if err := o.Registry.Register(e.actions); err != nil {
			return nil, fmt.Errorf("mitigate: executor: register metrics: %w", err)
		}
		for kind, actions := range map[Kind][]string{
			Copies:         {ActionCopyWrite, ActionCopyRefresh, ActionCopyDelete, ActionCopyKeptClaimed, ActionError},
			ShardedCounter: {ActionCounterFold, ActionCounterRecover, ActionCounterKeptClaimed, ActionError},
			"":             {ActionError}, // the scans for leftovers, which serve both kinds
		} {
			for _, a := range actions {
				e.actions.WithLabelValues(string(kind), a)
			}
		}
	}
	return e, nil
}

// ID returns the executor's id: its member in the claim keys of the copies it uses.
func (e *Executor) ID() string { return e.id }

func cmp0(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Offer hands p to Run, which applies it at once; only the latest offered plan counts. It
// never blocks, so it can be given to Store.Subscribe as is.
func (e *Executor) Offer(p Plan) {
	e.offerMu.Lock()
	e.offered, e.hasOffer = p, true
	e.offerMu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// applyOffered applies the plan last offered, if any not applied yet.
func (e *Executor) applyOffered(ctx context.Context) {
	e.offerMu.Lock()
	p, ok := e.offered, e.hasOffer
	e.offered, e.hasOffer = Plan{}, false
	e.offerMu.Unlock()
	if ok {
		_ = e.Apply(ctx, p) // errors are logged and counted; the next round retries
	}
}

// Apply makes Redis follow p's enforced Copies and ShardedCounter entries, at once:
// copies of a new entry (or of one whose copy names changed) are written from the
// original; copies of an ended entry (or names no longer listed) are deleted, and deleted
// again every round for the grace period; sub-counters of an ended entry are folded into
// their key, and again every round until they stay empty for the grace period. Applying
// the same plan again does nothing. What fails is logged, counted as an error and retried
// by the next round; the errors are also returned, joined.
func (e *Executor) Apply(ctx context.Context, p Plan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	return e.apply(ctx, p)
}

func (e *Executor) apply(ctx context.Context, p Plan) error {
	now := e.now()
	want := map[Kind]map[string][]string{Copies: {}, ShardedCounter: {}}
	modes := make(map[planKey]Mode)
	for _, en := range p.Entries {
		modes[planKey{en.Key, en.Kind}] = en.Mode
		if en.Mode != Enforce {
			continue
		}
		switch en.Kind {
		case Copies:
			want[Copies][en.Key] = nodeNames(en.Copies)
		case ShardedCounter:
			want[ShardedCounter][en.Key] = nodeNames(en.SubCounters)
		}
	}
	reasons := make(map[string]string)
	for _, en := range p.Entries {
		if en.Mode == Enforce {
			reasons[en.Key+"\x00"+string(en.Kind)] = en.Reason
		}
	}
	endReason := func(key string, kind Kind) string {
		if m, ok := modes[planKey{key, kind}]; ok {
			return "entry no longer enforced (mode " + string(m) + ")"
		}
		return "entry left the plan (cooled, forbidden or cleared)"
	}

	var errs []error
	// Copies that end, or names that are no longer listed (a topology change renamed them).
	type retire struct {
		key    string
		names  []string
		reason string
	}
	var gones []retire
	for _, key := range slices.Sorted(maps.Keys(e.copies)) {
		names := e.copies[key]
		cur, ok := want[Copies][key]
		gone, reason := names, endReason(key, Copies)
		if ok {
			gone, reason = minus(names, cur), "copy names changed (topology)"
		} else {
			delete(e.copies, key)
		}
		if len(gone) > 0 {
			gones = append(gones, retire{key, gone, reason})
			e.claimDirty = true
		}
	}
	// Copies that start, or whose names change.
	var starts []string
	for _, key := range slices.Sorted(maps.Keys(want[Copies])) {
		names := want[Copies][key]
		if slices.Equal(e.copies[key], names) {
			continue
		}
		for _, c := range names {
			delete(e.retiring, c)
		}
		e.copies[key] = names
		starts = append(starts, key)
		e.claimDirty = true
	}
	// The claims first: from now on another executor leaves the new copies alone, and
	// no longer the names this one stopped using.
	if e.claimDirty {
		errs = append(errs, e.putClaim(ctx))
	}
	for _, g := range gones {
		errs = append(errs, e.retireCopies(ctx, g.key, g.names, g.reason))
	}
	for _, key := range starts {
		names := e.copies[key]
		res, err := writeCopies(ctx, e.rdb, key, names)
		e.did(Copies, key, ActionCopyWrite, res.written, reasons[key+"\x00"+string(Copies)])
		e.did(Copies, key, ActionCopyDelete, res.deleted, "original does not exist")
		errs = append(errs, e.failed(Copies, key, err))
	}
	// Sharded counters that end, or sub-counters no longer listed.
	for _, key := range slices.Sorted(maps.Keys(e.subs)) {
		names := e.subs[key]
		cur, ok := want[ShardedCounter][key]
		gone, reason := names, endReason(key, ShardedCounter)
		if ok {
			gone, reason = minus(names, cur), "sub-counter names changed (topology or M)"
		} else {
			delete(e.subs, key)
		}
		if len(gone) > 0 {
			e.claimDirty = true
		}
		for _, s := range gone {
			e.draining[s] = ended{key: key, quiet: now}
			errs = append(errs, e.fold(ctx, key, s, reason))
		}
	}
	// Sharded counters that start: their sub-counters are live again, not draining.
	for key, names := range want[ShardedCounter] {
		for _, s := range names {
			delete(e.draining, s)
		}
		if !slices.Equal(e.subs[key], names) {
			e.claimDirty = true
		}
		e.subs[key] = names
	}
	// The sub-counters' claims, so that other executors' scans leave them on their lists.
	if e.claimDirty {
		errs = append(errs, e.putClaim(ctx))
	}
	return errors.Join(errs...)
}

// retireCopies deletes copies of key now and keeps deleting them for the grace period,
// except those another live executor claims: those it leaves alone and forgets. A copy
// whose claims cannot be checked is not deleted: it stays retired, and the next round
// tries again.
func (e *Executor) retireCopies(ctx context.Context, key string, names []string, reason string) error {
	now := e.now()
	deleted := 0
	var errs []error
	for _, c := range names {
		owner, n, err := e.deleteUnclaimed(ctx, c)
		switch {
		case err != nil:
			e.retiring[c] = ended{key: key, quiet: now, why: reason + " (deleted once its claims could be checked)"}
			errs = append(errs, err)
		case owner != "":
			delete(e.retiring, c)
			e.kept(key, c, owner, reason)
		default:
			e.retiring[c] = ended{key: key, quiet: now}
			deleted += n
		}
	}
	e.did(Copies, key, ActionCopyDelete, deleted, reason)
	return e.failed(Copies, key, errors.Join(errs...))
}

// retireAgain deletes retired copy c again (a round), unless another live executor
// claims it: then it is forgotten. It is forgotten too once it has been found absent for
// the grace period. When its claims cannot be checked it stays retired, its quiet time
// reset, and the next round tries again.
func (e *Executor) retireAgain(ctx context.Context, c string, now time.Time) error {
	r := e.retiring[c]
	owner, n, err := e.deleteUnclaimed(ctx, c)
	if owner != "" {
		delete(e.retiring, c)
		e.kept(r.key, c, owner, "retired copy")
		return nil
	}
	why := "retired copy written again (a client had not heard the entry ended)"
	if r.why != "" {
		why = r.why
	}
	e.did(Copies, r.key, ActionCopyDelete, n, why)
	if err == nil {
		r.why = ""
	}
	switch {
	case n > 0 || err != nil:
		r.quiet = now
	case now.Sub(r.quiet) >= e.grace:
		delete(e.retiring, c)
		return nil
	}
	e.retiring[c] = r
	return e.failed(Copies, r.key, err)
}

// drainAgain folds draining sub-counter s again (a round). Once it has been found empty,
// with no failed fold, for the grace period, readers need not read it any more: it is
// taken off its key's list and forgotten — unless another live executor's plan uses it
// (a scan found it), whose writers may list it and write it again at any time: then it
// is forgotten and stays listed.
func (e *Executor) drainAgain(ctx context.Context, s string, now time.Time) error {
	d := e.draining[s]
	err := e.fold(ctx, d.key, s, "sub-counter of an ended entry written again (a client had not heard the entry ended)")
	if d = e.draining[s]; now.Sub(d.quiet) < e.grace {
		return err // fold resets quiet when it found something or failed
	}
	owner, err := e.claimedBy(ctx, s)
	switch {
	case err != nil:
		return e.failed(ShardedCounter, d.key, err)
	case owner != "":
		delete(e.draining, s)
		e.keptSub(d.key, s, owner, "sub-counter quiet for the grace period")
		return nil
	}
	if err := unlistSubCounter(ctx, e.rdb, d.key, s); err != nil {
		return e.failed(ShardedCounter, d.key, err)
	}
	delete(e.draining, s)
	return nil
}

// fold folds sub-counter sub into key, counting and logging what it did; it resets the
// quiet time of a draining sub-counter that held something.
func (e *Executor) fold(ctx context.Context, key, sub, reason string) error {
	res, err := foldSub(ctx, e.rdb, key, sub)
	if res.recovers > 0 {
		e.did(ShardedCounter, key, ActionCounterRecover, res.recovers, "completed a fold left unfinished (agent crash)",
			slog.String("sub_counter", sub), slog.Int64("value", res.recovered))
	}
	if res.folds > 0 {
		e.did(ShardedCounter, key, ActionCounterFold, res.folds, reason,
			slog.String("sub_counter", sub), slog.Int64("value", res.moved))
	}
	if d, ok := e.draining[sub]; ok && (res.nonZero() || err != nil) {
		d.quiet = e.now()
		e.draining[sub] = d
	}
	if err != nil {
		e.unfinished[sub] = key
	} else {
		delete(e.unfinished, sub)
	}
	return e.failed(ShardedCounter, key, err)
}

// Refresh runs one round now: it rewrites every copy from its original (deleting the
// copies of an original that no longer exists), deletes retired copies again, folds the
// sub-counters of ended entries again, forgetting those quiet for the grace period, folds
// again every sub-counter whose last fold failed, and, one grace period after Recover,
// scans for leftovers once more. Every half grace period it renews the executor's
// claims, and every RescanPeriod it scans for leftovers of any kind (one executor of the
// fleet per RescanPeriod, SweepKey). Retired copies that another live executor claims
// are forgotten, not deleted. A scan due runs after the round, without holding up Apply
// or other rounds meanwhile (see scanJob), and Refresh returns once it is handled; it is
// not started while another scan is under way. Run runs the same rounds every
// RefreshPeriod, its scans beside them.
func (e *Executor) Refresh(ctx context.Context) error {
	job, err := e.roundLocked(ctx)
	if job == nil {
		return err
	}
	return errors.Join(err, e.finishScan(ctx, e.scan(ctx, *job)))
}

// roundLocked runs one round with e.mu held and returns the scan it found due, if any,
// for the caller to run (scan) and hand back (finishScan).
func (e *Executor) roundLocked(ctx context.Context) (*scanJob, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	return e.round(ctx)
}

// round is one round of Redis work (e.mu held). It does not scan: it returns the scan
// for leftovers that is due (the rescan after Recover, else the periodic scan), if any
// and none is under way, counted in e.scans.
func (e *Executor) round(ctx context.Context) (*scanJob, error) {
	var errs []error
	now := e.now()
	// The claims: written when the copies in use changed or a write failed, renewed every
	// half grace period.
	if e.claimDirty || !now.Before(e.claimNext) {
		errs = append(errs, e.putClaim(ctx))
	}
	for _, key := range slices.Sorted(maps.Keys(e.copies)) {
		res, err := writeCopies(ctx, e.rdb, key, e.copies[key])
		e.did(Copies, key, ActionCopyRefresh, res.written, "periodic refresh")
		e.did(Copies, key, ActionCopyDelete, res.deleted, "original does not exist")
		errs = append(errs, e.failed(Copies, key, err))
	}
	for _, c := range slices.Sorted(maps.Keys(e.retiring)) {
		errs = append(errs, e.retireAgain(ctx, c, now))
	}
	for _, s := range slices.Sorted(maps.Keys(e.draining)) {
		errs = append(errs, e.drainAgain(ctx, s, now))
	}
	// Failed folds of sub-counters still in use (those draining were folded above).
	for _, s := range slices.Sorted(maps.Keys(e.unfinished)) {
		if _, ok := e.draining[s]; !ok {
			errs = append(errs, e.fold(ctx, e.unfinished[s], s, "retrying a fold that failed"))
		}
	}
	var job *scanJob
	switch {
	case e.sweep.IsZero():
		e.sweep = e.nextSweep(now)
	case e.scans > 0, now.Before(e.scanNotBefore):
		// One scan at a time: what is due starts at a round after it, and after the
		// wait that follows a failed scan.
	case !e.rescan.IsZero() && !now.Before(e.rescan):
		job = &scanJob{kind: scanRescan, at: now}
	case !now.Before(e.sweep) && e.sweepRetry:
		// A retry of a failed periodic scan: its turn (SweepKey) is this executor's.
		job = &scanJob{kind: scanSweep, at: now}
	case !now.Before(e.sweep):
		mine, err := e.takeSweep(ctx)
		if err != nil {
			// Unknown whether another executor scanned (Redis unreachable, or an ACL
			// without SweepKey): scan all the same rather than never; a scan that fails
			// too is tried again at the next round.
			e.did("", "", ActionError, 1, "taking the periodic scan's turn failed; scanning all the same",
				slog.String("error", err.Error()))
			errs = append(errs, err)
		} else if !mine { // another executor scanned within RescanPeriod
			e.sweep = e.nextSweep(now)
			break
		}
		job = &scanJob{kind: scanSweep, at: now}
	}
	if job != nil {
		e.scans++
	}
	return job, errors.Join(errs...)
}

// Recover cleans up after an earlier run of the agent: it scans every primary for copies
// and sub-counters, and stashes of unfinished folds, that the applied plan does not use.
// Such copies are deleted (and retired for the grace period) unless another live executor
// claims them; every sub-counter found is folded into its key (an unfinished fold is
// completed first), and those the plan does not use drain for the grace period. Run
// starts it once, after applying the plan offered before it started, and goes on with its
// rounds while it scans.
//
// In a fleet the scan is skipped (logged at Info, Recover returns nil) when another
// executor holds RecoverKey: it scanned within the last grace period, and what this scan
// would find is found by a later scan that holds the lock (see RecoverKey). When the lock
// cannot be taken, Recover scans all the same and returns that error with the scan's.
//
// The scan itself does not hold up Apply or the rounds; what it found is handled once it
// is done, against the plan applied by then (see scanJob).
//
// Clients that still hold the earlier run's plan write its copies and sub-counters for up
// to one lease after that run ended, and may create some after the scan. So Recover also
// schedules a second scan, made by the first round one grace period later (and retried,
// backing off, until it succeeds), when those leases have run out; it takes RecoverKey
// too, and is not retried when skipped. A lone executor's rescan is never skipped: it
// holds the lock itself, or it has expired (an agent that restarts within a grace period
// of its last Recover skips its own scan at start, held by its previous run, and its
// rescan takes the lock).
func (e *Executor) Recover(ctx context.Context) error {
	job, err := e.startRecover()
	if err != nil {
		return err
	}
	return e.finishScan(ctx, e.scan(ctx, job))
}

// startRecover schedules the rescan and the periodic scan and returns Recover's scan,
// counted in e.scans.
func (e *Executor) startRecover() (scanJob, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return scanJob{}, errClosed
	}
	now := e.now()
	e.rescan = now.Add(e.grace)
	e.sweep = e.nextSweep(now)
	e.scans++
	return scanJob{kind: scanRecover, at: now}, nil
}

// scanKind tells the scans for leftovers apart.
type scanKind int

const (
	scanRecover scanKind = iota // Recover's
	scanRescan                  // one grace period after Recover
	scanSweep                   // the periodic scan, once per RescanPeriod in the fleet (SweepKey)
)

func (k scanKind) String() string {
	switch k {
	case scanRescan:
		return "rescan"
	case scanSweep:
		return "periodic"
	}
	return "recover"
}

// scanJob is one scan for leftovers, in two steps so that a scan of a big keyspace holds
// up neither Apply nor the rounds (copy refresh, claim renewal): scan reads every primary
// without e.mu (Redis only, no executor state), then finishScan handles what it found
// with e.mu held, telling what is in use from the plan applied by then.
type scanJob struct {
	kind scanKind
	at   time.Time // when it was started (a round's or Recover's clock)
}

// reason says why what the scan finds is there (logged with each action).
func (j scanJob) reason() string {
	switch j.kind {
	case scanRescan:
		return "written after the scan at start, under the plan of an earlier run of the agent"
	case scanSweep:
		return "left by an executor that crashed (a copy no live executor claims), or a client's write after the scans"
	}
	return "left by an earlier run of the agent"
}

// scanFound is what a scan found.
type scanFound struct {
	job   scanJob
	names []string // copies, sub-counters and stashes, each list replaced by the sub-counters it lists
	err   error    // the scan failed: names is not used, the scan is retried
	// listErr: a list of sub-counters could not be read; the other names are used.
	listErr error
	// skipped is the id of the executor that holds RecoverKey: this scan at start did not
	// scan (names is empty), that executor scanned within the grace period.
	skipped string
	// lockErr: RecoverKey could not be taken; the scan ran all the same.
	lockErr error
}

// scan is the first step of job: it reads every primary for the names a scan handles
// (every kind, whatever the job) and the lists' members. A scan at start (Recover's, the
// rescan) first takes the fleet's lock (RecoverKey), and skips when another executor
// holds it; when the lock cannot be taken it scans all the same. It uses no executor
// state and takes no lock of the executor's.
func (e *Executor) scan(ctx context.Context, job scanJob) scanFound {
	var lockErr error
	if job.kind != scanSweep {
		holder, err := e.takeRecover(ctx)
		if err == nil && holder != "" {
			return scanFound{job: job, skipped: holder}
		}
		lockErr = err
	}
	names, err := scanAll(ctx, e.rdb)
	if err != nil {
		return scanFound{job: job, err: err, lockErr: lockErr}
	}
	names, err = e.withListed(ctx, names)
	return scanFound{job: job, names: names, listErr: err, lockErr: lockErr}
}

// finishScan is the second step of a scan: it takes e.mu and handles f (nothing after
// Close: errClosed).
func (e *Executor) finishScan(ctx context.Context, f scanFound) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.scans--
	if e.closed {
		return errClosed
	}
	return e.handleScan(ctx, f)
}

// handleScan handles what a scan found (e.mu held). Copies that neither the plan applied
// now nor another live executor's claim uses are deleted; every sub-counter found is
// folded, and drains unless the plan uses it. A scan that failed is retried: the rescan
// and the periodic scan stay due (Recover's is made again by the rescan). What the scan
// found and could not clean up now is retried by the rounds (copies stay retired, failed
// folds unfinished, also when their claims cannot be checked), so only a failed scan
// needs scanning again. A scan at start skipped for another executor's lock (RecoverKey)
// handles nothing and is not made again: later scans that hold the lock find the same.
func (e *Executor) handleScan(ctx context.Context, f scanFound) error {
	errs := []error{f.lockErr}
	if f.lockErr != nil {
		// Unknown whether another executor scanned (Redis unreachable, or an ACL without
		// RecoverKey): the scan ran rather than none.
		e.did("", "", ActionError, 1, "taking the fleet's lock on scans at start failed; scanning all the same",
			slog.String("error", f.lockErr.Error()))
	}
	if f.err != nil {
		if f.job.kind == scanSweep {
			e.sweepRetry = true
		}
		e.scanFails++
		e.scanNotBefore = e.now().Add(e.scanBackoff(e.scanFails))
		e.did("", "", ActionError, 1, "scan for leftovers failed", slog.String("error", f.err.Error()))
		return errors.Join(f.lockErr, fmt.Errorf("mitigate: recover: %w", f.err))
	}
	e.scanFails, e.scanNotBefore = 0, time.Time{}
	switch f.job.kind {
	case scanRescan:
		e.rescan = time.Time{}
	case scanSweep:
		e.sweep, e.sweepRetry = e.nextSweep(f.job.at), false
	}
	if f.skipped != "" {
		e.log.LogAttrs(ctx, slog.LevelInfo, "leftovers scan skipped: another executor of the fleet, or an earlier run of this agent, scanned within the grace period; the next scan covers what it left",
			slog.String("scan", f.job.kind.String()), slog.String("executor", f.skipped))
		return nil
	}
	activeCopy, activeSub := make(map[string]bool), make(map[string]bool)
	for _, ns := range e.copies {
		for _, n := range ns {
			activeCopy[n] = true
		}
	}
	for _, ns := range e.subs {
		for _, n := range ns {
			activeSub[n] = true
		}
	}
	now := e.now()
	errs = append(errs, f.listErr)
	reason := f.job.reason()
	for _, name := range f.names {
		sub, isStash := stashSub(name)
		if !isStash {
			sub = name
		}
		kind, _, key, ok := ParseName(sub)
		switch {
		case !ok:
			continue // not a name hotkeyd made
		case kind == Copies && !isStash:
			if !activeCopy[name] {
				errs = append(errs, e.retireCopies(ctx, key, []string{name}, reason))
			}
		case kind == ShardedCounter:
			if !activeSub[sub] {
				// Folded once below; drained only when no other live executor's plan uses
				// it (when the claims cannot be checked it drains, and the check before it
				// leaves the list is made again).
				if owner, err := e.claimedBy(ctx, sub); err == nil && owner != "" {
					e.keptSub(key, sub, owner, reason)
				} else {
					e.draining[sub] = ended{key: key, quiet: now}
				}
			}
			errs = append(errs, e.fold(ctx, key, sub, reason))
		}
	}
	return errors.Join(errs...)
}

// withListed replaces, in names found by a scan, each list of sub-counters by the
// sub-counters it lists, which a scan misses once they are folded (a list outlives them
// until a round takes them off it). An error when a list cannot be read; the others are
// replaced all the same. It uses no executor state but the client (scan, no lock held).
func (e *Executor) withListed(ctx context.Context, names []string) ([]string, error) {
	out := names[:0:0]
	var errs []error
	for _, name := range names {
		if _, ok := listKey(name); !ok {
			out = append(out, name)
			continue
		}
		subs, err := e.rdb.Do(ctx, "SMEMBERS", name).StringSlice()
		if err != nil {
			errs = append(errs, fmt.Errorf("mitigate: recover: SMEMBERS %s: %w", name, err))
			continue
		}
		out = append(out, subs...)
	}
	slices.Sort(out)
	return slices.Compact(out), errors.Join(errs...)
}

// Run applies offered plans and runs a round every RefreshPeriod until ctx ends or Close
// is called. It first applies the plan offered before it started, if any, then starts
// Recover. Its scans for leftovers (Recover's, the rescan, the periodic scan; one at a
// time) read the primaries in a goroutine of their own while Run goes on applying plans
// and running rounds (copy refresh, claim renewal); what a scan found is handled by Run
// once it is done (scanJob). When Run returns, a scan under way is cancelled and waited
// for. Only one Run at a time.
func (e *Executor) Run(ctx context.Context) error {
	e.mu.Lock()
	select {
	case <-e.stop:
		e.mu.Unlock()
		return errClosed
	default:
	}
	if e.runDone != nil {
		e.mu.Unlock()
		return errors.New("mitigate: executor: Run is already running")
	}
	done := make(chan struct{})
	e.runDone = done
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.runDone = nil
		e.mu.Unlock()
		close(done)
	}()

	e.applyOffered(ctx)

	// The scans: at most one under way (e.scans), its result handed back on found.
	scanCtx, cancelScan := context.WithCancel(ctx)
	found := make(chan scanFound, 1)
	var wg sync.WaitGroup
	pending := 0 // scans started and not handled
	defer func() {
		cancelScan()
		wg.Wait()
		e.mu.Lock()
		e.scans -= pending // dropped unhandled: a later Run's rounds may scan again
		e.mu.Unlock()
	}()
	start := func(job scanJob) {
		pending++
		wg.Go(func() {
			f := e.scan(scanCtx, job)
			select {
			case found <- f:
			case <-scanCtx.Done():
			}
		})
	}
	if job, err := e.startRecover(); err == nil {
		start(job) // a failure is logged and counted; a round scans again one grace period later
	}
	t := time.NewTicker(e.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.stop:
			return nil
		case <-e.kick:
			e.applyOffered(ctx)
		case f := <-found:
			pending--
			_ = e.finishScan(ctx, f) // logged and counted
		case <-t.C:
			if job, _ := e.roundLocked(ctx); job != nil { // errors are logged and counted
				start(*job)
			}
		}
	}
}

// Close stops Run, removes the executor's claims, then deletes every copy that no other
// live executor claims (none whose claims cannot be checked) and folds every sub-counter,
// active or ended, and returns when that is done (or ctx ends). A failed step is retried
// a few times; the error is returned if it still fails, the copies left are logged (the
// periodic scan of another executor, or the next scan at start that holds RecoverKey,
// deletes them), and calling Close again retries what is left. After Close, Apply,
// Refresh and Recover return an error.
func (e *Executor) Close(ctx context.Context) error {
	e.stopOnce.Do(func() { close(e.stop) })
	e.mu.Lock()
	done := e.runDone
	e.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		// First: other executors stop leaving this one's copies alone.
		e.dropClaim(ctx)
	}
	e.closed = true
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = e.cleanUp(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			e.leftAtStop(ctx, err)
			return errors.Join(err, ctx.Err())
		case <-time.After(100 * time.Millisecond << attempt):
		}
	}
	e.leftAtStop(ctx, err)
	return err
}

// leftAtStop logs how many copies Close leaves in Redis after its attempts failed with
// err (their claims could not be checked, or their deletion failed).
func (e *Executor) leftAtStop(ctx context.Context, err error) {
	n := len(e.retiring)
	for _, ns := range e.copies {
		n += len(minus(ns, slices.Collect(maps.Keys(e.retiring))))
	}
	if n > 0 {
		e.log.LogAttrs(ctx, slog.LevelWarn, "copies left at stop for the periodic scans of other executors (or the next run's Recover)",
			slog.Int("count", n), slog.String("error", err.Error()))
	}
}

// cleanUp deletes every copy no other live executor claims and folds every sub-counter,
// forgetting those done. A copy whose claims cannot be checked is not deleted; it stays
// for the next attempt.
func (e *Executor) cleanUp(ctx context.Context) error {
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(e.copies)) {
		if err := e.retireCopies(ctx, key, e.copies[key], "agent stopping"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(e.copies, key)
	}
	for _, c := range slices.Sorted(maps.Keys(e.retiring)) {
		r := e.retiring[c]
		if err := e.retireCopies(ctx, r.key, []string{c}, "agent stopping"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(e.retiring, c)
	}
	for _, key := range slices.Sorted(maps.Keys(e.subs)) {
		var failed bool
		for _, s := range e.subs[key] {
			if err := e.fold(ctx, key, s, "agent stopping"); err != nil {
				errs = append(errs, err)
				failed = true
			}
		}
		if !failed {
			delete(e.subs, key)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(e.draining)) {
		if err := e.fold(ctx, e.draining[s].key, s, "agent stopping"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(e.draining, s)
	}
	// A failed fold of a sub-counter neither listed nor draining any more.
	for _, s := range slices.Sorted(maps.Keys(e.unfinished)) {
		if err := e.fold(ctx, e.unfinished[s], s, "agent stopping"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// did counts and logs n actions on key.
func (e *Executor) did(kind Kind, key, action string, n int, reason string, attrs ...slog.Attr) {
	if n <= 0 {
		return
	}
	if e.actions != nil {
		e.actions.WithLabelValues(string(kind), action).Add(float64(n))
	}
	level := slog.LevelInfo
	switch action {
	case ActionCopyRefresh:
		level = slog.LevelDebug
	case ActionError:
		level = slog.LevelWarn
	}
	attrs = append([]slog.Attr{slog.String("key", key), slog.String("kind", string(kind)),
		slog.String("action", action), slog.String("reason", reason), slog.Int("count", n)}, attrs...)
	e.log.LogAttrs(context.Background(), level, "mitigation action", attrs...)
}

// failed counts and logs err, if any, and returns it.
func (e *Executor) failed(kind Kind, key string, err error) error {
	if err != nil {
		e.did(kind, key, ActionError, 1, "redis step failed; retried at the next round", slog.String("error", err.Error()))
	}
	return err
}

// nodeNames returns the names of nodes.
func nodeNames(nodes []Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}

// minus returns the names of a not in b.
func minus(a, b []string) []string {
	var out []string
	for _, n := range a {
		if !slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	return out
}

// scanAll returns the names a scan for leftovers handles (scanWanted) on every primary
// (deduplicated, sorted).
func scanAll(ctx context.Context, rdb Redis) ([]string, error) {
	seen := make(map[string]bool)
	var mu sync.Mutex // guards seen
	scan := func(ctx context.Context, node Redis) error {
		names, err := scanNode(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			seen[n] = true
		}
		return err
	}
	var err error
	if m, ok := rdb.(masters); ok {
		err = m.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	return slices.Sorted(maps.Keys(seen)), err
}

// maxScanCalls bounds the SCAN calls per node (10^6 × COUNT 1000 keys).
const maxScanCalls = 1_000_000

// scanMatch is the one pattern a scan asks the server for: every name hotkeyd makes
// starts with "{hk:" (names.go, counter.go), the claim keys ("hk:claim…") and SweepKey
// do not. scanWanted picks the names a scan handles out of what it matches.
const scanMatch = "{hk:*"

// scanNode SCANs one node once (MATCH scanMatch) and returns the names scanWanted keeps,
// so that a scan reads each node's keyspace once whatever it looks for.
func scanNode(ctx context.Context, node Redis) ([]string, error) {
	var out []string
	cursor := "0"
	for range maxScanCalls {
		reply, err := node.Do(ctx, "SCAN", cursor, "MATCH", scanMatch, "COUNT", "1000").Slice()
		if err != nil {
			return out, fmt.Errorf("SCAN MATCH %s: %w", scanMatch, err)
		}
		if len(reply) != 2 {
			return out, fmt.Errorf("SCAN MATCH %s: reply %v; want [cursor keys]", scanMatch, reply)
		}
		keys, _ := reply[1].([]any)
		for _, k := range keys {
			if n := str(k); scanWanted(n) {
				out = append(out, n)
			}
		}
		if cursor = str(reply[0]); cursor == "0" {
			break
		}
	}
	return out, nil
}

// scanWanted reports whether a scan for leftovers handles name: exactly the names the
// globs "{hk:copy*" (copies), "{hk:sub*" (sub-counters), "{hk:t*}stash:*" (stashes of
// folds) and "{hk:t*}subs:*" (lists of sub-counters) match, where '*' is any run of
// bytes, '}' included. Which of them are really hotkeyd's names (ParseName, stashSub,
// listKey) is checked when they are handled.
func scanWanted(name string) bool {
	if strings.HasPrefix(name, "{"+copyTag) || strings.HasPrefix(name, "{"+subTag) {
		return true
	}
	rest, ok := strings.CutPrefix(name, "{hk:t")
	return ok && (strings.Contains(rest, "}stash:") || strings.Contains(rest, "}subs:"))
}
