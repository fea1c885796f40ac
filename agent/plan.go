package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hotkeyd/hotkeyd/nodeload"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/internal/jsontext"
	"github.com/hotkeyd/hotkeyd/mitigate"
	"github.com/redis/go-redis/v9"
)

// PlanKey and PlanChannel are where the agent publishes each new plan in Redis, when a
// Redis address is configured: the plan's JSON is stored under PlanKey and published on
// PlanChannel, for operators and tools to read. With several agents on one Redis the key
// holds the plan published last; SDK clients follow their own agent's plan over HTTP.
const (
	PlanKey     = "hotkeyd:plan"
	PlanChannel = "hotkeyd:plan"
)

// maxPlanWait bounds the wait parameter of GET /v1/plan.
const maxPlanWait = 60 * time.Second

// clusterReload is how often the executor's cluster client reloads the slot table.
const clusterReload = 3 * time.Second

// redisState is the Redis side of the agent, once the topology is known.
type redisState struct {
	topo        *mitigate.Topology
	rdb         redis.UniversalClient
	exec        *mitigate.Executor // carries out the Redis part of enforced entries
	unsubscribe func()             // stops feeding plans to exec
	// load reads the primaries' own load from INFO; nil when RedisInfo is negative.
	load *nodeload.Poller
	// nodes are the connections to each node, for the topology and for load.
	nodes *mitigate.NodeClients
}

