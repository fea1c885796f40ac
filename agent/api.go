package agent

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the HTTP API: /v1/samples, /v1/topk, /v1/keys/{key}, /metrics,
// /healthz and /readyz.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	samples := sampler.HTTPHandler(a, sampler.HTTPOptions{MaxBodyBytes: a.opts.MaxBodyBytes, MaxSamples: a.opts.MaxSamplesPerReport})
	mux.Handle("/v1/samples", a.authorized(samples))
	mux.HandleFunc("GET /v1/topk", a.topk)
	mux.HandleFunc("GET /v1/keys/{key...}", a.key)
	mux.HandleFunc("GET /v1/plan", a.plan)
	mux.Handle("/v1/registry", a.authorized(http.HandlerFunc(a.registryAPI)))
	mux.Handle("/v1/registry/{id}", a.authorized(http.HandlerFunc(a.registryAPI)))
	mux.Handle("/v1/plan/overrides", a.authorized(http.HandlerFunc(a.overrides)))
	mux.Handle("DELETE /v1/plan/overrides/{key...}", a.authorized(http.HandlerFunc(a.overrides)))
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{Registry: a.opts.Registry}))
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	return jsonErrors{mux, a.opts.BodyTimeout}
}

// jsonErrors answers what the mux itself answers — a path the API does not have (404), a
// method an endpoint does not take (405) — as {"error":"…"}, like every other error. It
// also bounds the time a request may take to send its body.
type jsonErrors struct {
	mux         *http.ServeMux
	bodyTimeout time.Duration
}

func (j jsonErrors) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// The server resets the deadline before the connection's next request. Without a
		// connection (a handler called directly) there is none to set.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(j.bodyTimeout))
	}
	h, pattern := j.mux.Handler(r)
	if pattern != "" {
		j.mux.ServeHTTP(w, r) // sets the path values that h reads
		return
	}
	c := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(c, r)
	switch c.status {
	case http.StatusNotFound:
		writeError(w, c.status, fmt.Sprintf("path %q: no such endpoint; see docs/api.md", r.URL.Path))
	case http.StatusMethodNotAllowed:
		allow := c.header.Get("Allow")
		w.Header().Set("Allow", allow)
		writeError(w, c.status, fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, allow))
	default:
		j.mux.ServeHTTP(w, r)
	}
}

// headerRecorder keeps the header and status a handler writes and drops its body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return len(b), nil
}

func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

