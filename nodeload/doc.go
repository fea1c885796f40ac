// Package nodeload reads each Redis primary's own load from INFO: the commands it ran, the
// CPU it used and the bytes it moved, as counters and as rates between two readings. It is
// the ground truth beside the sampled view of the keys (a hot key's primary busier than
// the others, and a split evening them out), exported to Prometheus and the HTTP API.
//
// A Poller is safe for concurrent use: Run polls in its own goroutine while Loads and the
// collector read the last readings under a mutex.
package nodeload
