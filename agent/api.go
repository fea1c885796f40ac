package agent

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the HTTP API: /v1/samples, /v1/topk, /v1/keys/{key}, /v1/plan,
// /v1/registry, /v1/plan/overrides, /metrics, /healthz and /readyz.
//
// Every route names its methods, so that the mux answers HEAD as GET wherever GET is
// answered, and any method a route does not take (OPTIONS among them) with 405 and the
// Allow header, before the token is asked for: only the methods that change something
// need it, and only they go through the checks of mutating.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	samples := sampler.HTTPHandler(a, sampler.HTTPOptions{MaxBodyBytes: a.opts.MaxBodyBytes, MaxSamples: a.opts.MaxSamplesPerReport, Logger: a.log})
	mux.Handle("POST /v1/samples", a.mutating(samplesEndpoint, samples))
	mux.HandleFunc("GET /v1/topk", a.topk)
	mux.HandleFunc("GET /v1/keys/{key...}", a.key)
	mux.HandleFunc("GET /v1/plan", a.plan)
	mux.HandleFunc("GET /v1/nodes", a.nodes)
	events := http.HandlerFunc(a.registryAPI)
	mux.Handle("GET /v1/registry", events)
	mux.Handle("POST /v1/registry", a.mutating("/v1/registry", events))
	mux.Handle("GET /v1/registry/{id}", events)
	mux.Handle("PUT /v1/registry/{id}", a.mutating("/v1/registry/{id}", events))
	mux.Handle("DELETE /v1/registry/{id}", a.mutating("/v1/registry/{id}", events))
	overrides := http.HandlerFunc(a.overrides)
	mux.Handle("GET /v1/plan/overrides", overrides)
	mux.Handle("POST /v1/plan/overrides", a.mutating("/v1/plan/overrides", overrides))
	mux.Handle("DELETE /v1/plan/overrides/{key...}", a.mutating("/v1/plan/overrides/{key}", overrides))
	mux.Handle("DELETE /v1/plan/overrides", a.mutating("/v1/plan/overrides/{key}", overrides)) // key missing: 400
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{Registry: a.opts.Registry}))
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	return jsonErrors{mux, a.opts.BodyTimeout}
}

// samplesEndpoint is the endpoint label of POST /v1/samples: the one whose refusals are
// dropped samples.
const samplesEndpoint = "/v1/samples"

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
	r = literalKey(r)
	w = &noRedirect{ResponseWriter: w, r: r}
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

// keyPrefixes are the paths whose rest, to the end, is a key.
var keyPrefixes = [...]string{"/v1/keys/", "/v1/plan/overrides/"}

// literalKey lets a key name itself in the path whatever it holds: the mux cleans a path
// before it routes it, and would send /v1/keys/page:https://ex.com/a (slashes unescaped)
// to /v1/keys/page:https:/ex.com/a, another key. The rest of a key route's path is
// escaped whole, dots too, so that the mux reads back the key as it was sent.
func literalKey(r *http.Request) *http.Request {
	esc := r.URL.EscapedPath()
	for _, prefix := range keyPrefixes {
		rest, ok := strings.CutPrefix(esc, prefix)
		if !ok {
			continue
		}
		key, err := url.PathUnescape(rest)
		if err != nil {
			return r
		}
		u := *r.URL
		u.Path = prefix + key
		u.RawPath = prefix + strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
		r2 := *r
		r2.URL = &u
		return &r2
	}
	return r
}

// noRedirect answers the mux's redirects — to a path's clean form (//v1/topk), or to the
// path with a slash added (GET /v1/keys) — as a 404 in the API's error format: a client
// that follows one may ask for another key, or see a DELETE do nothing. No handler of
// the API redirects.
type noRedirect struct {
	http.ResponseWriter
	r       *http.Request
	dropped bool // the redirect's body
}

func (n *noRedirect) WriteHeader(status int) {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		to := n.Header().Get("Location")
		n.Header().Del("Location")
		n.dropped = true
		writeError(n.ResponseWriter, http.StatusNotFound, fmt.Sprintf("path %q: no such endpoint for %s; the agent does not redirect, and the nearest path is %q; see docs/api.md", n.r.URL.Path, n.r.Method, to))
		return
	}
	n.ResponseWriter.WriteHeader(status)
}

func (n *noRedirect) Write(b []byte) (int, error) {
	if n.dropped {
		return len(b), nil
	}
	return n.ResponseWriter.Write(b)
}

