package client

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestCacheEntryOverheadCovers: MaxBytes counts each entry as its key and value plus
// entryOverhead, which must be at least what the heap really holds per entry, or a cache
// at its bound uses more memory than the app gave it. A review measured 296 bytes per
// entry of a 14-byte key and a 100-byte value against 210 counted; this test measured
// 276–301 for 3,000 to 70,000 entries (the maps' growth moves it).
func TestCacheEntryOverheadCovers(t *testing.T) {
	const n = 50_000
	c, err := NewCache(CacheOptions{MaxEntries: 1 << 20, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%09d", i) // 14 bytes
	}
	value := make([]byte, 100)
	load := func(context.Context) ([]byte, error) { return value, nil }
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, k := range keys {
		// A key of the cache's own, as an app's keys are (built per request).
		if _, err := c.Get(context.Background(), strings.Clone(k), load); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keys)
	perEntry := float64(after.HeapAlloc-before.HeapAlloc) / n
	counted := float64(14 + 100 + entryOverhead)
	t.Logf("heap per entry %.0f bytes; counted %.0f (entryOverhead %d)", perEntry, counted, entryOverhead)
	if perEntry > counted {
		t.Errorf("the heap holds %.0f bytes per entry, MaxBytes counts %.0f: raise entryOverhead to at least %.0f", perEntry, counted, perEntry-114)
	}
}
