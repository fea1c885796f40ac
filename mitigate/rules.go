package mitigate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/internal/defaults"
)

// KeyStats is what the rules know of one key at one evaluation.
type KeyStats struct {
	Key                 string
	ReadRate, WriteRate float64 // requests/s of full traffic
	BytesRate           float64 // bytes/s moved, 0 when unknown
	Counter             bool    // written with INCR/INCRBY/DECR/DECRBY
	Hot                 bool    // hot by detection now
	SDKShare            float64 // share (0..1) of its traffic from SDK clients that follow the plan
	// Truncated says Key is only the start of a longer key (the agent cut it to its key
	// limit): a mitigation would apply to the key that start names, not to this one.
	Truncated bool
	// PredictedBy names the registry events predicting the key. They arm mitigations even
	// before it is hot: the key is treated as hot. The caller should put an event's
	// expected rates into ReadRate and WriteRate when they exceed the observed ones, so
	// that copies and sub-counters are sized for the predicted load.
	PredictedBy []string
	// Kinds are the mitigations the predicting events list explicitly (an event's
	// "mitigations" other than "auto"); empty when every predicting event leaves the
	// choice to the rules. Only a predicted key's Kinds count.
	Kinds []Kind
	// Auto says some predicting event leaves the choice to the rules. With Kinds and
	// without Auto the decisions are exactly Kinds; with both, the table's decisions and
	// the listed kinds the table did not choose. Without Kinds, Auto changes nothing.
	Auto bool
	// ListedBy names the predicting events that list Kinds, for the reasons; empty means
	// all of PredictedBy.
	ListedBy []string
	// ExpectedReadRate is the largest read rate the predicting events expect. It sizes
	// listed copies before any traffic (ReadRate then holds the observed rate only; the
	// table's "predicted" row arms nothing that needs sizing).
	ExpectedReadRate float64
}

// Rows of the decision table, as Decision.Rule names them. docs/plan.md lists them.
const (
	RuleReadL1         = "read-l1"            // read-hot, SDK clients cover it: L1
	RuleReadFits       = "read-fits"          // read-hot, no SDK clients, fits one node: report
	RuleReadCopies     = "read-copies"        // read-hot beyond L1: copies (and L1 for SDK clients)
	RuleReadWritten    = "read-written"       // read-hot beyond L1 but written often: not split
	RuleReadStandalone = "read-standalone"    // read-hot beyond L1 on one primary: copies skipped
	RuleCounterBatched = "counter-batched"    // write-hot counter, fits one node: batched in SDK clients
	RuleCounterFits    = "counter-fits"       // write-hot counter, no SDK clients, fits: report
	RuleCounterSharded = "counter-sharded"    // write-hot counter beyond one node: sharded (and batched)
	RuleCounterAlone   = "counter-standalone" // write-hot counter beyond one node on one primary
	RuleWriteReport    = "write-report"       // write-hot key that is not a counter: report
	RulePredicted      = "predicted"          // predicted key with no traffic yet: L1 (and batched) armed
	RuleBinaryKey      = "binary-key"         // key is not valid UTF-8: the JSON plan cannot carry it
	RuleTruncatedKey   = "truncated-key"      // key longer than the agent keeps: the plan cannot name it
	RulePinned         = "pinned"             // an operator pinned the mitigation
	RuleForbidden      = "forbidden"          // an operator forbade what the rules wanted
	RuleNaming         = "naming"             // copies or sub-counters could not be named
	RuleEventListed    = "event-listed"       // a registry event listed the mitigation
)

