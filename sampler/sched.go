package sampler

import (
	"fmt"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/threadsched"
)

// SchedPolicy is what a Proxy does with the scheduling policy of its process's threads
// (Linux; see package threadsched).
type SchedPolicy uint8

// The scheduling policies a Proxy can apply.
const (
	// SchedOff leaves the threads' policy alone. The default.
	SchedOff SchedPolicy = iota
	// SchedAuto runs the threads as SCHED_BATCH while the multiplexed clients pipeline
	// deeply, and as SCHED_OTHER otherwise: see Proxy. It does nothing in a process
	// started with another policy than SCHED_OTHER (chrt), or without multiplexing.
	SchedAuto
	// SchedBatch runs the threads as SCHED_BATCH for as long as the Proxy serves.
	SchedBatch
)

func (s SchedPolicy) String() string {
	switch s {
	case SchedOff:
		return "off"
	case SchedAuto:
		return "auto"
	case SchedBatch:
		return "batch"
	}
	return fmt.Sprintf("SchedPolicy(%d)", int(s))
}

// ParseSchedPolicy parses "off", "auto" or "batch".
func ParseSchedPolicy(s string) (SchedPolicy, error) {
	for _, p := range []SchedPolicy{SchedOff, SchedAuto, SchedBatch} {
		if s == p.String() {
			return p, nil
		}
	}
	return SchedOff, fmt.Errorf("sampler: scheduling policy %q: must be off, auto or batch", s)
}

// DefaultProxySchedInterval is how often SchedAuto looks at the clients' reads.
const DefaultProxySchedInterval = 20 * time.Millisecond

// schedReapply is how often a policy once set is set again, for the threads the Go
// runtime started meanwhile (from a thread not switched yet). schedSettle and
// schedLogEvery pace the info-level log: see switchLog. After schedIdleAfter without a
// client read, SchedAuto's check sleeps until the next read (see sleepUntilRead).
const (
	schedReapply   = time.Second
	schedSettle    = time.Second
	schedLogEvery  = time.Minute
	schedIdleAfter = time.Second
)

// switchLog paces the info-level reports of policy switches, each of which is logged
// at debug level: the first switch is reported at once, later ones once the policy has
// held for schedSettle, or, while it keeps switching, once per schedLogEvery. So the
// last report always names the policy in force once it has settled, and a workload at
// the edge of the thresholds does not flood the log.
type switchLog struct {
	pending  int       // switches not reported yet
	last     time.Time // the last switch
	reported time.Time // the last report; zero before the first
	// The client reads, and those with deepRead commands or more, of the interval that
	// made the last switch: what a report gives as the reason, rather than the reads of
	// the interval it is made in (none, once the clients have gone quiet).
	reads, deep uint64
}

// switched records a switch at now, made by an interval of reads client reads, deep of
// them deep.
func (s *switchLog) switched(now time.Time, reads, deep uint64) {
	s.pending++
	s.last = now
	s.reads, s.deep = reads, deep
}

// report returns how many switches to report at now, 0 when none is due, and counts
// them as reported.
func (s *switchLog) report(now time.Time) int {
	if s.pending == 0 || now.Sub(s.last) < schedSettle && !s.reported.IsZero() && now.Sub(s.reported) < schedLogEvery {
		return 0
	}
	n := s.pending
	s.pending, s.reported = 0, now
	return n
}

// How SchedAuto decides, from the client reads of one interval that carried commands:
// a read is deep when it carried at least deepRead commands. Batch once at least
// batchOn of them are deep, back to normal once fewer than batchOff are; fewer reads
// than minReadRate a second keep the policy as it is.
const (
	deepRead    = 4
	batchOn     = 0.9
	batchOff    = 0.5
	minReadRate = 2000
)

// nextBatch returns whether the threads should run as SCHED_BATCH after an interval
// with reads client reads, deep of them deep, when batch is what they run as now;
// fewer than least reads decide nothing.
func nextBatch(batch bool, reads, deep, least uint64) bool {
	if reads < least || reads == 0 {
		return batch
	}
	share := float64(deep) / float64(reads)
	if batch {
		return share >= batchOff
	}
	return share >= batchOn
}

// countRead counts a client read that carried cmds commands, for SchedAuto, and wakes
// SchedAuto's check if it sleeps.
func (s *proxyCounters) countRead(cmds int) {
	s.reads.Add(1)
	if cmds >= deepRead {
		s.deepReads.Add(1)
	}
	s.schedIdle.touch()
}

