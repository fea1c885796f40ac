package registry

import (
	"context"
	"testing"
)

// TestSwitch: calls go to the current store, and a switch changes the version even when
// the two stores' versions agree.
func TestSwitch(t *testing.T) {
	ctx := context.Background()
	a, b := NewMemory(MemoryOptions{}), NewMemory(MemoryOptions{})
	if _, err := b.Create(ctx, testEvent("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, testEvent("y")); err != nil {
		t.Fatal(err)
	}
	w := NewSwitch(a)
	v1 := mustVersion(t, w)
	w.To(b)
	v2 := mustVersion(t, w)
	if va, vb := mustVersion(t, a), mustVersion(t, b); va != vb {
		t.Fatalf("the two stores' versions differ (%d, %d): the test wants them alike", va, vb)
	}
	if v1 == v2 {
		t.Errorf("version %d before and after the switch; want a change", v1)
	}
	if got, err := w.Get(ctx, "x"); err != nil || got.ID != "x" {
		t.Errorf("Get after the switch: %+v, %v; want b's event", got, err)
	}
	if w.Current() != Store(b) {
		t.Error("Current is not the store switched to")
	}
}

func mustVersion(t *testing.T, s Store) uint64 {
	t.Helper()
	v, err := s.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}
