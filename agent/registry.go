package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/registry"
)

// maxEventBytes bounds a registry event document: what registry.DecodeEvent reads, so
// that every event within the documented limits (256 patterns of 1024 bytes and more)
// can be sent.
const maxEventBytes = registry.MaxEventJSON

// events holds the agent's view of the registry: the store, the index built from it, and
// the tracker of prediction against reality. Only refreshIndex writes index and version:
// called by followRegistry while the evaluation loop runs, else by evaluate itself;
// handlers read index through the atomic pointer in Agent.
type events struct {
	store     registry.Store
	tracker   *registry.Tracker
	kick      chan time.Time // set while the loop runs: evaluate hands the registry reads to followRegistry
	version   uint64         // store version the index was built from
	loaded    bool           // the index was built from the store at least once
	partial   bool           // the index left out stored events that could not be read
	checked   time.Time      // last time the store version was read
	lastError string         // last index error logged, to log each once

	// Failures to read the store's version (Redis down) are logged at the first, then
	// once a minute, and their end once.
	failingSince time.Time // first failure of the current run of them; zero while reads succeed
	failLogged   time.Time // when one was last logged
	failures     int       // failures since failLogged
}

// versionLogEvery is how often a registry whose version cannot be read is logged again.
const versionLogEvery = time.Minute

// checkRegistry has the index rebuilt if the store changed (refreshIndex): in the
// background while the evaluation loop runs, so that a registry in a Redis that hangs —
// maybe the node a hot key overloads — never holds up detection; else (tests that drive
// evaluate) at once.
func (a *Agent) checkRegistry(now time.Time) {
	if k := a.events.kick; k != nil {
		select {
		case k <- now:
		default: // a check is queued already
		}
		return
	}
	a.refreshIndex(context.Background(), now)
}

// followRegistry runs the registry checks that the evaluation loop hands it, until ctx
// ends.
func (a *Agent) followRegistry(ctx context.Context, kick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-kick:
			a.refreshIndex(ctx, now)
		}
	}
}

// refreshIndex rebuilds the index when the store changed, reading its version at most
// once a second (a Redis store costs a round trip). Stored events the store cannot read
// (registry.ErrUnreadable) do not hide the others: the index is built from the readable
// ones, the error is logged once, and the store is listed again at every check until it
// reads whole.
func (a *Agent) refreshIndex(ctx context.Context, now time.Time) {
	ev := &a.events
	if now.Sub(ev.checked) < time.Second {
		return
	}
	ev.checked = now
	stopping := ctx
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := ev.store.Version(ctx)
	if stopping.Err() != nil {
		return // the agent is stopping: a read it cut short is no failure of the store
	}
	if err != nil {
		ev.failures++
		switch {
		case ev.failingSince.IsZero():
			ev.failingSince, ev.failLogged, ev.failures = now, now, 0
			a.log.Warn("registry: reading the version; keeping the events armed, retrying every second (logged again once a minute)", "err", err)
		case now.Sub(ev.failLogged) >= versionLogEvery:
			a.log.Warn("registry: reading the version still fails; keeping the events armed", "err", err,
				"failing_for", now.Sub(ev.failingSince).Round(time.Second), "failures", ev.failures)
			ev.failLogged, ev.failures = now, 0
		}
		return
	}
	if !ev.failingSince.IsZero() {
		a.log.Info("registry: the version reads again", "failed_for", now.Sub(ev.failingSince).Round(time.Second))
		ev.failingSince = time.Time{}
	}
	if v == ev.version && ev.loaded && !ev.partial {
		return
	}
	list, err := ev.store.List(ctx)
	if stopping.Err() != nil {
		return
	}
	partial := errors.Is(err, registry.ErrUnreadable)
	if v == 0 && len(list) == 0 && ev.loaded && ev.version != 0 && a.index.Load().Len() > 0 {
		// No change brings a version back to 0: the store lost its data (a Redis that
		// restarted empty). Disarming every event on that would be the worst answer;
		// the store restores what it can (registry.Mirror), and a later version is read.
		err = fmt.Errorf("the registry is empty at version 0, having been at version %d: its store lost its data (Redis restarted without persistence, or failed over to an empty replica); keeping the %d events armed until it holds a registry again", ev.version, a.index.Load().Len())
		partial = false
	} else if err == nil || partial {
		x, ierr := registry.NewIndex(list, registry.IndexOptions{CoolDown: a.coolDown()})
		if ierr == nil {
			a.index.Store(x)
			if v != ev.version || !ev.loaded || partial != ev.partial {
				a.log.Info("registry loaded", "events", x.Len(), "version", v)
			}
			ev.version, ev.loaded, ev.partial = v, true, partial
			if !partial {
				ev.lastError = ""
				return
			}
			if err.Error() != ev.lastError {
				a.log.Error("registry: some stored events cannot be read; arming the others", "err", err)
				ev.lastError = err.Error()
			}
			return
		}
		err = ierr
	}
	if err.Error() != ev.lastError {
		a.log.Error("registry: keeping the previous events", "err", err)
		ev.lastError = err.Error()
	}
}