// authorized requires the bearer token, when one is configured, on every method but GET
// and HEAD.
func (a *Agent) authorized(h http.Handler) http.Handler {
	if a.opts.AuthToken == "" {
		return h
	}
	want := []byte("Bearer " + a.opts.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			a.Drop("unknown", sampler.DropAuth, 1)
			w.Header().Set("WWW-Authenticate", `Bearer realm="hotkeyd"`)
			writeError(w, http.StatusUnauthorized, "authorization: this endpoint needs the header \"Authorization: Bearer TOKEN\" with the agent's auth.token")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Key is one key in the answers of GET /v1/topk and GET /v1/keys/{key}: the wire format
// that docs/api.md describes.
type Key struct {
	Key         string     `json:"key"`
	Rate        float64    `json:"rate"`
	Share       float64    `json:"share"`
	ReadRate    float64    `json:"read_rate"`
	WriteRate   float64    `json:"write_rate"`
	Hot         bool       `json:"hot"`
	HotSince    *time.Time `json:"hot_since"`
	PredictedBy []string   `json:"predicted_by"`
	Mitigations []string   `json:"mitigations"`
	// Extensions to the contract, documented in docs/api.md.
	BytesRate float64 `json:"bytes_rate,omitempty"`
	Counter   bool    `json:"counter,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
	Level     float64 `json:"level"`
	History   []Point `json:"history,omitempty"`
}

// TopK is the answer of GET /v1/topk.
type TopK struct {
	At            time.Time `json:"at"`
	WindowSeconds float64   `json:"window_seconds"`
	TotalRate     float64   `json:"total_rate"`
	ReadRate      float64   `json:"read_rate"`
	WriteRate     float64   `json:"write_rate"`
	DistinctKeys  uint64    `json:"distinct_keys"`
	HotKeys       int       `json:"hot_keys"`
	Keys          []Key     `json:"keys"`
}

// maxTopN bounds n in /v1/topk.
const maxTopN = 10000

func (a *Agent) topk(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n := 10
	if s := q.Get("n"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > maxTopN {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("n: %q is not allowed; use a whole number from 1 to %d (the agent keeps %d keys)", s, maxTopN, a.opts.Detector.K))
			return
		}
	}
	ranking := detector.All
	switch op := q.Get("op"); op {
	case "", "all":
	case "read":
		ranking = detector.Reads
	case "write":
		ranking = detector.Writes
	case "bytes":
		if !a.opts.Detector.Bytes {
			writeError(w, http.StatusBadRequest, "op: \"bytes\" needs the ranking by bytes, which is off; set detector.bytes: true")
			return
		}
		ranking = detector.Bytes
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("op: %q is not allowed; use all, read, write (or bytes, with detector.bytes on)", op))
		return
	}
	v := a.view.Load()
	snap := a.det.Snapshot(a.now(), ranking, n)
	total := snap.Rate(snap.Reads + snap.Writes)
	out := TopK{
		At:            snap.At.UTC(),
		WindowSeconds: snap.Covered.Seconds(),
		TotalRate:     total,
		ReadRate:      snap.Rate(snap.Reads),
		WriteRate:     snap.Rate(snap.Writes),
		DistinctKeys:  snap.Distinct,
		HotKeys:       v.hot,
		Keys:          make([]Key, 0, len(snap.Keys)),
	}
	for _, k := range snap.Keys {
		j := a.keyReply(v, k, snap.Rate(k.Reads), snap.Rate(k.Writes), total)
		j.BytesRate = snap.Rate(k.Bytes)
		out.Keys = append(out.Keys, j)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) keyReply(v *view, k detector.Key, readRate, writeRate, total float64) Key {
	j := Key{
		Key:         a.display(k.Key),
		Rate:        readRate + writeRate,
		ReadRate:    readRate,
		WriteRate:   writeRate,
		PredictedBy: v.predicted[k.Key],
		Mitigations: v.mitigations[k.Key],
		Counter:     k.Flags&detector.FlagCounter != 0,
		Truncated:   k.Flags&FlagTruncated != 0,
	}
	if j.Mitigations == nil {
		j.Mitigations = []string{}
	}
	if j.PredictedBy == nil {
		j.PredictedBy = []string{}
	}
	if total > 0 {
		j.Share = j.Rate / total
	}
	if l, ok := v.level(k.Key); ok {
		j.Level = l.Level
		j.Hot = l.Hot
		if l.Hot {
			since := l.HotSince.UTC()
			j.HotSince = &since
		}
	}
	return j
}

func (a *Agent) key(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if key == "" {
		writeError(w, http.StatusBadRequest, "key: empty; use /v1/keys/{key} with the key URL-escaped")
		return
	}
	v := a.view.Load()
	now := a.now()
	if a.opts.HashKeys {
		// The API shows hashes; accept a hash back, or the real key.
		key = a.unhash(v, now, key)
	}
	asked, truncated := key, false
	if len(key) > a.opts.MaxKeyBytes {
		key, truncated = key[:a.opts.MaxKeyBytes], true // as Accept stored it
	}
	covered, _ := a.det.Covered(now)
	reads, writes := a.det.Estimate([]byte(key))
	l, ranked := v.level(key)
	if reads == 0 && writes == 0 && !ranked && v.history[key] == nil && v.predicted[key] == nil && v.mitigations[key] == nil {
		// The sketch never under-counts: no request of this key in the window, and nothing
		// armed for it (a key an event predicts is shown before its traffic comes).
		writeError(w, http.StatusNotFound, fmt.Sprintf("key %q: no requests in the last %v, no history, not predicted nor mitigated; the key is matched byte for byte (escape it in the path: /v1/keys/score%%3Amatch42)", asked, covered.Round(time.Millisecond)))
		return
	}
	sec := covered.Seconds()
	k := detector.Key{Key: key, Reads: reads, Writes: writes}
	if ranked {
		k.Flags = l.Key.Flags
	}
	if truncated {
		k.Flags |= FlagTruncated
	}
	total := v.reads + v.writes
	j := a.keyReply(v, k, float64(reads)/sec, float64(writes)/sec, total)
	j.History = v.history[key]
	if j.History == nil {
		j.History = []Point{}
	}
	writeJSON(w, http.StatusOK, struct {
		At            time.Time `json:"at"`
		WindowSeconds float64   `json:"window_seconds"`
		Key
	}{now.UTC(), sec, j})
}

// unhash returns the key whose hash is name among the keys the API may have shown: the
// evaluated ranking, then every ranking of the detector (GET /v1/topk?op=read shows keys
// the combined ranking may lack); else name itself.
func (a *Agent) unhash(v *view, now time.Time, name string) string {
	for _, l := range v.levels {
		if a.display(l.Key.Key) == name {
			return l.Key.Key
		}
	}
	if !strings.HasPrefix(name, "h:") {
		return name
	}
	rankings := []int{detector.All, detector.Reads, detector.Writes}
	if a.opts.Detector.Bytes {
		rankings = append(rankings, detector.Bytes)
	}
	for _, r := range rankings {
		for _, k := range a.det.Keys(now, r, math.MaxInt) {
			if a.display(k.Key) == name {
				return k.Key
			}
		}
	}
	return name
}

func (a *Agent) healthz(w http.ResponseWriter, _ *http.Request) {
	// Alive while the evaluation loop runs: a stalled loop is a stuck agent. The view's
	// time keeps its monotonic reading, so a step of the wall clock neither hides a stall
	// nor makes one up.
	if last := a.view.Load().at; !last.IsZero() {
		if lag := a.now().Sub(last); lag > 5*time.Second+10*a.opts.Detector.Tick {
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("evaluation loop: last ran %v ago", lag.Round(time.Millisecond)))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (a *Agent) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, "not ready: starting or stopping")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// display returns the name shown for key: the key, or a short hash when HashKeys is on.
func (a *Agent) display(key string) string {
	if !a.opts.HashKeys {
		return key
	}
	return fmt.Sprintf("h:%012x", xxhash.Sum64String(key)>>16)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": strings.TrimSpace(msg)})
}
