package mitigate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newTopology starts a Topology on seeds and closes it when the test ends.
func newTopology(t *testing.T, opts TopologyOptions) *Topology {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topo, err := NewTopology(ctx, opts)
	if err != nil {
		t.Fatalf("NewTopology(%v): %v", opts.Seeds, err)
	}
	t.Cleanup(func() { _ = topo.Close() })
	return topo
}

// keyInSlot returns a key whose slot is slot.
func keyInSlot(t *testing.T, prefix string, slot int) string {
	t.Helper()
	for i := 0; i < 1<<22; i++ {
		if k := prefix + strconv.Itoa(i); Slot(k) == slot {
			return k
		}
	}
	t.Fatalf("no key %q+N in slot %d", prefix, slot)
	return ""
}

// checkCovers fails t unless topo's ranges cover every slot exactly once, each on one of
// addrs, and every addr owns slots.
func checkCovers(t *testing.T, topo *Topology, addrs []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(addrs))
	if got := topo.PrimaryAddrs(); !slices.Equal(got, want) {
		t.Errorf("PrimaryAddrs() = %v; want %v", got, want)
	}
	if got := topo.Primaries(); got != len(addrs) {
		t.Errorf("Primaries() = %d; want %d", got, len(addrs))
	}
	next, total := 0, 0
	for _, r := range topo.Ranges() {
		if r.Start != next {
			t.Errorf("range %d-%d on %s starts after slot %d; want no gap", r.Start, r.End, r.Primary, next-1)
		}
		next = r.End + 1
		total += r.End - r.Start + 1
	}
	if next != SlotCount || total != SlotCount {
		t.Errorf("ranges end at %d and hold %d slots; want 16384 and 16384", next, total)
	}
	sum := 0
	for s := range SlotCount {
		p := topo.PrimaryOf(s)
		if !slices.Contains(want, p) {
			t.Fatalf("PrimaryOf(%d) = %q; want one of %v", s, p, want)
		}
	}
	for _, a := range want {
		n := topo.SlotsOf(a)
		if n == 0 {
			t.Errorf("SlotsOf(%s) = 0; want > 0", a)
		}
		sum += n
	}
	if sum != SlotCount {
		t.Errorf("slots over all primaries = %d; want 16384", sum)
	}
}

func TestTopologyCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	topo := newTopology(t, TopologyOptions{Seeds: []string{c.Addrs()[1]}})
	if !topo.IsCluster() {
		t.Fatalf("IsCluster() = false; want true")
	}
	checkCovers(t, topo, c.Addrs())

	// Every slot's owner accepts a write for it; a wrong owner would answer MOVED.
	for s := 0; s < SlotCount; s += 41 {
		k := keyInSlot(t, "cover:", s)
		if _, err := redistest.Command(topo.PrimaryOfKey(k), "", "SET", k, "1"); err != nil {
			t.Fatalf("SET %q (slot %d) on PrimaryOf = %s: %v", k, s, topo.PrimaryOf(s), err)
		}
	}
}

// TestTopologyShardsAndSlots checks that CLUSTER SHARDS and CLUSTER SLOTS (the fallback)
// give the same table, over RESP2 and RESP3.
func TestTopologyShardsAndSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		conn := NewNodeClients(&redis.Options{Protocol: proto})
		defer conn.Close()
		addr := c.Addrs()[0]
		shards, err := conn.NodeDo(ctx, addr, "CLUSTER", "SHARDS")
		if err != nil {
			t.Fatalf("RESP%d CLUSTER SHARDS: %v", proto, err)
		}
		slots, err := conn.NodeDo(ctx, addr, "CLUSTER", "SLOTS")
		if err != nil {
			t.Fatalf("RESP%d CLUSTER SLOTS: %v", proto, err)
		}
		a, err := parseShards(shards, addr)
		if err != nil {
			t.Fatalf("RESP%d parseShards: %v", proto, err)
		}
		b, err := parseSlots(slots, addr)
		if err != nil {
			t.Fatalf("RESP%d parseSlots: %v", proto, err)
		}
		if !slices.Equal(a.addrs, b.addrs) || a.owner != b.owner {
			t.Errorf("RESP%d: CLUSTER SHARDS gives primaries %v, CLUSTER SLOTS %v (or their slots differ); want the same", proto, a.addrs, b.addrs)
		}
		if want := slices.Sorted(slices.Values(c.Addrs())); !slices.Equal(a.addrs, want) {
			t.Errorf("RESP%d: primaries %v; want %v", proto, a.addrs, want)
		}
	}
}

