package mitigate

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/leaktest"
)

// Tests of the scans for leftovers (Recover, the rescan one grace period later, the
// periodic sweep): what they cost in SCAN calls, and that a long one holds up neither
// Apply nor the rounds (copy refresh, claim renewal).

// fillUnrelated writes n keys hotkeyd has nothing to do with ("other:<i>"), pipelined.
func fillUnrelated(t *testing.T, b backend, n int) {
	t.Helper()
	cmds := make([][]any, 0, n/500+1)
	for i := 0; i < n; i += 500 {
		args := []any{"MSET"}
		for j := i; j < min(i+500, n); j++ {
			args = append(args, "other:"+strconv.Itoa(j), "v")
		}
		cmds = append(cmds, args)
	}
	for _, err := range doAll(context.Background(), b.rdb, cmds) {
		if err != nil {
			t.Fatalf("MSET: %v", err)
		}
	}
}

// scanCalls returns how many SCAN commands the server at b.rdb has run since its last
// CONFIG RESETSTAT (INFO commandstats, cmdstat_scan:calls=).
func scanCalls(t *testing.T, b backend) int {
	t.Helper()
	info, err := b.rdb.Do(context.Background(), "INFO", "commandstats").Text()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_scan:calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest+",", ',')])
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// TestRecoverOneScanPass: Recover walks a primary's keyspace once (one SCAN cursor loop
// matching "{hk:*"), not once per kind of name it looks for, and still finds every kind:
// a copy nobody uses (deleted), a sub-counter (folded), the stash of an unfinished fold
// (completed) and a list of sub-counters (its sub-counters drain).
func TestRecoverOneScanPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startStandalone(t)
	const unrelated = 5000
	fillUnrelated(t, b, unrelated)
	const page, likes, listed = "pass:page", "pass:likes", "pass:listed"
	stray := b.names(t, page, 2, Copies)
	for _, n := range stray {
		mustDo(t, b.rdb, "SET", n.Name, "stale")
	}
	subs := b.names(t, likes, 2, ShardedCounter)
	mustDo(t, b.rdb, "INCRBY", subs[0].Name, 5)
	mustDo(t, b.rdb, "INCRBY", subs[1].Name, 7)
	// A fold of sub 2 interrupted after step a: its value sits in a stash.
	if err := foldMove.run(ctx, b.rdb, []string{subs[1].Name, stashName(subs[1].Name)}, "crashed-fold").Err(); err != nil {
		t.Fatal(err)
	}
	// A list whose sub-counter an earlier run already folded: only the list tells.
	lsubs := b.names(t, listed, 1, ShardedCounter)
	if err := ListSubCounter(ctx, b.rdb, listed, lsubs[0].Name); err != nil {
		t.Fatal(err)
	}
	// Names a scan for "{hk:*" sees but that are none of the four kinds.
	mustDo(t, b.rdb, "SET", "{hk:t1}done:x:"+likes, "1")
	mustDo(t, b.rdb, "SET", "{hk:other}thing", "1")

	e := newTestExecutor(t, b, time.Hour, time.Hour)
	defer e.Close(ctx)
	mustDo(t, b.rdb, "CONFIG", "RESETSTAT")
	if err := e.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	calls := scanCalls(t, b)
	pass := (unrelated + 999) / 1000
	t.Logf("Recover: %d SCAN calls over %d keys (one pass of COUNT 1000: about %d)", calls, unrelated+8, pass)
	if limit := pass*3/2 + 2; calls > limit {
		t.Errorf("Recover made %d SCAN calls; want ≤ %d (one pass over the keyspace)", calls, limit)
	}

	b.absent(t, "copies nobody uses, after Recover", stray)
	if got, err := b.rdb.Do(ctx, "GET", likes).Int64(); err != nil || got != 12 {
		t.Errorf("GET %s after Recover: %d, %v; want 12 (the sub-counter and the stash folded)", likes, got, err)
	}
	b.noneLeft(t, "{hk:sub*", "{hk:t*}stash:*")
	if got := e.count(ShardedCounter, ActionCounterRecover); got != 1 {
		t.Errorf("counter_recover: %v; want 1 (the stash)", got)
	}
	e.mu.Lock()
	_, drains := e.draining[lsubs[0].Name]
	e.mu.Unlock()
	if !drains {
		t.Errorf("listed sub-counter %s: not draining after Recover; want it found through its list", lsubs[0].Name)
	}
	if got := len(b.keys(t, "{hk:t*}done:*")) + len(b.keys(t, "{hk:other}*")); got < 2 {
		t.Errorf("names of none of the four kinds: %d left; want both untouched", got)
	}
}

