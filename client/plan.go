package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/mitigate"
)

// PlanStats says what the plan follower has done.
type PlanStats struct {
	// Version is the version of the plan held, 0 before the first one.
	Version uint64
	// Entries is the number of enforced entries in it whose lease has not run out.
	Entries int
	// Fetches counts answers from the agent (200 and 304), Updates the new plans taken.
	Fetches, Updates uint64
	// Errors counts failed fetches: agent unreachable, an HTTP error, an invalid plan.
	Errors uint64
}

// Backoff between failed fetches: 1s doubling to 30s (docs/plan.md), but never past a
// second before the held plan's leases run out (see run).
const (
	backoffMin = time.Second
	backoffMax = 30 * time.Second
)

// maxPlanBytes bounds a plan's body: the most a planner publishes.
const maxPlanBytes = mitigate.MaxPlanBytes

// planIndex is a plan as the command path reads it: the enforced entries by key, with
// their leases on the client's clock. It is immutable once published, except for the
// keyPlan.copyState words.
type planIndex struct {
	plan  mitigate.Plan
	keys  map[string]*keyPlan
	l1    bool      // some key has an L1 entry
	split bool      // some key has copies
	until time.Time // when the last lease runs out; zero when nothing is enforced
}

// keyPlan is what the plan asks of one key.
type keyPlan struct {
	l1TTL   time.Duration // 0: no L1
	l1Until time.Time

	copies      []string // names of the copies; nil: none
	copiesUntil time.Time
	// copyState says whether this client's reads of the key may go to its copies (see
	// the copy* bits): they may while copyUnsure is not set.
	copyState atomic.Uint64

	// Entries of the other kinds (sharded and batched counters), kept for the Counter
	// API: see leased.
	others []leasedEntry
}

// leasedEntry is an enforced entry and the end of its lease on the client's clock.
type leasedEntry struct {
	mitigate.Entry
	until time.Time
}

// Bits of keyPlan.copyState.
const (
	// copyUnsure: the copies may be older than the original: a write's outcome is
	// unknown (a timeout, a broken connection), its copying failed, or it was a write the
	// client cannot mirror (a multi-key write, a script, MULTI/EXEC…). Reads go to the
	// original until a repair (Client.repair) has copied the original to the copies.
	copyUnsure = 1
	// copyGen is the unit of the count of unsure marks, in the bits above: a repair
	// clears copyUnsure only when no write was marked unsure since it began.
	copyGen = 2
)

// markUnsure turns the key's copy reads off until a repair that begins after it ends,
// and reports whether they were on as far as unsure marks go (a new episode).
func (k *keyPlan) markUnsure() bool {
	for {
		s := k.copyState.Load()
		if k.copyState.CompareAndSwap(s, (s+copyGen)|copyUnsure) {
			return s&copyUnsure == 0
		}
	}
}

// l1 returns the key's L1 TTL, 0 when it has none or its lease ran out (or k is nil: the
// key has no plan).
func (k *keyPlan) l1(now time.Time) time.Duration {
	if k != nil && k.l1TTL > 0 && now.Before(k.l1Until) {
		return k.l1TTL
	}
	return 0
}

// readCopies returns the copies reads may go to, nil when none.
func (k *keyPlan) readCopies(now time.Time) []string {
	if k.copies != nil && now.Before(k.copiesUntil) && k.copyState.Load()&copyUnsure == 0 {
		return k.copies
	}
	return nil
}

// split reports whether writes of the key must reach its copies (false for nil: the key
// has no plan).
func (k *keyPlan) split(now time.Time) bool {
	return k != nil && k.copies != nil && now.Before(k.copiesUntil)
}

// leased returns the key's enforced entry of a kind whose lease has not run out, with
// its lease's end. The Counter API reads sharded_counter and batched_counter entries
// through it.
func (p *planIndex) leased(key string, kind mitigate.Kind, now time.Time) (leasedEntry, bool) {
	k := p.lookup(key)
	if k == nil {
		return leasedEntry{}, false
	}
	for _, e := range k.others {
		if e.Kind == kind && now.Before(e.until) {
			return e, true
		}
	}
	return leasedEntry{}, false
}

