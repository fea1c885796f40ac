//go:build linux

package threadsched

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Supported reports whether this platform has the policies.
const Supported = true

// resetOnFork is SCHED_RESET_ON_FORK, a flag or'ed into the policy.
const resetOnFork = 0x40000000

// SetProcess gives policy p, Normal or Batch, to every thread of the process that has
// Normal or Batch now, keeping its nice value and its reset-on-fork flag, and returns
// how many threads it changed. Threads created later take the policy of the thread
// that creates them. Threads that end meanwhile are skipped.
func SetProcess(p Policy) (changed int, err error) {
	if !settable(p) {
		return 0, fmt.Errorf("threadsched: SetProcess(%v): must be normal or batch", p)
	}
	tids, err := threads()
	if err != nil {
		return 0, err
	}
	for _, tid := range tids {
		raw, err := getscheduler(tid)
		if errors.Is(err, syscall.ESRCH) {
			continue // it ended
		}
		if err != nil {
			return changed, err
		}
		if cur := Policy(raw &^ resetOnFork); cur == p || !settable(cur) {
			continue
		}
		var param struct{ priority int32 } // struct sched_param; 0 for these policies
		_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid),
			uintptr(int(p)|raw&resetOnFork), uintptr(unsafe.Pointer(&param)))
		switch {
		case e == syscall.ESRCH:
		case e != 0:
			return changed, fmt.Errorf("threadsched: sched_setscheduler(thread %d, %v): %w", tid, p, e)
		default:
			changed++
		}
	}
	return changed, nil
}

// Process returns the policy of every thread of the process, by thread id.
func Process() (map[int]Policy, error) {
	tids, err := threads()
	if err != nil {
		return nil, err
	}
	out := make(map[int]Policy, len(tids))
	for _, tid := range tids {
		raw, err := getscheduler(tid)
		if errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[tid] = Policy(raw &^ resetOnFork)
	}
	return out, nil
}

// Current returns the policy of the calling thread.
func Current() (Policy, error) {
	raw, err := getscheduler(0)
	return Policy(raw &^ resetOnFork), err
}

// getscheduler returns thread tid's policy with its flags; 0 is the calling thread.
func getscheduler(tid int) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
	if e != 0 {
		return 0, fmt.Errorf("threadsched: sched_getscheduler(thread %d): %w", tid, e)
	}
	return int(r), nil
}

// threads lists the ids of the process's threads.
func threads() ([]int, error) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("threadsched: list threads: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("threadsched: list threads: %w", err)
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