// escalation ranks the row of a decision's Rule by how much it finds the key needs: 1
// when the key fits one node, 2 when it is beyond one node (or beyond what the table can
// fix) and not split, 3 when it is split. Rows that state no load rank 0: no traffic
// yet, an operator's pin, what events list. The planner shows a higher row at once and
// a lower one only after CoolDown.
func escalation(rule string) int {
	switch tableRow(rule) {
	case RuleReadL1, RuleReadFits, RuleCounterBatched, RuleCounterFits:
		return 1
	case RuleReadWritten, RuleReadStandalone, RuleCounterAlone, RuleWriteReport, RuleBinaryKey, RuleTruncatedKey:
		return 2
	case RuleReadCopies, RuleCounterSharded:
		return 3
	}
	return 0
}

// tableRow is the row of a Rule that may carry more: "read-fits event-listed" (a report
// beside a skipped listed kind) or a report's notes ("read-fits forbidden:copies").
func tableRow(rule string) string {
	row, _, _ := strings.Cut(rule, " ")
	return row
}

// Rules is the decision table: which mitigations suit a hot key. Its zero value uses every
// default; Validate checks fields that were set. Decide is pure and safe for concurrent use.
type Rules struct {
	// L1TTL is how long SDK clients cache a key under L1. Default: 1s.
	L1TTL time.Duration
	// NodeCapacity is the requests/s one primary serves. Default: 100,000.
	NodeCapacity float64
	// Headroom is the share of a node's capacity (and bandwidth) one key may take before
	// it needs more than one node, in (0, 1]. Default: 0.5, so one key may take 50,000/s.
	Headroom float64
	// NodeBandwidth is the bytes/s one primary moves. A key moving more than
	// NodeBandwidth × Headroom is split even when its request rate fits, and copies are
	// sized by N = ceil(max(reads / (NodeCapacity × Headroom), bytes / (NodeBandwidth ×
	// Headroom))). Default: 100 MB/s (a 1 Gbit/s link at 80 %), so a key moving more than
	// 50 MB/s is split.
	NodeBandwidth float64
	// MaxWriteShare is the share of a key's traffic that may be writes for it to be split,
	// in (0, 1). Above it a read-hot key is not split (each write costs N+1 writes and
	// copies lag the original more often) and a write-hot key is evaluated as one. At
	// 0.1 a key split in 3 still takes at most 0.9/3 + 0.1 = 40 % of its former load on
	// any node, and the write fan-out adds at most 30 % to its cluster-wide load.
	// Default: 0.1.
	MaxWriteShare float64
	// SubCounters is M, how many sub-counters a sharded counter gets, in [2, MaxNames]. Default: the
	// number of primaries, capped at MaxSubCounters (reading the value costs M+2 commands).
	SubCounters int
	// MaxSubCounters caps the default M. Default: 16.
	MaxSubCounters int
	// FlushInterval is how often SDK clients send a batched counter's increments.
	// Default: 100ms.
	FlushInterval time.Duration
	// Modes gives each kind's mode. Kinds not listed take their default: Observe for
	// Copies and ShardedCounter, Enforce for L1 and BatchedCounter, Recommend for Report
	// (Report may not be Enforce: there is nothing to enforce).
	Modes map[Kind]Mode
}

// Default values of Rules.
const (
	DefaultL1TTL          = time.Second
	DefaultNodeCapacity   = 100_000.0
	DefaultHeadroom       = 0.5
	DefaultNodeBandwidth  = 100e6
	DefaultMaxWriteShare  = 0.1
	DefaultMaxSubCounters = 16
	DefaultFlushInterval  = 100 * time.Millisecond
)

// DefaultMode returns the mode a kind has when Rules.Modes does not name it.
func DefaultMode(k Kind) Mode {
	switch k {
	case Copies, ShardedCounter:
		return Observe
	case Report:
		return Recommend
	}
	return Enforce
}

