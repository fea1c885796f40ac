package sampler

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestOutQueue: bytes pushed in pieces of any size come out in order, written a piece
// at a time of any size; the queue counts what waits; chunks come back to the pool,
// which keeps at most its max.
func TestOutQueue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := chunkPool{max: 4}
	var q outQueue
	var want, got []byte
	next := byte(0)
	for round := range 2000 {
		if rng.IntN(2) == 0 {
			b := make([]byte, rng.IntN(3*outChunk))
			for i := range b {
				b[i] = next
				next++
			}
			q.push(b, &pool)
			want = append(want, b...)
		} else if f := q.front(); len(f) > 0 {
			n := rng.IntN(len(f)) + 1
			got = append(got, f[:n]...)
			q.consume(n, &pool)
		}
		if q.len() != len(want)-len(got) {
			t.Fatalf("round %d: len %d; want %d", round, q.len(), len(want)-len(got))
		}
		if len(pool.free) > pool.max {
			t.Fatalf("round %d: the pool keeps %d chunks; want at most %d", round, len(pool.free), pool.max)
		}
	}
	for f := q.front(); len(f) > 0; f = q.front() {
		got = append(got, f...)
		q.consume(len(f), &pool)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes out of %d in; they differ", len(got), len(want))
	}
	if q.len() != 0 || q.chunks != nil || len(pool.free) == 0 {
		t.Errorf("emptied: len %d, chunks %d, pool %d; want 0, none, chunks back in the pool", q.len(), len(q.chunks), len(pool.free))
	}
	q.push(make([]byte, 5*outChunk+1), &pool)
	q.reset(&pool)
	if q.len() != 0 || q.front() != nil || len(pool.free) != pool.max {
		t.Errorf("after reset: len %d, pool %d; want 0 and a full pool", q.len(), len(pool.free))
	}
}
