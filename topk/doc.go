// Package topk keeps the k heaviest keys of a stream from their sketch estimates: a min-heap
// of k candidates ordered by estimated count, plus an open-addressing index from key hash to
// heap slot. Only the k candidates keep their key bytes; every other key is a hash in a
// sketch.
//
// This is the heavy-hitter scheme of Cormode and Muthukrishnan (2005, section 5.1): after
// each update the key's sketch estimate is offered to the heap, and it displaces the
// smallest candidate when it is larger. Sliding windows make estimates fall as well as rise,
// so Refresh re-estimates every candidate when a tick ends and drops those that went to 0.
//
// A TopK is not safe for concurrent use, keeps no clock, and allocates nothing per Offer
// once its key buffers have grown to the keys it holds.
package topk