// newPlanIndex indexes p's enforced entries. Leases are Expires − Generated, at most
// mitigate.MaxLease, counted from received on the client's clock, so the agent's clock
// does not matter.
func newPlanIndex(p mitigate.Plan, received time.Time) *planIndex {
	ix := &planIndex{plan: p, keys: make(map[string]*keyPlan)}
	for _, e := range p.Entries {
		if e.Mode != mitigate.Enforce {
			continue
		}
		until := received.Add(min(e.Expires.Sub(p.Generated), mitigate.MaxLease))
		if until.After(ix.until) {
			ix.until = until
		}
		k := ix.keys[e.Key]
		if k == nil {
			k = &keyPlan{}
			ix.keys[e.Key] = k
		}
		switch e.Kind {
		case mitigate.L1:
			k.l1TTL, k.l1Until = time.Duration(e.TTL), until
			ix.l1 = true
		case mitigate.Copies:
			k.copies, k.copiesUntil = make([]string, len(e.Copies)), until
			for i, n := range e.Copies {
				k.copies[i] = n.Name
			}
			ix.split = true
		default:
			k.others = append(k.others, leasedEntry{e, until})
		}
	}
	return ix
}

// live counts the entries whose lease has not run out.
func (p *planIndex) live(now time.Time) int {
	n := 0
	for _, k := range p.keys {
		if k.l1(now) > 0 {
			n++
		}
		if k.split(now) {
			n++
		}
		for _, e := range k.others {
			if now.Before(e.until) {
				n++
			}
		}
	}
	return n
}

// follower long-polls the agent for the plan and publishes each new one.
type follower struct {
	url  string // …/v1/plan
	wait time.Duration
	http *http.Client
	now  func() time.Time
	log  *slog.Logger
	// Called in the follower's goroutine with each new plan and the one it replaces (nil
	// for the first): prepare before the new one is published, onPlan after.
	prepare, onPlan func(old, ix *planIndex)
	min, max        time.Duration // backoff

	cur                      atomic.Pointer[planIndex]
	fetches, updates, errors atomic.Uint64
	lastErr                  atomic.Pointer[error] // the last failed fetch's error; nil after a success

	lmu     sync.Mutex  // guards lapse, down and stopped
	lapse   *time.Timer // fires when the held plan's leases run out
	down    bool        // a fetch failed or the leases ran out, and no plan was taken since
	stopped bool        // run has returned: arm no timer
}