// Validate reports the first field that is set and out of range, naming it.
func (r Rules) Validate() error {
	switch {
	case r.L1TTL < 0 || r.L1TTL > time.Hour:
		return fmt.Errorf("rules: L1 TTL %v: must be in (0, 1h] (0 means 1s)", r.L1TTL)
	case r.NodeCapacity < 0 || math.IsNaN(r.NodeCapacity) || math.IsInf(r.NodeCapacity, 0):
		return fmt.Errorf("rules: node capacity %v: must be a positive number of requests/s (0 means 100000)", r.NodeCapacity)
	case r.Headroom < 0 || r.Headroom > 1 || math.IsNaN(r.Headroom):
		return fmt.Errorf("rules: headroom %v: must be in (0, 1] (0 means 0.5)", r.Headroom)
	case r.NodeBandwidth < 0 || math.IsNaN(r.NodeBandwidth) || math.IsInf(r.NodeBandwidth, 0):
		return fmt.Errorf("rules: node bandwidth %v: must be a positive number of bytes/s (0 means 100e6)", r.NodeBandwidth)
	case r.MaxWriteShare < 0 || r.MaxWriteShare >= 1 || math.IsNaN(r.MaxWriteShare):
		return fmt.Errorf("rules: max write share %v: must be in (0, 1) (0 means 0.1)", r.MaxWriteShare)
	case r.SubCounters < 0 || r.SubCounters == 1 || r.SubCounters > MaxNames:
		return fmt.Errorf("rules: sub-counters %d: must be in [2, %d] (0 means the number of primaries)", r.SubCounters, MaxNames)
	case r.MaxSubCounters < 0 || r.MaxSubCounters == 1 || r.MaxSubCounters > MaxNames:
		return fmt.Errorf("rules: max sub-counters %d: must be in [2, %d] (0 means 16)", r.MaxSubCounters, MaxNames)
	case r.FlushInterval < 0 || r.FlushInterval > time.Minute:
		return fmt.Errorf("rules: flush interval %v: must be in (0, 1m] (0 means 100ms)", r.FlushInterval)
	}
	for k, m := range r.Modes {
		if !knownKind(k) {
			return fmt.Errorf("rules: mode for kind %q: %s", k, kindsAllowed)
		}
		if _, err := ParseMode(string(m)); err != nil {
			return fmt.Errorf("rules: kind %s: %w", k, err)
		}
		if k == Report && m == Enforce {
			return fmt.Errorf("rules: kind report: mode enforce: a report has nothing to enforce; use observe or recommend")
		}
	}
	return nil
}

// withDefaults fills every zero field.
func (r Rules) withDefaults() Rules {
	r.L1TTL = defaults.Or(r.L1TTL, DefaultL1TTL)
	r.NodeCapacity = defaults.Or(r.NodeCapacity, DefaultNodeCapacity)
	r.Headroom = defaults.Or(r.Headroom, DefaultHeadroom)
	r.NodeBandwidth = defaults.Or(r.NodeBandwidth, DefaultNodeBandwidth)
	r.MaxWriteShare = defaults.Or(r.MaxWriteShare, DefaultMaxWriteShare)
	r.MaxSubCounters = defaults.Or(r.MaxSubCounters, DefaultMaxSubCounters)
	r.FlushInterval = defaults.Or(r.FlushInterval, DefaultFlushInterval)
	return r
}

// Mode returns the mode of kind k under these rules.
func (r Rules) Mode(k Kind) Mode {
	if m, ok := r.Modes[k]; ok && m != "" {
		return m
	}
	return DefaultMode(k)
}

// Decision is one mitigation the rules want for one key.
type Decision struct {
	Key  string
	Kind Kind
	Mode Mode
	// Rule names the row of the decision table that fired (RuleReadL1, …).
	Rule string
	// N is the number of copies (Copies) or sub-counters (ShardedCounter).
	N int
	// TTL is the L1 cache time (L1).
	TTL time.Duration
	// FlushInterval is how often clients flush a batched counter (BatchedCounter).
	FlushInterval time.Duration
	// Reason says, for an operator, why this decision was made.
	Reason string
	// TradeOff says what the mitigation costs.
	TradeOff string
}

