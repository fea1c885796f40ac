package mitigate

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// StoreOptions configure a Store. The zero value works.
type StoreOptions struct {
	// Now stamps the first plan and plans published without Generated. Default: time.Now.
	Now func() time.Time
}

// Store holds the current plan and its version, and lets callers wait for a newer one
// (long-poll) or be told of each new one (Subscribe). It is safe for concurrent use.
//
// Versions start at 1 (an empty plan) and increase by one on every Publish whose
// primaries or entries differ from the current plan's; the version is the plan's ETag.
type Store struct {
	now func() time.Time

	publishMu sync.Mutex // serializes Publish, so hooks see plans in version order

	mu      sync.Mutex    // guards plan, changed, hooks and nextHook
	plan    Plan          // the current plan
	changed chan struct{} // closed (and replaced) when plan is replaced
	hooks   map[int]func(Plan)
	nextID  int
}

// NewStore returns a store whose current plan is version 1 with no entries.
func NewStore(o StoreOptions) *Store {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Store{
		now:     now,
		plan:    Plan{Version: 1, Generated: now(), Primaries: 1, Entries: []Entry{}},
		changed: make(chan struct{}),
		hooks:   make(map[int]func(Plan)),
	}
}

// Current returns the current plan. Treat it as read-only: it is shared.
func (s *Store) Current() Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plan
}

// Publish makes p the current plan when its primaries or entries (leases included;
// Generated and Version ignored) differ from the current plan's: it gets the next version,
// waiters wake and hooks run. It returns the current plan afterwards, which is the old
// one, with its old version, when nothing differed. A Generated left zero is stamped now.
func (s *Store) Publish(p Plan) Plan {
	s.publishMu.Lock()
	defer s.publishMu.Unlock()

	p.Entries = slices.Clone(p.Entries)
	if p.Entries == nil {
		p.Entries = []Entry{}
	}
	p.Primaries = max(p.Primaries, 1)
	if p.Generated.IsZero() {
		p.Generated = s.now()
	}

	s.mu.Lock()
	if p.Primaries == s.plan.Primaries && sameEntries(p.Entries, s.plan.Entries, true) {
		cur := s.plan
		s.mu.Unlock()
		return cur
	}
	p.Version = s.plan.Version + 1
	s.plan = p
	close(s.changed)
	s.changed = make(chan struct{})
	hooks := make([]func(Plan), 0, len(s.hooks))
	for _, id := range slices.Sorted(maps.Keys(s.hooks)) {
		hooks = append(hooks, s.hooks[id])
	}
	s.mu.Unlock()

	for _, h := range hooks {
		h(p)
	}
	return p
}

// Wait returns the current plan as soon as its version differs from after: at once when
// it already does (a newer plan, or an after from an earlier run of the agent whose
// versions went higher), else when a newer plan is published. When ctx ends first it
// returns the current plan, whose version is then after, and ctx.Err(). Waiting costs no
// goroutine beyond the caller's.
func (s *Store) Wait(ctx context.Context, after uint64) (Plan, error) {
	s.mu.Lock()
	p, ch := s.plan, s.changed
	s.mu.Unlock()
	if p.Version != after {
		return p, nil
	}
	select {
	case <-ch:
		return s.Current(), nil
	case <-ctx.Done():
		return s.Current(), ctx.Err()
	}
}

// Subscribe calls fn with every plan Publish makes current, in version order, on the
// publishing goroutine, until cancel is called. fn must return quickly (hand slow work,
// such as a Redis PUBLISH, to a goroutine of its own) and must not call Publish.
func (s *Store) Subscribe(fn func(Plan)) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID++
	s.hooks[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.hooks, id)
	}
}
