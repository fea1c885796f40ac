package client

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Repairs of a split key's copies. A write of the original whose outcome is unknown (a
// timeout, a broken connection), whose copying to the copies failed, or that the client
// cannot mirror (a multi-key write, a script, MULTI/EXEC), leaves copies that may be
// older than the original: reading them could return a value older than one a read of
// the original has already returned. So such a write turns the key's copy reads off
// (copyUnsure), and a repair in the background copies the original to the copies
// (copyOriginal reads the original as it is now, so whatever the write did is in the
// copies after it) and turns them on again. Marks and repairs outlive a plan version
// (carryMarks): until a repair under the plan in force has run, the original's node
// takes all of this client's reads of the key.
//
// Writes of the key through this client take its stripe, and the repair takes it from
// before it reads the original to after it has written the copies and cleared the mark:
// a write meanwhile waits, so it is never lost in the copies. A write of a key still
// marked goes to the original only and marks it again, for the next repair; a mark made
// after a repair began (copyState's count: by a write the client cannot mirror, which
// takes no stripe) is not cleared by it either. Holding the stripe, the writes cannot
// race the repair: under a steady load of writes it would never win.

// Waits between a repair's attempts, and how many attempts run at once in a Client.
const (
	repairMin     = 50 * time.Millisecond // before the first attempt, doubling
	repairMax     = 2 * time.Second
	repairsAtOnce = 8
)

// A new plan version has keyPlans of its own, with copy reads on. A mark of the plan it
// replaces is carried over (the copies, renewed, renamed or not, may still lack the
// write): carryMarks marks the new keyPlan before it is published, carryRepairs starts
// its repair after, and unsure marks the current plan too when a plan came during the
// write. So copy reads stay off until a repair under the plan in force has copied the
// original, whatever plans come meanwhile.

// carryMarks marks unsure, in ix, each split key whose copy reads were off in old.
func carryMarks(old, ix *planIndex) {
	for key, kp := range ix.keys {
		if kp.copies != nil && old.marked(key) {
			kp.markUnsure()
		}
	}
}

// carryRepairs starts the repairs of ix's keys whose marks carryMarks carried, and of
// those marked in old since.
func (c *Client) carryRepairs(old, ix *planIndex) {
	for key, kp := range ix.keys {
		if kp.copies != nil && (old.marked(key) || kp.copyState.Load()&copyUnsure != 0) {
			c.unsure(key, kp)
		}
	}
}

// marked reports whether key's copy reads are off in p.
func (p *planIndex) marked(key string) bool {
	kp := p.lookup(key)
	return kp != nil && kp.copyState.Load()&copyUnsure != 0
}

// unsure marks key's copies as possibly older than the original and makes sure a repair
// runs for it (one per key and plan at a time); when a new plan is in force, it marks
// that one too. It reports whether the copy reads were on until now as far as unsure
// marks go (the start of an episode).
func (c *Client) unsure(key string, kp *keyPlan) bool {
	fresh := c.unsureIn(key, kp)
	if cur := c.follower.cur.Load().lookup(key); cur != nil && cur != kp && cur.copies != nil {
		c.unsureIn(key, cur)
	}
	return fresh
}

// unsureIn is unsure for kp alone.
func (c *Client) unsureIn(key string, kp *keyPlan) bool {
	fresh := kp.markUnsure()
	c.repairMu.Lock()
	defer c.repairMu.Unlock()
	if c.repairsStopped {
		return fresh
	}
	if _, running := c.repairing[kp]; running {
		return fresh // it sees the new mark before it ends (repairEnd)
	}
	c.repairing[kp] = struct{}{}
	c.repairWG.Add(1)
	go c.repair(key, kp)
	return fresh
}