// Decide applies the decision table to one key on a deployment with primaries primaries
// (1 for standalone Redis or when no topology is known). It returns nothing for a key
// that is neither hot nor predicted, and otherwise at least one decision: Report when no
// mitigation applies. Decisions come in the order of Kinds, at most one of each kind.
//
// A key is read-hot when its reads are at least its writes, else write-hot. A read-hot
// key fits one node when its reads from non-SDK clients stay within NodeCapacity ×
// Headroom, its total reads within NodeCapacity and its bytes within NodeBandwidth ×
// Headroom; a write-hot counter fits when its writes do the same. See docs/plan.md.
//
// A predicted key whose events list mitigations (k.Kinds) gets those, armed at once
// (RuleEventListed): only those when no predicting event is auto, else added to what the
// table chose (a Report of the table is then dropped). A listed kind that cannot be
// carried out (copies or a sharded counter on one primary) becomes a Report saying so.
func (r Rules) Decide(k KeyStats, primaries int) []Decision {
	r = r.withDefaults()
	predicted := len(k.PredictedBy) > 0
	if !k.Hot && !predicted {
		return nil
	}
	if !utf8.ValidString(k.Key) {
		return []Decision{r.report(k, RuleBinaryKey, "key is not valid UTF-8 and the JSON plan cannot name it: no automatic action")}
	}
	if k.Truncated {
		return []Decision{r.report(k, RuleTruncatedKey, "key is longer than limits.max_key_bytes and the plan could name only its start, which is another key: no automatic action")}
	}
	sdk := clamp01(k.SDKShare)
	e := evaluation{r: r, k: k, sdk: sdk, primaries: max(primaries, 1), prefix: predictedPrefix(k.PredictedBy)}
	listed := listedKinds(k)
	if len(listed) == 0 {
		return e.table()
	}
	var ds []Decision
	if k.Auto {
		ds = e.table()
	}
	return e.listed(ds, listed)
}

// table is the automatic decision table.
func (e evaluation) table() []Decision {
	r, k := e.r, e.k
	total := k.ReadRate + k.WriteRate
	switch {
	case total <= 0 && k.BytesRate <= 0:
		// Predicted with no traffic yet: arm what costs nothing if it proves unneeded.
		ds := []Decision{r.l1(k, RulePredicted, e.prefix+"no traffic seen yet: L1 for "+r.L1TTL.String()+" armed in SDK clients")}
		if k.Counter {
			ds = append(ds, r.batched(k, RulePredicted, e.prefix+"counter with no traffic seen yet: batched increments armed in SDK clients"))
		}
		return ds
	case k.ReadRate >= k.WriteRate:
		return e.read()
	case k.Counter:
		return e.counter()
	default:
		return []Decision{r.report(k, RuleWriteReport, fmt.Sprintf(
			"%swritten %s (%s of its traffic) and not a counter: no automatic action; coalesce its writes in the application or spread it over several keys",
			e.prefix, fmtRate(k.WriteRate), fmtShare(k.WriteRate/total)))}
	}
}

// evaluation carries one key through the table.
type evaluation struct {
	r         Rules
	k         KeyStats
	sdk       float64 // SDK share, clamped to [0, 1]
	primaries int
	prefix    string // "predicted by …: " or ""
}

// armL1 says whether L1 (or batching) in SDK clients is worth publishing: some traffic
// comes from SDK clients, or the key is predicted and its SDK share is not known yet.
func (e evaluation) armL1() bool { return e.sdk > 0 || len(e.k.PredictedBy) > 0 }

