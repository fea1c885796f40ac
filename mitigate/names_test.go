package mitigate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var _ Namer = (*Topology)(nil)

// nameKeys are keys of every awkward shape.
var nameKeys = []string{
	"score:match42",
	"{user:1}profile",
	"{user:1}",
	"pre{tag}post",
	"foo{}{bar}",
	"open{only",
	"close}only",
	"}{",
	"{",
	"}",
	"",
	"ключ:日本:{é}",
	string([]byte{0, 1, 2, '{', 0xff, '}', '\r', '\n', 0x80}),
	strings.Repeat("\xfe{x}", 300),
	"{hk:copy1:7}score:match42", // a key that looks like one of ours
}

func threePrimaries(t testing.TB) *Topology {
	t.Helper()
	topo, err := TopologyFromRanges([]SlotRange{{0, 5460, "127.0.0.1:7000"}, {5461, 10922, "127.0.0.1:7001"}, {10923, 16383, "127.0.0.1:7002"}})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// checkNames fails t unless nodes are n well-formed names of key on topo: the key
// verbatim after our tag, ParseName reading them back, the slot and primary right, all
// names distinct, primaries distinct when n ≤ primaries and otherwise spread evenly.
func checkNames(t *testing.T, topo *Topology, key string, n int, kind Kind, nodes []Node) {
	t.Helper()
	if len(nodes) != n {
		t.Fatalf("Names(%q, %d, %s): %d names; want %d", key, n, kind, len(nodes), n)
	}
	perPrimary := map[string]int{}
	for i, nd := range nodes {
		k, idx, orig, ok := ParseName(nd.Name)
		if !ok || k != kind || idx != i+1 || orig != key {
			t.Errorf("ParseName(%q) = %s, %d, %q, %v; want %s, %d, %q, true", nd.Name, k, idx, orig, ok, kind, i+1, key)
		}
		if !strings.HasSuffix(nd.Name, key) || nd.Name == key {
			t.Errorf("name %q: want the key %q verbatim at its end", nd.Name, key)
		}
		if slices.ContainsFunc(nodes[:i], func(o Node) bool { return o.Name == nd.Name }) {
			t.Errorf("name %q listed twice", nd.Name)
		}
		if topo.IsCluster() {
			if got := Slot(nd.Name); got != nd.Slot {
				t.Errorf("name %q: Slot %d; want %d (its hash)", nd.Name, nd.Slot, got)
			}
			if got := topo.PrimaryOf(nd.Slot); got != nd.Primary || got == "" {
				t.Errorf("name %q: Primary %q; want %q (owner of slot %d)", nd.Name, nd.Primary, got, nd.Slot)
			}
		} else if nd.Slot != 0 || nd.Primary != "" {
			t.Errorf("standalone name %q: slot %d, primary %q; want 0 and \"\"", nd.Name, nd.Slot, nd.Primary)
		}
		perPrimary[nd.Primary]++
	}
	p := topo.Primaries()
	lo, hi := n/p, (n+p-1)/p
	if !topo.IsCluster() {
		lo, hi = n, n
	}
	for addr, c := range perPrimary {
		if c < lo || c > hi {
			t.Errorf("Names(%q, %d, %s): %d names on %q; want %d to %d (spread evenly over %d primaries): %v", key, n, kind, c, addr, lo, hi, p, nodes)
		}
	}
	if n <= p && len(perPrimary) != n {
		t.Errorf("Names(%q, %d, %s): on %d primaries; want %d different ones: %v", key, n, kind, len(perPrimary), n, nodes)
	}
}

func TestNamesPure(t *testing.T) {
	topo := threePrimaries(t)
	for _, kind := range []Kind{Copies, ShardedCounter} {
		for _, key := range nameKeys {
			for n := 1; n <= 7; n++ {
				nodes, err := topo.Names(key, n, kind)
				if err != nil {
					t.Fatalf("Names(%q, %d, %s): %v", key, n, kind, err)
				}
				checkNames(t, topo, key, n, kind, nodes)
				again, _ := topo.Names(key, n, kind)
				if !slices.Equal(nodes, again) {
					t.Errorf("Names(%q, %d, %s) twice: %v then %v; want the same", key, n, kind, nodes, again)
				}
				// Fewer copies than primaries avoid the key's own primary.
				if n < topo.Primaries() {
					own := topo.PrimaryOfKey(key)
					for _, nd := range nodes {
						if nd.Primary == own {
							t.Errorf("Names(%q, %d, %s): %q on the key's own primary %s; want another", key, n, kind, nd.Name, own)
						}
					}
				}
				// The first names of a larger n are the names of a smaller n.
				if n > 1 {
					fewer, _ := topo.Names(key, n-1, kind)
					if !slices.Equal(fewer, nodes[:n-1]) {
						t.Errorf("Names(%q, %d, %s) = %v; want it to start with Names(…, %d) = %v", key, n, kind, nodes, n-1, fewer)
					}
				}
			}
		}
	}
}

func TestNamesKindsDiffer(t *testing.T) {
	topo := threePrimaries(t)
	c, _ := topo.Names("score:match42", 3, Copies)
	s, _ := topo.Names("score:match42", 3, ShardedCounter)
	for i := range c {
		if !strings.HasPrefix(c[i].Name, "{hk:copy") || !strings.HasPrefix(s[i].Name, "{hk:sub") {
			t.Errorf("names %q and %q; want prefixes {hk:copy and {hk:sub", c[i].Name, s[i].Name)
		}
	}
}

func TestNamesErrors(t *testing.T) {
	topo := threePrimaries(t)
	tests := []struct {
		n    int
		kind Kind
		want string
	}{
		{0, Copies, `names for "k": n 0: must be between 1 and 256`},
		{-1, ShardedCounter, "n -1: must be between 1 and 256"},
		{MaxNames + 1, Copies, "n 257"},
		{2, L1, `kind "l1" has no Redis keys; use "copies" or "sharded_counter"`},
		{2, Kind("bogus"), `kind "bogus"`},
	}
	for _, tt := range tests {
		if _, err := topo.Names("k", tt.n, tt.kind); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Names(k, %d, %q) error = %v; want one containing %q", tt.n, tt.kind, err, tt.want)
		}
	}
}