// repair copies the original of key to its copies and clears copyUnsure, retrying with a
// backoff, until it has done so, a new plan replaced kp, the copies' lease ran out, or
// Close.
func (c *Client) repair(key string, kp *keyPlan) {
	defer c.repairWG.Done()
	start := time.Now()
	wait := repairMin
	t := time.NewTimer(wait)
	defer t.Stop()
	tries := 0
	for {
		select {
		case <-c.life.Done():
			c.repairEnd(key, kp, true)
			return
		case <-t.C:
		}
		tries++
		err := c.repairOnce(key, kp)
		if c.repairEnd(key, kp, false) {
			if err == nil {
				// At info level after a failed try (Redis was away), else at debug: an
				// app whose scripts write a split key repairs it at each.
				level := slog.LevelDebug
				if tries > 1 {
					level = slog.LevelInfo
				}
				c.log.Log(c.life, level, "hotkeyd: copied a key's original to its copies after a write of unknown outcome, a failed copying or a write it cannot mirror; reads go to the copies again",
					"key", key, "after", time.Since(start).Round(time.Millisecond), "tries", tries)
			}
			return
		}
		if err != nil && !errors.As(err, new(repairRaced)) {
			c.log.Debug("hotkeyd: repairing a key's copies failed; retrying", "key", key, "err", err, "retry_in", wait)
			wait = min(2*wait, repairMax)
		} else {
			wait = repairMin // marked again during or after the attempt: repair again soon
		}
		t.Reset(wait)
	}
}

// repairEnd reports whether the repair of kp may end (and forgets it then): the mark is
// cleared, kp is no longer the key's plan or its copies' lease ran out, or stop (Close).
// It decides under repairMu, so that an unsure call either sees the repair running or
// starts a new one.
func (c *Client) repairEnd(key string, kp *keyPlan, stop bool) bool {
	c.repairMu.Lock()
	defer c.repairMu.Unlock()
	current := c.follower.cur.Load().lookup(key) == kp && kp.split(c.now())
	if !stop && current && kp.copyState.Load()&copyUnsure != 0 {
		return false
	}
	delete(c.repairing, kp)
	return true
}

// repairRaced says that a repair's copy was made but a write was marked unsure
// meanwhile, so the mark stays.
type repairRaced struct{}

func (repairRaced) Error() string { return "a write of the key was marked unsure during the repair" }

// repairOnce makes one attempt: it asks the original's node and each copy's whether the
// key and the copy exist, without the stripe (so that a node that is down or hangs holds
// no writes of the stripe back: it fails the probe after the client's read timeout,
// while the writes go on), then, holding the stripe, copies the original to the copies
// and clears copyUnsure unless the key was marked again since the attempt began. Every
// command is sent after the write that marked the key failed, so Redis has processed
// that write, if it got it, by the time it answers the probe: the copy includes it.
func (c *Client) repairOnce(key string, kp *keyPlan) error {
	select {
	case c.repairSem <- struct{}{}:
	case <-c.life.Done():
		return c.life.Err()
	}
	defer func() { <-c.repairSem }()
	ctx, cancel := context.WithTimeout(internal(c.life), c.timeout)
	defer cancel()
	if err := c.probe(ctx, key, kp.copies); err != nil {
		return err
	}
	st := c.stripe(key)
	if err := st.lock(ctx); err != nil {
		return err
	}
	defer st.unlock()
	s := kp.copyState.Load()
	if s&copyUnsure == 0 {
		return nil
	}
	if err := c.copyOriginal(ctx, key, kp.copies); err != nil {
		return err
	}
	if !kp.copyState.CompareAndSwap(s, s&^copyUnsure) {
		return repairRaced{}
	}
	c.repairs.Add(1)
	return nil
}

// probe sends EXISTS for key and each of copies, in one pipeline (go-redis sends each
// node's share on its own connection, at once), and returns the first error.
func (c *Client) probe(ctx context.Context, key string, copies []string) error {
	return c.pipelined(ctx, func(p redis.Pipeliner) error {
		p.Exists(ctx, key)
		for _, name := range copies {
			p.Exists(ctx, name)
		}
		return nil
	})
}

// stopRepairs ends the repairs and waits for them; Close calls it after ending c.life.
func (c *Client) stopRepairs() {
	c.repairMu.Lock()
	c.repairsStopped = true
	c.repairMu.Unlock()
	c.repairWG.Wait()
}