// read is the read-hot half of the table.
func (e evaluation) read() []Decision {
	r, k := e.r, e.k
	budget := r.NodeCapacity * r.Headroom
	bwBudget := r.NodeBandwidth * r.Headroom
	nonSDK := k.ReadRate * (1 - e.sdk)
	from := fmt.Sprintf("%sread %s, %s from SDK clients", e.prefix, fmtRate(k.ReadRate), fmtShare(e.sdk))

	var beyond []string
	if nonSDK > budget {
		beyond = append(beyond, fmt.Sprintf("%s from other clients is above one node's %s budget", fmtRate(nonSDK), fmtRate(budget)))
	}
	if k.ReadRate > r.NodeCapacity {
		beyond = append(beyond, fmt.Sprintf("%s in all is above one node's %s capacity", fmtRate(k.ReadRate), fmtRate(r.NodeCapacity)))
	}
	if k.BytesRate > bwBudget {
		beyond = append(beyond, fmt.Sprintf("moving %s is above one node's %s budget", fmtBytes(k.BytesRate), fmtBytes(bwBudget)))
	}
	ttl := r.L1TTL.String()
	if len(beyond) == 0 {
		if e.armL1() {
			return []Decision{r.l1(k, RuleReadL1, fmt.Sprintf("%s: L1 for %s leaves %s from other clients, within one node's %s budget",
				from, ttl, fmtRate(nonSDK), fmtRate(budget)))}
		}
		return []Decision{r.report(k, RuleReadFits, fmt.Sprintf("%s; it fits one node's %s budget and no SDK client can cache it: no action needed",
			from, fmtRate(budget)))}
	}
	why := from + "; " + strings.Join(beyond, ", ")

	need := r.copiesNeeded(k.ReadRate, k.BytesRate)
	if e.primaries < 2 {
		reason := why + "; copies skipped: standalone Redis has one primary"
		if e.armL1() {
			return []Decision{r.l1(k, RuleReadStandalone, reason+"; L1 for "+ttl+" on the reads from SDK clients only")}
		}
		return []Decision{r.report(k, RuleReadStandalone, reason+"; no SDK client can cache it: no automatic action")}
	}
	total := k.ReadRate + k.WriteRate
	if ws := k.WriteRate / max(total, 1e-9); ws > r.MaxWriteShare {
		reason := fmt.Sprintf("%s; but writes are %s of its traffic (limit %s): not split, every write would cost %d writes",
			why, fmtShare(ws), fmtShare(r.MaxWriteShare), min(need, e.primaries)+1)
		if e.armL1() {
			return []Decision{r.l1(k, RuleReadWritten, reason+"; L1 for "+ttl+" on the reads from SDK clients only")}
		}
		return []Decision{r.report(k, RuleReadWritten, reason+"; no SDK client can cache it: no automatic action")}
	}
	n := min(need, e.primaries)
	split := fmt.Sprintf("split into %d copies", n)
	if n < need {
		split += fmt.Sprintf(" (%d needed, capped at %d primaries: each still takes %s)", need, e.primaries, fmtRate(k.ReadRate/float64(n)))
	}
	var ds []Decision
	if e.armL1() {
		ds = append(ds, r.l1(k, RuleReadCopies, fmt.Sprintf("%s: L1 for %s on the reads from SDK clients, alongside %d copies", from, ttl, n)))
	}
	return append(ds, r.copies(k, RuleReadCopies, n, why+": "+split))
}

