package client

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// planServer stands in for the agent's GET /v1/plan, with its after/generated/wait
// semantics: the current plan at once without after or when its version (or, when asked,
// its generated) differs, else a wait for a new version, then 304. It is not a Redis
// fake: the tests' Redis is real.
type planServer struct {
	mu      sync.Mutex    // guards plan, changed, status, body and waiting
	plan    mitigate.Plan // the current plan
	changed chan struct{} // closed when plan or status changes
	status  int           // when not 0, every request gets this status and body
	body    []byte
	waiting int // long-polls waiting now
	srv     *httptest.Server
}

func startPlanServer(t testing.TB) *planServer {
	t.Helper()
	s := &planServer{changed: make(chan struct{}),
		plan: mitigate.Plan{Version: 1, Generated: time.Now(), Primaries: 1}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *planServer) URL() string { return s.srv.URL }

func (s *planServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/plan" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	p, changed := s.plan, s.changed
	s.mu.Unlock()
	if s.failed(w) {
		return
	}
	q := r.URL.Query()
	if a := q.Get("after"); a != "" {
		after, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			http.Error(w, "bad after", http.StatusBadRequest)
			return
		}
		wait, _ := time.ParseDuration(q.Get("wait"))
		var gen time.Time
		if g := q.Get("generated"); g != "" {
			if gen, err = time.Parse(time.RFC3339Nano, g); err != nil {
				http.Error(w, "bad generated", http.StatusBadRequest)
				return
			}
		}
		held := func(p mitigate.Plan) bool {
			return p.Version == after && (gen.IsZero() || p.Generated.Equal(gen))
		}
		if held(p) {
			s.mu.Lock()
			s.waiting++
			s.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-changed:
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
			if s.failed(w) { // fail was called during the wait
				return
			}
			s.mu.Lock()
			p = s.plan
			s.mu.Unlock()
		}
		if held(p) {
			w.Header().Set("ETag", strconv.Quote(a))
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(p.Version, 10)))
	json.NewEncoder(w).Encode(p)
}

// publish makes entries the next plan version.
func (s *planServer) publish(entries ...mitigate.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan = mitigate.Plan{Version: s.plan.Version + 1, Generated: planNow, Primaries: 3, Entries: entries}
	s.wakeLocked()
}

// waitingPolls returns how many long-polls are waiting for a new version now.
func (s *planServer) waitingPolls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// restart stands for an agent that stops and starts again with entries as its plan, at
// the version the client holds: a new agent counts versions from 1 again, so it can reach
// the client's version, with another plan, before the client asks again. With crash the
// connections are cut, as when the agent is killed; else waiting long-polls end, as when
// it stops.
func (s *planServer) restart(crash bool, entries ...mitigate.Entry) {
	s.mu.Lock()
	s.plan = mitigate.Plan{Version: s.plan.Version, Generated: s.plan.Generated.Add(time.Second), Primaries: 3, Entries: entries}
	s.wakeLocked()
	s.mu.Unlock()
	if crash {
		s.srv.CloseClientConnections()
	}
}

// fail makes every request answer status with body until fail(0, nil), a long-poll
// already waiting included: fail wakes it without changing the plan.
func (s *planServer) fail(status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
	s.wakeLocked()
}

// wakeLocked ends every waiting long-poll; s.mu must be held.
func (s *planServer) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// failed answers w with the failure set by fail, if any, and reports whether it did.
func (s *planServer) failed(w http.ResponseWriter) bool {
	s.mu.Lock()
	status, body := s.status, s.body
	s.mu.Unlock()
	if status == 0 {
		return false
	}
	w.WriteHeader(status)
	w.Write(body)
	return true
}

// planNow is the agent's clock in the test plans: leases are Expires − Generated, so its
// value does not matter.
var planNow = time.Date(2026, 3, 1, 20, 0, 0, 0, time.UTC)

func l1Entry(key string, ttl, lease time.Duration) mitigate.Entry {
	return mitigate.Entry{Key: key, Kind: mitigate.L1, Mode: mitigate.Enforce, Reason: "test",
		Since: planNow.Add(-time.Second), Expires: planNow.Add(lease), TTL: mitigate.Duration(ttl)}
}

func copiesEntry(key string, names []string, lease time.Duration) mitigate.Entry {
	e := mitigate.Entry{Key: key, Kind: mitigate.Copies, Mode: mitigate.Enforce, Reason: "test",
		Since: planNow.Add(-time.Second), Expires: planNow.Add(lease)}
	for _, n := range names {
		e.Copies = append(e.Copies, mitigate.Node{Name: n, Slot: mitigate.Slot(n)})
	}
	return e
}

// seeded returns a Rand for Options that is deterministic and safe for concurrent use.
func seeded(seed uint64) func() uint64 {
	var mu sync.Mutex // guards r
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()
	}
}

// fakeClock is a clock tests move by hand; it starts at a fixed instant.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var cmdstatGet = regexp.MustCompile(`cmdstat_get:calls=(\d+)`)

// redisGets returns how many GETs the servers at addrs have executed, summed.
func redisGets(t testing.TB, addrs ...string) int {
	t.Helper()
	n := 0
	for _, a := range addrs {
		out, err := redistest.Command(a, "", "INFO", "commandstats")
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", a, err)
		}
		if m := cmdstatGet.FindStringSubmatch(out); m != nil {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
	}
	return n
}

// redisGetsEach returns the GETs executed by each server at addrs.
func redisGetsEach(t testing.TB, addrs ...string) []int {
	t.Helper()
	var out []int
	for _, a := range addrs {
		out = append(out, redisGets(t, a))
	}
	return out
}

// attachCounted lets rdb's pool and cluster state settle (a PING, then a pause), counts
// the goroutines, and attaches a Client with opts that has its first plan. It returns the
// Client and the count from before Attach, for leaktest.Wait after Close.
func attachCounted(t *testing.T, rdb redis.UniversalClient, opts Options) (*Client, int) {
	t.Helper()
	ctx := context.Background()
	rdb.Ping(ctx)
	time.Sleep(50 * time.Millisecond)
	base := runtime.NumGoroutine()
	c, err := Attach(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.WaitPlan(wctx); err != nil {
		t.Fatal(err)
	}
	return c, base
}
