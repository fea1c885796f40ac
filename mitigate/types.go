package mitigate

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kind is a kind of mitigation.
type Kind string

// The mitigations hotkeyd knows.
const (
	// L1 asks SDK clients to cache the key in process for a short TTL, refilled by one
	// caller at a time (single-flight).
	L1 Kind = "l1"
	// Copies splits a read-hot key into N copies on different cluster primaries; SDK
	// clients read a random copy and write the original and every copy.
	Copies Kind = "copies"
	// ShardedCounter spreads a write-hot counter over M sub-counters on different
	// primaries; its value is the base key plus the sum of the sub-counters.
	ShardedCounter Kind = "sharded_counter"
	// BatchedCounter asks SDK clients to sum increments locally and send one INCRBY per
	// key per flush interval.
	BatchedCounter Kind = "batched_counter"
	// Report marks a hot key hotkeyd will not act on automatically (a write-hot key that
	// is not a counter); the entry says why.
	Report Kind = "report"
)

// Kinds lists every kind, in the order operators read them.
var Kinds = []Kind{L1, Copies, ShardedCounter, BatchedCounter, Report}

// Mode says how far a mitigation goes.
type Mode string

// The modes.
const (
	// Observe computes the mitigation and exports it in metrics only.
	Observe Mode = "observe"
	// Recommend publishes it in the plan, marked as recommended; clients do not apply it.
	Recommend Mode = "recommend"
	// Enforce publishes it for clients to apply, and the agent carries out its Redis part.
	Enforce Mode = "enforce"
)

// ParseMode checks a mode's spelling.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Observe, Recommend, Enforce:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: use observe, recommend or enforce", s)
}

// Node is a Redis key that hotkeyd creates (a copy or a sub-counter) and where it lives.
type Node struct {
	// Name is the key's full name; it contains the original key verbatim.
	Name string `json:"name"`
	// Slot is the cluster slot of Name (0 for standalone Redis).
	Slot int `json:"slot"`
	// Primary is the address of the primary that owns Slot ("" for standalone Redis).
	Primary string `json:"primary"`
}

// Duration is a time.Duration that reads and writes JSON as a Go duration string ("1s").
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "100ms".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"1s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}
