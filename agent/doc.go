// Package agent wires the parts of hotkeyd into one service: sample sources (UDP reports,
// POST /v1/samples, the RESP proxy tap, MONITOR) feed a detector; an evaluation loop turns
// its window into rates and hot keys every tick; the HTTP API and Prometheus metrics show
// the result.
//
// An Agent is safe for concurrent use: sources call Accept from many goroutines, and the
// HTTP API reads an immutable view that the evaluation loop replaces each tick.
package agent
