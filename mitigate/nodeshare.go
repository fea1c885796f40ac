package mitigate

import (
	"cmp"
	"math"
	"slices"
)

// KeyLoad is one sampled key and its rate (requests per second, or any unit, as long as
// every key uses the same one).
type KeyLoad struct {
	Key  string
	Rate float64
}

// NodeLoad is one primary's part of the sampled load: what hotkeyd_node_share shows, with
// the keys behind it.
type NodeLoad struct {
	// Primary is the primary's address; "" gathers keys whose slot no primary owns.
	Primary string
	// Rate is the sum of the rates of the keys it owns.
	Rate float64
	// Share is Rate over the total rate of all keys, in [0, 1]; 0 when the total is 0.
	Share float64
	// Keys are its heaviest keys, heaviest first, at most the limit NodeShares was given.
	Keys []HeavyKey
}

// HeavyKey is one of a primary's heaviest keys.
type HeavyKey struct {
	Key  string
	Slot int
	Rate float64
	// Share is Rate over the primary's Rate.
	Share float64
}

// NodeShares estimates each primary's share of the load from sampled keys and the slot
// table of topo: the lopsided cluster an operator sees, drilled down to the key. Keys with
// the same name add up; rates that are not positive finite numbers are skipped. Every
// primary of topo appears, even with no load, and a "" entry appears when some keys fall
// on slots no primary owns. The result is ordered by Rate, heaviest first, then by
// address; each entry lists at most perNode of its heaviest keys (ties by key), none when
// perNode ≤ 0. unplaced is load that no primary can be named for (keys whose slot is not
// known, such as truncated ones): it is in no entry, and the shares are of the total with
// it, so that a primary with a sliver of the load never reads as all of it. It is a pure
// function of its arguments.
func NodeShares(keys []KeyLoad, unplaced float64, topo *Topology, perNode int) []NodeLoad {
	tab := topo.table.Load()
	sums := make(map[string]float64, len(keys))
	order := make([]string, 0, len(keys)) // first appearance, for a deterministic walk
	for _, k := range keys {
		if !(k.Rate > 0) || math.IsInf(k.Rate, 1) {
			continue
		}
		if _, seen := sums[k.Key]; !seen {
			order = append(order, k.Key)
		}
		sums[k.Key] += k.Rate
	}

	byAddr := make(map[string]*NodeLoad, len(tab.addrs)+1)
	out := make([]*NodeLoad, 0, len(tab.addrs)+1)
	for _, a := range tab.addrs {
		nl := &NodeLoad{Primary: a}
		byAddr[a] = nl
		out = append(out, nl)
	}
	total := 0.0
	if unplaced > 0 && !math.IsInf(unplaced, 1) {
		total = unplaced
	}
	for _, key := range order {
		rate := sums[key]
		slot := Slot(key)
		addr := topo.PrimaryOf(slot)
		nl := byAddr[addr]
		if nl == nil { // unowned slot
			nl = &NodeLoad{Primary: addr}
			byAddr[addr] = nl
			out = append(out, nl)
		}
		nl.Rate += rate
		total += rate
		if perNode > 0 {
			nl.Keys = append(nl.Keys, HeavyKey{Key: key, Slot: slot, Rate: rate})
		}
	}

	res := make([]NodeLoad, len(out))
	for i, nl := range out {
		if total > 0 {
			nl.Share = nl.Rate / total
		}
		slices.SortFunc(nl.Keys, func(a, b HeavyKey) int {
			if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
				return c
			}
			return cmp.Compare(a.Key, b.Key)
		})
		if len(nl.Keys) > perNode {
			nl.Keys = slices.Clip(nl.Keys[:perNode])
		}
		for j := range nl.Keys {
			nl.Keys[j].Share = nl.Keys[j].Rate / nl.Rate
		}
		res[i] = *nl
	}
	slices.SortFunc(res, func(a, b NodeLoad) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		return cmp.Compare(a.Primary, b.Primary)
	})
	return res
}
