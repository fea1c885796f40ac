// Package detector finds the heaviest keys of a sampled request stream over a sliding
// window: it hashes each key, counts it in a count-min sketch for reads or for writes,
// offers the estimate to the read, write and combined top-k rankings, and counts distinct
// keys with HyperLogLog (packages sketch and topk do the counting; this package adds
// sharding, locking, time and rates).
//
// Keys are spread over a power-of-two number of shards by hash, each with its own mutex
// and its own sketches and heaps, so parallel ingest contends only when two goroutines hit
// the same shard. Shards hold disjoint keys, so the global rankings are the shards'
// rankings merged.
//
// A Detector is safe for concurrent use. It keeps no clock: callers pass now to Advance
// and Snapshot (the agent drives Advance from a ticker every Tick).
package detector