// counter is the write-hot counter half of the table.
func (e evaluation) counter() []Decision {
	r, k := e.r, e.k
	budget := r.NodeCapacity * r.Headroom
	nonSDK := k.WriteRate * (1 - e.sdk)
	from := fmt.Sprintf("%swritten %s by INCR/DECR, %s from SDK clients", e.prefix, fmtRate(k.WriteRate), fmtShare(e.sdk))

	var beyond []string
	if nonSDK > budget {
		beyond = append(beyond, fmt.Sprintf("%s from other clients is above one node's %s budget", fmtRate(nonSDK), fmtRate(budget)))
	}
	if k.WriteRate > r.NodeCapacity {
		beyond = append(beyond, fmt.Sprintf("%s in all is above one node's %s capacity", fmtRate(k.WriteRate), fmtRate(r.NodeCapacity)))
	}
	batch := fmt.Sprintf("SDK clients batch increments into one INCRBY per %v", r.FlushInterval)
	if len(beyond) == 0 {
		if e.armL1() {
			return []Decision{r.batched(k, RuleCounterBatched, fmt.Sprintf("%s: %s; %s from other clients fits one node's %s budget",
				from, batch, fmtRate(nonSDK), fmtRate(budget)))}
		}
		return []Decision{r.report(k, RuleCounterFits, fmt.Sprintf("%s; it fits one node's %s budget and no SDK client can batch it: no action needed",
			from, fmtRate(budget)))}
	}
	why := from + "; " + strings.Join(beyond, ", ")
	if e.primaries < 2 {
		reason := why + "; sharded counter skipped: standalone Redis has one primary"
		if e.armL1() {
			return []Decision{r.batched(k, RuleCounterAlone, reason+"; "+batch)}
		}
		return []Decision{r.report(k, RuleCounterAlone, reason+"; no SDK client can batch it: no automatic action")}
	}
	sharded := r.sharded(k, RuleCounterSharded, e.primaries, func(m int) string {
		return fmt.Sprintf("%s: spread over %d sub-counters on different primaries", why, m)
	})
	var ds []Decision
	if e.armL1() {
		ds = append(ds, r.batched(k, RuleCounterSharded, fmt.Sprintf("%s: %s, alongside %d sub-counters", from, batch, sharded.N)))
	}
	return append(ds, sharded)
}

// listedKinds returns the kinds a predicted key's events list that can be armed, each
// once; nil for a key no event predicts.
func listedKinds(k KeyStats) []Kind {
	if len(k.PredictedBy) == 0 {
		return nil
	}
	var out []Kind
	for _, kind := range k.Kinds {
		if kind != Report && knownKind(kind) && !slices.Contains(out, kind) {
			out = append(out, kind)
		}
	}
	return out
}

// listed adds to ds, the table's decisions (nil when no predicting event is auto), the
// listed kinds it lacks, and returns them in the order of Kinds.
func (e evaluation) listed(ds []Decision, kinds []Kind) []Decision {
	r, k := e.r, e.k
	by := k.ListedBy
	if len(by) == 0 {
		by = k.PredictedBy
	}
	prefix := "listed by event " + by[0] + ": "
	if len(by) > 1 {
		prefix = "listed by events " + strings.Join(by, ", ") + ": "
	}
	var skipped []string
	added := false
	for _, kind := range kinds {
		if slices.ContainsFunc(ds, func(d Decision) bool { return d.Kind == kind }) {
			continue // the table chose it: its decision, sized and explained, stands
		}
		d, ok := e.listedOne(kind, prefix)
		if !ok {
			skipped = append(skipped, d.Reason)
			continue
		}
		ds = append(ds, d)
		added = true
	}
	if added { // the table's "no action" no longer holds
		ds = slices.DeleteFunc(ds, func(d Decision) bool { return d.Kind == Report })
	}
	if len(skipped) > 0 {
		why := prefix + strings.Join(skipped, "; ")
		if i := slices.IndexFunc(ds, func(d Decision) bool { return d.Kind == Report }); i >= 0 {
			ds[i].Rule += " " + RuleEventListed
			ds[i].Reason += "; " + why
		} else {
			ds = append(ds, r.report(k, RuleEventListed, why))
		}
	}
	slices.SortStableFunc(ds, func(a, b Decision) int {
		return cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind))
	})
	return ds
}