// connectRedis learns the topology from the configured addresses, retrying every few
// seconds until it succeeds or ctx ends (detection works meanwhile), then keeps the
// topology fresh until ctx ends.
func (a *Agent) connectRedis(ctx context.Context) {
	for {
		// One client per node, shared by the topology's CLUSTER commands and INFO.
		nodes := mitigate.NewNodeClients(&redis.Options{Username: a.opts.RedisUsername, Password: a.opts.RedisPassword,
			PoolSize: 2, ContextTimeoutEnabled: true})
		topo, err := mitigate.NewTopology(ctx, mitigate.TopologyOptions{
			Seeds:   a.opts.RedisAddrs,
			Conn:    nodes,
			OnError: func(err error) { a.log.Warn("redis topology refresh failed", "err", err) },
			OnChange: func(primaries, added, removed []string) {
				a.log.Info("redis primaries changed (failover, or nodes added or removed)", "primaries", primaries,
					"new", added, "gone", removed)
			},
		})
		if err == nil {
			st := &redisState{topo: topo, nodes: nodes}
			if topo.IsCluster() {
				// go-redis learns of a failover without a MOVED only when it reloads its
				// slot table (every 60 s by default): until then, every copy refresh and
				// fold on the failed primary's shard fails. One CLUSTER SLOTS every few
				// seconds is cheap.
				cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: a.opts.RedisAddrs,
					Username: a.opts.RedisUsername, Password: a.opts.RedisPassword,
					ClusterStateReloadInterval: clusterReload})
				// The topology learns a slot move or a failover from what the executor's
				// client meets at its next copy refresh or fold (MOVED, or a command
				// served by another primary), within a second or so, not at its own
				// periodic refresh: until then the plan's copies may sit two on one
				// primary, or name a dead one.
				topo.Watch(cc)
				st.rdb = cc
			} else {
				st.rdb = redis.NewClient(&redis.Options{Addr: a.opts.RedisAddrs[0],
					Username: a.opts.RedisUsername, Password: a.opts.RedisPassword})
			}
			st.exec, err = mitigate.NewExecutor(mitigate.ExecutorOptions{
				Redis:         st.rdb,
				RefreshPeriod: a.opts.CopyRefresh,
				GracePeriod:   a.opts.Planner.Lease,
				Registry:      a.opts.Registry,
				Logger:        a.keyLogger(),
				Now:           a.now,
			})
			if err != nil {
				a.log.Error("mitigation executor", "err", err)
				st.rdb.Close()
				topo.Close()
				nodes.Close()
				return
			}
			st.unsubscribe = a.store.Subscribe(st.exec.Offer)
			st.exec.Offer(a.store.Current())
			a.startRedisInfo(st)
			a.redis.Store(st)
			a.log.Info("redis topology known", "cluster", topo.IsCluster(), "primaries", topo.PrimaryAddrs())
			var wg sync.WaitGroup
			wg.Go(func() {
				// Run ends with ctx's error when the agent stops: that is no fault.
				if err := st.exec.Run(ctx); err != nil && ctx.Err() == nil {
					a.log.Warn("mitigation executor stopped", "err", err)
				}
			})
			if st.load != nil {
				wg.Go(func() { st.load.Run(ctx) })
			}
			topo.Run(ctx)
			wg.Wait()
			return
		}
		nodes.Close()
		a.log.Warn("redis unreachable; detection goes on, mitigations that need Redis wait", "addrs", a.opts.RedisAddrs, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// startRedisInfo sets up the reading of the primaries' INFO, unless RedisInfo is negative.
// A primary that fails to answer is logged once, and again when it answers.
func (a *Agent) startRedisInfo(st *redisState) {
	if a.opts.RedisInfo < 0 {
		return
	}
	p, err := nodeload.New(nodeload.Options{
		Primaries: st.topo.PrimaryAddrs,
		Conn:      st.nodes,
		Interval:  a.opts.RedisInfo,
		Now:       a.now,
		OnFailing: func(addr string, err error) {
			a.log.Warn("a primary does not answer INFO: hotkeyd_redis_info_up is 0 and GET /v1/nodes shows the error until it answers", "primary", addr, "err", err)
		},
		OnRecovered: func(addr string) {
			a.log.Info("a primary answers INFO again; its load is shown from its next reading", "primary", addr)
		},
	})
	if err != nil { // the options above are always valid
		a.log.Error("reading primaries' INFO", "err", err)
		return
	}
	st.load = p
}

// keyLogger returns the logger for parts that log keys under the attribute "key" (the
// executor): the agent's, with those keys shown as hashes when HashKeys is on.
func (a *Agent) keyLogger() *slog.Logger {
	if !a.opts.HashKeys {
		return a.log
	}
	return slog.New(hashKeyHandler{a.log.Handler(), a.display})
}

// hashKeyHandler replaces the value of every "key" attribute, and of "sub_counter" (a
// name holding the key verbatim), by display(value).
type hashKeyHandler struct {
	slog.Handler
	display func(string) string
}

func (h hashKeyHandler) hide(at slog.Attr) slog.Attr {
	if at.Key != "key" && at.Key != "sub_counter" {
		return at
	}
	if v := at.Value.Resolve().String(); v != "" {
		return slog.String(at.Key, h.display(v))
	}
	return at
}

func (h hashKeyHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(at slog.Attr) bool {
		out.AddAttrs(h.hide(at))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h hashKeyHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	hidden := make([]slog.Attr, len(attrs))
	for i, at := range attrs {
		hidden[i] = h.hide(at)
	}
	return hashKeyHandler{h.Handler.WithAttrs(hidden), h.display}
}

func (h hashKeyHandler) WithGroup(name string) slog.Handler {
	return hashKeyHandler{h.Handler.WithGroup(name), h.display}
}

// closeRedis undoes what the executor did in Redis — deletes every copy, folds every
// sub-counter back — then closes the Redis client and topology, if any.
func (a *Agent) closeRedis() {
	st := a.redis.Load()
	if st == nil {
		return
	}
	st.unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.exec.Close(ctx); err != nil {
		a.log.Error("cleaning up copies and sub-counters on stop", "err", err)
	}
	st.rdb.Close()
	st.topo.Close()
	st.nodes.Close()
}

// namer returns the topology to name copies with, nil while none is known.
func (a *Agent) namer() mitigate.Namer {
	if st := a.redis.Load(); st != nil {
		return st.topo
	}
	return nil
}

// publishToRedis stores and publishes a plan in Redis; failures are logged, never fatal.
func (a *Agent) publishToRedis(p mitigate.Plan) {
	st := a.redis.Load()
	if st == nil {
		return
	}
	b, err := json.Marshal(p)
	if err != nil {
		a.log.Error("encoding the plan", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := st.rdb.Set(ctx, PlanKey, b, 0).Err(); err != nil {
		a.log.Warn("storing the plan in redis", "key", PlanKey, "err", err)
	}
	if err := st.rdb.Publish(ctx, PlanChannel, b).Err(); err != nil {
		a.log.Warn("publishing the plan in redis", "channel", PlanChannel, "err", err)
	}
}

// keyStats turns the evaluated levels into what the mitigation rules read.
func keyStats(levels []detector.Level, covered time.Duration) []mitigate.KeyStats {
	var out []mitigate.KeyStats
	for _, l := range levels {
		if l.Hot {
			out = append(out, oneKeyStats(l, covered))
		}
	}
	return out
}

// oneKeyStats is what the rules read of one evaluated key.
func oneKeyStats(l detector.Level, covered time.Duration) mitigate.KeyStats {
	ks := mitigate.KeyStats{
		Key:       l.Key.Key,
		ReadRate:  l.ReadRate,
		WriteRate: l.WriteRate,
		Counter:   l.Key.Flags&detector.FlagCounter != 0,
		Hot:       l.Hot,
		SDKShare:  sdkShare(l.Key.Flags),
		Truncated: l.Key.Flags&FlagTruncated != 0,
	}
	if covered > 0 {
		ks.BytesRate = float64(l.Key.Bytes) / covered.Seconds()
	}
	return ks
}

// sdkShare estimates the share of a key's traffic from plan-following clients from where
// it was seen: all of it, none of it, or — seen from both — half, a coarse middle.
func sdkShare(flags uint8) float64 {
	sdk, other := flags&FlagFollowsPlan != 0, flags&FlagOther != 0
	switch {
	case sdk && !other:
		return 1
	case sdk && other:
		return 0.5
	}
	return 0
}

// planEntries returns, per key, the mitigations of the plan and the planner's observed
// ones, as "kind:mode" strings for /v1/topk.
func planEntries(active []mitigate.Entry) map[string][]string {
	m := make(map[string][]string)
	for _, e := range active {
		if e.Kind == mitigate.Report {
			continue
		}
		m[e.Key] = append(m[e.Key], string(e.Kind)+":"+activeMode(e))
	}
	return m
}

// activeMode is an active entry's mode as the API and metrics show it: "withheld" for an
// entry the planner left out of the plan at its size bound (not in force, though its mode
// says enforce or recommend: Active gives it no lease, as it does observe entries).
func activeMode(e mitigate.Entry) string {
	if e.Mode != mitigate.Observe && e.Expires.IsZero() {
		return "withheld"
	}
	return string(e.Mode)
}

// plan answers GET /v1/plan[?after=VERSION&generated=TIME&wait=30s]: the current plan at
// once, or, with after, a newer one as soon as there is one, waiting up to wait; 304 when
// none came. With generated (the plan held's), a plan of version after but generated
// otherwise — this run's, when the client's came from an earlier run of the agent — is
// answered at once too. The ETag is the version; If-None-Match works as after.
func (a *Agent) plan(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, hasAfter := uint64(0), false
	if s := q.Get("after"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after: %q is not a plan version; use the version of the plan you hold, a whole number", s))
			return
		}
		after, hasAfter = v, true
	} else if s := strings.Trim(r.Header.Get("If-None-Match"), `"`); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			after, hasAfter = v, true
		}
	}
	wait := time.Duration(0)
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxPlanWait {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait: %q is not allowed; use a duration from 0s to %v, such as 30s", s, maxPlanWait))
			return
		}
		wait = d
	}
	var generated time.Time
	if s := q.Get("generated"); s != "" {
		g, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("generated: %q is not an RFC 3339 time; use the generated of the plan you hold", s))
			return
		}
		generated = g
	}
	// held reports whether p is the plan the client holds.
	held := func(p mitigate.Plan) bool {
		return hasAfter && p.Version == after && (generated.IsZero() || p.Generated.Equal(generated))
	}
	p := a.store.Current()
	if held(p) && wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		stop := context.AfterFunc(a.stopping, cancel) // the agent stops: answer now
		p, _ = a.store.Wait(ctx, after)
		stop()
		cancel()
	}
	w.Header().Set("ETag", fmt.Sprintf("%q", strconv.FormatUint(p.Version, 10)))
	w.Header().Set("Cache-Control", "no-cache")
	if held(p) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// overrideRequest is the body of POST /v1/plan/overrides.