func (a *Agent) coolDown() time.Duration {
	if a.opts.Planner.CoolDown > 0 {
		return a.opts.Planner.CoolDown
	}
	return mitigate.DefaultCoolDown
}

// predict adds what the registry knows to the key stats: the events predicting each
// ranked key (hot or not: a key under a prefix or glob is armed once it shows up in
// traffic) with their expected rates when higher than observed, and the exact keys of
// armed events that have no traffic yet, with no rates (the rules arm those with what
// needs no sizing: L1, batching). Either way it adds the mitigations the events list
// (Kinds, Auto, ListedBy) and the expected read rate, which sizes listed copies before
// traffic. It returns the stats and, per key, its events.
func (a *Agent) predict(now time.Time, levels []detector.Level, covered time.Duration) ([]mitigate.KeyStats, map[string][]string) {
	x := a.index.Load()
	stats := keyStats(levels, covered)
	if x.Len() == 0 {
		return stats, nil
	}
	by := make(map[string][]string)
	have := make(map[string]int, len(stats))
	for i, s := range stats {
		have[s.Key] = i
	}
	apply := func(ks *mitigate.KeyStats, p registry.Prediction, seen bool) {
		ks.PredictedBy = p.Events
		ks.Kinds, ks.Auto, ks.ListedBy = p.Kinds, p.Auto, listedBy(x, p)
		ks.ExpectedReadRate = p.ExpectedReadRate
		if seen {
			ks.ReadRate = max(ks.ReadRate, p.ExpectedReadRate)
			ks.WriteRate = max(ks.WriteRate, p.ExpectedWriteRate)
		}
		ks.Counter = ks.Counter || p.Counter
		by[ks.Key] = p.Events
	}
	for _, l := range levels {
		p, ok := x.Predict(l.Key.Key, now)
		if !ok {
			continue
		}
		i, seen := have[l.Key.Key]
		if !seen {
			stats = append(stats, oneKeyStats(l, covered))
			i = len(stats) - 1
			have[l.Key.Key] = i
		}
		apply(&stats[i], p, true)
	}
	for _, p := range x.Predicted(now) {
		if _, seen := have[p.Key]; seen {
			continue
		}
		stats = append(stats, mitigate.KeyStats{Key: p.Key})
		have[p.Key] = len(stats) - 1
		apply(&stats[len(stats)-1], p, false)
	}
	return stats, by
}

// listedBy returns the events of p that list mitigations (all of them unless some event
// is auto), for the rules' reasons; nil when none does.
func listedBy(x *registry.Index, p registry.Prediction) []string {
	if len(p.Kinds) == 0 {
		return nil
	}
	if !p.Auto {
		return p.Events
	}
	var out []string
	for _, id := range p.Events {
		if ev, ok := x.Event(id); ok {
			if auto, _ := ev.Kinds(); !auto {
				out = append(out, id)
			}
		}
	}
	return out
}

// observe feeds the evaluated keys to the registry tracker and returns the number of new
// surprises: keys that turned hot with no armed event predicting them.
func (a *Agent) observe(now time.Time, levels []detector.Level) int {
	x := a.index.Load()
	obs := make([]registry.Observation, len(levels))
	for i, l := range levels {
		obs[i] = registry.Observation{Key: l.Key.Key, ReadRate: l.ReadRate, WriteRate: l.WriteRate, Hot: l.Hot}
	}
	return a.events.tracker.Observe(now, x, obs)
}

