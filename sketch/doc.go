// Package sketch counts keys in fixed memory: a count-min sketch with conservative update,
// its sliding-window form, and distinct-key counting with HyperLogLog.
//
// CountMin follows Cormode and Muthukrishnan, "An Improved Data Stream Summary: The
// Count-Min Sketch and its Applications" (J. Algorithms, 2005): depth rows of width
// counters; a key's estimate is the minimum of its counter in each row and never falls
// below its true count. With width ⌈e/ε⌉ and depth ⌈ln 1/δ⌉ the estimate exceeds the true
// count by more than ε·N (N the total count) with probability at most δ. Updates are
// conservative (Estan and Varghese, "New Directions in Traffic Measurement and Accounting",
// SIGCOMM 2002): a counter only rises as far as the new minimum, which keeps the same
// guarantee and cuts the over-estimate of heavy keys several-fold. Departures from the
// paper: widths are powers of two, and the row hashes are multiply-shift hashes of one
// 64-bit key hash rather than independent pairwise hash functions.
//
// Window holds a ring of per-tick sketches plus their cell-wise sum, so the count of a key
// over the last ticks is one read per row, and a tick expires by subtracting its sketch from
// the sum. Because each per-tick cell is at least the true per-tick count of every key that
// maps to it, the sum keeps the no-under-count guarantee over the window.
//
// Distinct counts the distinct keys of a window with a ring of HyperLogLog sketches
// (Flajolet et al., 2007, as implemented by github.com/axiomhq/hyperloglog).
//
// Everything here takes keys already hashed to a uint64, holds no lock and no clock, and is
// not safe for concurrent use; updates allocate nothing. Callers shard and lock one layer up.
package sketch
