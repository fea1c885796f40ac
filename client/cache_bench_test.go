package client

import (
	"context"
	"testing"
	"time"
)

var cacheSink *value

// BenchmarkCacheHit measures the hit path of the cache: "lookup" is what the plan hook's
// L1 calls first (it must not allocate); "get" is the internal get with a loader closure
// built outside the loop; "get-parallel" the same from all cores.
func BenchmarkCacheHit(b *testing.B) {
	c, err := NewCache(CacheOptions{TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	load := func(context.Context) (string, bool, error) { return "value", false, nil }
	if _, err := c.get(ctx, "score:match42", time.Hour, load); err != nil {
		b.Fatal(err)
	}
	b.Run("lookup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _, cacheSink, _ = c.lookup("score:match42", c.now())
		}
	})
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cacheSink, _ = c.get(ctx, "score:match42", time.Hour, load)
		}
	})
	b.Run("get-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var v *value
			for pb.Next() {
				v, _ = c.get(ctx, "score:match42", time.Hour, load)
			}
			_ = v
		})
	})
}
