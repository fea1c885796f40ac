package agent

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/detector"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// flow is steady traffic on one key: rate requests/s of op, reported 1 in 1/sampleRate.
type flow struct {
	key        string
	write      bool
	rate       float64
	sampleRate float64 // 0: 1 (every request reported)
}

// drive sends the flows for d in 10 ms steps; with eval, it evaluates at every tick
// boundary as the loop does, else the loop is lagging and never runs.
func drive(a *Agent, c *clock, d time.Duration, eval bool, flows ...flow) {
	const step = 10 * time.Millisecond
	carry := make([]float64, len(flows))
	for el := time.Duration(0); el < d; el += step {
		for i, f := range flows {
			sr := f.sampleRate
			if sr == 0 {
				sr = 1
			}
			carry[i] += f.rate * step.Seconds() * sr
			n := math.Floor(carry[i])
			carry[i] -= n
			if n == 0 {
				continue
			}
			op := sampler.OpRead
			if f.write {
				op = sampler.OpWrite
			}
			a.Accept(sampler.Batch{Source: fmt.Sprint("src-", sr), Rate: sr, Samples: []sampler.Sample{{Key: []byte(f.key), Op: op, Count: uint32(n)}}})
		}
		c.add(step)
		if eval && c.now().Sub(t0)%a.opts.Detector.Tick == 0 {
			a.evaluate()
		}
	}
}

func topkOf(t *testing.T, h http.Handler, query string) TopK {
	t.Helper()
	w := do(t, h, "GET", "/v1/topk?"+query, "")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /v1/topk?%s: %d %s", query, w.Code, w.Body)
	}
	return decode[TopK](t, w)
}

func findKey(keys []Key, name string) (Key, bool) {
	for _, k := range keys {
		if k.Key == name {
			return k, true
		}
	}
	return Key{}, false
}

// gaugeValue reads an unlabelled gauge from a real gathering of the registry.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

// TestLateTickNoPhantomHot: a key read steadily at 800/s (under the 1,000/s threshold)
// while the evaluation loop runs 400 ms late once. The late evaluation must not flag it:
// its rate is over the 500 ms the current tick really holds. 30 other keys at 600/s keep
// every share under 5 %.
func TestLateTickNoPhantomHot(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	flows := []flow{{key: "steady", rate: 800}}
	for i := range 30 {
		flows = append(flows, flow{key: fmt.Sprint("bg:", i), rate: 600})
	}
	drive(a, c, 2*time.Second, true, flows...)
	drive(a, c, 400*time.Millisecond, false, flows...)
	a.evaluate()
	got := topkOf(t, h, "n=1")
	k, ok := findKey(got.Keys, "steady")
	if !ok {
		t.Fatalf("steady not in the top-k: %+v", got.Keys)
	}
	want := 800.0 / 18800 / 0.05 // its share, 4.3 %, is nearer its 5 % threshold than its rate
	if k.Hot || math.Abs(k.Level-want) > 0.01 || math.Abs(k.ReadRate-800) > 8 {
		t.Errorf("after the loop lagged 400ms: read_rate %v level %v hot %v; want 800, %.3f, not hot", k.ReadRate, k.Level, k.Hot, want)
	}
	if n := testutil.ToFloat64(a.metrics.changes.WithLabelValues("hot")); n != 0 {
		t.Errorf("%v transitions to hot; want 0", n)
	}
}

