package mitigate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Namer names the Redis keys a mitigation creates and says where they live.
type Namer interface {
	// Primaries returns how many primaries can hold copies (1 for standalone Redis).
	Primaries() int
	// Names returns n names for key's copies (kind Copies) or sub-counters (kind
	// ShardedCounter), each containing key verbatim, each on a different primary when
	// there are at least n primaries (else spread as evenly as possible), with slot and
	// primary filled in. It is deterministic for a given key, n, kind and topology.
	Names(key string, n int, kind Kind) ([]Node, error)
}

// PlannerOptions configure a Planner. The zero value works.
type PlannerOptions struct {
	// Rules is the decision table. Default: Rules{} (every rule at its default).
	Rules Rules
	// MinActive is the least time a mitigation stays once started. Default: 30s.
	MinActive time.Duration
	// CoolDown is how long the rules must have stopped wanting a mitigation before it is
	// removed; a smaller N of copies or sub-counters waits as long. Default: 60s.
	CoolDown time.Duration
	// Lease is how long a published entry stays valid without renewal. Entries are renewed
	// (all together, with a new version) once half of it has passed, so a client that
	// loses the agent drops them between Lease/2 and Lease after its last fetch.
	// Default: 60s; 2s to MaxLease.
	Lease time.Duration
	// Now stamps overrides (Pin, Forbid). Default: time.Now.
	Now func() time.Time
	// MaxPlanBytes bounds the size of a plan's JSON (as the agent serves it, indented).
	// When more entries are wanted than fit, the plan keeps enforced entries first, then
	// recommended ones, then reports; within each, entries already published, then pinned
	// ones, then those of the keys with the most traffic; the rest stay active but
	// unpublished (Withheld counts them). Default: 8 MiB; 64 KiB to MaxPlanBytes, the
	// SDK's limit.
	MaxPlanBytes int
}

// Default values of PlannerOptions.
const (
	DefaultMinActive = 30 * time.Second
	DefaultCoolDown  = 60 * time.Second
	DefaultLease     = 60 * time.Second
	// DefaultMaxPlanBytes is half the SDK's limit.
	DefaultMaxPlanBytes = 8 << 20
)

// Override is an operator's standing instruction for one key and kind.
type Override struct {
	Key  string `json:"key"`
	Kind Kind   `json:"kind"`
	// Action is "pin" (always apply the kind) or "forbid" (never apply it).
	Action string `json:"action"`
	// Mode is the pinned mitigation's mode; empty means the kind's mode from the rules.
	Mode Mode `json:"mode,omitempty"`
	// At is when the override was set.
	At time.Time `json:"at"`
}

// Actions of an Override.
const (
	ActionPin    = "pin"
	ActionForbid = "forbid"
)

// Planner turns the key statistics of each evaluation into a plan, with hysteresis, modes
// and operator overrides. It is safe for concurrent use.
type Planner struct {
	rules     Rules // with defaults filled in
	minActive time.Duration
	coolDown  time.Duration
	lease     time.Duration
	maxBytes  int
	now       func() time.Time

	mu        sync.Mutex // guards active, overrides, last, all, expires and withheld
	active    map[planKey]*mitigation
	overrides map[planKey]Override
	last      Plan      // the plan Update last returned
	all       []Entry   // every active mitigation at the last Update, Observe ones included
	expires   time.Time // the lease end of the entries of last
	withheld  int       // entries left out of last for its size
}

// planKey identifies a mitigation: one key, one kind.
type planKey struct {
	key  string
	kind Kind
}

// mitigation is one active (key, kind) and its history.
type mitigation struct {
	d           Decision
	nodes       []Node
	since       time.Time
	wanted      time.Time // the last Update at which rules or a pin wanted it
	ruleWanted  time.Time // the last Update at which the rules wanted it; zero when never
	lowerSince  time.Time // since when the rules want a smaller N; zero when they do not
	predictedBy []string
	override    string
	notes       string    // Report only: the notes part of d.Rule (overrides, naming)
	rowSeen     time.Time // the last Update whose decision had d.Rule, the row d.Reason states
}

