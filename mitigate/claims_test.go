package mitigate

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
)

// Several executors on one cluster (one agent per app pod, every agent on the same
// Redis Cluster): copy names are the same for every agent, so an executor must not
// delete copies that another, live executor uses. These tests drive two executors, A and
// B, by hand on one 3-primary cluster with one clock.

// claimsTestPrefix, spelled out: claim keys are part of what operators see in Redis and
// write ACLs for.
const claimsTestPrefix = "hk:claim"

// claimsExec is an executor with its metrics and its log.
type claimsExec struct {
	testExec
	log *logbuf.Buffer
}

// newLoggedExecutor is NewExecutor(o) with a registry of its own and a logger that writes
// to t and to the returned log. RefreshPeriod defaults to an hour: the test runs the
// rounds.
func newLoggedExecutor(t *testing.T, o ExecutorOptions) claimsExec {
	t.Helper()
	reg := prometheus.NewRegistry()
	buf := &logbuf.Buffer{}
	o.Registry = reg
	o.RefreshPeriod = cmp.Or(o.RefreshPeriod, time.Hour)
	o.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(buf, testWriter{t}),
		&slog.HandlerOptions{Level: slog.LevelInfo}))
	e, err := NewExecutor(o)
	if err != nil {
		t.Fatalf("NewExecutor: %v", err)
	}
	return claimsExec{testExec{e, reg}, buf}
}

// newClaimsExecutor is an executor on b whose grace periods follow clock.
func newClaimsExecutor(t *testing.T, b backend, clock *execClock, grace time.Duration) claimsExec {
	t.Helper()
	return newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, GracePeriod: grace, Now: clock.Now})
}

// claimsGrace is the grace period of the claims tests' executors.
const claimsGrace = time.Minute

// claimsPair sets key and returns n copy names of it, a clock, and two executors A and B
// on b with the grace period claimsGrace. The test closes them (or lets one crash).
func claimsPair(t *testing.T, b backend, key string, n int) (names []Node, clock *execClock, ea, eb claimsExec) {
	t.Helper()
	mustDo(t, b.rdb, "SET", key, "v")
	names = b.names(t, key, n, Copies)
	clock = newExecClock()
	return names, clock, newClaimsExecutor(t, b, clock, claimsGrace), newClaimsExecutor(t, b, clock, claimsGrace)
}

func TestExecutorClaims(t *testing.T) {
	t.Parallel()
	b := startCluster(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, backend)
	}{
		{"RecoverKeepsClaimed", testClaimsRecover},
		{"FewerCopies", testClaimsFewerCopies},
		{"CloseKeepsClaimed", testClaimsClose},
		{"CrashedClaimExpires", testClaimsCrash},
		{"Unreadable", testClaimsUnreadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer cleanClaims(t, b)
			tc.fn(t, b)
		})
	}
}

// cleanClaims deletes every claim key and copy, and the fleet's locks on the scans
// (SweepKey, RecoverKey), for the next test: its executors are a new fleet.
func cleanClaims(t *testing.T, b backend) {
	t.Helper()
	ctx := context.Background()
	for _, k := range append(append(b.keys(t, "{hk:copy*"), b.keys(t, claimsTestPrefix+"*")...), SweepKey, RecoverKey) {
		if err := b.rdb.Do(ctx, "DEL", k).Err(); err != nil {
			t.Fatalf("DEL %s: %v", k, err)
		}
	}
}

// exist fails t unless every copy in names exists.
func (b backend) exist(t *testing.T, when string, names []Node) {
	t.Helper()
	for _, n := range names {
		if got, err := b.rdb.Do(context.Background(), "EXISTS", n.Name).Int(); err != nil || got != 1 {
			t.Errorf("%s: copy %s: EXISTS %d, %v; want 1", when, n.Name, got, err)
		}
	}
}

// claimants returns the members of name's claim key (the ids of the executors claiming
// it, live or expired), sorted.
func (b backend) claimants(t *testing.T, name string) []string {
	t.Helper()
	ids, err := b.rdb.Do(context.Background(), "ZRANGE", claimsTestPrefix+name, 0, -1).StringSlice()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", claimsTestPrefix+name, err)
	}
	slices.Sort(ids)
	return ids
}

