package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/client"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// Settings of the fleet test, short so that it runs in seconds: the grace period of the
// executors is the plan's lease.
const (
	fleetLease       = 3 * time.Second
	fleetCopyRefresh = 200 * time.Millisecond
	// fleetStaleBound is how long after a write through the SDK a read may still see an
	// older value: docs/plan.md bounds it by RefreshPeriod + one round (a refresh that
	// DUMPed the original just before the write RESTOREs the old value over the copies
	// the SDK just wrote), here with room for a busy 2-core machine.
	fleetStaleBound = fleetCopyRefresh + 800*time.Millisecond
)

// TestFleetSharedCluster runs the recommended deployment: two app processes, each with its
// own hotkeyd agent (sidecar), both agents on one 3-primary Redis Cluster and sharing the
// registry in it. An event registered through A's API for key K, with copies enforced:
//
//  1. B arms it too (shared registry): its plan splits K, predicted by the event;
//  2. K's copies exist on 3 distinct primaries, both agents name the same ones, both apps
//     read through them, and every read through either app returns the value last
//     written through either app (within the documented refresh bound);
//  3. B restarts (SIGTERM, start again) while A runs: A's copies exist at every sample
//     (every 50 ms) across B's stop, its start and its second scan one grace period
//     later, and reads stay correct;
//  4. the event is deleted through B's API: both agents disarm it within seconds, and the
//     copies are gone after the grace period.
func TestFleetSharedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and two agents, restarts one: about 20 s")
	}
	testStart := time.Now()
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()

	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	quoted := make([]string, 0, 3)
	for _, a := range cl.Addrs() {
		quoted = append(quoted, strconv.Quote(a))
	}
	// L1 only observed: with it, an app may read a value up to 1 s old after another
	// app's write (its documented trade-off), which would hide what copies do.
	yaml := fmt.Sprintf(`redis:
  addrs: [%s]
mitigate:
  modes:
    l1: observe
    copies: enforce
  min_active: 1s
  cool_down: 1s
  lease: %v
  copy_refresh: %v
`, strings.Join(quoted, ", "), fleetLease, fleetCopyRefresh)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	addrA, addrB := freeAddr(t), freeAddr(t)
	argsA := []string{"--config", cfg, "--http-listen", addrA, "--udp-listen", addrA}
	argsB := []string{"--config", cfg, "--http-listen", addrB, "--udp-listen", addrB}
	agentA := startServe(t, nil, argsA...)
	agentB := startServe(t, nil, argsB...)
	baseA, baseB := "http://"+addrA, "http://"+addrB

	// The apps: one go-redis ClusterClient each, with the SDK following its own agent.
	newApp := func(name, agent string) (*redis.ClusterClient, *client.Client) {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		c, err := client.Attach(rdb, client.Options{Agent: agent, Source: name, SampleEvery: 1, PlanWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Close()
			rdb.Close()
		})
		return rdb, c
	}
	rdbA, appA := newApp("app-a", baseA)
	rdbB, appB := newApp("app-b", baseB)
	probe := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) // no SDK
	t.Cleanup(func() { probe.Close() })

	const key, event = "fleet:score:42", "fleet-sale"
	h := &fleetHistory{}
	if err := h.set(ctx, probe, key, 0); err != nil {
		t.Fatal(err)
	}

	// Traffic: two readers per app, and one writer that writes 1, 2, 3… through the apps
	// its mode names. Every loop ends by itself at the deadline as well.
	deadline := time.Now().Add(55 * time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var via atomic.Int32 // writer mode: viaNone, viaBoth, viaA
	apps := []*redis.ClusterClient{rdbA, rdbB}
	running := func() bool {
		select {
		case <-stop:
			return false
		default:
			return time.Now().Before(deadline)
		}
	}
	for _, rdb := range apps {
		for range 2 {
			wg.Go(func() {
				for running() {
					h.read(ctx, rdb, key)
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	wg.Go(func() {
		for i := 0; running(); i++ {
			time.Sleep(25 * time.Millisecond)
			switch via.Load() {
			case viaBoth:
				h.writeNext(ctx, apps[i%2], key)
			case viaA:
				h.writeNext(ctx, rdbA, key)
			}
		}
	})
	stopTraffic := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	t.Cleanup(stopTraffic)

	// The event, through A's API: K is read 200k/s, beyond one node's 100k/s.
	now := time.Now()
	ev := fmt.Sprintf(`{"id":%q,"patterns":[%q],"start":%q,"end":%q,"expected_read_rate":200000,"mitigations":["copies"]}`,
		event, key, now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	if code, body := httpDo(t, http.MethodPost, baseA+"/v1/registry", ev); code != http.StatusCreated {
		t.Fatalf("POST /v1/registry on A: %d %s; want 201", code, body)
	}

	// (1) Both agents arm the event and split K: the same 3 copies.
	var copiesA, copiesB []mitigate.Node
	eventually(t, "A and B to split "+key+" into copies, predicted by "+event, func() bool {
		copiesA = agentCopies(baseA, key, event)
		copiesB = agentCopies(baseB, key, event)
		return copiesA != nil && copiesB != nil
	})
	if !slices.Equal(copiesA, copiesB) {
		t.Fatalf("copies in A's plan %v, in B's %v; want the same names on the same primaries", copiesA, copiesB)
	}
	for _, base := range []string{baseA, baseB} {
		m, err := httpGet(base + "/metrics")
		if err != nil || !strings.Contains(m, `hotkeyd_event_expected_rate{event="`+event+`"`) {
			t.Errorf("%s/metrics has no hotkeyd_event_expected_rate series of %s (err %v); want it while armed", base, event, err)
		}
	}

	// (2) Copies on distinct primaries, checked on each primary directly.
	primaries := map[string]bool{}
	for _, n := range copiesA {
		primaries[n.Primary] = true
	}
	if len(copiesA) != 3 || len(primaries) != 3 {
		t.Fatalf("copies %v; want 3, on 3 distinct primaries", copiesA)
	}
	eventually(t, "every copy to exist on its primary", func() bool {
		for _, n := range copiesA {
			if onPrimary(ctx, n) != 1 {
				return false
			}
		}
		return true
	})
	eventually(t, "both apps to hold the copies entry", func() bool {
		return appCopies(appA, key) && appCopies(appB, key)
	})
	before := [2]client.CopyStats{appA.Stats().Copies, appB.Stats().Copies}
	via.Store(viaBoth)
	time.Sleep(2 * time.Second)
	for i, c := range []*client.Client{appA, appB} {
		st := c.Stats().Copies
		if st.Reads <= before[i].Reads || st.Mirrors <= before[i].Mirrors {
			t.Errorf("app %d copy stats %+v, before %+v; want reads from copies and writes mirrored to them", i, st, before[i])
		}
	}
	h.report(t, "with both apps writing and reading")

	// (3) B restarts while A runs. Only A's app writes meanwhile: B's app, without a
	// plan once its lease runs out, writes the original alone, like any client that
	// bypasses the SDK (docs/plan.md: stale copies until the next refresh).
	via.Store(viaA)
	time.Sleep(100 * time.Millisecond) // let a write through B in flight finish
	var samples, missing atomic.Int64
	var firstMissing atomic.Value
	sampleStop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for running() {
			for _, n := range copiesA {
				samples.Add(1)
				if v, err := probe.Exists(ctx, n.Name).Result(); err != nil || v != 1 {
					if missing.Add(1) == 1 {
						firstMissing.Store(fmt.Sprintf("%s at %v: EXISTS %d, %v", n.Name, time.Since(testStart).Round(time.Millisecond), v, err))
					}
				}
			}
			select {
			case <-sampleStop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	fallbacksA := appA.Stats().Copies.Fallbacks
	time.Sleep(300 * time.Millisecond)
	if err := agentB.signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("B after SIGTERM: %v; want exit status 0\n%s", err, agentB.log)
	}
	if !strings.Contains(agentB.log.String(), "action=copy_kept_claimed") {
		t.Errorf("B's stop logged no copy_kept_claimed; want its copies left to A, which claims them:\n%s", agentB.log)
	}
	time.Sleep(500 * time.Millisecond) // B away for a while
	agentB = startServe(t, nil, argsB...)
	restarted := time.Now()
	eventually(t, "B to split "+key+" again after its restart", func() bool {
		return slices.Equal(agentCopies(baseB, key, event), copiesA)
	})
	// Past B's second scan for leftovers, one grace period after its start.
	time.Sleep(time.Until(restarted.Add(fleetLease + 1500*time.Millisecond)))
	close(sampleStop)
	sampler.Wait()
	if n := missing.Load(); n > 0 {
		t.Errorf("%d of %d samples of A's copies found one missing across B's restart; want none (first: %v)", n, samples.Load(), firstMissing.Load())
	}
	if f := appA.Stats().Copies.Fallbacks - fallbacksA; f > 0 {
		t.Errorf("A's app fell back to the original %d times across B's restart; want none (its copies exist)", f)
	}
	t.Logf("B's restart: %d samples of A's copies, %d missing", samples.Load(), missing.Load())
	h.report(t, "across B's restart")
	eventually(t, "B's app to hold the copies entry again", func() bool { return appCopies(appB, key) })
	via.Store(viaBoth)
	time.Sleep(time.Second)
	h.report(t, "after B's restart")

	// (4) The event, deleted through B's API: both disarm it and the copies go.
	deleted := time.Now()
	if code, body := httpDo(t, http.MethodDelete, baseB+"/v1/registry/"+event, ""); code/100 != 2 {
		t.Fatalf("DELETE /v1/registry/%s on B: %d %s; want 2xx", event, code, body)
	}
	for _, base := range []string{baseA, baseB} {
		eventually(t, base+" to disarm "+event, func() bool {
			m, err := httpGet(base + "/metrics")
			return err == nil && !strings.Contains(m, `hotkeyd_event_expected_rate{event="`+event+`"`) &&
				agentCopies(base, key, "") == nil
		})
	}
	disarmed := time.Since(deleted)
	if disarmed > 5*time.Second {
		t.Errorf("both agents disarmed %s %v after its deletion; want within 5 s", event, disarmed)
	}
	eventually(t, "K's copies to be gone from every primary", func() bool {
		for _, n := range copiesA {
			if onPrimary(ctx, n) != 0 {
				return false
			}
		}
		return true
	})
	gone := time.Since(deleted)
	// They stay gone for a grace period: no agent or app writes them again.
	time.Sleep(fleetLease)
	for _, n := range copiesA {
		if v := onPrimary(ctx, n); v != 0 {
			t.Errorf("copy %s on %s: EXISTS %d a grace period after it was deleted; want 0", n.Name, n.Primary, v)
		}
	}
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		left, err := c.Keys(ctx, "{hk:copy*").Result()
		c.Close()
		if err != nil || len(left) > 0 {
			t.Errorf("primary %s holds copies %q (err %v); want none", addr, left, err)
		}
	}
	stopTraffic()
	h.report(t, "after the event's deletion")
	t.Logf("disarmed by both %v after the deletion, copies gone after %v; %d writes; test took %v",
		disarmed.Round(time.Millisecond), gone.Round(time.Millisecond), h.started.Load(), time.Since(testStart).Round(time.Millisecond))
	for _, p := range []*serveProc{agentA, agentB} {
		if err := p.signal(t, syscall.SIGTERM); err != nil {
			t.Errorf("agent after SIGTERM: %v; want exit status 0\n%s", err, p.log)
		}
	}
}

// Writer modes of TestFleetSharedCluster.
const (
	viaNone = iota
	viaBoth
	viaA
)

// fleetHistory is the history of one key's values: the writer writes 0, 1, 2… one at a
// time, and every read is checked against the writes that had returned before it began.
type fleetHistory struct {
	started  atomic.Int64 // the highest value whose write began
	floor    atomic.Int64 // the highest value whose write returned
	mu       sync.Mutex   // guards returned and the fields below
	returned []time.Time  // returned[n]: when the write of n returned
	reads    int
	stale    int           // reads older than a write that had returned, within the bound
	maxStale time.Duration // the longest such staleness
	problems []string      // reads that were wrong; at most 10 kept
	nproblem int
	reported int // nproblem at the last report
}

// writeNext writes the next value through rdb; a failure is a problem.
func (h *fleetHistory) writeNext(ctx context.Context, rdb redis.Cmdable, key string) {
	if err := h.set(ctx, rdb, key, h.started.Load()+1); err != nil {
		h.problem(err.Error())
	}
}

// set writes n, the next value, through rdb and records when the write returned.
func (h *fleetHistory) set(ctx context.Context, rdb redis.Cmdable, key string, n int64) error {
	h.started.Store(n)
	err := rdb.Set(ctx, key, n, 0).Err()
	h.mu.Lock()
	h.returned = append(h.returned, time.Now())
	h.mu.Unlock()
	h.floor.Store(n)
	if err != nil {
		return fmt.Errorf("SET %s %d: %v", key, n, err)
	}
	return nil
}

// read reads key through rdb and checks the value: never one not written yet, and one
// older than the last write returned before the read began only within fleetStaleBound
// of that write.
func (h *fleetHistory) read(ctx context.Context, rdb redis.Cmdable, key string) {
	floor := h.floor.Load()
	at := time.Now()
	s, err := rdb.Get(ctx, key).Result()
	started := h.started.Load()
	if err != nil {
		h.problem(fmt.Sprintf("GET %s: %v", key, err))
		return
	}
	v, err := strconv.ParseInt(s, 10, 64)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	switch {
	case err != nil || v > started:
		h.problemLocked(fmt.Sprintf("GET %s = %q: never written (highest write begun %d)", key, s, started))
	case v < floor:
		// The write of v+1 had returned before the read began.
		late := at.Sub(h.returned[v+1])
		h.stale++
		h.maxStale = max(h.maxStale, late)
		if late > fleetStaleBound {
			h.problemLocked(fmt.Sprintf("GET %s = %d, %v after the write of %d returned; want a value written since, or within %v",
				key, v, late.Round(time.Millisecond), v+1, fleetStaleBound))
		}
	}
}

func (h *fleetHistory) problem(msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.problemLocked(msg)
}

func (h *fleetHistory) problemLocked(msg string) {
	h.nproblem++
	if len(h.problems) < 10 {
		h.problems = append(h.problems, msg)
	}
}

// report fails t with the problems seen since the last report, and logs the counts.
func (h *fleetHistory) report(t *testing.T, phase string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("%s: %d reads so far, %d writes, %d stale within the bound (longest %v)",
		phase, h.reads, h.started.Load(), h.stale, h.maxStale.Round(time.Millisecond))
	if n := h.nproblem - h.reported; n > 0 {
		t.Errorf("%s: %d wrong reads or failed commands; want none. First ones: %q", phase, n, h.problems)
	}
	h.reported = h.nproblem
}

// agentCopies returns the copies of key in the agent's plan, enforced and, unless event
// is "", predicted by event; nil when there are none.
func agentCopies(base, key, event string) []mitigate.Node {
	body, err := httpGet(base + "/v1/plan")
	if err != nil {
		return nil
	}
	p, err := mitigate.DecodePlan([]byte(body))
	if err != nil {
		return nil
	}
	for _, e := range p.Entries {
		if e.Key == key && e.Kind == mitigate.Copies && e.Mode == mitigate.Enforce &&
			(event == "" || slices.Contains(e.PredictedBy, event)) {
			return e.Copies
		}
	}
	return nil
}

// appCopies reports whether the app's SDK holds an enforced copies entry for key.
func appCopies(c *client.Client, key string) bool {
	p, ok := c.Plan()
	if !ok {
		return false
	}
	for _, e := range p.Entries {
		if e.Key == key && e.Kind == mitigate.Copies && e.Mode == mitigate.Enforce {
			return true
		}
	}
	return false
}

// onPrimary returns EXISTS of the node's name asked of its primary directly (which
// answers MOVED if the slot were not its own), or -1 on error.
func onPrimary(ctx context.Context, n mitigate.Node) int64 {
	c := redis.NewClient(&redis.Options{Addr: n.Primary})
	defer c.Close()
	v, err := c.Exists(ctx, n.Name).Result()
	if err != nil {
		return -1
	}
	return v
}

// httpDo sends a request with body (JSON) and returns the status and body.
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
