// Package sampler is what feeds the detector: the Sample type, the sampling policy, and the
// sources that produce samples — the report protocol (UDP datagrams and the JSON body of
// POST /v1/samples), the RESP proxy tap and the MONITOR reader. The go-redis hook that
// reports from Go applications lives in package client and speaks the UDP protocol.
//
// Every source hands its samples to a Sink in batches. A Batch and the key bytes it points
// to are only valid during the Sink call: sources reuse their buffers, so the hot path does
// not allocate. Sources are safe for concurrent use unless their doc says otherwise.
package sampler