// TestNamesStable checks that names change only when their slot changes owner.
func TestNamesStable(t *testing.T) {
	topo := threePrimaries(t)
	before, _ := topo.Names("score:match42", 3, Copies)
	// Move a slot that none of the names uses, nor the salts tried before them.
	tried := map[int]bool{}
	for i, nd := range before {
		buf := []byte(nil)
		for salt := uint64(fnv32("score:match42") % 100000); ; salt++ {
			buf = appendTag(buf[:0], copyTag, i+1, salt)
			tried[SlotBytes(buf)] = true
			if string(buf)+"score:match42" == nd.Name {
				break
			}
		}
	}
	moved := -1
	for s := 0; s < SlotCount; s++ {
		if !tried[s] && topo.PrimaryOf(s) == before[0].Primary {
			moved = s
			break
		}
	}
	topo.ReportMoved(moved, before[1].Primary)
	after, _ := topo.Names("score:match42", 3, Copies)
	if !slices.Equal(before, after) {
		t.Errorf("after moving unrelated slot %d: names %v; want unchanged %v", moved, after, before)
	}
	// Move the slot of copy 1 away: that name changes, staying on its primary; the others stay.
	topo.ReportMoved(before[0].Slot, before[1].Primary)
	after, _ = topo.Names("score:match42", 3, Copies)
	if after[0].Name == before[0].Name || after[0].Primary != before[0].Primary {
		t.Errorf("after moving slot %d of %q: copy 1 = %+v; want a new name on %s", before[0].Slot, before[0].Name, after[0], before[0].Primary)
	}
	if !slices.Equal(after[1:], before[1:]) {
		t.Errorf("after moving copy 1's slot: copies 2-3 = %v; want unchanged %v", after[1:], before[1:])
	}
}

// TestNamesSpreadOverKeys checks that different keys use different primaries.
func TestNamesSpreadOverKeys(t *testing.T) {
	topo := threePrimaries(t)
	count := map[string]int{}
	slots := map[int]bool{}
	const keys = 3000
	for i := range keys {
		nodes, err := topo.Names(fmt.Sprintf("{same-tag}item:%d", i), 1, Copies)
		if err != nil {
			t.Fatal(err)
		}
		count[nodes[0].Primary]++
		slots[nodes[0].Slot] = true
	}
	for _, a := range topo.PrimaryAddrs() {
		// Every key shares one slot (one tag), so copy 1 avoids that primary: the other two split.
		if a == topo.PrimaryOfKey("{same-tag}") {
			if count[a] != 0 {
				t.Errorf("%d first copies on the keys' own primary %s; want 0", count[a], a)
			}
			continue
		}
		if c := count[a]; c < keys*4/10 {
			t.Errorf("%d of %d first copies on %s; want at least 40%% (rendezvous spreads keys): %v", c, keys, a, count)
		}
	}
	if len(slots) < keys/10 {
		t.Errorf("first copies of %d keys use %d slots; want at least %d", keys, len(slots), keys/10)
	}
}