// claimExpiry returns the score of id in name's claim key: when its claim expires (unix
// ms).
func (b backend) claimExpiry(t *testing.T, name, id string) int64 {
	t.Helper()
	v, err := b.rdb.Do(context.Background(), "ZSCORE", claimsTestPrefix+name, id).Result()
	if err != nil {
		t.Fatalf("ZSCORE %s %s: %v", claimsTestPrefix+name, id, err)
	}
	f, err := strconv.ParseFloat(fmt.Sprint(v), 64) // RESP3: a double; RESP2: a string
	if err != nil {
		t.Fatalf("ZSCORE %s %s: %v", claimsTestPrefix+name, id, err)
	}
	return int64(f)
}

// absent fails t unless no copy in names exists.
func (b backend) absent(t *testing.T, when string, names []Node) {
	t.Helper()
	for _, n := range names {
		if got, err := b.rdb.Do(context.Background(), "EXISTS", n.Name).Int(); err != nil || got != 0 {
			t.Errorf("%s: copy %s: EXISTS %d, %v; want 0", when, n.Name, got, err)
		}
	}
}

// rounds advances clock by step n times and runs a round of each executor after each
// step, in order; after, when not nil, is called with the step's index once they ran.
func rounds(t *testing.T, clock *execClock, step time.Duration, n int, after func(i int), execs ...claimsExec) {
	t.Helper()
	for i := range n {
		clock.Add(step)
		for j, e := range execs {
			if err := e.Refresh(context.Background()); err != nil {
				t.Fatalf("round %d, executor %d: Refresh: %v", i, j, err)
			}
		}
		if after != nil {
			after(i)
		}
	}
}

func mustDo(t *testing.T, rdb Redis, args ...any) {
	t.Helper()
	if err := rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// testClaimsRecover (a): A enforces copies of K; B starts with an empty plan and runs
// Recover, then its rounds (the scan one grace period after Recover included). A's copies
// stay throughout.
func testClaimsRecover(t *testing.T, b backend) {
	ctx := context.Background()
	const key, grace = "claims:a:page", claimsGrace
	names, clock, ea, eb := claimsPair(t, b, key, 3)
	defer ea.Close(ctx)
	defer eb.Close(ctx)
	if err := ea.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	b.exist(t, "after A's Apply", names)
	if err := eb.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("B Apply: %v", err)
	}
	if err := eb.Recover(ctx); err != nil {
		t.Fatalf("B Recover: %v", err)
	}
	b.exist(t, "after B's Recover", names)
	// Rounds over three grace periods: A renews its claim, B retires and scans again.
	rounds(t, clock, grace/2, 6, func(int) {
		b.exist(t, "after B's round "+clock.Now().Format(time.TimeOnly), names)
	}, ea, eb)
	if got := eb.count(Copies, "copy_kept_claimed"); got < 3 {
		t.Errorf("B copy_kept_claimed: got %v; want ≥ 3 (one per copy Recover left alone)", got)
	}
	if got := eb.count(Copies, ActionCopyDelete); got != 0 {
		t.Errorf("B copy_delete: got %v; want 0", got)
	}
	// A's entry ends: nobody claims the copies any more, A deletes them.
	if err := ea.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("A Apply of an empty plan: %v", err)
	}
	b.absent(t, "after A's entry ended", names)
}

// testClaimsFewerCopies (b): A has 4 copies of K, B 2 (the first two of the same names);
// B's rounds, its Recover and its own change from 4 to 2 never delete copies 3 and 4.
func testClaimsFewerCopies(t *testing.T, b backend) {
	ctx := context.Background()
	const key, grace = "claims:b:page", claimsGrace
	names, clock, ea, eb := claimsPair(t, b, key, 4)
	defer ea.Close(ctx)
	defer eb.Close(ctx)
	if err := ea.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	if err := eb.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names[:2]))); err != nil {
		t.Fatalf("B Apply: %v", err)
	}
	if err := eb.Recover(ctx); err != nil {
		t.Fatalf("B Recover: %v", err)
	}
	b.exist(t, "after B's Recover", names)
	rounds(t, clock, grace/2, 4, func(int) { b.exist(t, "after B's round", names) }, ea, eb)
	// B goes up to 4 and down to 2 again: copies 3 and 4 are A's.
	if err := eb.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("B Apply n=4: %v", err)
	}
	if err := eb.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names[:2]))); err != nil {
		t.Fatalf("B Apply n=2: %v", err)
	}
	b.exist(t, "after B went from 4 copies to 2", names)
	clock.Add(grace / 2)
	if err := eb.Refresh(ctx); err != nil {
		t.Fatalf("B Refresh: %v", err)
	}
	b.exist(t, "after B's round following its change to 2", names)
}

