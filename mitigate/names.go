package mitigate

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Names of the keys hotkeyd creates.
//
// Copy i (from 1) of key is named "{hk:copy<i>:<salt>}<key>", sub-counter i of a sharded
// counter "{hk:sub<i>:<salt>}<key>", for example "{hk:copy2:40913}score:match42". The
// hash tag comes first, so Redis hashes only "hk:copy2:40913" — whatever tag the key
// carries after it is ignored — and the whole original key follows verbatim, so SCAN
// MATCH "{hk:*" finds every copy and sub-counter hotkeyd made (not the claim keys of copies,
// "hk:claim" + name, claims.go) and an operator reads off which key it copies.
//
// The salt is the first number, counting up from one derived from the key (FNV-1a), whose
// slot the intended primary owns. The intended primaries are ranked by rendezvous hashing
// of the key with each primary's address, the primary that owns the key itself last, so
// n ≤ primaries copies land on n different primaries (and avoid the key's own primary
// while others are free), and different hot keys use different primaries and slots. With
// n > primaries, copy i goes to the (i mod primaries)-th ranked primary.
const (
	copyTag = "hk:copy"
	subTag  = "hk:sub"
)

// MaxNames is the most names Names makes for one key.
const MaxNames = 256

// maxSalts bounds the search for a salt whose slot a primary owns; a primary that owns a
// single slot needs about 16384 tries on average.
const maxSalts = 1 << 22

// Names returns n names for key's copies (kind Copies) or sub-counters (kind
// ShardedCounter), each containing key verbatim, each on a different primary when there
// are at least n primaries (else spread as evenly as possible), with slot and primary
// filled in. The names are a pure function of key, n, kind and the current slot table, so
// every caller that sees the same topology gets the same names; a name changes when the
// slot it was placed in moves to another primary (and, rarely, when a resharding moves a
// slot that the search for it tried earlier to its intended primary).
//
// For standalone Redis it returns n names on the one server, with Slot 0 and Primary ""
// (the Node convention for standalone). They work as sub-counters; copies there spread no
// load, which is why the planner does not ask for them.
//
// Errors: n outside [1, MaxNames], a kind other than Copies and ShardedCounter, or a
// primary none of whose slots a salt reaches (not seen in practice).
func (t *Topology) Names(key string, n int, kind Kind) ([]Node, error) {
	var tag string
	switch kind {
	case Copies:
		tag = copyTag
	case ShardedCounter:
		tag = subTag
	default:
		return nil, fmt.Errorf("mitigate: names for %q: kind %q has no Redis keys; use %q or %q", key, kind, Copies, ShardedCounter)
	}
	if n < 1 || n > MaxNames {
		return nil, fmt.Errorf("mitigate: names for %q: n %d: must be between 1 and %d", key, n, MaxNames)
	}
	tab := t.table.Load()
	start := uint64(fnv32(key) % 100000)
	out := make([]Node, n)
	buf := make([]byte, 0, 64)
	if !tab.cluster {
		for i := range out {
			buf = appendTag(buf[:0], tag, i+1, start)
			out[i] = Node{Name: string(buf) + key}
		}
		return out, nil
	}
	ranked := rankPrimaries(tab, key)
	for i := range out {
		target := ranked[i%len(ranked)]
		found := false
		for salt := start; salt < start+maxSalts; salt++ {
			buf = appendTag(buf[:0], tag, i+1, salt)
			s := SlotBytes(buf)
			if tab.owner[s] == target {
				out[i] = Node{Name: string(buf) + key, Slot: s, Primary: tab.addrs[target]}
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("mitigate: names for %q: no salt in %d tries lands on a slot of primary %s (%d slots)",
				key, maxSalts, tab.addrs[target], tab.slots[target])
		}
	}
	return out, nil
}

// appendTag appends "{<tag><i>:<salt>}".
func appendTag(b []byte, tag string, i int, salt uint64) []byte {
	b = append(b, '{')
	b = append(b, tag...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, salt, 10)
	return append(b, '}')
}

// rankPrimaries orders the indexes of tab.addrs for key: highest rendezvous score first,
// the primary that owns key itself last.
func rankPrimaries(tab *slotTable, key string) []int16 {
	origin := tab.owner[Slot(key)]
	type scored struct {
		i     int16
		score uint64
	}
	ps := make([]scored, len(tab.addrs))
	for i, a := range tab.addrs {
		ps[i] = scored{int16(i), mix64(fnv64(key) ^ fnv64(a))}
	}
	slices.SortFunc(ps, func(a, b scored) int {
		if (a.i == origin) != (b.i == origin) {
			if a.i == origin {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	out := make([]int16, len(ps))
	for i, p := range ps {
		out[i] = p.i
	}
	return out
}

// ParseName reads a name made by Names: the kind (Copies or ShardedCounter), the copy or
// sub-counter index (from 1) and the original key. It reports false for any other name.
func ParseName(name string) (kind Kind, index int, key string, ok bool) {
	end := strings.IndexByte(name, '}')
	if !strings.HasPrefix(name, "{") || end < 0 {
		return "", 0, "", false
	}
	tag := name[1:end]
	switch {
	case strings.HasPrefix(tag, copyTag):
		kind, tag = Copies, tag[len(copyTag):]
	case strings.HasPrefix(tag, subTag):
		kind, tag = ShardedCounter, tag[len(subTag):]
	default:
		return "", 0, "", false
	}
	is, salt, found := strings.Cut(tag, ":")
	i, err1 := strconv.Atoi(is)
	_, err2 := strconv.ParseUint(salt, 10, 64)
	if !found || err1 != nil || err2 != nil || i < 1 || is[0] == '+' {
		return "", 0, "", false
	}
	return kind, i, name[end+1:], true
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is the splitmix64 finaliser, so that scores of similar addresses differ in every bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
