package registry

import (
	"context"
	"sync"
	"sync/atomic"
)

// Switch is a Store that hands every call to another, which can be replaced while in use:
// an agent that starts while Redis does not answer keeps its events in its file, and
// moves them to Redis once it answers. It is safe for concurrent use.
type Switch struct {
	mu  sync.RWMutex // held shared by each write for its duration, exclusively by Move
	cur atomic.Pointer[switched]
}

// switched is the store a Switch hands calls to, and how many times it was replaced.
type switched struct {
	s   Store
	gen uint64
}

// NewSwitch returns a Switch that hands calls to s.
func NewSwitch(s Store) *Switch {
	w := &Switch{}
	w.cur.Store(&switched{s: s})
	return w
}

// To makes s the store calls go to from now on.
func (w *Switch) To(s Store) {
	for {
		old := w.cur.Load()
		if w.cur.CompareAndSwap(old, &switched{s: s, gen: old.gen + 1}) {
			return
		}
	}
}

// Move makes s the store calls go to after calling fill with the current store (to seed s
// from it), with writes held from before fill until the switch: a write either lands in
// the current store before fill reads it, or in s.
func (w *Switch) Move(s Store, fill func(from Store)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fill(w.Current())
	w.To(s)
}

// Current returns the store calls go to.
func (w *Switch) Current() Store { return w.cur.Load().s }

// List implements Store.
func (w *Switch) List(ctx context.Context) ([]Event, error) { return w.Current().List(ctx) }

// Get implements Store.
func (w *Switch) Get(ctx context.Context, id string) (Event, error) {
	return w.Current().Get(ctx, id)
}

// Create implements Store.
func (w *Switch) Create(ctx context.Context, e Event) (Event, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.Current().Create(ctx, e)
}

// Put implements Store.
func (w *Switch) Put(ctx context.Context, e Event) (Event, bool, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.Current().Put(ctx, e)
}

// Delete implements Store.
func (w *Switch) Delete(ctx context.Context, id string) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.Current().Delete(ctx, id)
}

// Version implements Store: the current store's version, with the number of switches in
// its top byte, so that a switch changes it even where the two stores' versions agree.
func (w *Switch) Version(ctx context.Context) (uint64, error) {
	c := w.cur.Load()
	v, err := c.s.Version(ctx)
	return v + c.gen<<56, err
}
