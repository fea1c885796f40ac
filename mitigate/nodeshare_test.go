package mitigate

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

func TestNodeShares(t *testing.T) {
	const a, b, c = "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"
	cluster, err := TopologyFromRanges([]SlotRange{{0, 5460, a}, {5461, 10922, b}, {10923, 16383, c}})
	if err != nil {
		t.Fatal(err)
	}
	partial, err := TopologyFromRanges([]SlotRange{{0, 8191, a}})
	if err != nil {
		t.Fatal(err)
	}
	standalone := StandaloneTopology("127.0.0.1:6379")

	// Keys with known slots (Redis agrees: CLUSTER KEYSLOT): "foo" on c, "bar" and
	// "hello" on a, inB on b.
	slotOf := map[string]int{"foo": 12182, "bar": 5061, "hello": 866}
	for k, want := range slotOf {
		if got := Slot(k); got != want {
			t.Fatalf("Slot(%q) = %d; want %d", k, got, want)
		}
	}
	inB := keyInSlot(t, "b:", 6000)

	tests := []struct {
		name     string
		keys     []KeyLoad
		unplaced float64
		topo     *Topology
		perNode  int
		want     []NodeLoad
	}{
		{
			name: "lopsided: one hot key makes its primary heaviest",
			keys: []KeyLoad{{"foo", 900}, {"bar", 60}, {"hello", 40}},
			topo: cluster, perNode: 2,
			want: []NodeLoad{
				{Primary: c, Rate: 900, Share: 0.9, Keys: []HeavyKey{{"foo", 12182, 900, 1}}},
				{Primary: a, Rate: 100, Share: 0.1, Keys: []HeavyKey{{"bar", 5061, 60, 0.6}, {"hello", 866, 40, 0.4}}},
				{Primary: b, Keys: nil},
			},
		},
		{
			name: "perNode limits the drill-down, duplicates add up, bad rates are skipped",
			keys: []KeyLoad{{"bar", 10}, {"hello", 30}, {"bar", 30}, {"foo", -5}, {"foo", math.NaN()}, {inB, 20}, {"x", math.Inf(1)}, {"y", 0}},
			topo: cluster, perNode: 1,
			want: []NodeLoad{
				{Primary: a, Rate: 70, Share: 70.0 / 90, Keys: []HeavyKey{{"bar", 5061, 40, 40.0 / 70}}},
				{Primary: b, Rate: 20, Share: 20.0 / 90, Keys: []HeavyKey{{inB, 6000, 20, 1}}},
				{Primary: c},
			},
		},
		{
			name: "ties by key; perNode 0 lists no keys",
			keys: []KeyLoad{{"hello", 5}, {"bar", 5}},
			topo: cluster, perNode: 0,
			want: []NodeLoad{{Primary: a, Rate: 10, Share: 1}, {Primary: b}, {Primary: c}},
		},
		{
			name: "ties by key in the drill-down",
			keys: []KeyLoad{{"hello", 5}, {"bar", 5}},
			topo: cluster, perNode: 5,
			want: []NodeLoad{{Primary: a, Rate: 10, Share: 1, Keys: []HeavyKey{{"bar", 5061, 5, 0.5}, {"hello", 866, 5, 0.5}}}, {Primary: b}, {Primary: c}},
		},
		{
			name: "no load: every primary at 0",
			keys: nil, topo: cluster, perNode: 3,
			want: []NodeLoad{{Primary: a}, {Primary: b}, {Primary: c}},
		},
		{
			name: "unowned slots gather under the empty primary",
			keys: []KeyLoad{{"foo", 30}, {"bar", 10}},
			topo: partial, perNode: 1,
			want: []NodeLoad{
				{Primary: "", Rate: 30, Share: 0.75, Keys: []HeavyKey{{"foo", 12182, 30, 1}}},
				{Primary: a, Rate: 10, Share: 0.25, Keys: []HeavyKey{{"bar", 5061, 10, 1}}},
			},
		},
		{
			name: "unplaced load counts in the total: a sliver of it is no 100 %",
			keys: []KeyLoad{{"foo", 1}}, unplaced: 99,
			topo: standalone, perNode: 1,
			want: []NodeLoad{{Primary: "127.0.0.1:6379", Rate: 1, Share: 0.01, Keys: []HeavyKey{{"foo", 12182, 1, 1}}}},
		},
		{
			name: "standalone: one node holds everything",
			keys: []KeyLoad{{"foo", 1}, {"bar", 3}},
			topo: standalone, perNode: 1,
			want: []NodeLoad{{Primary: "127.0.0.1:6379", Rate: 4, Share: 1, Keys: []HeavyKey{{"bar", 5061, 3, 0.75}}}},
		},
	}
	for _, tt := range tests {
		got := NodeShares(tt.keys, tt.unplaced, tt.topo, tt.perNode)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.name, fmtLoads(got), fmtLoads(tt.want))
		}
	}
}

func fmtLoads(ls []NodeLoad) string {
	s := ""
	for _, l := range ls {
		s += fmt.Sprintf("{%s %g %.4f %v} ", l.Primary, l.Rate, l.Share, l.Keys)
	}
	return s
}