// testClaimsClose (c): A and B enforce the same copies; B closes (a rolling deploy): A's
// copies stay, and B's claims are gone from every claim key.
func testClaimsClose(t *testing.T, b backend) {
	ctx := context.Background()
	const key, other = "claims:c:page", "claims:c:other"
	names, _, ea, eb := claimsPair(t, b, key, 2)
	mustDo(t, b.rdb, "SET", other, "v")
	own := b.names(t, other, 2, Copies) // B's alone
	defer ea.Close(ctx)
	if err := ea.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	if err := eb.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names), execEntry(other, Copies, Enforce, own))); err != nil {
		t.Fatalf("B Apply: %v", err)
	}
	if err := eb.Close(ctx); err != nil {
		t.Fatalf("B Close: %v", err)
	}
	b.exist(t, "after B's Close", names)
	b.absent(t, "B's own copies after its Close", own)
	for _, n := range names {
		if got := b.claimants(t, n.Name); !slices.Equal(got, []string{ea.ID()}) {
			t.Errorf("claims of %s after B's Close: %q; want A's only (%s)", n.Name, got, ea.ID())
		}
	}
	for _, n := range own {
		if got := b.claimants(t, n.Name); len(got) != 0 {
			t.Errorf("claims of B's own copy %s after B's Close: %q; want none", n.Name, got)
		}
	}
	if err := ea.Close(ctx); err != nil {
		t.Fatalf("A Close: %v", err)
	}
	b.absent(t, "after A's Close too", names)
}

// testClaimsCrash (d): A crashes (no Close): its claims keep its copies alive until they
// expire, also through B's periodic scans; after that, the next periodic scan of the
// fleet deletes them — not before, and not B's rounds between scans. The scan runs once
// per fleet: while another executor holds SweepKey, B skips its own. A copy nobody claims
// that appears later (a client of a crashed agent, a resharding) is deleted by a later
// periodic scan.
func testClaimsCrash(t *testing.T, b backend) {
	ctx := context.Background()
	const key, stray, grace = "claims:d:page", "claims:d:stray", claimsGrace
	mustDo(t, b.rdb, "SET", key, "v")
	names := b.names(t, key, 3, Copies)
	strays := b.names(t, stray, 2, Copies)
	clock := newExecClock()
	ea := newClaimsExecutor(t, b, clock, grace) // crashes: never closed
	// B scans every half grace period (plus up to an eighth), so that it scans while A's
	// claims are live and soon after they expire.
	eb := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, GracePeriod: grace, RescanPeriod: grace / 2, Now: clock.Now})
	defer eb.Close(ctx)
	if err := ea.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	if err := eb.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("B Apply: %v", err)
	}
	if err := eb.Recover(ctx); err != nil {
		t.Fatalf("B Recover: %v", err)
	}
	b.exist(t, "after B's Recover, A's claims live", names)
	// Both run past B's second scan, one grace period after its Recover.
	rounds(t, clock, grace/2, 3, nil, ea, eb)
	b.exist(t, "after B's second scan, A's claims live", names)
	// A dies now; its claims expire one grace period after its last renewal. Until then
	// B's periodic scans (SweepKey freed before each round: the test's clock does not
	// move Redis's) keep them.
	expiry := time.UnixMilli(b.claimExpiry(t, names[0].Name, ea.ID()))
	if d := expiry.Sub(clock.Now()); d <= grace/2 || d > grace {
		t.Fatalf("A's claim expires in %v; want in (%v, %v]", d, grace/2, grace)
	}
	kept := eb.count(Copies, ActionCopyKeptClaimed)
	for clock.Now().Add(grace / 8).Before(expiry) {
		mustDo(t, b.rdb, "DEL", SweepKey)
		rounds(t, clock, grace/8, 1, nil, eb)
		b.exist(t, "B's round "+clock.Now().Format(time.TimeOnly)+", before A's claims expired", names)
	}
	if got := eb.count(Copies, ActionCopyKeptClaimed); got < kept+3 {
		t.Errorf("B copy_kept_claimed after its scans while A's claims were live: got %v; want ≥ %v (its scans saw them)", got, kept+3)
	}
	// Expired, but another executor of the fleet ran the periodic scan a moment ago: B's
	// are skipped, and its rounds delete nothing.
	mustDo(t, b.rdb, "SET", SweepKey, "other", "PX", "600000")
	rounds(t, clock, grace/2, 6, nil, eb)
	b.exist(t, "three grace periods after A's claims expired, another executor holding the scan", names)
	// The scan's turn is free: B's next scan deletes them.
	mustDo(t, b.rdb, "DEL", SweepKey)
	rounds(t, clock, grace/2, 2, nil, eb)
	b.absent(t, "after B's next periodic scan, A's claims expired", names)
	// A copy that nobody claims appears after every scan so far.
	for _, n := range strays {
		mustDo(t, b.rdb, "SET", n.Name, "stale")
	}
	mustDo(t, b.rdb, "SET", SweepKey, "other", "PX", "600000")
	rounds(t, clock, grace/2, 4, nil, eb)
	b.exist(t, "two grace periods later, another executor holding the scan", strays)
	mustDo(t, b.rdb, "DEL", SweepKey)
	rounds(t, clock, grace/2, 2, nil, eb)
	b.absent(t, "after B's next periodic scan", strays)
	b.rdb.Do(ctx, "DEL", key)
}