// NewPlanner checks the options and returns a planner with no mitigation active.
func NewPlanner(o PlannerOptions) (*Planner, error) {
	if err := o.Rules.Validate(); err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	switch {
	case o.MinActive < 0:
		return nil, fmt.Errorf("planner: min active %v: must be ≥ 0 (0 means 30s)", o.MinActive)
	case o.CoolDown < 0:
		return nil, fmt.Errorf("planner: cool-down %v: must be ≥ 0 (0 means 60s)", o.CoolDown)
	case o.Lease != 0 && (o.Lease < 2*time.Second || o.Lease > MaxLease):
		return nil, fmt.Errorf("planner: lease %v: must be 2s to %v (0 means 60s)", o.Lease, MaxLease)
	case o.MaxPlanBytes != 0 && (o.MaxPlanBytes < 64<<10 || o.MaxPlanBytes > MaxPlanBytes):
		return nil, fmt.Errorf("planner: max plan bytes %d: must be %d to %d, the SDK's limit (0 means %d)",
			o.MaxPlanBytes, 64<<10, MaxPlanBytes, DefaultMaxPlanBytes)
	}
	p := &Planner{
		rules:     o.Rules.withDefaults(),
		minActive: cmp.Or(o.MinActive, DefaultMinActive),
		coolDown:  cmp.Or(o.CoolDown, DefaultCoolDown),
		lease:     cmp.Or(o.Lease, DefaultLease),
		maxBytes:  cmp.Or(o.MaxPlanBytes, DefaultMaxPlanBytes),
		now:       o.Now,
		active:    make(map[planKey]*mitigation),
		overrides: make(map[planKey]Override),
		last:      Plan{Primaries: 1, Entries: []Entry{}},
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p, nil
}

// Pin forces kind on key whether it is hot or not, in mode (empty: the kind's mode from
// the rules), until Clear. It replaces a Forbid of the same kind. Report cannot be pinned,
// nor a key that is not valid UTF-8 (the JSON plan cannot name it; Forbid can).
func (p *Planner) Pin(key string, kind Kind, mode Mode) error {
	if key == "" {
		return fmt.Errorf("pin: key missing")
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("pin %q: key is not valid UTF-8: the JSON plan cannot name it, so it gets no mitigation (forbid works, to hide its report)", key)
	}
	if !knownKind(kind) || kind == Report {
		return fmt.Errorf("pin %q: kind %q: use l1, copies, sharded_counter or batched_counter", key, kind)
	}
	if mode != "" {
		if _, err := ParseMode(string(mode)); err != nil {
			return fmt.Errorf("pin %q: %w", key, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.overrides[planKey{key, kind}] = Override{Key: key, Kind: kind, Action: ActionPin, Mode: mode, At: p.now()}
	return nil
}

// Forbid never applies kind to key until Clear; an active mitigation of that kind ends at
// the next Update. It replaces a Pin of the same kind. Forbidding Report hides the key's
// reports.
func (p *Planner) Forbid(key string, kind Kind) error {
	if key == "" {
		return fmt.Errorf("forbid: key missing")
	}
	if !knownKind(kind) {
		return fmt.Errorf("forbid %q: kind %q: %s", key, kind, kindsAllowed)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.overrides[planKey{key, kind}] = Override{Key: key, Kind: kind, Action: ActionForbid, At: p.now()}
	return nil
}

// Clear removes every override of key and returns how many there were. A mitigation that
// was only there because of a pin ends at the next Update.
func (p *Planner) Clear(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for pk := range p.overrides {
		if pk.key == key {
			delete(p.overrides, pk)
			n++
		}
	}
	return n
}

// Overrides lists the overrides, sorted by key and kind.
func (p *Planner) Overrides() []Override {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Override, 0, len(p.overrides))
	for _, o := range p.overrides {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Override) int { return cmpKey(a.Key, a.Kind, b.Key, b.Kind) })
	return out
}

// Active returns every mitigation active at the last Update, in plan order, including
// those the plan leaves out, in Observe mode or withheld for the plan's size (for metrics;
// their Expires is zero).
func (p *Planner) Active() []Entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.all)
}

// Update evaluates keys at now: it applies the rules and the overrides, keeps each
// mitigation at least MinActive and until the rules have stopped wanting it for CoolDown,
// and returns the plan (without a version: the Store assigns it) and whether it differs
// from the plan the previous Update returned. Renewing the entries' lease counts as a
// change. namer names copies and sub-counters; nil means no topology (standalone).
func (p *Planner) Update(now time.Time, keys []KeyStats, namer Namer) (Plan, bool) {
	primaries := 1
	if namer != nil {
		primaries = max(namer.Primaries(), 1)
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	// What the rules and the overrides want now.
	want := make(map[planKey]Decision)
	ruled := make(map[planKey]bool)  // what the rules want, pinned or not
	notes := make(map[string][]note) // key → what overrides or naming turned into a report
	stats := make(map[string]*KeyStats, len(keys))
	for i := range keys {
		k := &keys[i]
		stats[k.Key] = k
		for _, d := range p.rules.Decide(*k, primaries) {
			pk := planKey{d.Key, d.Kind}
			if o, ok := p.overrides[pk]; ok && o.Action == ActionForbid {
				if d.Kind != Report {
					notes[d.Key] = append(notes[d.Key], note{RuleForbidden, d.Kind,
						fmt.Sprintf("%s forbidden by an operator (the rules wanted it: %s)", d.Kind, d.Reason)})
				}
				continue
			}
			want[pk] = d
			ruled[pk] = true
		}
	}
	for pk, o := range p.overrides {
		if o.Action != ActionPin {
			continue
		}
		d, ok := want[pk]
		if !ok {
			if d, ok = p.rules.pinned(pk.key, pk.kind, stats[pk.key], primaries); !ok {
				notes[pk.key] = append(notes[pk.key], note{RulePinned, pk.kind, d.Reason})
				continue
			}
		}
		if o.Mode != "" {
			d.Mode = o.Mode
		}
		want[pk] = d
		delete(want, planKey{pk.key, Report}) // "no action" no longer holds
	}

	// Start and update mitigations.
	for pk, d := range want {
		if pk.kind == Report {
			continue // reports are merged with the notes below
		}
		m := p.active[pk]
		if m == nil {
			nodes, err := p.names(namer, d)
			if err != nil {
				notes[pk.key] = append(notes[pk.key], note{RuleNaming, d.Kind,
					fmt.Sprintf("%s wanted but could not be named: %v (the rules wanted it: %s)", d.Kind, err, d.Reason)})
				continue
			}
			m = &mitigation{d: d, nodes: nodes, since: now, rowSeen: now}
			p.active[pk] = m
		} else {
			p.adjust(now, m, d, namer)
		}
		p.touch(now, m, pk, stats)
		if ruled[pk] {
			m.ruleWanted = now
		}
	}
	// One report per key: the rules' reason first, then every note.
	for key := range notes {
		if _, ok := want[planKey{key, Report}]; !ok {
			want[planKey{key, Report}] = Decision{Key: key, Kind: Report, Mode: p.rules.Mode(Report)}
		}
	}
	for pk, d := range want {
		if pk.kind != Report {
			continue
		}
		if o, ok := p.overrides[pk]; ok && o.Action == ActionForbid {
			continue
		}
		ns := notes[pk.key]
		slices.SortFunc(ns, func(a, b note) int { return cmpKey(a.rule, a.kind, b.rule, b.kind) })
		sig, reasons := []string{d.Rule}, []string{}
		if d.Reason != "" {
			reasons = append(reasons, d.Reason)
		}
		forbidden := false
		for _, n := range ns {
			sig = append(sig, n.rule+":"+string(n.kind))
			reasons = append(reasons, n.text)
			forbidden = forbidden || n.rule == RuleForbidden
		}
		noteSig := strings.Join(sig[1:], " ")
		d.Rule, d.Reason = strings.Join(sig, " "), strings.Join(reasons, "; ")
		m := p.active[pk]
		if m == nil {
			m = &mitigation{d: d, since: now, notes: noteSig, rowSeen: now}
			p.active[pk] = m
		}
		// The reason quotes rates: rewrite it only when the rows behind it change. What
		// overrides and naming add shows at once; a change of the table's row as restate
		// says.
		if m.notes != noteSig || p.restate(now, m, d.Rule) {
			m.d, m.notes, m.rowSeen = d, noteSig, now
		}
		m.d.Mode = d.Mode
		p.touch(now, m, pk, stats)
		if forbidden {
			m.override = Forbidden
		}
	}

	// End mitigations: at once when forbidden or held by a pin alone, else after
	// hysteresis.
	for pk, m := range p.active {
		if !m.wanted.Equal(now) {
			o, overridden := p.overrides[pk]
			if m.override == Pinned && !overridden {
				// The pin is gone: what is left is what the rules wanted, and when.
				m.override, m.wanted = "", m.ruleWanted
			}
			if overridden && o.Action == ActionForbid ||
				m.wanted.IsZero() ||
				now.Sub(m.since) >= p.minActive && now.Sub(m.wanted) >= p.coolDown {
				delete(p.active, pk)
				continue
			}
		}
		if m.since.Round(0).After(now.Round(0)) {
			// The wall clock stepped back past the start: restate the start on the new
			// clock, keeping its age when now has a monotonic reading, so that Since stays
			// before Expires in the plan.
			m.since = now.Add(-max(now.Sub(m.since), 0))
		}
		m.refreshNames(p, namer)
	}
	p.dropOutranked()

	// Entries, lease and change.
	all := make([]Entry, 0, len(p.active))
	for pk, m := range p.active {
		all = append(all, Entry{
			Key: pk.key, Kind: pk.kind, Mode: m.d.Mode, Reason: m.d.Reason, TradeOff: m.d.TradeOff,
			Since: m.since, Override: m.override, PredictedBy: m.predictedBy,
			TTL: Duration(m.d.TTL), FlushInterval: Duration(m.d.FlushInterval),
			Copies: nodesIf(pk.kind == Copies, m.nodes), SubCounters: nodesIf(pk.kind == ShardedCounter, m.nodes),
		})
	}
	slices.SortFunc(all, func(a, b Entry) int { return cmpKey(a.Key, a.Kind, b.Key, b.Kind) })
	published := make([]Entry, 0, len(all))
	for _, e := range all {
		if e.Mode != Observe {
			published = append(published, e)
		}
	}
	published, p.withheld = p.bound(published, stats)
	changed := !sameEntries(published, p.last.Entries, false) || primaries != p.last.Primaries
	// A lease ending more than a lease from now was made before the clock stepped back:
	// renew it on the new clock.
	if len(published) > 0 && (changed || !now.Before(p.expires.Add(-p.lease/2)) || p.expires.After(now.Add(p.lease))) {
		p.expires = now.Add(p.lease)
		changed = true
	}
	for i, j := 0, 0; i < len(all) && j < len(published); i++ { // published is a subsequence of all
		if all[i].Key == published[j].Key && all[i].Kind == published[j].Kind {
			all[i].Expires = p.expires
			j++
		}
	}
	for i := range published {
		published[i].Expires = p.expires
	}
	p.all = all
	p.last = Plan{Generated: now, Primaries: primaries, Entries: published}
	return p.last, changed
}

// Withheld returns how many entries the last Update left out of the plan to keep it
// within MaxPlanBytes.
func (p *Planner) Withheld() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.withheld
}

// bound keeps published, in plan order, within maxBytes (see PlannerOptions.MaxPlanBytes)
// and returns the entries kept and how many it left out.
func (p *Planner) bound(published []Entry, stats map[string]*KeyStats) ([]Entry, int) {
	total := planJSONFixed
	for i := range published {
		total += published[i].sizeBound()
	}
	if total <= p.maxBytes {
		return published, 0 // the common case: no string read
	}
	total = planJSONFixed
	sizes := make([]int, len(published))
	for i := range published {
		sizes[i] = published[i].encodedSize()
		total += sizes[i]
	}
	if total <= p.maxBytes {
		return published, 0
	}
	type rank struct {
		i         int
		mode      int // enforce, recommend, report
		incumbent bool
		pinned    bool
		traffic   float64
	}
	ranks := make([]rank, len(published))
	for i := range published {
		e := &published[i]
		r := rank{i: i, mode: 1, pinned: e.Override == Pinned}
		switch {
		case e.Kind == Report:
			r.mode = 2
		case e.Mode == Enforce:
			r.mode = 0
		}
		_, r.incumbent = slices.BinarySearchFunc(p.last.Entries, e, func(a Entry, b *Entry) int {
			return cmpKey(a.Key, a.Kind, b.Key, b.Kind)
		})
		if st := stats[e.Key]; st != nil {
			r.traffic = st.ReadRate + st.WriteRate
		}
		ranks[i] = r
	}
	slices.SortFunc(ranks, func(a, b rank) int {
		return cmp.Or(cmp.Compare(a.mode, b.mode), -cmpBool(a.incumbent, b.incumbent), -cmpBool(a.pinned, b.pinned),
			cmp.Compare(b.traffic, a.traffic), cmpKey(published[a.i].Key, published[a.i].Kind, published[b.i].Key, published[b.i].Kind))
	})
	keep := make([]bool, len(published))
	room := p.maxBytes - planJSONFixed
	for _, r := range ranks {
		if sizes[r.i] <= room {
			keep[r.i] = true
			room -= sizes[r.i]
		}
	}
	kept := published[:0]
	for i, e := range published {
		if keep[i] {
			kept = append(kept, e)
		}
	}
	return kept, len(published) - len(kept)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// note is something the rules wanted that an override or naming turned into a report.
type note struct {
	rule string // RuleForbidden, RulePinned or RuleNaming
	kind Kind
	text string
}

// touch marks m wanted at now and refreshes what it says about overrides and predictions.
func (p *Planner) touch(now time.Time, m *mitigation, pk planKey, stats map[string]*KeyStats) {
	m.wanted = now
	if st := stats[pk.key]; st != nil && !slices.Equal(m.predictedBy, st.PredictedBy) {
		m.predictedBy = slices.Clone(st.PredictedBy) // replaced, never changed: plans share it
	}
	m.override = ""
	if o, ok := p.overrides[pk]; ok && o.Action == ActionPin {
		m.override = Pinned
	}
}

// restate says whether m, whose reason states the row m.d.Rule, should take the reason
// of a decision of row rule instead, and notes when its own row applies again. The
// reason quotes rates, so it stays while the row does (figures moving within a row do not
// change the plan). A row further up the table (see escalation) shows at once: an entry
// must not say "fits one node" of a key that no longer does. So does a row that differs
// only in what registry events list. A row further down, or beside, shows once the row
// stated has not applied for CoolDown, as a smaller N does: a key swinging between two
// rows then changes the plan once, and its entries state the most it needed within the
// cool-down.
func (p *Planner) restate(now time.Time, m *mitigation, rule string) bool {
	if rule == m.d.Rule {
		m.rowSeen = now
		return false
	}
	return escalation(rule) > escalation(m.d.Rule) || tableRow(rule) == tableRow(m.d.Rule) ||
		now.Sub(m.rowSeen) >= p.coolDown
}

// adjust brings an active mitigation to the rules' current decision: mode and larger N at
// once, smaller N after CoolDown, other parameters when they change, and the reason when
// its row changes (see restate).
func (p *Planner) adjust(now time.Time, m *mitigation, d Decision, namer Namer) {
	restate := p.restate(now, m, d.Rule)
	n := d.N
	switch {
	case d.N < m.d.N:
		if m.lowerSince.IsZero() {
			m.lowerSince = now
		}
		if now.Sub(m.lowerSince) < p.coolDown {
			n = m.d.N
		}
	default:
		m.lowerSince = time.Time{}
	}
	if n != d.N { // keep the larger N, and the reason that explains it
		m.d.Mode = d.Mode
		return
	}
	if n != m.d.N {
		if nodes, err := p.names(namer, d); err == nil {
			m.nodes = nodes
		} else {
			m.d.Mode = d.Mode
			return // keep the N we could name
		}
		m.lowerSince = time.Time{}
	}
	if restate || n != m.d.N || d.TTL != m.d.TTL || d.FlushInterval != m.d.FlushInterval {
		m.d, m.rowSeen = d, now
	}
	m.d.Mode = d.Mode
}

// dropOutranked ends each report of the table's rows alone (no notes, no listed kinds)
// whose row ranks below the row another active entry of its key states (see escalation):
// "fits one node: no action needed" beside copies, or in place of observed ones, says
// less than the key needs. Such a report does not come back while that entry cools, so a
// key swinging between the two rows changes the plan once.
func (p *Planner) dropOutranked() {
	top := make(map[string]int)
	for pk, m := range p.active {
		if pk.kind != Report {
			top[pk.key] = max(top[pk.key], escalation(m.d.Rule))
		}
	}
	for pk, m := range p.active {
		if pk.kind == Report && m.notes == "" && tableRow(m.d.Rule) == m.d.Rule && escalation(m.d.Rule) < top[pk.key] {
			delete(p.active, pk)
		}
	}
}

// refreshNames re-reads the names of a cooling mitigation's copies, which move when the
// topology changes; on an error the old names stay.
func (m *mitigation) refreshNames(p *Planner, namer Namer) {
	if m.d.N == 0 || namer == nil {
		return
	}
	if nodes, err := p.names(namer, m.d); err == nil {
		m.nodes = nodes
	}
}

// names asks namer for the Redis keys of a Copies or ShardedCounter decision.
func (p *Planner) names(namer Namer, d Decision) ([]Node, error) {
	if d.Kind != Copies && d.Kind != ShardedCounter {
		return nil, nil
	}
	if namer == nil {
		return nil, fmt.Errorf("no Redis topology known")
	}
	nodes, err := namer.Names(d.Key, d.N, d.Kind)
	if err != nil {
		return nil, err
	}
	if len(nodes) != d.N {
		return nil, fmt.Errorf("namer returned %d names for %d %s", len(nodes), d.N, d.Kind)
	}
	return slices.Clone(nodes), nil
}

func nodesIf(ok bool, nodes []Node) []Node {
	if !ok {
		return nil
	}
	return nodes
}

// cmpKey orders by key, then by kind in the order of Kinds.
func cmpKey(ka string, a Kind, kb string, b Kind) int {
	return cmp.Or(strings.Compare(ka, kb), cmp.Compare(slices.Index(Kinds, a), slices.Index(Kinds, b)))
}