type overrideRequest struct {
	Key    string `json:"key"`
	Kind   string `json:"kind"`
	Action string `json:"action"`
	Mode   string `json:"mode,omitempty"`
}

// maxOverrideBytes bounds the body of POST /v1/plan/overrides: a key and three short words.
const maxOverrideBytes = 64 << 10

// overrides answers GET and POST /v1/plan/overrides and DELETE /v1/plan/overrides/{key}.
func (a *Agent) overrides(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		writeJSON(w, http.StatusOK, map[string]any{"overrides": a.planner.Overrides()})
	case http.MethodPost:
		var req overrideRequest
		body, ok := readBody(w, r, maxOverrideBytes, "an override")
		if !ok {
			return
		}
		var err error
		if !utf8.Valid(body) {
			// encoding/json would read each bad byte as U+FFFD: the override would name
			// another key.
			err = errors.New("not valid UTF-8: JSON cannot name a key that is not, and the override would apply to another key")
		} else {
			// Nor can it name a key holding half a surrogate pair: encoding/json reads the
			// escape as U+FFFD too.
			if at := jsontext.LoneSurrogate(body); at >= 0 {
				err = fmt.Errorf("%w: the override would apply to another key", jsontext.LoneSurrogateError(body, at))
			}
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err == nil {
			err = dec.Decode(&req)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "body: "+err.Error()+`; send {"key":"…","kind":"copies","action":"pin|forbid","mode":"enforce"}`)
			return
		}
		if err := a.applyOverride(req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		a.log.Info("plan override", "key", a.display(req.Key), "kind", req.Kind, "action", req.Action, "mode", req.Mode)
		writeJSON(w, http.StatusCreated, map[string]any{"overrides": a.planner.Overrides()})
	case http.MethodDelete:
		key := r.PathValue("key")
		if key == "" { // no override has the empty key: Pin refuses it
			writeError(w, http.StatusBadRequest, "key: missing; DELETE /v1/plan/overrides/{key} clears one key's overrides (escape the key as in /v1/keys/{key}); GET /v1/plan/overrides lists them")
			return
		}
		n := a.planner.Clear(key)
		if n == 0 {
			writeError(w, http.StatusNotFound, fmt.Sprintf("key %q has no override", key))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"cleared": n})
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed; use GET, POST, or DELETE /v1/plan/overrides/{key}", r.Method))
	}
}