// testClaimsUnreadable (e): with the claim keys of the copies unreadable (here they hold
// strings), an executor deletes no copy whose claims it cannot check — not at Recover,
// not at an entry's end, not at Close — and logs it; once they are readable again, the
// next round deletes what is left.
func testClaimsUnreadable(t *testing.T, b backend) {
	ctx := context.Background()
	const key, stray = "claims:e:page", "claims:e:stray"
	mustDo(t, b.rdb, "SET", key, "v")
	names := b.names(t, key, 2, Copies)
	strays := b.names(t, stray, 2, Copies)
	for _, n := range strays {
		mustDo(t, b.rdb, "SET", n.Name, "left")
	}
	spoil := func() {
		for _, n := range append(names, strays...) {
			mustDo(t, b.rdb, "SET", claimsTestPrefix+n.Name, "not a sorted set")
		}
	}
	mend := func() {
		for _, n := range append(names, strays...) {
			mustDo(t, b.rdb, "DEL", claimsTestPrefix+n.Name)
		}
	}
	spoil()
	clock := newExecClock()
	const grace = claimsGrace
	e := newClaimsExecutor(t, b, clock, grace)
	defer e.Close(ctx)
	if err := e.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := e.Recover(ctx); err == nil {
		t.Errorf("Recover with the claims unreadable: got nil; want an error")
	}
	b.exist(t, "after Recover with the claims unreadable", strays)
	// An entry starts and ends while the claims stay unreadable.
	_ = e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names)))
	b.exist(t, "after Apply", names)
	_ = e.Apply(ctx, execPlan())
	b.exist(t, "after the entry ended with the claims unreadable", names)
	clock.Add(grace / 2)
	_ = e.Refresh(ctx)
	b.exist(t, "after a round with the claims unreadable", append(names, strays...))
	if got := e.count(Copies, ActionError); got < 1 {
		t.Errorf("error count (kind copies): got %v; want ≥ 1", got)
	}
	if !strings.Contains(e.log.String(), "claims") {
		t.Errorf("log: no line mentions the claims; want the failure logged")
	}
	// Readable again: the next round deletes what was left.
	mend()
	clock.Add(grace / 2)
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with the claims readable: %v", err)
	}
	b.absent(t, "after a round with the claims readable again", append(names, strays...))

	// Close with the claims unreadable deletes nothing and says so.
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	mend()
	spoil()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Close(cctx); err == nil {
		t.Errorf("Close with the claims unreadable: got nil; want an error")
	}
	b.exist(t, "after Close with the claims unreadable", names)
	if !strings.Contains(e.log.String(), "copies left at stop") {
		t.Errorf("log: Close did not say it left the copies; want a line saying so")
	}
	mend()
	b.rdb.Do(ctx, "DEL", key)
}