// TestNamesTinyPrimary checks that a primary that owns one slot still gets its names.
func TestNamesTinyPrimary(t *testing.T) {
	topo, err := TopologyFromRanges([]SlotRange{{0, 16382, "127.0.0.1:7000"}, {16383, 16383, "127.0.0.1:7001"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []Kind{Copies, ShardedCounter} {
		nodes, err := topo.Names("score:match42", 2, kind)
		if err != nil {
			t.Fatalf("Names: %v", err)
		}
		checkNames(t, topo, "score:match42", 2, kind, nodes)
	}
}

// TestSaltsReachEverySlot checks that the salt search can land on any slot, so no primary
// is ever unreachable.
func TestSaltsReachEverySlot(t *testing.T) {
	if testing.Short() {
		t.Skip("scans millions of salts")
	}
	for _, tag := range []string{copyTag, subTag} {
		for _, i := range []int{1, 2, 3, 64, MaxNames} {
			var seen [SlotCount]bool
			left := SlotCount
			buf := make([]byte, 0, 64)
			// the worst start: the search begins anywhere in [0, 100000)
			for salt := uint64(99999); salt < 99999+maxSalts && left > 0; salt++ {
				buf = appendTag(buf[:0], tag, i, salt)
				if s := SlotBytes(buf); !seen[s] {
					seen[s] = true
					left--
				}
			}
			if left > 0 {
				t.Errorf("tag %s%d: %d slots never reached in %d salts; want 0", tag, i, left, maxSalts)
			}
		}
	}
}

func TestNamesStandalone(t *testing.T) {
	srv := redistest.Start(t)
	topo := newTopology(t, TopologyOptions{Seeds: []string{srv.Addr()}})
	for _, kind := range []Kind{Copies, ShardedCounter} {
		for _, key := range nameKeys {
			nodes, err := topo.Names(key, 3, kind)
			if err != nil {
				t.Fatalf("standalone Names(%q, 3, %s): %v", key, kind, err)
			}
			checkNames(t, topo, key, 3, kind, nodes)
			for _, nd := range nodes {
				if _, err := redistest.Command(srv.Addr(), "", "SET", nd.Name, "v"); err != nil {
					t.Errorf("SET %q: %v", nd.Name, err)
				}
			}
		}
	}
}

// TestNamesCluster writes every name on the primary it names, through a plain connection
// to that primary: a wrong primary answers MOVED and fails the test.
func TestNamesCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	topo := newTopology(t, TopologyOptions{Seeds: c.Addrs()})
	ctx := context.Background()
	clients := map[string]*redis.Client{}
	for _, a := range c.Addrs() {
		clients[a] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		defer clients[a].Close()
	}
	keys := append(slices.Clone(nameKeys), strings.Repeat("\x00\xff{}", 1000))
	for _, kind := range []Kind{Copies, ShardedCounter} {
		for _, key := range keys {
			for n := 1; n <= 5; n++ {
				nodes, err := topo.Names(key, n, kind)
				if err != nil {
					t.Fatalf("Names(%q, %d, %s): %v", key, n, kind, err)
				}
				checkNames(t, topo, key, n, kind, nodes)
				for _, nd := range nodes {
					cl := clients[nd.Primary]
					if cl == nil {
						t.Fatalf("name %q on %q; want one of %v", nd.Name, nd.Primary, c.Addrs())
					}
					if err := cl.Set(ctx, nd.Name, "v", 0).Err(); err != nil {
						t.Errorf("SET %q on %s (slot %d): %v", nd.Name, nd.Primary, nd.Slot, err)
					}
					if got, err := cl.ClusterKeySlot(ctx, nd.Name).Result(); err != nil || int(got) != nd.Slot {
						t.Errorf("CLUSTER KEYSLOT %q = %d, %v; want %d", nd.Name, got, err, nd.Slot)
					}
				}
			}
		}
	}
}

var namesSink []Node

func BenchmarkNames(b *testing.B) {
	topo := threePrimaries(b)
	b.ReportAllocs()
	for b.Loop() {
		namesSink, _ = topo.Names("{user:1}profile", 3, Copies)
	}
}