// TestHotKeysGaugeMatchesTopK: a hot key pushed out of the top-k by two heavier ones is no
// longer shown; hot_keys in /v1/topk and the hotkeyd_hot_keys gauge count the keys flagged
// in the ranking, not one that nobody can see.
func TestHotKeysGaugeMatchesTopK(t *testing.T) {
	a, c, h := newTestAgent(t, Options{Detector: detector.Options{K: 2}})
	drive(a, c, time.Second, true, flow{key: "first", rate: 3000})
	if k, _ := findKey(topkOf(t, h, "n=2").Keys, "first"); !k.Hot {
		t.Fatalf("first at 3,000/s not hot")
	}
	// Within half a second first is out of the ranking, and not yet cooled (10 ticks).
	drive(a, c, 500*time.Millisecond, true,
		flow{key: "first", rate: 3000}, flow{key: "big1", rate: 20000}, flow{key: "big2", rate: 15000})
	got := topkOf(t, h, "n=2")
	flagged := 0
	for _, k := range got.Keys {
		if k.Hot {
			flagged++
		}
	}
	if flagged != 2 {
		t.Fatalf("top-k %+v; want big1 and big2, hot", got.Keys)
	}
	if got.HotKeys != flagged {
		t.Errorf("hot_keys %d; want %d, the keys flagged in the top-k", got.HotKeys, flagged)
	}
	if g := gaugeValue(t, a.Registry(), "hotkeyd_hot_keys"); g != float64(flagged) {
		t.Errorf("hotkeyd_hot_keys %v; want %d", g, flagged)
	}
}