func TestExecutorID(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	a, _ := NewExecutor(ExecutorOptions{Redis: c})
	b, _ := NewExecutor(ExecutorOptions{Redis: c})
	if a.ID() == "" || a.ID() == b.ID() {
		t.Errorf("default ids: %q and %q; want two different non-empty ids", a.ID(), b.ID())
	}
	e, _ := NewExecutor(ExecutorOptions{Redis: c, ID: "pod-7"})
	if e.ID() != "pod-7" {
		t.Errorf("ID: got %q; want pod-7", e.ID())
	}
	if e.rescanEvery != 10*DefaultLease {
		t.Errorf("rescan period: got %v; want %v", e.rescanEvery, 10*DefaultLease)
	}
	now := time.Unix(0, 0)
	for range 20 {
		if d := e.nextSweep(now).Sub(now); d < e.rescanEvery || d >= e.rescanEvery*5/4 {
			t.Fatalf("next sweep in %v; want in [%v, %v)", d, e.rescanEvery, e.rescanEvery*5/4)
		}
	}
}

// TestClaimKey: a copy's claim key lives in the copy's slot (so one script on the copy's
// node can check and delete), whatever hash tags the original key holds, and neither
// ParseName nor a scan for hotkeyd's names ("{hk:*") takes it for a copy.
func TestClaimKey(t *testing.T) {
	for _, name := range []string{
		"{hk:copy2:40913}score:match42",
		"{hk:copy1:7}{user:1}profile",
		"{hk:copy3:123456}a{b}c",
		"{hk:copy4:9}{}",
		"{hk:copy1:5}}{",
		"{hk:copy12:77}",
		"{hk:copy2:1}line\nbreak\x00{x}",
	} {
		ck := claimKey(name)
		if ck != claimsTestPrefix+name {
			t.Errorf("claimKey(%q) = %q; want %q", name, ck, claimsTestPrefix+name)
		}
		if got, want := Slot(ck), Slot(name); got != want {
			t.Errorf("Slot(claimKey(%q)) = %d; want %d (the copy's slot)", name, got, want)
		}
		if got, want := SlotBytes([]byte(ck)), Slot(name); got != want {
			t.Errorf("SlotBytes(claimKey(%q)) = %d; want %d (the copy's slot)", name, got, want)
		}
		if _, _, _, ok := ParseName(ck); ok {
			t.Errorf("ParseName(claimKey(%q)) ok; want false: a claim key is not a copy", name)
		}
		if strings.HasPrefix(ck, "{") {
			t.Errorf("claimKey(%q) = %q starts with '{'; want it outside the scans' \"{hk:*\"", name, ck)
		}
	}
}

// TestClaimsAtomic: checking a copy's claims and deleting it are one step. Executor A
// retires a copy nobody claimed when its entry ended; B claims it just before A's delete
// reaches Redis (a hook on A's client). The copy survives and A counts it kept; a claim
// that has expired by then does not save it. Also the claim key's layout: member = id,
// score = expiry, the key expiring two grace periods on, gone once the last claim is
// removed.
func TestClaimsAtomic(t *testing.T) {
	t.Parallel()
	for _, bk := range []struct {
		name  string
		start func(*testing.T) backend
	}{{"Standalone", startStandalone}, {"Cluster", startCluster}} {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.start(t)
			t.Run("Layout", func(t *testing.T) { testClaimsLayout(t, b) })
			t.Run("LiveClaimInTime", func(t *testing.T) { testClaimsAtomic(t, b, true) })
			t.Run("ExpiredClaim", func(t *testing.T) { testClaimsAtomic(t, b, false) })
		})
	}
}