// TestScanLeavesRoundsAndApply: while Run's scan at start walks a big keyspace (each SCAN
// call slowed down, the whole scan longer than the grace period), the rounds go on
// renewing the executor's claim on its copies (its expiry moves forward during the scan)
// and a plan offered meanwhile has its copies written before the scan's findings are
// handled. Close during a scan stops it and leaves no goroutine. Not parallel: it counts
// the goroutines of the process.
func TestScanLeavesRoundsAndApply(t *testing.T) {
	b := startStandalone(t)
	fillUnrelated(t, b, 40000)
	const pageA, pageB, stray = "slow:a", "slow:b", "slow:stray"
	mustDo(t, b.rdb, "SET", pageA, "a")
	mustDo(t, b.rdb, "SET", pageB, "b")
	copiesA, copiesB := b.names(t, pageA, 2, Copies), b.names(t, pageB, 2, Copies)
	strays := b.names(t, stray, 1, Copies)
	mustDo(t, b.rdb, "SET", strays[0].Name, "left by an earlier run")
	exists := func(name string) bool {
		n, err := b.rdb.Do(context.Background(), "EXISTS", name).Int()
		if err != nil {
			t.Fatalf("EXISTS %s: %v", name, err)
		}
		return n == 1
	}

	// The executor's client: a real one, each SCAN reply held back 150 ms (a scan of the
	// 40,000 keys: about 40 calls, 6 s).
	var scans atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: b.addrs[0]})
	defer rdb.Close()
	rdb.AddHook(slowScan{&scans, 150 * time.Millisecond})
	mustDo(t, rdb, "PING") // warm the pool before counting goroutines
	before := runtime.NumGoroutine()
	// Claims are renewed every half grace period and last one: a round held up for 2 s
	// (a loaded machine) would not make them lapse; a scan that holds up the rounds does.
	const grace = 4 * time.Second
	e := newLoggedExecutor(t, ExecutorOptions{Redis: rdb, RefreshPeriod: 100 * time.Millisecond, GracePeriod: grace})
	planA := execPlan(execEntry(pageA, Copies, Enforce, copiesA))
	e.Offer(planA)
	stop := sync.OnceFunc(e.run(t))
	defer stop()

	eventually(t, "Run's scan at start under way", func() bool { return scans.Load() >= 2 })
	start := time.Now()
	e.Offer(execPlan(execEntry(pageA, Copies, Enforce, copiesA), execEntry(pageB, Copies, Enforce, copiesB)))
	// Until the scan's findings are handled (the stray copy deleted): the claim on A's
	// copies stays live, and B's copies appear.
	// Whether the claim is renewed is a matter of order, not of speed: its expiry must
	// move forward while the scan is under way (renewals fall due every half grace period
	// and the scan lasts longer than the grace period). How often it lapsed is only
	// logged: on a loaded machine a round may come late.
	var samples, lapsed, renewals int
	firstExp := claimExpiryOr0(t, b, copiesA[0].Name, e.ID())
	lastExp := firstExp
	bWritten, bBeforeScanDone := false, false
	for exists(strays[0].Name) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("the stray copy is still there a minute after the scan started; want it deleted once the scan ends")
		}
		now := time.Now().UnixMilli()
		samples++
		exp := claimExpiryOr0(t, b, copiesA[0].Name, e.ID())
		if exp <= now {
			lapsed++
		}
		if exp > lastExp {
			renewals++
			lastExp = exp
		}
		if !bWritten && exists(copiesB[0].Name) && exists(copiesB[1].Name) {
			bWritten = true
			bBeforeScanDone = exists(strays[0].Name)
			t.Logf("B's copies written %v after the offer, %d SCAN calls in; scan handled: %v",
				time.Since(start).Round(time.Millisecond), scans.Load(), !bBeforeScanDone)
		}
		time.Sleep(100 * time.Millisecond)
	}
	scanTook := time.Since(start)
	t.Logf("scan handled %v after the offer, %d SCAN calls; %d claim samples, %d renewals seen, %d lapsed",
		scanTook.Round(time.Millisecond), scans.Load(), samples, renewals, lapsed)
	if renewals == 0 {
		t.Errorf("the claim on %s was not renewed during the scan (expiry %d throughout); want the rounds to go on renewing it", copiesA[0].Name, firstExp)
	}
	if scanTook < grace+grace/4 {
		t.Fatalf("the scan took %v; want well over the grace period %v for the test to mean anything (add keys)", scanTook, grace)
	}
	if !bWritten || !bBeforeScanDone {
		t.Errorf("copies of the plan offered during the scan: written %v, before the scan's findings were handled %v; want both", bWritten, bBeforeScanDone)
	}
	b.exist(t, "A's copies after the scan", copiesA)

	// Close in the middle of a scan (the rescan one grace period after the first one is
	// due by now; make sure one runs) stops it and leaves no goroutine behind.
	n := scans.Load()
	eventually(t, "another scan under way", func() bool { return scans.Load() >= n+2 })
	stop()
	leaktest.Wait(t, before)
	b.noneLeft(t, "{hk:copy*")
}

// claimExpiryOr0 is claimExpiry, or 0 when id holds no claim on name (its claim key
// itself expired, say).
func claimExpiryOr0(t *testing.T, b backend, name, id string) int64 {
	t.Helper()
	v, err := b.rdb.Do(context.Background(), "ZSCORE", claimKey(name), id).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("ZSCORE %s %s: %v", claimKey(name), id, err)
	}
	f, err := strconv.ParseFloat(fmt.Sprint(v), 64) // RESP3: a double; RESP2: a string
	if err != nil {
		t.Fatalf("ZSCORE %s %s: %v", claimKey(name), id, err)
	}
	return int64(f)
}

// slowScan is a go-redis hook that counts the SCAN commands a client sends and holds
// each reply back for delay (less when the command's context ends first).
type slowScan struct {
	n     *atomic.Int64
	delay time.Duration
}

func (slowScan) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s slowScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if strings.EqualFold(cmd.Name(), "scan") {
			s.n.Add(1)
			select {
			case <-time.After(s.delay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return err
	}
}

func (slowScan) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