// TestKeyNeverSeen: /v1/keys/{key} for a key with no traffic in the window and no history
// answers 404 with a message naming the key, with and without hash_keys.
func TestKeyNeverSeen(t *testing.T) {
	for _, hash := range []bool{false, true} {
		a, c, h := newTestAgent(t, Options{HashKeys: hash})
		drive(a, c, time.Second, true, flow{key: "seen", rate: 500})
		for _, name := range []string{"never:seen", "h:0123456789ab"} {
			w := do(t, h, "GET", "/v1/keys/"+url.PathEscape(name), "")
			if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"error"`) || !strings.Contains(w.Body.String(), name) {
				t.Errorf("hash_keys %v: GET /v1/keys/%s: %d %s; want 404 with an error naming the key", hash, name, w.Code, w.Body)
			}
		}
		seen := a.display("seen")
		if w := do(t, h, "GET", "/v1/keys/"+seen, ""); w.Code != http.StatusOK {
			t.Errorf("hash_keys %v: GET /v1/keys/%s: %d %s; want 200", hash, seen, w.Code, w.Body)
		}
	}
}

// TestKeyLookupLongKey: a key longer than max_key_bytes is stored cut; /v1/keys/{key}
// answers for the cut key and says so, ranked or not.
func TestKeyLookupLongKey(t *testing.T) {
	long := strings.Repeat("x", 40) + "/tail ü"
	a, c, h := newTestAgent(t, Options{MaxKeyBytes: 16, Detector: detector.Options{K: 1, Shards: 1}})
	drive(a, c, time.Second, true, flow{key: long, rate: 200}, flow{key: "heavy", rate: 5000})
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/"+url.PathEscape(long), ""))
	if k.Key != long[:16] || !k.Truncated || math.Abs(k.ReadRate-200) > 2 {
		t.Errorf("unranked long key: %+v; want key %q, truncated, read_rate 200", k, long[:16])
	}
}

func delayCount(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "hotkeyd_detection_delay_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// TestOverrideHysteresis: a score:* key (hot at 5,000/s by its override) turns hot once,
// keeps hot_since while it stays over 70 % of 5,000 and when it re-heats while cooling,
// cools below 3,500/s although that is far over the default's cool line (700/s), and its
// next episode has a new hot_since; the delay histogram counts each episode once. A key
// under the longer prefix score:final* is held to that one's 20,000/s.
func TestOverrideHysteresis(t *testing.T) {
	r := detector.DefaultRules()
	r.Overrides = []detector.Override{
		{Pattern: "score:*", Read: detector.Threshold{Rate: 5000, Share: 0.9}},
		{Pattern: "score:final*", Read: detector.Threshold{Rate: 20000, Share: 0.9}},
	}
	a, c, h := newTestAgent(t, Options{Rules: &r})
	bg := flow{key: "bg", rate: 100_000, sampleRate: 0.01} // keeps every other share low
	state := func(name string) Key {
		t.Helper()
		w := do(t, h, "GET", "/v1/keys/"+url.PathEscape(name), "")
		if w.Code != http.StatusOK {
			t.Fatalf("GET /v1/keys/%s: %d %s", name, w.Code, w.Body)
		}
		return decode[Key](t, w)
	}
	drive(a, c, 2*time.Second, true, bg, flow{key: "score:m1", rate: 6000}, flow{key: "score:final:1", rate: 6000})
	k := state("score:m1")
	if !k.Hot || k.HotSince == nil {
		t.Fatalf("score:m1 at 6,000/s: %+v; want hot", k)
	}
	since := *k.HotSince
	if f := state("score:final:1"); f.Hot || math.Abs(f.Level-0.3) > 0.01 {
		t.Errorf("score:final:1 at 6,000/s: hot %v level %v; want not hot, level 0.3 (20,000/s, the longest prefix)", f.Hot, f.Level)
	}
	drive(a, c, 2*time.Second, true, bg, flow{key: "score:m1", rate: 4000}) // 80 %: stays hot
	drive(a, c, 800*time.Millisecond, true, bg, flow{key: "score:m1", rate: 3000})
	if k = state("score:m1"); !k.Hot || !k.HotSince.Equal(since) {
		t.Fatalf("cooling for a few ticks: %+v; want hot since %v", k, since)
	}
	drive(a, c, 2*time.Second, true, bg, flow{key: "score:m1", rate: 6000}) // re-heats
	if k = state("score:m1"); !k.Hot || !k.HotSince.Equal(since) {
		t.Fatalf("re-heated while cooling: %+v; want hot since %v", k, since)
	}
	drive(a, c, 3*time.Second, true, bg, flow{key: "score:m1", rate: 3000}) // 60 %: cools
	if k = state("score:m1"); k.Hot || k.HotSince != nil {
		t.Fatalf("3 s at 60 %% of its threshold: %+v; want cool", k)
	}
	if n := delayCount(t, a.Registry()); n != 2 { // bg (hot by share) and score:m1
		t.Errorf("delay histogram: %d observations after one episode of each key; want 2", n)
	}
	drive(a, c, 2*time.Second, true, bg, flow{key: "score:m1", rate: 6000})
	if k = state("score:m1"); !k.Hot || !k.HotSince.After(since) {
		t.Errorf("second episode: %+v; want hot with a new hot_since", k)
	}
	if n := delayCount(t, a.Registry()); n != 3 {
		t.Errorf("delay histogram: %d observations after bg's episode and two of score:m1; want 3", n)
	}
	cool := testutil.ToFloat64(a.metrics.changes.WithLabelValues("cool"))
	hot := testutil.ToFloat64(a.metrics.changes.WithLabelValues("hot"))
	if hot != 3 || cool != 1 { // score:m1 twice, bg (100 % share) once
		t.Errorf("transitions hot %v cool %v; want 3 and 1", hot, cool)
	}
}

// TestMixedSampleRates: one key reported by two sources, one sampling 1 in 100 and one
// reporting every request; the agent's rate is the sum of both at full traffic.
func TestMixedSampleRates(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	drive(a, c, 2*time.Second, true,
		flow{key: "mix", rate: 1000, sampleRate: 0.01}, flow{key: "mix", rate: 500},
		flow{key: "w", write: true, rate: 300, sampleRate: 0.1})
	k := decode[Key](t, do(t, h, "GET", "/v1/keys/mix", ""))
	if math.Abs(k.ReadRate-1500) > 100 || !k.Hot {
		t.Errorf("mix: read_rate %v hot %v; want about 1,500, hot", k.ReadRate, k.Hot)
	}
	got := topkOf(t, h, "op=write")
	if len(got.Keys) != 1 || got.Keys[0].Key != "w" || math.Abs(got.Keys[0].WriteRate-300) > 10 {
		t.Errorf("op=write: %+v; want w at 300 writes/s", got.Keys)
	}
}

// TestSeriesChurnHashKeys: 200 keys pass through a top-5 with hash_keys on. After each
// round the per-key series, gathered from the registry, are exactly the keys of the
// ranking, named by their hash as in /v1/topk; no name leaks, no series stays behind.
func TestSeriesChurnHashKeys(t *testing.T) {
	a, c, h := newTestAgent(t, Options{HashKeys: true, Detector: detector.Options{K: 5}})
	for round := range 40 {
		var flows []flow
		for i := range 5 {
			flows = append(flows, flow{key: fmt.Sprintf("churn:%d", round*5+i), rate: float64(2000 + 100*i)})
		}
		drive(a, c, 1500*time.Millisecond, true, flows...)
		families, err := a.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		series := map[string]bool{}
		for _, f := range families {
			if !strings.HasPrefix(f.GetName(), "hotkeyd_key_") {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "key" {
						series[l.GetValue()] = true
					}
				}
			}
		}
		top := topkOf(t, h, "n=100")
		shown := map[string]bool{}
		for _, k := range top.Keys {
			shown[k.Key] = true
		}
		for name := range series {
			if !strings.HasPrefix(name, "h:") || !shown[name] {
				t.Fatalf("round %d: series for key %q; want only the hashes of the top-k %v", round, name, shown)
			}
		}
		if len(series) != len(shown) || len(series) > 5 {
			t.Fatalf("round %d: %d keys with series, %d in the top-k; want the same, at most 5", round, len(series), len(shown))
		}
	}
}

// TestWriteHotOutsideCombinedRanking: two keys read at 900/s each (under the 1,000/s read
// threshold) fill a top-2; a counter written 600/s (over the 500/s write threshold) is
// heavier by writes than any other key but outranked in the combined ranking. It is hot,
// and shows so in GET /v1/topk?op=write and in hotkeyd_hot_keys.
func TestWriteHotOutsideCombinedRanking(t *testing.T) {
	r := detector.DefaultRules()
	r.Read.Share, r.Write.Share = 0.5, 0.5 // by rate only here
	a, c, h := newTestAgent(t, Options{Rules: &r, Detector: detector.Options{K: 2}})
	drive(a, c, 2*time.Second, true,
		flow{key: "r1", rate: 900}, flow{key: "r2", rate: 900}, flow{key: "likes", write: true, rate: 600})
	got := topkOf(t, h, "op=write&n=1")
	if len(got.Keys) != 1 || got.Keys[0].Key != "likes" {
		t.Fatalf("op=write: %+v; want likes", got.Keys)
	}
	if k := got.Keys[0]; !k.Hot || math.Abs(k.Level-1.2) > 0.01 {
		t.Errorf("likes at 600 writes/s: hot %v level %v; want hot, level 1.2", k.Hot, k.Level)
	}
	if g := gaugeValue(t, a.Registry(), "hotkeyd_hot_keys"); g != 1 {
		t.Errorf("hotkeyd_hot_keys %v; want 1", g)
	}
}

// TestQuietAgentNoSurprises: an agent that sees 1,500 requests a second sampled 1 in 100,
// spread over many keys, has no hot key; before hot.min_samples, each key it sampled once
// (100/s, 6.7 % of its traffic) turned hot by share and counted as a surprise, which
// HotkeydUnpredictedHotKey pages on. With the floor off the same traffic does that.
func TestQuietAgentNoSurprises(t *testing.T) {
	for _, minSamples := range []int{5, 0} {
		rules := detector.DefaultRules()
		rules.MinSamples = minSamples
		a, c, _ := newTestAgent(t, Options{Rules: &rules})
		flows := make([]flow, 150) // 150 keys at 5–14/s (out of step): 1,425/s in all
		for i := range flows {
			flows[i] = flow{key: fmt.Sprint("user:", i), rate: float64(5 + i%10), sampleRate: 0.01}
		}
		drive(a, c, 20*time.Second, true, flows...)
		got := testutil.ToFloat64(a.metrics.surprises)
		t.Logf("min_samples %d: %v surprise hot keys", minSamples, got)
		switch {
		case minSamples > 0 && got != 0:
			t.Errorf("min_samples %d: %v surprise hot keys in quiet traffic; want 0", minSamples, got)
		case minSamples == 0 && got == 0:
			t.Errorf("min_samples 0: no surprise hot key; the test cannot tell")
		}
	}
}