// testClaimsLayout: an executor's claim on each copy it uses is its id with its expiry as
// score, in a sorted set that expires two grace periods on; its claims go when its entry
// ends.
func testClaimsLayout(t *testing.T, b backend) {
	ctx := context.Background()
	const key = "atomic:layout"
	mustDo(t, b.rdb, "SET", key, "v")
	defer b.rdb.Do(ctx, "DEL", key)
	names := b.names(t, key, 2, Copies)
	clock := newExecClock()
	e := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: "layout-A", GracePeriod: claimsGrace, Now: clock.Now})
	defer e.Close(ctx)
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := clock.Now().Add(claimsGrace).UnixMilli()
	for _, n := range names {
		if got := b.claimants(t, n.Name); !slices.Equal(got, []string{"layout-A"}) {
			t.Errorf("claim key of %s: members %q; want [layout-A]", n.Name, got)
		}
		if got := b.claimExpiry(t, n.Name, "layout-A"); got != want {
			t.Errorf("claim key of %s: ZSCORE layout-A = %d; want %d (now + grace, unix ms)", n.Name, got, want)
		}
		pttl, err := b.rdb.Do(ctx, "PTTL", claimsTestPrefix+n.Name).Int64()
		if err != nil || pttl <= claimsGrace.Milliseconds() || pttl > 2*claimsGrace.Milliseconds() {
			t.Errorf("claim key of %s: PTTL = %d, %v; want in (%d, %d]", n.Name, pttl, err, claimsGrace.Milliseconds(), 2*claimsGrace.Milliseconds())
		}
	}
	if err := e.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("Apply of an empty plan: %v", err)
	}
	for _, n := range names {
		if got, err := b.rdb.Do(ctx, "EXISTS", claimsTestPrefix+n.Name).Int(); err != nil || got != 0 {
			t.Errorf("claim key of %s after the entry ended: EXISTS %d, %v; want 0", n.Name, got, err)
		}
	}
	b.absent(t, "after the entry ended", names)
}

// testClaimsAtomic: A's entry ends; just before A's delete of each copy reaches Redis, B
// claims it, live (a real executor's Apply) or already expired (a score in the past).
func testClaimsAtomic(t *testing.T, b backend, live bool) {
	ctx := context.Background()
	key := fmt.Sprintf("atomic:%v", live)
	mustDo(t, b.rdb, "SET", key, "v")
	defer b.rdb.Do(ctx, "DEL", key)
	names := b.names(t, key, 2, Copies)
	plan := execPlan(execEntry(key, Copies, Enforce, names))
	clock := newExecClock()
	eb := newLoggedExecutor(t, ExecutorOptions{Redis: b.rdb, ID: fmt.Sprintf("atomic-B-%v", live), GracePeriod: claimsGrace, Now: clock.Now})
	defer eb.Close(ctx)
	claimed := false
	hook := func(_ context.Context, args []any) error {
		// The script's keys: the claim key, then the copy.
		deletes := len(args) > 4 && (isScript(args, deleteIfUnclaimed) && slices.ContainsFunc(names, func(n Node) bool { return args[4] == n.Name }) ||
			args[0] == "DEL" && slices.ContainsFunc(names, func(n Node) bool { return args[1] == n.Name }))
		if !deletes || claimed {
			return nil
		}
		claimed = true // A has decided: nobody claimed the copies when its entry ended
		if live {
			if err := eb.Apply(ctx, plan); err != nil {
				t.Errorf("B Apply: %v", err)
			}
			return nil
		}
		for _, n := range names {
			mustDo(t, b.rdb, "ZADD", claimsTestPrefix+n.Name, clock.Now().Add(-time.Millisecond).UnixMilli(), eb.ID())
		}
		return nil
	}
	ea := newLoggedExecutor(t, ExecutorOptions{Redis: interposer{Redis: b.rdb, before: hook}, ID: fmt.Sprintf("atomic-A-%v", live),
		GracePeriod: claimsGrace, Now: clock.Now})
	defer ea.Close(ctx)
	if err := ea.Apply(ctx, plan); err != nil {
		t.Fatalf("A Apply: %v", err)
	}
	if err := ea.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("A Apply of an empty plan: %v", err)
	}
	if !claimed {
		t.Fatalf("A's entry ended without a delete of its copies reaching Redis; want one")
	}
	if !live {
		b.absent(t, "after A's entry ended, B's claims expired", names)
		if got := ea.count(Copies, ActionCopyKeptClaimed); got != 0 {
			t.Errorf("A copy_kept_claimed: got %v; want 0", got)
		}
		return
	}
	b.exist(t, "after A's entry ended, B claiming the copies in between", names)
	if got := ea.count(Copies, ActionCopyKeptClaimed); got != float64(len(names)) {
		t.Errorf("A copy_kept_claimed: got %v; want %d", got, len(names))
	}
	// A forgot them: its rounds leave B's copies alone.
	rounds(t, clock, claimsGrace/2, 3, nil, ea, eb)
	b.exist(t, "after A's and B's rounds", names)
}
