// Package threadsched reads and sets the Linux scheduling policy of every thread of
// the process, between SCHED_OTHER (Normal, the default) and SCHED_BATCH (Batch).
//
// A SCHED_BATCH thread that wakes up does not preempt the thread running on its CPU; it
// waits for that one's time slice to end or for it to sleep. The proxy tap uses that
// while its clients pipeline deeply: on a machine where the tap shares its CPUs with
// those clients, each client's write then no longer interrupts the tap in the middle of
// a turn, so both do more per wake-up (docs/BENCHMARKS.md). Go runs goroutines on many
// threads, and a thread takes the policy of the thread that creates it, so the policy
// is set on every thread at once.
//
// Only SCHED_OTHER and SCHED_BATCH threads are changed: a thread someone made SCHED_IDLE
// or real-time keeps its policy. A thread's nice value is kept. Elsewhere than on Linux,
// Supported is false and the functions return ErrUnsupported.
package threadsched