// TestParseShardsFailedPrimary: after a failover, CLUSTER SHARDS lists the old primary
// as a master with health "fail" next to the new one, in either order, until it returns
// as a replica. The slots belong to the one online.
func TestParseShardsFailedPrimary(t *testing.T) {
	node := func(port int64, role, health string) []any {
		return []any{"id", fmt.Sprint("n", port), "port", port, "ip", "127.0.0.1", "endpoint", "127.0.0.1",
			"role", role, "replication-offset", int64(100), "health", health}
	}
	shard := func(nodes ...[]any) []any {
		ns := make([]any, len(nodes))
		for i, n := range nodes {
			ns[i] = n
		}
		return []any{"slots", []any{int64(0), int64(SlotCount - 1)}, "nodes", ns}
	}
	for _, tt := range []struct {
		name  string
		shard []any
		want  string
	}{
		{"old primary first", shard(node(7000, "master", "fail"), node(7003, "master", "online")), "127.0.0.1:7003"},
		{"old primary last", shard(node(7003, "master", "online"), node(7000, "master", "fail")), "127.0.0.1:7003"},
		{"replica online", shard(node(7000, "master", "fail"), node(7003, "replica", "online")), "127.0.0.1:7000"},
		{"both failing", shard(node(7000, "master", "fail"), node(7003, "master", "fail")), "127.0.0.1:7000"},
	} {
		st, err := parseShards([]any{tt.shard}, "127.0.0.1:7000")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !slices.Equal(st.addrs, []string{tt.want}) {
			t.Errorf("%s: primaries %v; want [%s]", tt.name, st.addrs, tt.want)
		}
	}
}

func TestTopologyStandalone(t *testing.T) {
	srv := redistest.Start(t)
	topo := newTopology(t, TopologyOptions{Seeds: []string{srv.Addr()}})
	if topo.IsCluster() {
		t.Errorf("IsCluster() = true; want false")
	}
	if got := topo.Primaries(); got != 1 {
		t.Errorf("Primaries() = %d; want 1", got)
	}
	for _, s := range []int{0, 5000, SlotCount - 1} {
		if got := topo.PrimaryOf(s); got != srv.Addr() {
			t.Errorf("PrimaryOf(%d) = %q; want %q", s, got, srv.Addr())
		}
	}
	if got, want := topo.Ranges(), []SlotRange{{0, SlotCount - 1, srv.Addr()}}; !slices.Equal(got, want) {
		t.Errorf("Ranges() = %v; want %v", got, want)
	}
	topo.ReportMoved(7, "127.0.0.1:1")
	if got := topo.PrimaryOf(7); got != srv.Addr() {
		t.Errorf("after a MOVED report, standalone PrimaryOf(7) = %q; want %q", got, srv.Addr())
	}
	if err := topo.Refresh(context.Background()); err != nil || topo.IsCluster() {
		t.Errorf("Refresh() = %v, IsCluster %v; want nil, false", err, topo.IsCluster())
	}
}

