package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestCacheCloseDuringGets: Close while other goroutines keep calling Get (an app
// shutting down while it still serves requests) must neither panic nor race: a load that
// starts as Close waits must not reuse Close's WaitGroup ("sync: WaitGroup is reused
// before previous Wait has returned").
func TestCacheCloseDuringGets(t *testing.T) {
	for round := range 200 {
		c, err := NewCache(CacheOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 3 {
			untilStop(&wg, stop, func(i int) bool {
				if _, err := c.Get(context.Background(), fmt.Sprint(round, ":", g, ":", i), func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
					t.Errorf("Get during Close: %v", err)
					return false
				}
				return true
			})
		}
		stopGets := sync.OnceFunc(func() { close(stop); wg.Wait() })
		t.Cleanup(stopGets) // if waitFor fails
		waitFor(t, func() bool { return c.Stats().Loads >= 50 })
		c.Close()
		stopGets()
	}
}
