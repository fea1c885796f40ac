package agent

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/registry"
)

// view is what the API and metrics show: the result of one evaluation, never modified
// after it is stored.
type view struct {
	at       time.Time
	covered  time.Duration
	reads    float64 // rate of all reads
	writes   float64 // rate of all writes
	distinct uint64
	levels   []detector.Level // the combined ranking, heaviest first
	byKey    map[string]int   // key → index in levels
	history  map[string][]Point
	hot      int
	// mitigations lists, per key, the active mitigations as "kind:mode".
	mitigations map[string][]string
	// nodes is each primary's share of the ranked keys' load; nil without a topology.
	nodes []mitigate.NodeLoad
	// unplaced is the rate of the ranked keys no primary could be named for.
	unplaced float64
	// planVersion is the version of the current plan.
	planVersion uint64
	// predicted lists, per key, the registry events that predict it.
	predicted map[string][]string
	// reports are the registry reports of the armed events, for metrics.
	reports []registry.Report
}

func (v *view) level(key string) (detector.Level, bool) {
	i, ok := v.byKey[key]
	if !ok {
		return detector.Level{}, false
	}
	return v.levels[i], true
}

// Point is one second of a key's rate history.
type Point struct {
	At        time.Time `json:"at"`
	ReadRate  float64   `json:"read_rate"`
	WriteRate float64   `json:"write_rate"`
	Hot       bool      `json:"hot"`
}

// histories keeps the last n one-second points of the ranked and hot keys.
type histories struct {
	n    int
	last time.Time // second of the last point
	keys map[string][]Point
	view map[string][]Point // copy of keys for the views, made once a second
}

func newHistories(n int) *histories { return &histories{n: n, keys: map[string][]Point{}} }

// add records a point for each level once a second (at each new second of the clock, which
// may have stepped back) and forgets keys that are neither ranked nor hot; it returns a
// copy for the views, the same one until the next second.
func (h *histories) add(now time.Time, levels []detector.Level) map[string][]Point {
	sec := now.Truncate(time.Second) // wall clock only: a step back must not stop the points
	if sec.Equal(h.last) && h.view != nil {
		return h.view
	}
	h.last = sec
	seen := make(map[string]bool, len(levels))
	for _, l := range levels {
		seen[l.Key.Key] = true
		p := h.keys[l.Key.Key]
		if len(p) == h.n {
			p = append(p[:0], p[1:]...)
		}
		h.keys[l.Key.Key] = append(p, Point{At: sec, ReadRate: l.ReadRate, WriteRate: l.WriteRate, Hot: l.Hot})
	}
	for k := range h.keys {
		if !seen[k] {
			delete(h.keys, k)
		}
	}
	h.view = make(map[string][]Point, len(h.keys))
	for k, p := range h.keys {
		h.view[k] = append([]Point(nil), p...)
	}
	return h.view
}

// countHot counts the hot keys among the evaluated ones. The tracker may hold more: a hot
// key pushed out of the rankings stays hot there until it cools, but neither the API nor
// the per-key series show it, so hotkeyd_hot_keys and hot_keys do not count it either.
func countHot(levels []detector.Level) int {
	n := 0
	for _, l := range levels {
		if l.Hot {
			n++
		}
	}
	return n
}

// loop evaluates the window every tick until ctx ends; meanwhile a goroutine of its own
// reads the registry (checkRegistry). The registry's first read comes before the first
// tick, and is waited for (a second at most): an agent started while a key was hot would
// otherwise plan the table's choice for it before knowing that an event lists other
// kinds, and keep that entry for min_active.
func (a *Agent) loop(ctx context.Context) {
	a.refreshIndex(ctx, a.now())
	kick := make(chan time.Time, 1)
	var wg sync.WaitGroup
	wg.Go(func() { a.followRegistry(ctx, kick) })
	a.events.kick = kick
	defer func() {
		wg.Wait()
		a.events.kick = nil // evaluate after the loop (Run's last) reads the registry itself
	}()
	t := time.NewTicker(a.opts.Detector.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.evaluate()
		}
	}
}

// rankedSnapshot returns the combined ranking's snapshot with the keys of the read and
// write rankings it lacks added, heaviest first: a key hot by writes alone (its threshold
// is lower) may be outranked in the combined ranking by keys read more but not hot, and
// must still be evaluated.
func (a *Agent) rankedSnapshot(now time.Time) detector.Snapshot {
	snap := a.det.Snapshot(now, detector.All, 0)
	in := make(map[string]bool, len(snap.Keys))
	for _, k := range snap.Keys {
		in[k.Key] = true
	}
	n := len(snap.Keys)
	for _, r := range []int{detector.Reads, detector.Writes} {
		for _, k := range a.det.Ranked(now, r, 0).Keys {
			if !in[k.Key] {
				in[k.Key] = true
				snap.Keys = append(snap.Keys, k)
			}
		}
	}
	if len(snap.Keys) > n {
		slices.SortStableFunc(snap.Keys, func(x, y detector.Key) int {
			return cmp.Compare(y.Count(detector.All), x.Count(detector.All))
		})
	}
	return snap
}

// evaluate turns the window into rates and hot states, records changes, starts the next
// tick and publishes a new view. Only the loop (and Run, after the loop) calls it.
func (a *Agent) evaluate() {
	now := a.now()
	snap := a.rankedSnapshot(now)
	levels, changes := a.tracker.Update(&snap)
	a.det.Advance(now)
	a.checkRegistry(now)
	stats, predicted := a.predict(now, levels, snap.Covered)
	a.metrics.surprises.Add(float64(a.observe(now, levels)))
	if plan, changed := a.planner.Update(now, stats, a.namer()); changed {
		plan = a.store.Publish(plan)
		a.log.Info("plan changed", "version", plan.Version, "entries", len(plan.Entries))
		if n := a.planner.Withheld(); n > 0 {
			a.log.Warn("plan at its size bound: entries of the least busy keys left out", "withheld", n, "entries", len(plan.Entries))
		}
	}
	for _, c := range changes {
		a.metrics.change(c)
		if c.Hot {
			a.log.Info("key turned hot", "key", a.display(c.Key), "delay", c.Delay)
		} else {
			a.log.Info("key cooled", "key", a.display(c.Key))
		}
	}
	v := &view{
		at:       now,
		covered:  snap.Covered,
		reads:    snap.Rate(snap.Reads),
		writes:   snap.Rate(snap.Writes),
		distinct: snap.Distinct,
		levels:   levels,
		byKey:    make(map[string]int, len(levels)),
		history:  a.history.add(now, levels),
		hot:      countHot(levels),

		mitigations: planEntries(a.planner.Active()),
		planVersion: a.store.Current().Version,
		predicted:   predicted,
	}
	for _, arm := range a.index.Load().Armed(now) {
		if r, ok := a.events.tracker.Report(arm.Event.ID, now); ok {
			v.reports = append(v.reports, r)
		}
	}
	if st := a.redis.Load(); st != nil {
		v.nodes, v.unplaced = nodeLoads(levels, st.topo)
	}
	for i, l := range levels {
		v.byKey[l.Key.Key] = i
	}
	a.view.Store(v)
}
