package threadsched

import (
	"errors"
	"fmt"
)

// Policy is a Linux scheduling policy, by its number in <sched.h>.
type Policy int

// The policies.
const (
	Normal Policy = 0 // SCHED_OTHER
	FIFO   Policy = 1 // SCHED_FIFO
	RR     Policy = 2 // SCHED_RR
	Batch  Policy = 3 // SCHED_BATCH
	Idle   Policy = 5 // SCHED_IDLE
)

func (p Policy) String() string {
	switch p {
	case Normal:
		return "normal"
	case FIFO:
		return "fifo"
	case RR:
		return "rr"
	case Batch:
		return "batch"
	case Idle:
		return "idle"
	}
	return fmt.Sprintf("policy(%d)", int(p))
}

// ErrUnsupported is returned where policies cannot be read or set.
var ErrUnsupported = errors.New("threadsched: scheduling policies are Linux only")

// settable reports whether SetProcess changes a thread that has policy p.
func settable(p Policy) bool { return p == Normal || p == Batch }
