package sampler

import "fmt"

// Op says whether a sampled request read or wrote its key.
type Op uint8

// The operations a sample can carry.
const (
	OpRead  Op = 1
	OpWrite Op = 2
)

// String returns "read" or "write", the spelling of the JSON protocol.
func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ParseOp parses the JSON protocol's spelling of an operation.
func ParseOp(s string) (Op, error) {
	switch s {
	case "read":
		return OpRead, nil
	case "write":
		return OpWrite, nil
	}
	return 0, fmt.Errorf("op %q: must be \"read\" or \"write\"", s)
}

// Sample is one sampled request on one key. A multi-key command (MGET, DEL a b c) becomes
// one Sample per key.
type Sample struct {
	// Key is the Redis key. It aliases the source's buffer: copy it to keep it.
	Key []byte
	// Op is OpRead or OpWrite.
	Op Op
	// Counter marks a write of the INCR family on strings (INCR, INCRBY, DECR, DECRBY),
	// which the mitigation rules treat apart from other writes: such a key can be spread
	// over sub-counters or have its increments batched.
	Counter bool
	// Count is how many sampled requests this sample stands for; 0 is read as 1.
	Count uint32
	// Bytes is the size of the value read or written, 0 when unknown.
	Bytes uint32
	// Truncated marks a key that the source cut to a prefix because it was too long.
	Truncated bool
}

// Batch is a group of samples from one source taken at one sample rate.
type Batch struct {
	// Source names the sender ("app-1", "proxy", "monitor"). It is a label in metrics.
	Source string
	// Rate is the sample rate in (0, 1]: 0.01 means one request in a hundred was sampled,
	// so each sample stands for 1/Rate requests of the full traffic.
	Rate float64
	// Samples are the samples; they and their keys are valid only during Sink.Accept.
	Samples []Sample
	// FollowsPlan marks samples from clients that apply hotkeyd's plan (the Go SDK), so
	// that client-side mitigations such as L1 reach this traffic.
	FollowsPlan bool
}

// Drop reasons that sources report to Sink.Drop. They are label values in metrics.
const (
	DropMalformed = "malformed" // bytes that do not parse as the protocol
	DropTooLarge  = "too_large" // a report, body or key over its limit
	DropOverload  = "overload"  // the consumer could not keep up and the source shed load
	DropAuth      = "auth"      // a report without the required token
)

// Sink consumes samples. The agent implements it; sources call it.
type Sink interface {
	// Accept takes one batch. It must not keep b.Samples or any key after it returns.
	Accept(b Batch)
	// Drop records n samples (or reports, when the count is unknown, n = 1) that a
	// source dropped before they reached Accept, and why (one of the Drop… reasons).
	Drop(source, reason string, n int)
}

// SinkFunc adapts a function to a Sink whose drops are ignored; handy in tests and examples.
type SinkFunc func(b Batch)

// Accept calls f(b).
func (f SinkFunc) Accept(b Batch) { f(b) }

// Drop does nothing.
func (SinkFunc) Drop(string, string, int) {}