// listedOne is the decision for one listed kind. When the kind cannot be carried out
// here, ok is false and the decision's Reason says why (without the prefix).
func (e evaluation) listedOne(kind Kind, prefix string) (d Decision, ok bool) {
	r, k := e.r, e.k
	switch kind {
	case L1:
		return r.l1(k, RuleEventListed, prefix+"L1 for "+r.L1TTL.String()+" armed in SDK clients"), true
	case BatchedCounter:
		return r.batched(k, RuleEventListed, fmt.Sprintf("%sSDK clients batch increments into one INCRBY per %v", prefix, r.FlushInterval)), true
	case Copies:
		if e.primaries < 2 {
			return Decision{Reason: "copies need ≥ 2 primaries and standalone Redis has one: skipped"}, false
		}
		budget, bwBudget := r.NodeCapacity*r.Headroom, r.NodeBandwidth*r.Headroom
		reads := max(k.ReadRate, k.ExpectedReadRate)
		need := r.copiesNeeded(reads, k.BytesRate)
		n := min(need, e.primaries)
		var why string
		switch {
		case reads <= 0 && k.BytesRate <= 0:
			why = fmt.Sprintf("no reads seen or expected yet: split into %d copies, the least", n)
		case k.BytesRate <= 0:
			why = fmt.Sprintf("read %s (seen or expected) against one node's %s budget: split into %d copies", fmtRate(reads), fmtRate(budget), n)
		default:
			why = fmt.Sprintf("read %s (seen or expected), moving %s, against one node's %s and %s budgets: split into %d copies",
				fmtRate(reads), fmtBytes(k.BytesRate), fmtRate(budget), fmtBytes(bwBudget), n)
		}
		if n < need {
			why += fmt.Sprintf(" (%d needed, capped at %d primaries: each still takes %s)", need, e.primaries, fmtRate(reads/float64(n)))
		}
		if total := k.ReadRate + k.WriteRate; total > 0 && k.WriteRate/total > r.MaxWriteShare {
			why += fmt.Sprintf("; writes are %s of its traffic, above the %s the table would split", fmtShare(k.WriteRate/total), fmtShare(r.MaxWriteShare))
		}
		return r.copies(k, RuleEventListed, n, prefix+why), true
	case ShardedCounter:
		if e.primaries < 2 {
			return Decision{Reason: "sharded_counter needs ≥ 2 primaries and standalone Redis has one: skipped"}, false
		}
		return r.sharded(k, RuleEventListed, e.primaries, func(m int) string {
			return fmt.Sprintf("%sspread over %d sub-counters on different primaries", prefix, m)
		}), true
	}
	return Decision{Reason: fmt.Sprintf("%s: not a mitigation an event can list", kind)}, false
}

func (r Rules) l1(k KeyStats, rule, reason string) Decision {
	return Decision{Key: k.Key, Kind: L1, Mode: r.Mode(L1), Rule: rule, TTL: r.L1TTL, Reason: reason,
		TradeOff: fmt.Sprintf("SDK clients may read a value up to %v old; one refill per client per %v (single-flight)", r.L1TTL, r.L1TTL)}
}

func (r Rules) batched(k KeyStats, rule, reason string) Decision {
	return Decision{Key: k.Key, Kind: BatchedCounter, Mode: r.Mode(BatchedCounter), Rule: rule, FlushInterval: r.FlushInterval, Reason: reason,
		TradeOff: fmt.Sprintf("increments reach Redis up to %v late; a client that crashes loses its increments not yet flushed: its last %v, or all since Redis became unreachable", r.FlushInterval, r.FlushInterval)}
}

// copies is a decision to split k into n copies.
func (r Rules) copies(k KeyStats, rule string, n int, reason string) Decision {
	return Decision{Key: k.Key, Kind: Copies, Mode: r.Mode(Copies), Rule: rule, N: n, Reason: reason,
		TradeOff: fmt.Sprintf("every write costs %d writes (the original and %d copies); copies of a value written by a client that bypasses the SDK stay stale until the agent refreshes them",
			n+1, n)}
}