// run follows the plan until ctx ends.
func (f *follower) run(ctx context.Context) {
	defer f.stop()
	backoff := f.min
	for ctx.Err() == nil {
		start := time.Now()
		changed, err := f.poll(ctx)
		if err == nil {
			f.lastErr.Store(nil)
			backoff = f.min
			// An agent that answers 304 without waiting must not be polled in a tight
			// loop: at most one unchanged answer per backoffMin.
			if d := f.min - time.Since(start); !changed && d > 0 {
				if !sleep(ctx, d) {
					return
				}
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		f.errors.Add(1)
		f.lastErr.Store(&err)
		f.lmu.Lock()
		f.down = true
		f.lmu.Unlock()
		// The next try comes before the held plan's leases run out, so that an agent back
		// by then renews them before the app is unmitigated.
		d := backoff
		ix := f.cur.Load()
		var left time.Duration
		if ix != nil && !ix.until.IsZero() {
			left = ix.until.Sub(f.now())
			if left-f.min > 0 && left-f.min < d {
				d = left - f.min
			}
		}
		switch {
		case ix == nil:
			f.log.Warn("hotkeyd: fetching the plan failed; commands go to Redis unmitigated until one comes", "agent", f.url, "err", err, "retry_in", d)
		case left > 0:
			f.log.Warn("hotkeyd: fetching the plan failed; keeping the current one until its leases run out", "agent", f.url, "err", err, "retry_in", d, "leases_left", left.Round(time.Millisecond))
		default:
			f.log.Warn("hotkeyd: fetching the plan failed; the plan held has no lease left, so commands go to Redis unmitigated until a new one comes", "agent", f.url, "err", err, "retry_in", d)
		}
		if !sleep(ctx, d) {
			return
		}
		backoff = min(2*backoff, f.max)
	}
}

// took runs after ix was published: it logs a plan taken after failed fetches or run-out
// leases, and arms the timer that logs when ix's leases run out.
func (f *follower) took(ix *planIndex) {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	if f.lapse != nil {
		f.lapse.Stop()
		f.lapse = nil
	}
	if f.down {
		f.down = false
		f.log.Info("hotkeyd: took a plan from the agent again; following it", "agent", f.url,
			"version", ix.plan.Version, "entries", ix.live(f.now()))
	}
	if !ix.until.IsZero() && !f.stopped {
		f.armLocked(ix)
	}
}

// armLocked sets the timer for the end of ix's leases; f.lmu must be held.
func (f *follower) armLocked(ix *planIndex) {
	f.lapse = time.AfterFunc(ix.until.Sub(f.now()), func() {
		f.lmu.Lock()
		defer f.lmu.Unlock()
		if f.stopped || f.cur.Load() != ix {
			return // run has returned, or another plan came
		}
		if now := f.now(); now.Before(ix.until) {
			f.armLocked(ix) // an injected clock that has not got there yet
			return
		}
		f.lapse = nil
		f.down = true
		f.log.Warn("hotkeyd: the plan's leases have run out without a new plan from the agent; commands go to Redis unmitigated until one comes",
			"agent", f.url, "version", ix.plan.Version, "last_err", f.failure())
	})
}

// stop ends the lease timer when run returns.
func (f *follower) stop() {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	f.stopped = true
	if f.lapse != nil {
		f.lapse.Stop()
		f.lapse = nil
	}
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// poll asks for a plan other than the one held (waiting for it) and takes it; changed
// reports whether a new plan came. It names the plan held by its version and its
// generated: an agent that restarted counts versions from 1 again and may have reached
// the version held with another plan, which it then sends at once.
func (f *follower) poll(ctx context.Context) (changed bool, err error) {
	u := f.url
	cur := f.cur.Load()
	if cur != nil {
		u += "?after=" + strconv.FormatUint(cur.plan.Version, 10) +
			"&generated=" + url.QueryEscape(cur.plan.Generated.Format(time.RFC3339Nano)) +
			"&wait=" + url.QueryEscape(f.wait.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPlanBytes+1))
	if err != nil {
		return false, fmt.Errorf("reading the plan: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusNotModified && cur != nil:
		f.fetches.Add(1)
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("GET %s: %s%s", u, resp.Status, errorBody(body))
	case len(body) > maxPlanBytes:
		return false, fmt.Errorf("GET %s: plan over %d bytes", u, maxPlanBytes)
	}
	f.fetches.Add(1)
	p, err := mitigate.DecodePlan(body)
	if err != nil {
		return false, err
	}
	if cur != nil && p.Version == cur.plan.Version && p.Generated.Equal(cur.plan.Generated) {
		return false, errors.New("the agent answered with the plan it was asked to wait past")
	}
	ix := newPlanIndex(p, f.now())
	if f.prepare != nil {
		f.prepare(cur, ix)
	}
	f.cur.Store(ix)
	f.updates.Add(1)
	f.took(ix)
	if f.onPlan != nil {
		f.onPlan(cur, ix)
	}
	return true, nil
}

// errorBody returns what an error answer says, for the error message: the agent's
// {"error":"…"}, or the start of another body; "" when empty.
func errorBody(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	msg := string(bytes.TrimSpace(body))
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		return ""
	}
	return ": " + strconv.QuoteToGraphic(msg)
}

// failure returns the error of the last failed fetch, nil when the last fetch succeeded
// or none has failed.
func (f *follower) failure() error {
	if e := f.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

func (f *follower) stats() PlanStats {
	st := PlanStats{Fetches: f.fetches.Load(), Updates: f.updates.Load(), Errors: f.errors.Load()}
	if ix := f.cur.Load(); ix != nil {
		st.Version = ix.plan.Version
		st.Entries = ix.live(f.now())
	}
	return st
}