// eventReply is an event with its report, for GET /v1/registry/{id}.
type eventReply struct {
	registry.Event
	Report *registry.Report `json:"report,omitempty"`
}

// registryAPI answers /v1/registry and /v1/registry/{id}.
func (a *Agent) registryAPI(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case id == "" && read:
		list, err := a.events.store.List(ctx)
		if err != nil && !errors.Is(err, registry.ErrUnreadable) {
			writeError(w, http.StatusServiceUnavailable, "registry: "+err.Error())
			return
		}
		if list == nil {
			list = []registry.Event{}
		}
		reply := map[string]any{"events": list}
		if err != nil {
			// The readable events, and which ones could not be read.
			reply["unreadable"] = err.Error()
		}
		writeJSON(w, http.StatusOK, reply)
	case id == "" && r.Method == http.MethodPost:
		e, ok := a.decodeEvent(w, r)
		if !ok {
			return
		}
		stored, err := a.events.store.Create(ctx, e)
		if err != nil {
			writeRegistryError(w, err)
			return
		}
		a.log.Info("registry: event created", "id", stored.ID, "name", stored.Name, "patterns", stored.Patterns)
		writeJSON(w, http.StatusCreated, stored)
	case id != "" && read:
		e, err := a.events.store.Get(ctx, id)
		if err != nil {
			writeRegistryError(w, err)
			return
		}
		reply := eventReply{Event: e}
		if rep, ok := a.events.tracker.Report(id, a.now()); ok {
			a.hideKeys(&rep)
			reply.Report = &rep
		}
		writeJSON(w, http.StatusOK, reply)
	case id != "" && r.Method == http.MethodPut:
		e, ok := a.decodeEvent(w, r)
		if !ok {
			return
		}
		if e.ID != "" && e.ID != id {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("id: %q in the body differs from %q in the path; leave it out or make them equal", e.ID, id))
			return
		}
		e.ID = id
		stored, created, err := a.events.store.Put(ctx, e)
		if err != nil {
			writeRegistryError(w, err)
			return
		}
		code := http.StatusOK
		if created {
			code = http.StatusCreated
		}
		a.log.Info("registry: event stored", "id", stored.ID, "created", created)
		writeJSON(w, code, stored)
	case id != "" && r.Method == http.MethodDelete:
		if err := a.events.store.Delete(ctx, id); err != nil {
			writeRegistryError(w, err)
			return
		}
		a.log.Info("registry: event deleted", "id", id)
		writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
	default:
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed here; use GET or POST /v1/registry, GET, PUT or DELETE /v1/registry/{id}", r.Method))
	}
}

// hideKeys replaces the key names of a report by their hashes when HashKeys is on.
func (a *Agent) hideKeys(r *registry.Report) {
	if !a.opts.HashKeys {
		return
	}
	if r.PeakReadKey != "" {
		r.PeakReadKey = a.display(r.PeakReadKey)
	}
	if r.PeakWriteKey != "" {
		r.PeakWriteKey = a.display(r.PeakWriteKey)
	}
	hot := make([]registry.HotKey, len(r.HotKeys))
	for i, k := range r.HotKeys {
		k.Key = a.display(k.Key)
		hot[i] = k
	}
	r.HotKeys = hot
}

func (a *Agent) decodeEvent(w http.ResponseWriter, r *http.Request) (registry.Event, bool) {
	body, ok := readBody(w, r, maxEventBytes, "an event")
	if !ok {
		return registry.Event{}, false
	}
	e, err := registry.DecodeEvent(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return registry.Event{}, false
	}
	return e, true
}

func writeRegistryError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, registry.ErrInvalid), errors.Is(err, registry.ErrFull):
		code = http.StatusBadRequest
	case errors.Is(err, registry.ErrUnreadable):
		code = http.StatusInternalServerError
	case errors.Is(err, registry.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, registry.ErrExists), errors.Is(err, registry.ErrReadOnly):
		code = http.StatusConflict
	}
	writeError(w, code, err.Error())
}