// sharded is a decision to spread counter k over the table's number of sub-counters for
// primaries primaries.
func (r Rules) sharded(k KeyStats, rule string, primaries int, reason func(m int) string) Decision {
	m := r.SubCounters
	if m == 0 {
		m = max(2, min(primaries, r.MaxSubCounters))
	}
	return Decision{Key: k.Key, Kind: ShardedCounter, Mode: r.Mode(ShardedCounter), Rule: rule, N: m, Reason: reason(m),
		TradeOff: fmt.Sprintf("reading the value costs %d commands in 3 round trips (the key and %d sub-counters, checked against concurrent folds) instead of 1 GET; the value stays exact at every moment",
			m+2, m)}
}

// copiesNeeded is how many copies spread reads and bytes within one node's budgets each,
// at least 2.
func (r Rules) copiesNeeded(reads, bytes float64) int {
	return max(int(math.Ceil(max(reads/(r.NodeCapacity*r.Headroom), bytes/(r.NodeBandwidth*r.Headroom)))), 2)
}

func (r Rules) report(k KeyStats, rule, reason string) Decision {
	return Decision{Key: k.Key, Kind: Report, Mode: r.Mode(Report), Rule: rule, Reason: reason}
}

// pinned returns the decision an operator's pin of kind forces on key, sized from st
// when the key's stats are known (st may be nil). ok is false for a kind that cannot be
// carried out here; the decision is then a Report that says why.
func (r Rules) pinned(key string, kind Kind, st *KeyStats, primaries int) (d Decision, ok bool) {
	r = r.withDefaults()
	k := KeyStats{Key: key}
	if st != nil {
		k = *st
	}
	switch kind {
	case L1:
		return r.l1(k, RulePinned, "pinned by an operator: L1 for "+r.L1TTL.String()), true
	case BatchedCounter:
		return r.batched(k, RulePinned, fmt.Sprintf("pinned by an operator: SDK clients batch increments into one INCRBY per %v", r.FlushInterval)), true
	}
	if primaries < 2 {
		return r.report(k, RulePinned, fmt.Sprintf("%s pinned by an operator, but standalone Redis has one primary: skipped", kind)), false
	}
	k.Key = key
	if kind == Copies {
		n := min(r.copiesNeeded(k.ReadRate, k.BytesRate), primaries)
		return r.copies(k, RulePinned, n, fmt.Sprintf("pinned by an operator: split into %d copies", n)), true
	}
	return r.sharded(k, RulePinned, primaries, func(m int) string {
		return fmt.Sprintf("pinned by an operator: spread over %d sub-counters", m)
	}), true
}

func predictedPrefix(events []string) string {
	if len(events) == 0 {
		return ""
	}
	return "predicted by " + strings.Join(events, ", ") + "; "
}

func clamp01(v float64) float64 {
	if !(v > 0) { // also NaN
		return 0
	}
	return min(v, 1)
}

// fmtRate writes a rate for people: "950/s", "1.5k/s", "240k/s", "2.4M/s".
func fmtRate(v float64) string { return fmtScaled(v, "/s", "k/s", "M/s", "G/s") }

// fmtBytes writes a byte rate for people: "512 B/s", "40 kB/s", "60 MB/s".
func fmtBytes(v float64) string { return fmtScaled(v, " B/s", " kB/s", " MB/s", " GB/s") }

// fmtScaled writes v with three significant digits in the largest unit (of 1, 1e3, 1e6,
// 1e9) that keeps it below 1000.
func fmtScaled(v float64, units ...string) string {
	if v < 999.5 {
		return fmt.Sprintf("%.0f%s", v, units[0])
	}
	i := 0
	for i < len(units)-1 && v >= 999.5 {
		v /= 1000
		i++
	}
	return fmt.Sprintf("%.3g%s", v, units[i])
}

// fmtShare writes a share in [0, 1] as a percentage: "0%", "<1%", "3%", "100%".
func fmtShare(v float64) string {
	if v > 0 && v < 0.01 {
		return "<1%"
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

const kindsAllowed = "use l1, copies, sharded_counter, batched_counter or report"

func knownKind(k Kind) bool {
	for _, x := range Kinds {
		if k == x {
			return true
		}
	}
	return false
}
