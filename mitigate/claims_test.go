package mitigate

import (
	"cmp"
	"context"
	"errors"
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

// claimsKey, spelled out: the hash is part of what operators see in Redis.
const claimsTestKey = "{hotkeyd}claims"

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
		{"NewerFormat", testClaimsNewerFormat},
		{"PruneKeepsRenewed", testClaimsPruneKeepsRenewed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer cleanClaims(t, b)
			tc.fn(t, b)
		})
	}
}

// cleanClaims deletes the claims hash and every copy, for the next test.
func cleanClaims(t *testing.T, b backend) {
	t.Helper()
	ctx := context.Background()
	for _, k := range append(b.keys(t, "{hk:copy*"), claimsTestKey, SweepKey) {
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
// copies stay, and B's claim is gone from the hash.
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
	if got, err := b.rdb.Do(ctx, "HLEN", claimsTestKey).Int(); err != nil || got != 1 {
		t.Errorf("HLEN %s after B's Close: got %d, %v; want 1 (A's claim only)", claimsTestKey, got, err)
	}
	if err := ea.Close(ctx); err != nil {
		t.Fatalf("A Close: %v", err)
	}
	b.absent(t, "after A's Close too", names)
}

// testClaimsCrash (d): A crashes (no Close): its claim keeps its copies alive until it
// expires, then B deletes them. A copy nobody claims that appears later (a client of a
// crashed agent, a resharding) is deleted by B's periodic scan.
func testClaimsCrash(t *testing.T, b backend) {
	ctx := context.Background()
	const key, stray, grace = "claims:d:page", "claims:d:stray", claimsGrace
	names, clock, ea, eb := claimsPair(t, b, key, 3) // A crashes: never closed
	strays := b.names(t, stray, 2, Copies)
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
	b.exist(t, "after B's Recover, A's claim live", names)
	// A dies now. Its claim runs out; B's next rounds delete its copies.
	rounds(t, clock, grace/2, 4, nil, eb)
	b.absent(t, "two grace periods after A crashed", names)
	if got, err := b.rdb.Do(ctx, "HLEN", claimsTestKey).Int(); err != nil || got != 0 {
		t.Errorf("HLEN %s after A's claim expired: got %d, %v; want 0 (pruned)", claimsTestKey, got, err)
	}
	// A copy that nobody claims appears after every scan so far.
	for _, n := range strays {
		mustDo(t, b.rdb, "SET", n.Name, "stale")
	}
	// Another executor of the fleet ran the periodic scan a moment ago: B's is skipped.
	mustDo(t, b.rdb, "SET", SweepKey, "other", "PX", "600000")
	rounds(t, clock, grace/2, 30, nil, eb) // 15 grace periods: past B's periodic scan (10–12.5 after Recover)
	b.exist(t, "15 grace periods after Recover, another executor holding the scan", strays)
	mustDo(t, b.rdb, "DEL", SweepKey)
	rounds(t, clock, grace/2, 30, nil, eb) // past B's next periodic scan
	b.absent(t, "30 grace periods after Recover, the scan free", strays)
	b.rdb.Do(ctx, "DEL", key)
}

// testClaimsUnreadable (e): with the claims hash unreadable (here it holds a string), an
// executor deletes no copy that needs the claims — not at Recover, not at an entry's end,
// not at Close — and logs it; once the claims are readable again, the next round deletes
// what is left.
func testClaimsUnreadable(t *testing.T, b backend) {
	ctx := context.Background()
	const key, stray = "claims:e:page", "claims:e:stray"
	mustDo(t, b.rdb, "SET", key, "v")
	names := b.names(t, key, 2, Copies)
	strays := b.names(t, stray, 2, Copies)
	for _, n := range strays {
		mustDo(t, b.rdb, "SET", n.Name, "left")
	}
	mustDo(t, b.rdb, "SET", claimsTestKey, "not a hash")
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
	mustDo(t, b.rdb, "DEL", claimsTestKey)
	clock.Add(grace / 2)
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with the claims readable: %v", err)
	}
	b.absent(t, "after a round with the claims readable again", append(names, strays...))

	// Close with the claims unreadable deletes nothing and says so.
	if err := e.Apply(ctx, execPlan(execEntry(key, Copies, Enforce, names))); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	mustDo(t, b.rdb, "DEL", claimsTestKey)
	mustDo(t, b.rdb, "SET", claimsTestKey, "not a hash")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = e.Close(cctx)
	b.exist(t, "after Close with the claims unreadable", names)
	if !strings.Contains(e.log.String(), "left for") {
		t.Errorf("log: Close did not say it left the copies; want a line saying so")
	}
	b.rdb.Do(ctx, "DEL", key)
}

