// Package mitigate turns hot keys into a plan and carries out the parts of it that live in
// Redis. It holds the decision rules (which mitigation suits which hot key, with
// hysteresis and modes), Redis Cluster slot math and topology, the names of key copies and
// sub-counters that land on chosen primaries, the executors that write copies and fold
// counters back, and the versioned plan that clients follow.
//
// The rules and slot math are pure and safe for concurrent use. The plan store and the
// executors are safe for concurrent use; each says what its mutex guards.
package mitigate