func (a *Agent) applyOverride(req overrideRequest) error {
	if req.Key == "" {
		return errors.New("key: empty; name the key to override")
	}
	kind := mitigate.Kind(req.Kind)
	switch {
	case !isKind(kind):
		return fmt.Errorf("kind: %q is not allowed; use l1, copies, sharded_counter or batched_counter (or report, to forbid: it hides the key's reports)", req.Kind)
	case kind == mitigate.Report && req.Action == mitigate.ActionPin:
		return fmt.Errorf("kind: %q cannot be pinned; pin l1, copies, sharded_counter or batched_counter, or forbid report to hide the key's reports", req.Kind)
	}
	switch req.Action {
	case mitigate.ActionPin:
		mode := mitigate.Mode("")
		if req.Mode != "" {
			m, err := mitigate.ParseMode(req.Mode)
			if err != nil {
				return fmt.Errorf("mode: %w", err)
			}
			mode = m
		}
		return a.planner.Pin(req.Key, kind, mode)
	case mitigate.ActionForbid:
		if req.Mode != "" {
			return errors.New("mode: only a pin takes a mode")
		}
		return a.planner.Forbid(req.Key, kind)
	}
	return fmt.Errorf("action: %q is not allowed; use pin or forbid", req.Action)
}

func isKind(k mitigate.Kind) bool {
	for _, x := range mitigate.Kinds {
		if x == k {
			return true
		}
	}
	return false
}
