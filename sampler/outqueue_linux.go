package sampler

// outChunk is the size of the chunks an outQueue holds its bytes in.
const outChunk = 64 << 10

// outQueue holds the reply bytes waiting for room in a client's socket, in chunks of
// outChunk bytes that it takes from and gives back to a chunkPool: a backlog costs about
// its size, where one slice grown by append would cost up to twice that, and leave the
// arrays it outgrew to the garbage collector, while a slow client's replies pile up. The
// zero value is empty.
type outQueue struct {
	chunks [][]byte // each full to its len but the last; bytes chunks[0][off:] come first
	off    int
	n      int // bytes waiting
}

// chunkPool keeps the chunks outQueues gave back, up to max of them; beyond that they go
// to the garbage collector, so that a burst's memory is given back after it. Its chunks
// have a capacity of size bytes, outChunk when 0. The loop keeps its clients' input
// buffers in one too.
type chunkPool struct {
	free [][]byte
	max  int
	size int
}

func (p *chunkPool) get() []byte {
	if k := len(p.free); k > 0 {
		c := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		return c[:0]
	}
	if p.size > 0 {
		return make([]byte, 0, p.size)
	}
	return make([]byte, 0, outChunk)
}

func (p *chunkPool) put(c []byte) {
	if len(p.free) < p.max {
		p.free = append(p.free, c)
	}
}

// len returns the bytes waiting.
func (q *outQueue) len() int { return q.n }

// push appends b.
func (q *outQueue) push(b []byte, pool *chunkPool) {
	q.n += len(b)
	for len(b) > 0 {
		k := len(q.chunks)
		if k == 0 || len(q.chunks[k-1]) == cap(q.chunks[k-1]) {
			q.chunks = append(q.chunks, pool.get())
			k++
		}
		last := q.chunks[k-1]
		m := min(len(b), cap(last)-len(last))
		q.chunks[k-1] = append(last, b[:m]...)
		b = b[m:]
	}
}

// front returns the bytes to write next: the rest of the first chunk.
func (q *outQueue) front() []byte {
	if q.n == 0 {
		return nil
	}
	return q.chunks[0][q.off:]
}

// consume drops the first n bytes, which front returned and were written.
func (q *outQueue) consume(n int, pool *chunkPool) {
	q.n -= n
	q.off += n
	// A chunk read to its end is done with: only the last is not full, and when it is
	// read to its end nothing waits.
	for len(q.chunks) > 0 && q.off == len(q.chunks[0]) {
		pool.put(q.chunks[0])
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.off = 0
	}
	if len(q.chunks) == 0 {
		q.chunks = nil // drop the backing array the slicing walked along
	}
}

// take returns every byte waiting, in one slice of its own, and empties q.
func (q *outQueue) take(pool *chunkPool) []byte {
	b := make([]byte, 0, q.n)
	for i, c := range q.chunks {
		if i == 0 {
			c = c[q.off:]
		}
		b = append(b, c...)
	}
	q.reset(pool)
	return b
}

// reset drops every byte waiting.
func (q *outQueue) reset(pool *chunkPool) {
	for _, c := range q.chunks {
		pool.put(c)
	}
	*q = outQueue{}
}