func TestNewTopologyErrors(t *testing.T) {
	dead := deadAddr(t)
	tests := []struct {
		opts TopologyOptions
		want string
	}{
		{TopologyOptions{}, "no seed addresses"},
		{TopologyOptions{Seeds: []string{"localhost"}}, `seed "localhost": want "host:port"`},
		{TopologyOptions{Seeds: []string{dead}, RefreshInterval: -time.Second}, "refresh interval -1s: must be positive"},
		{TopologyOptions{Seeds: []string{dead}, MinRefreshGap: -1}, "min refresh gap -1ns"},
		{TopologyOptions{Seeds: []string{dead}, RefreshTimeout: -1}, "refresh timeout -1ns"},
		{TopologyOptions{Seeds: []string{dead}}, "no node answered: " + dead},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := NewTopology(ctx, tt.opts)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewTopology(%+v) error = %v; want one containing %q", tt.opts, err, tt.want)
		}
	}
}

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestTopologyFromRanges(t *testing.T) {
	topo, err := TopologyFromRanges([]SlotRange{{0, 99, "b:1"}, {100, 16383, "a:1"}, {50, 60, "c:1"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		slot int
		want string
	}{{0, "b:1"}, {49, "b:1"}, {50, "c:1"}, {60, "c:1"}, {61, "b:1"}, {100, "a:1"}, {16383, "a:1"}, {-1, ""}, {16384, ""}}
	for _, tt := range tests {
		if got := topo.PrimaryOf(tt.slot); got != tt.want {
			t.Errorf("PrimaryOf(%d) = %q; want %q", tt.slot, got, tt.want)
		}
	}
	if got, want := topo.Ranges(), []SlotRange{{0, 49, "b:1"}, {50, 60, "c:1"}, {61, 99, "b:1"}, {100, 16383, "a:1"}}; !slices.Equal(got, want) {
		t.Errorf("Ranges() = %v; want %v", got, want)
	}
	if got := topo.SlotsOf("b:1"); got != 89 {
		t.Errorf("SlotsOf(b:1) = %d; want 89", got)
	}

	partial, err := TopologyFromRanges([]SlotRange{{0, 9, "a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := partial.PrimaryOf(10); got != "" {
		t.Errorf("unowned PrimaryOf(10) = %q; want \"\"", got)
	}

	for _, tt := range []struct {
		r    []SlotRange
		want string
	}{
		{nil, "no slot has a primary"},
		{[]SlotRange{{5, 4, "a:1"}}, "slot range 5-4: want 0 ≤ start ≤ end ≤ 16383"},
		{[]SlotRange{{0, 16384, "a:1"}}, "slot range 0-16384"},
		{[]SlotRange{{0, 1, ""}}, "slot range 0-1: no primary address"},
	} {
		if _, err := TopologyFromRanges(tt.r); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("TopologyFromRanges(%v) error = %v; want one containing %q", tt.r, err, tt.want)
		}
	}
}

func TestParseRedirect(t *testing.T) {
	tests := []struct {
		err  error
		want Redirect
		ok   bool
	}{
		{errors.New("MOVED 3999 127.0.0.1:6381"), Redirect{Slot: 3999, Addr: "127.0.0.1:6381"}, true},
		{errors.New("-MOVED 3999 127.0.0.1:6381"), Redirect{Slot: 3999, Addr: "127.0.0.1:6381"}, true},
		{errors.New("ASK 0 10.0.0.1:7000"), Redirect{Ask: true, Slot: 0, Addr: "10.0.0.1:7000"}, true},
		{errors.New("MOVED 16383 [::1]:7000"), Redirect{Slot: 16383, Addr: "[::1]:7000"}, true},
		{errors.New("MOVED 12 :6380"), Redirect{Slot: 12, Addr: ":6380"}, true},
		{fmt.Errorf("wrapped: %w", errors.New("x")), Redirect{}, false},
		{nil, Redirect{}, false},
		{errors.New("MOVED 16384 127.0.0.1:1"), Redirect{}, false},
		{errors.New("MOVED -1 127.0.0.1:1"), Redirect{}, false},
		{errors.New("MOVED x 127.0.0.1:1"), Redirect{}, false},
		{errors.New("MOVED 1 127.0.0.1"), Redirect{}, false},
		{errors.New("MOVED 1 a:b"), Redirect{}, false},
		{errors.New("MOVED 1 127.0.0.1:0"), Redirect{}, false},
		{errors.New("MOVED 1 127.0.0.1:65536"), Redirect{}, false},
		{errors.New("MOVED 1 127.0.0.1:+80"), Redirect{}, false},
		{errors.New("MOVED 1"), Redirect{}, false},
		{errors.New("ERR MOVED 1 127.0.0.1:1"), Redirect{}, false},
		{errors.New("CROSSSLOT Keys in request don't hash to the same slot"), Redirect{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseRedirect(tt.err)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRedirect(%v) = %+v, %v; want %+v, %v", tt.err, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseRedirect(f *testing.F) {
	for _, s := range []string{"MOVED 3999 127.0.0.1:6381", "-ASK 1 :1", "MOVED 1", "MOVED 99999999999999999999 a:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, ok := ParseRedirect(errors.New(s))
		if !ok {
			if r != (Redirect{}) {
				t.Fatalf("ParseRedirect(%q) = %+v, false; want the zero Redirect", s, r)
			}
			return
		}
		if r.Slot < 0 || r.Slot >= SlotCount || r.Addr == "" {
			t.Fatalf("ParseRedirect(%q) = %+v, true; want a slot in range and an address", s, r)
		}
		// The address is one field of the reply, and the redirect survives being written
		// the way Redis writes it.
		if !slices.Contains(strings.Fields(s), r.Addr) {
			t.Fatalf("ParseRedirect(%q) = %+v; address is not a field of the reply", s, r)
		}
		kind := "MOVED"
		if r.Ask {
			kind = "ASK"
		}
		canon := fmt.Sprintf("%s %d %s", kind, r.Slot, r.Addr)
		if again, ok := ParseRedirect(errors.New(canon)); !ok || again != r {
			t.Fatalf("ParseRedirect(%q) = %+v, but its canonical form %q gives %+v, %v", s, r, canon, again, ok)
		}
	})
}

// ids returns each node's cluster node ID by address.
func ids(t *testing.T, c *redistest.Cluster) map[string]string {
	t.Helper()
	m := make(map[string]string)
	for _, a := range c.Addrs() {
		id, err := redistest.Command(a, "", "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("%s CLUSTER MYID: %v", a, err)
		}
		m[a] = id
	}
	return m
}

// TestTopologyReshard moves a slot for real and checks MOVED reports, Refresh and Run.
func TestTopologyReshard(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	seeds := []string{c.Addrs()[0]}
	stale := newTopology(t, TopologyOptions{Seeds: seeds})
	polled := newTopology(t, TopologyOptions{Seeds: seeds, RefreshInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { polled.Run(ctx); close(done) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of its context's end")
		}
	}()

	from := c.Addrs()[0]
	var to string
	var slot int
	for _, r := range stale.Ranges() {
		if r.Primary == from {
			slot = (r.Start + r.End) / 2
		}
	}
	for _, a := range c.Addrs() {
		if a != from {
			to = a
			break
		}
	}
	if got := stale.PrimaryOf(slot); got != from {
		t.Fatalf("before the move PrimaryOf(%d) = %q; want %q", slot, got, from)
	}
	key := keyInSlot(t, "moving:", slot)
	if _, err := redistest.Command(from, "", "SET", key, "v"); err != nil {
		t.Fatalf("SET %q on %s: %v", key, from, err)
	}
	c.MoveSlot(t, slot, from, to)

	// The stale topology still routes to the old owner, which answers MOVED.
	_, err := redistest.Command(stale.PrimaryOfKey(key), "", "GET", key)
	if r, ok := ParseRedirect(err); !ok || r.Ask || r.Slot != slot || r.Addr != to {
		t.Fatalf("GET %q on the old owner: error %v; want MOVED %d %s", key, err, slot, to)
	}
	if !stale.NoteRedirect(err) {
		t.Fatalf("NoteRedirect(%v) = false; want true", err)
	}
	if got := stale.PrimaryOf(slot); got != to {
		t.Errorf("right after the MOVED report PrimaryOf(%d) = %q; want %q", slot, got, to)
	}
	if got, _ := redistest.Command(stale.PrimaryOfKey(key), "", "GET", key); got != "v" {
		t.Errorf("GET %q on the reported owner = %q; want \"v\" (migrated)", key, got)
	}

	// A topology that saw no MOVED learns the move from Refresh.
	fresh := newTopology(t, TopologyOptions{Seeds: seeds})
	fresh.table.Store(stale.table.Load()) // start from a table that has the slot on its new owner…
	fresh.ReportMoved(slot, from)         // …then put it back on the old one, as if stale
	if got := fresh.PrimaryOf(slot); got != from {
		t.Fatalf("after ReportMoved(%d, %s) PrimaryOf = %q; want %q", slot, from, got, from)
	}
	if err := fresh.Refresh(context.Background()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if got := fresh.PrimaryOf(slot); got != to {
		t.Errorf("after Refresh PrimaryOf(%d) = %q; want %q", slot, got, to)
	}
	checkCovers(t, fresh, c.Addrs())

	// Run's periodic refresh finds the move too.
	waitOwner(t, polled, slot, to, 5*time.Second)
}

// TestTopologyRunAfterMoved checks that a MOVED report makes Run refresh long before its
// interval: a bogus report is corrected by the refresh it triggers.
func TestTopologyRunAfterMoved(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var errs []error
	var mu sync.Mutex // guards errs
	topo := newTopology(t, TopologyOptions{Seeds: c.Addrs(), RefreshInterval: time.Hour, MinRefreshGap: 10 * time.Millisecond,
		OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { topo.Run(ctx); close(done) }()
	owner := topo.PrimaryOf(100)
	bogus := deadAddr(t)
	topo.ReportMoved(100, bogus)
	if got := topo.PrimaryOf(100); got != bogus && got != owner {
		t.Fatalf("after ReportMoved(100, %s) PrimaryOf(100) = %q; want %q (or already refreshed to %q)", bogus, got, bogus, owner)
	}
	waitOwner(t, topo, 100, owner, 5*time.Second)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("Run did not return within 5s of its context's end")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 0 || topo.Err() != nil {
		t.Errorf("refresh errors %v, Err() = %v; want none", errs, topo.Err())
	}
}

func waitOwner(t *testing.T, topo *Topology, slot int, want string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for topo.PrimaryOf(slot) != want {
		if time.Now().After(deadline) {
			t.Fatalf("PrimaryOf(%d) = %q after %v; want %q", slot, topo.PrimaryOf(slot), limit, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTopologyConcurrent reads while refreshes and MOVED reports swap tables (run with -race).
func TestTopologyConcurrent(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	topo := newTopology(t, TopologyOptions{Seeds: c.Addrs()})
	addrs := c.Addrs()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if p := topo.PrimaryOf((i * 7919) % SlotCount); !slices.Contains(addrs, p) {
					t.Errorf("reader %d: PrimaryOf = %q; want one of %v", g, p, addrs)
					return
				}
				_ = topo.Primaries()
			}
		})
	}
	for i := range 20 {
		if err := topo.Refresh(context.Background()); err != nil {
			t.Errorf("Refresh: %v", err)
		}
		topo.ReportMoved(i, addrs[i%3])
	}
	close(stop)
	wg.Wait()
}

func TestPrimaryOfAllocs(t *testing.T) {
	topo, _ := TopologyFromRanges([]SlotRange{{0, 8000, "127.0.0.1:7000"}, {8001, 16383, "127.0.0.1:7001"}})
	var sink int
	if a := testing.AllocsPerRun(1000, func() { sink += len(topo.PrimaryOf(9000)) + len(topo.PrimaryOfKey("{u:1}x")) }); a != 0 {
		t.Errorf("PrimaryOf: %v allocations per call; want 0", a)
	}
	_ = sink
}

var primarySink string

func BenchmarkPrimaryOf(b *testing.B) {
	topo, _ := TopologyFromRanges([]SlotRange{{0, 5460, "127.0.0.1:7000"}, {5461, 10922, "127.0.0.1:7001"}, {10923, 16383, "127.0.0.1:7002"}})
	b.Run("slot", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			primarySink = topo.PrimaryOf(i & (SlotCount - 1))
			i++
		}
	})
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			primarySink = topo.PrimaryOfKey("{user:1000}profile")
		}
	})
	// naive: a map from slot to address behind a RWMutex, as a baseline.
	b.Run("naive-rwmutex-map", func(b *testing.B) {
		var mu sync.RWMutex // guards m
		m := make(map[int]string, SlotCount)
		for s := range SlotCount {
			m[s] = topo.PrimaryOf(s)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			mu.RLock()
			primarySink = m[i&(SlotCount-1)]
			mu.RUnlock()
			i++
		}
	})
}

// TestTopologyRunSchedule checks Run's timing with a fake clock: a refresh every
// RefreshInterval, one refresh (not one per report) at most MinRefreshGap after a burst of
// MOVED reports, failed refreshes reported to OnError with the old table kept, and a
// prompt return when the context ends. The connection fails every command, so no reply
// of Redis is imitated.
func TestTopologyRunSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex // guards failures
		failures := 0
		seed := "127.0.0.1:1"
		topo, _ := TopologyFromRanges([]SlotRange{{0, SlotCount - 1, seed}})
		topo.opts = TopologyOptions{
			Seeds:           []string{seed},
			RefreshInterval: 10 * time.Second,
			MinRefreshGap:   time.Second,
			RefreshTimeout:  time.Second,
			Conn: NodeCommanderFunc(func(ctx context.Context, addr string, args ...any) (any, error) {
				return nil, errors.New("dial tcp " + addr + ": connection refused")
			}),
			OnError: func(err error) { mu.Lock(); failures++; mu.Unlock() },
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return failures }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { topo.Run(ctx); close(done) }()

		time.Sleep(35 * time.Second)
		synctest.Wait()
		if got := count(); got != 3 {
			t.Errorf("refreshes in 35s at a 10s interval: %d; want 3", got)
		}
		// 5s after the last refresh the gap has passed: a report refreshes at once.
		topo.ReportMoved(5, "127.0.0.1:2")
		synctest.Wait()
		if got := count(); got != 4 {
			t.Errorf("refreshes right after a MOVED report 5s after the last refresh: %d; want 4 (one more, at once)", got)
		}
		// Right after that refresh, a report waits out the gap.
		topo.ReportMoved(6, "127.0.0.1:2")
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if got := count(); got != 4 {
			t.Errorf("refreshes 0.5s after a refresh and a MOVED report: %d; want 4 (the gap is 1s)", got)
		}
		time.Sleep(600 * time.Millisecond)
		synctest.Wait()
		if got := count(); got != 5 {
			t.Errorf("refreshes 1.1s after a refresh and a MOVED report: %d; want 5", got)
		}
		// A burst during the gap coalesces: one refresh when the gap ends, and at most one
		// more for reports that came after Run took the first.
		for i := range 20 {
			topo.ReportMoved(7+i, "127.0.0.1:2")
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := count(); got < 6 || got > 7 {
			t.Errorf("refreshes after a burst of 20 MOVED reports: %d; want 6 or 7 (coalesced)", got)
		}
		if got := topo.PrimaryOf(5); got != "127.0.0.1:2" {
			t.Errorf("after failed refreshes PrimaryOf(5) = %q; want the reported 127.0.0.1:2 kept", got)
		}
		if err := topo.Err(); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Err() = %v; want the last refresh's connection refused", err)
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Errorf("Run still running after its context ended")
		}
	})
}

// TestReportMoved checks that a MOVED report leaves the same table as building the moved
// layout from scratch, including a new primary and a primary that loses its last slot.
func TestReportMoved(t *testing.T) {
	base := []SlotRange{{0, 9, "a:1"}, {10, 10, "b:1"}, {11, 16383, "c:1"}}
	tests := []struct {
		slot int
		addr string
		want []SlotRange
	}{
		{5, "c:1", []SlotRange{{0, 4, "a:1"}, {5, 5, "c:1"}, {6, 9, "a:1"}, {10, 10, "b:1"}, {11, 16383, "c:1"}}},
		{10, "a:1", []SlotRange{{0, 10, "a:1"}, {11, 16383, "c:1"}}},                               // b:1 loses its last slot
		{0, "d:1", []SlotRange{{0, 0, "d:1"}, {1, 9, "a:1"}, {10, 10, "b:1"}, {11, 16383, "c:1"}}}, // a new primary
		{3, "a:1", base},      // already there
		{3, ":6380", base},    // no host: refresh only
		{3, "nonsense", base}, // not an address
		{-1, "c:1", base},     // no such slot
		{16384, "c:1", base},  // no such slot
	}
	for _, tt := range tests {
		topo, _ := TopologyFromRanges(base)
		topo.ReportMoved(tt.slot, tt.addr)
		want, _ := TopologyFromRanges(tt.want)
		got := topo.table.Load()
		if w := want.table.Load(); !slices.Equal(got.addrs, w.addrs) || !slices.Equal(got.slots, w.slots) || got.owner != w.owner {
			t.Errorf("ReportMoved(%d, %q): ranges %v, primaries %v with %v slots; want %v, %v, %v",
				tt.slot, tt.addr, topo.Ranges(), got.addrs, got.slots, tt.want, w.addrs, w.slots)
		}
	}
}
