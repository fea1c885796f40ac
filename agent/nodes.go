package agent

import (
	"net/http"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/hotkeyd/hotkeyd/nodeload"
)

// Nodes is the answer of GET /v1/nodes: where the ranked keys' load lands in Redis, per
// primary, with each primary's heaviest keys. An extension, documented in docs/api.md.
type Nodes struct {
	At time.Time `json:"at"`
	// Cluster is whether the configured Redis is a cluster; false for a standalone server
	// and without redis.addrs (then Nodes is empty).
	Cluster bool `json:"cluster"`
	// Nodes are ordered by Rate, the sampled load of their ranked keys, not by their own
	// load (Redis): sort by Redis.CPU for that.
	Nodes []Node `json:"nodes"`
	// UnplacedRate is the rate of the ranked keys whose primary is unknown (truncated
	// keys without a whole hash tag in their kept part): in no node's Rate, and the
	// part of the load the nodes' shares leave out.
	UnplacedRate float64 `json:"unplaced_rate"`
}

// Node is one primary's part of the ranked keys' load.
type Node struct {
	// Primary is the primary's address; "" gathers keys in slots no primary owns (a
	// cluster being resharded or failed).
	Primary string `json:"primary"`
	// Slots is the number of hash slots the primary owns (16384 for a standalone server).
	Slots int `json:"slots"`
	// Rate is the sum of the rates of the ranked keys it owns, requests per second.
	Rate float64 `json:"rate"`
	// Share is Rate over the rate of all ranked keys, unplaced ones included.
	Share float64 `json:"share"`
	// Keys are its heaviest ranked keys, heaviest first; Share is of the primary's Rate.
	Keys []NodeKey `json:"keys"`
	// Redis is the primary's own load between its last two INFO readings; nil until it
	// has answered two in a row, while it fails, and with redis.info_interval 0.
	Redis *RedisLoad `json:"redis,omitempty"`
	// RedisError says why the primary's last INFO reading failed and since when its
	// readings have failed: down, or wedged (a long script or command). Nil while it
	// answers.
	RedisError *RedisError `json:"redis_error,omitempty"`
}

// RedisError is a primary whose INFO readings fail.
type RedisError struct {
	Error string    `json:"error"`
	Since time.Time `json:"since"`
}

// RedisLoad is a primary's own load, from INFO: all of its traffic, not only the sampled.
type RedisLoad struct {
	At                      time.Time `json:"at"`      // the later reading
	Seconds                 float64   `json:"seconds"` // between the two readings
	CommandsPerSecond       float64   `json:"commands_per_second"`
	CPU                     float64   `json:"cpu"`         // its command thread's busy share (the process's before Redis 6.2): near 1, saturated
	ProcessCPU              float64   `json:"process_cpu"` // cores the whole process uses, I/O threads included
	NetInputBytesPerSecond  float64   `json:"net_input_bytes_per_second"`
	NetOutputBytesPerSecond float64   `json:"net_output_bytes_per_second"`
}

// NodeKey is one of a primary's heaviest keys.
type NodeKey struct {
	Key    string  `json:"key"`
	KeyB64 string  `json:"key_b64,omitempty"`
	Slot   int     `json:"slot"`
	Rate   float64 `json:"rate"`
	Share  float64 `json:"share"`
}

// nodeKeys is how many of each primary's heaviest keys the evaluation keeps.
const nodeKeys = 5

// nodeLoads computes each primary's share of the ranked keys' load, and the rate of those
// it cannot place. A truncated key counts only when its shown prefix decides its slot (a
// whole hash tag): otherwise its primary is unknown, and guessing from the prefix would
// charge the wrong one.
func nodeLoads(levels []detector.Level, topo *mitigate.Topology) ([]mitigate.NodeLoad, float64) {
	loads := make([]mitigate.KeyLoad, 0, len(levels))
	unplaced := 0.0
	for _, l := range levels {
		if l.Key.Flags&FlagTruncated != 0 {
			if _, ok := mitigate.PrefixSlot(l.Key.Key); !ok {
				unplaced += l.ReadRate + l.WriteRate
				continue
			}
		}
		loads = append(loads, mitigate.KeyLoad{Key: l.Key.Key, Rate: l.ReadRate + l.WriteRate})
	}
	return mitigate.NodeShares(loads, unplaced, topo, nodeKeys), unplaced
}

// placement returns a key's slot (nil outside a cluster) and primary ("" without a
// topology, or when the key was truncated before its slot was decided).
func (a *Agent) placement(key string, flags uint8) (*int, string) {
	st := a.redis.Load()
	if st == nil {
		return nil, ""
	}
	slot := mitigate.Slot(key)
	if flags&FlagTruncated != 0 {
		var ok bool
		if slot, ok = mitigate.PrefixSlot(key); !ok {
			return nil, ""
		}
	}
	primary := st.topo.PrimaryOf(slot)
	if !st.topo.IsCluster() {
		return nil, primary
	}
	return &slot, primary
}

// nodes answers GET /v1/nodes from the last evaluation.
func (a *Agent) nodes(w http.ResponseWriter, _ *http.Request) {
	v := a.view.Load()
	out := Nodes{At: v.at.UTC(), Nodes: make([]Node, 0, len(v.nodes)), UnplacedRate: v.unplaced}
	var states map[string]nodeload.State
	slots := func(string) int { return 0 }
	if st := a.redis.Load(); st != nil {
		out.Cluster = st.topo.IsCluster()
		slots = st.topo.SlotsOf
		if st.load != nil {
			states = st.load.Nodes()
		}
	}
	for _, n := range v.nodes {
		j := Node{Primary: n.Primary, Slots: slots(n.Primary), Rate: n.Rate, Share: n.Share, Keys: make([]NodeKey, 0, len(n.Keys))}
		switch s := states[n.Primary]; {
		case s.Err != nil:
			j.RedisError = &RedisError{Error: s.Err.Error(), Since: s.Since.UTC()}
		case s.HasLoad:
			l := s.Load
			j.Redis = &RedisLoad{At: l.At.UTC(), Seconds: l.Span.Seconds(), CommandsPerSecond: l.CommandsPerSecond, CPU: l.CPU, ProcessCPU: l.ProcessCPU,
				NetInputBytesPerSecond: l.NetInputBytesPerSecond, NetOutputBytesPerSecond: l.NetOutputBytesPerSecond}
		}
		for _, k := range n.Keys {
			j.Keys = append(j.Keys, NodeKey{Key: a.display(k.Key), KeyB64: a.displayB64(k.Key), Slot: k.Slot, Rate: k.Rate, Share: k.Share})
		}
		out.Nodes = append(out.Nodes, j)
	}
	writeJSON(w, http.StatusOK, out)
}