// testClaimsNewerFormat: a live claim whose names this executor cannot read (a newer
// agent's format) keeps every copy until it expires; then it is pruned.
func testClaimsNewerFormat(t *testing.T, b backend) {
	ctx := context.Background()
	const stray = "claims:f:stray"
	strays := b.names(t, stray, 2, Copies)
	for _, n := range strays {
		mustDo(t, b.rdb, "SET", n.Name, "left")
	}
	clock := newExecClock()
	const grace = claimsGrace
	exp := clock.Now().Add(grace).UnixMilli()
	mustDo(t, b.rdb, "HSET", claimsTestKey, "future-agent", strconv.FormatInt(exp, 10)+" 2 something new")
	e := newClaimsExecutor(t, b, clock, grace)
	defer e.Close(ctx)
	if err := e.Apply(ctx, execPlan()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := e.Recover(ctx); err == nil {
		t.Errorf("Recover with a claim of an unknown format: got nil; want an error")
	}
	b.exist(t, "after Recover, the claim of unknown format live", strays)
	clock.Add(grace)
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("Refresh after the claim expired: %v", err)
	}
	b.absent(t, "after the claim of unknown format expired", strays)
	if got, err := b.rdb.Do(ctx, "HEXISTS", claimsTestKey, "future-agent").Int(); err != nil || got != 0 {
		t.Errorf("HEXISTS future-agent after its expiry: got %d, %v; want 0 (pruned)", got, err)
	}
}

// testClaimsPruneKeepsRenewed: pruning deletes a claim only if it still holds the value
// read as expired; a claim renewed in between stays.
func testClaimsPruneKeepsRenewed(t *testing.T, b backend) {
	ctx := context.Background()
	old := encodeClaim(time.Unix(1, 0), []string{"{hk:copy1:1}k"})
	renewed := encodeClaim(time.Unix(1e9, 0), []string{"{hk:copy1:1}k"})
	mustDo(t, b.rdb, "HSET", claimsTestKey, "x", renewed, "y", old)
	got, err := pruneClaims.run(ctx, b.rdb, []string{claimsTestKey}, "x", old, "y", old).StringSlice()
	if err != nil || !slices.Equal(got, []string{"y"}) {
		t.Errorf("pruneClaims: got %q, %v; want [y]", got, err)
	}
	if v, err := b.rdb.Do(ctx, "HGET", claimsTestKey, "x").Text(); err != nil || v != renewed {
		t.Errorf("renewed claim after pruning: got %q, %v; want it kept", v, err)
	}
}

func TestClaimEncoding(t *testing.T) {
	exp := time.UnixMilli(1767225600123)
	for _, names := range [][]string{
		nil,
		{"{hk:copy1:5}k"},
		{"{hk:copy1:5}a b:c", "{hk:copy2:7}line\nbreak\x00", "{hk:copy3:9}12:34", "{hk:copy4:1}"},
	} {
		v := encodeClaim(exp, names)
		gotExp, got, err := decodeClaim(v)
		if err != nil || gotExp != exp.UnixMilli() || !slices.Equal(got, names) {
			t.Errorf("decodeClaim(encodeClaim(%q)) = %d, %q, %v; want %d, the names, nil", names, gotExp, got, err, exp.UnixMilli())
		}
	}
	for _, tc := range []struct {
		v         string
		noExpiry  bool
		wantError bool
	}{
		{"", true, true},
		{"soon 1 ", true, true},
		{"123", true, true},
		{"123 2 whatever", false, true},
		{"123 1 5:abc", false, true},
		{"123 1 x:abc", false, true},
		{"123 1 ", false, false},
	} {
		_, _, err := decodeClaim(tc.v)
		if (err != nil) != tc.wantError || errors.Is(err, errNoExpiry) != tc.noExpiry {
			t.Errorf("decodeClaim(%q): got %v; want error %v (no expiry %v)", tc.v, err, tc.wantError, tc.noExpiry)
		}
	}
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