// Unwrap gives http.NewResponseController the writer underneath.
func (n *noRedirect) Unwrap() http.ResponseWriter { return n.ResponseWriter }

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

// mutating guards the routes of the methods that change something (POST /v1/samples
// among them). In this order, it refuses:
//
//   - with 403, a request from a web page: one with an Origin or a Sec-Fetch-Site header.
//     Browsers send Origin with every POST, PUT and DELETE (and Sec-Fetch-Site with every
//     request to a loopback or https address); page scripts can neither remove nor set
//     them; and no client of the agent (the SDK, hotkeyd top and registry, curl, other
//     languages' senders) sends them. Without this, a page a developer visits could post
//     to the agent on loopback: a form or a fetch with Content-Type text/plain needs no
//     preflight, and DNS rebinding would pass any comparison of Origin with Host.
//   - with 401, a request without the bearer token, when one is configured.
//   - with 415, a body in a Content-Encoding other than identity (the handler of
//     /v1/samples checks its own, to count the report as dropped).
//
// A 403 or 401 counts in hotkeyd_http_unauthorized_total{endpoint}, endpoint being one of
// the few route names Handler passes; on POST /v1/samples it also counts as a dropped
// sample (source "unknown", reason auth), as a refused UDP datagram does, and nothing
// else does.
func (a *Agent) mutating(endpoint string, h http.Handler) http.Handler {
	refused := a.metrics.unauthorized.WithLabelValues(endpoint) // the series exists from the start
	refuse := func(w http.ResponseWriter, status int, msg string) {
		refused.Inc()
		if endpoint == samplesEndpoint {
			a.Drop("unknown", sampler.DropAuth, 1)
		}
		writeError(w, status, msg)
	}
	want := []byte(a.opts.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header["Origin"] != nil || r.Header["Sec-Fetch-Site"] != nil { // any value, even empty
			refuse(w, http.StatusForbidden, "requests from web pages are refused: this one carries an Origin or Sec-Fetch-Site header, "+
				"which browsers send; the agent's clients (the SDK, hotkeyd, curl) send neither")
			return
		}
		if len(want) > 0 {
			token, ok := bearer(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare([]byte(token), want) != 1 || !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hotkeyd"`)
				msg := "authorization: this endpoint needs the header \"Authorization: Bearer TOKEN\" with the agent's auth.token"
				if ok {
					msg = "authorization: the bearer token is not the agent's auth.token"
				}
				refuse(w, http.StatusUnauthorized, msg)
				return
			}
		}
		if endpoint != samplesEndpoint && r.Method != http.MethodDelete {
			if err := sampler.CheckContentEncoding(r.Header); err != nil {
				writeError(w, http.StatusUnsupportedMediaType, err.Error())
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// bearer returns the token of an Authorization header value in the Bearer scheme, and
// whether the value is in that scheme: "Bearer" in any case (RFC 7235 §2.1), one or more
// spaces, the token (RFC 6750 §2.1).
func bearer(v string) (string, bool) {
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// Key is one key in the answers of GET /v1/topk and GET /v1/keys/{key}: the wire format
// that docs/api.md describes.
type Key struct {
	Key string `json:"key"`
	// KeyB64 is the key's bytes in standard base64 when they are not valid UTF-8 (a
	// binary key), which Key can show only lossily; empty, and left out, otherwise and
	// when names are hashed. An extension, documented in docs/api.md.
	KeyB64      string     `json:"key_b64,omitempty"`
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
	// Slot and Primary place the key in Redis, when redis.addrs is set: its hash slot
	// (in a cluster only) and the primary that owns it. Both are left out for a
	// truncated key whose shown part does not decide its slot.
	Slot    *int    `json:"slot,omitempty"`
	Primary string  `json:"primary,omitempty"`
	Level   float64 `json:"level"`
	History []Point `json:"history,omitempty"`
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
	// At most K: each shard ranks its own K keys, and past the K-th of all their union
	// can lack keys heavier than some it holds.
	snap := a.det.Snapshot(a.now(), ranking, min(n, a.opts.Detector.K))
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
		KeyB64:      a.displayB64(k.Key),
		Rate:        readRate + writeRate,
		ReadRate:    readRate,
		WriteRate:   writeRate,
		PredictedBy: v.predicted[k.Key],
		Mitigations: v.mitigations[k.Key],
		Counter:     k.Flags&detector.FlagCounter != 0,
		Truncated:   k.Flags&FlagTruncated != 0,
	}
	j.Slot, j.Primary = a.placement(k.Key, k.Flags)
	if j.Mitigations == nil {
		j.Mitigations = []string{}
	}
	if j.PredictedBy == nil {
		j.PredictedBy = []string{}
	}
	if total > 0 {
		// At most 1 even if the window moved on between reading the key and the total.
		j.Share = min(j.Rate/total, 1)
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

// key answers GET /v1/keys/{key}, or GET /v1/keys/?key_b64=BASE64 for a key that is not
// UTF-8 (as /v1/topk lists it).
func (a *Agent) key(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	b64, named := r.URL.Query()["key_b64"] // key_b64= names the empty key, which Redis allows
	if named {
		if key != "" || len(b64) != 1 {
			writeError(w, http.StatusBadRequest, "key_b64: give the key once: either in the path (/v1/keys/{key}) or as /v1/keys/?key_b64=BASE64")
			return
		}
		b, err := decodeB64(b64[0])
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("key_b64: %q is not base64: %v; send the key's bytes in standard base64 (as key_b64 in /v1/topk), URL-escaped", b64[0], err))
			return
		}
		key = string(b)
	}
	if key == "" && !named {
		writeError(w, http.StatusBadRequest, "key: empty; use /v1/keys/{key} with the key URL-escaped, /v1/keys/?key_b64=BASE64, or /v1/keys/?key_b64= for the empty key")
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
	// The key's counts and the totals come from the detector at this moment, over the
	// same span, as in GET /v1/topk: the view's totals are those of the last evaluation,
	// which trail the sketch by up to a tick (a share over 1). The key first: traffic that
	// comes in between can only lower its share.
	reads, writes := a.det.Estimate([]byte(key))
	snap := a.det.Ranked(now, detector.All, 1)
	l, ranked := v.level(key)
	if reads == 0 && writes == 0 && !ranked && v.history[key] == nil && v.predicted[key] == nil && v.mitigations[key] == nil {
		// The sketch never under-counts: no request of this key in the window, and nothing
		// armed for it (a key an event predicts is shown before its traffic comes).
		writeError(w, http.StatusNotFound, fmt.Sprintf("key %q: no requests in the last %v, no history, not predicted nor mitigated; the key is matched byte for byte (escape it in the path: /v1/keys/score%%3Amatch42)", asked, snap.Covered.Round(time.Millisecond)))
		return
	}
	k := detector.Key{Key: key, Reads: reads, Writes: writes}
	if ranked {
		k.Flags = l.Key.Flags
	}
	if truncated {
		k.Flags |= FlagTruncated
	}
	j := a.keyReply(v, k, snap.Rate(reads), snap.Rate(writes), snap.Rate(snap.Reads+snap.Writes))
	history := v.history[key]
	if history == nil {
		history = []Point{} // always in this answer, [] for a key with none
	}
	writeJSON(w, http.StatusOK, struct {
		At            time.Time `json:"at"`
		WindowSeconds float64   `json:"window_seconds"`
		Key
		History []Point `json:"history"` // over Key's, which /v1/topk leaves out
	}{now.UTC(), snap.Covered.Seconds(), j, history})
}

// decodeB64 decodes the key_b64 parameter: standard base64, as the API writes it; also
// unpadded, or in the URL alphabet. A "+" sent unescaped in the query reads as a space,
// which base64 never holds: it is taken back as "+".
func decodeB64(s string) ([]byte, error) {
	s = strings.ReplaceAll(s, " ", "+")
	b, err := base64.StdEncoding.DecodeString(s)
	if err == nil {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err2 := enc.DecodeString(s); err2 == nil {
			return b, nil
		}
	}
	return nil, err
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
		for _, k := range a.det.Ranked(now, r, math.MaxInt).Keys {
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

// displayB64 returns the key in standard base64 when it is not valid UTF-8 and names are
// shown (not hashed); else "".
func (a *Agent) displayB64(key string) string {
	if a.opts.HashKeys || utf8.ValidString(key) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(key))
}

// writeJSON writes a successful answer, indented for people reading it with curl.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError writes every {"error":"…"} body of the API, whatever the status, with the
// function POST /v1/samples answers with too: one format for every error.
func writeError(w http.ResponseWriter, status int, msg string) {
	sampler.WriteJSONError(w, status, msg)
}

// readBody reads r's body, of at most limit bytes. Past the limit it answers 413, naming
// the limit and what the body holds (what: "an event"); on another read error, 400. False
// when it answered.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, what string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: over %d bytes; %s is a small JSON document", limit, what))
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("body: reading it: %v", err))
		return nil, false
	}
	return body, true
}