// sleepUntilRead parks SchedAuto's check until a client reads, given seen, the reads
// counted at its last look; false once the proxy is closing. Alone, the check woke the
// process 50 times a second.
func (p *Proxy) sleepUntilRead(seen uint64) bool {
	s := &p.stats
	return s.schedIdle.sleep(func() bool { return s.reads.Load() != seen }, p.ctx.Done())
}

// scheduler applies the Proxy's SchedPolicy until the proxy closes, then gives back
// SCHED_OTHER to the threads if it changed them.
func (p *Proxy) scheduler() {
	policy, every := p.sched, p.schedEvery
	if !threadsched.Supported {
		p.log.Info("proxy: scheduling policies are Linux only; sched_policy does nothing here", "sched_policy", policy)
		return
	}
	switch cur, err := threadsched.Current(); {
	case err != nil:
		p.log.Warn("proxy: cannot read the scheduling policy; sched_policy does nothing", "sched_policy", policy, "err", err)
		return
	case cur != threadsched.Normal:
		p.log.Info("proxy: the process already has a scheduling policy; sched_policy leaves it alone",
			"sched_policy", policy, "policy", cur)
		return
	}
	if policy == SchedAuto && !p.multiplex {
		p.log.Debug("proxy: sched_policy auto watches multiplexed clients only; multiplexing is off")
		return
	}
	batch, touched := policy == SchedBatch, false
	if batch {
		every = schedReapply // nothing to decide: it only sets the policy again
	}
	defer func() {
		if touched {
			p.setPolicy(false)
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	var reads, deep uint64
	var log switchLog
	least := uint64(max(1, minReadRate*every.Seconds()))
	reapply := max(1, int(schedReapply/every))
	idleAfter := max(1, int(schedIdleAfter/every))
	quiet := 0 // intervals in a row without a read
	apply := batch
	for n := 1; ; n++ {
		if apply {
			touched = true
			if !p.setPolicy(batch) {
				return
			}
		}
		select {
		case <-t.C:
		case <-p.ctx.Done():
			return
		}
		// Once set, now and then again, for the threads the runtime started since.
		apply = touched && n%reapply == 0
		if policy != SchedAuto {
			continue
		}
		r, d := p.stats.reads.Load(), p.stats.deepReads.Load()
		dr, dd := r-reads, d-deep
		reads, deep = r, d
		now := time.Now()
		if next := nextBatch(batch, dr, dd, least); next != batch {
			batch, apply = next, true
			log.switched(now, dr, dd)
			p.log.Debug("proxy: the clients' pipelining switched the threads' scheduling policy",
				"policy", policyOf(batch), "client_reads", dr, "reads_with_4_or_more_commands", dd, "in", every)
		}
		if n := log.report(now); n > 0 {
			p.log.Info("proxy: the clients' pipelining set the threads' scheduling policy",
				"policy", policyOf(batch), "switches", n, "client_reads", log.reads, "reads_with_4_or_more_commands", log.deep, "in", every)
		}
		if dr > 0 {
			quiet = 0
		} else {
			quiet++
		}
		if quiet >= idleAfter && !apply && log.pending == 0 {
			if !p.sleepUntilRead(reads) {
				return
			}
			// The first interval after it starts at the read that woke it; threads the
			// runtime started meanwhile get the policy again.
			quiet, apply = 0, batch
			t.Reset(every)
		}
	}
}

func policyOf(batch bool) threadsched.Policy {
	if batch {
		return threadsched.Batch
	}
	return threadsched.Normal
}

// setPolicy gives every thread of the process SCHED_BATCH or SCHED_OTHER; false, after
// logging why, when it cannot. A thread that the runtime starts meanwhile, from a thread
// not switched yet, keeps the old policy: so it goes over the threads again until a
// pass finds none to change (or a few passes did not settle it; the next reapply will).
func (p *Proxy) setPolicy(batch bool) bool {
	for range 4 {
		n, err := threadsched.SetProcess(policyOf(batch))
		if err != nil {
			p.stats.schedBatch.Store(false)
			p.log.Warn("proxy: cannot set the threads' scheduling policy; sched_policy does nothing from now on",
				"policy", policyOf(batch), "err", err)
			return false
		}
		if n == 0 {
			break
		}
	}
	p.stats.schedBatch.Store(batch)
	return true
}
