package topk_test

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/hotkeyd/hotkeyd/internal/dataset"
	"github.com/hotkeyd/hotkeyd/sketch"
	"github.com/hotkeyd/hotkeyd/topk"
)

// oneMiB is the sketch the accuracy targets are stated for: 65,536 × 4 counters of 4 bytes.
var oneMiB = sketch.Options{Width: 1 << 16, Depth: 4}

type score struct {
	recall10, precision10, recall100, precision100 float64
	maxErr10, maxErr100                            float64 // relative over-estimate of true top keys
	missedOver1pct                                 int     // keys above 1 % of traffic not reported
}

// run feeds the trace, sampling each request with probability p (seeded) and weighting a
// sampled one by 1/p, through a 1 MiB sketch and a top-100, and scores the result
// against exact counts.
func run(t *testing.T, keys []string, p float64, seed uint64) score {
	t.Helper()
	cm, err := sketch.New(oneMiB)
	if err != nil {
		t.Fatal(err)
	}
	if cm.SizeBytes() > 1<<20 {
		t.Fatalf("sketch takes %d bytes; want ≤ 1 MiB", cm.SizeBytes())
	}
	tk, _ := topk.New(topk.Options{K: 100})
	r := rand.New(rand.NewPCG(seed, seed))
	w := uint32(1/p + 0.5)
	for _, k := range keys {
		if p < 1 && r.Float64() >= p {
			continue
		}
		h := xxhash.Sum64String(k)
		tk.Offer(h, []byte(k), uint64(cm.Add(h, w)), 0, 0)
	}
	exact := dataset.Exact(keys)
	got := tk.AppendEntries(nil)
	var s score
	s.recall10, s.precision10 = recallPrecision(exact, got, 10)
	s.recall100, s.precision100 = recallPrecision(exact, got, 100)
	for i, c := range exact[:100] {
		e := float64(cm.Estimate(xxhash.Sum64String(c.Key)))/float64(c.Count) - 1
		s.maxErr100 = max(s.maxErr100, e)
		if i < 10 {
			s.maxErr10 = max(s.maxErr10, e)
		}
	}
	reported := map[string]bool{}
	for _, e := range got {
		reported[e.Key] = true
	}
	for _, c := range exact {
		if float64(c.Count) > 0.01*float64(len(keys)) && !reported[c.Key] {
			s.missedOver1pct++
		}
	}
	return s
}

func recallPrecision(exact []dataset.Count, got []topk.Entry, k int) (recall, precision float64) {
	keys := make([]string, len(got))
	for i, e := range got {
		keys[i] = e.Key
	}
	return dataset.Score(exact, keys, k)
}

func TestAccuracyAgainstExactCounts(t *testing.T) {
	targets := map[string]float64{ // top-100 recall
		"domains.txt":            0.99,
		"war_and_peace.txt":      0.99,
		"cache2k_web07.trace.xz": 0.95,
		"cache2k_web12.trace.xz": 0.95,
	}
	for _, name := range dataset.Names {
		tr, err := dataset.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		s := run(t, tr.Keys, 1, 0)
		t.Logf("%-24s top-10 recall %.2f precision %.2f | top-100 recall %.3f precision %.3f | max over-estimate top-10 %.4f%% top-100 %.3f%%",
			name, s.recall10, s.precision10, s.recall100, s.precision100, 100*s.maxErr10, 100*s.maxErr100)
		if s.recall100 < targets[name] {
			t.Errorf("%s: top-100 recall %.3f; want ≥ %.2f", name, s.recall100, targets[name])
		}
		if s.recall10 < 1 {
			t.Errorf("%s: top-10 recall %.2f; want 1", name, s.recall10)
		}
		if s.maxErr10 > 0.01 {
			t.Errorf("%s: a true top-10 key is over-estimated by %.3f%%; want ≤ 1%%", name, 100*s.maxErr10)
		}
	}
}

func TestAccuracySampled(t *testing.T) {
	for _, name := range dataset.Names {
		tr, err := dataset.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, every := range []int{10, 100} {
			s := run(t, tr.Keys, 1/float64(every), 42)
			t.Logf("%-24s 1 in %-3d top-10 recall %.2f | top-100 recall %.3f precision %.3f | keys >1%% missed: %d",
				name, every, s.recall10, s.recall100, s.precision100, s.missedOver1pct)
			if s.missedOver1pct > 0 {
				t.Errorf("%s sampled 1 in %d: %d keys above 1%% of traffic missed; want 0", name, every, s.missedOver1pct)
			}
		}
	}
}

// TestNegativeControl: in the Corda trace no key is seen more than twice, so no key may
// reach a 1 % share of traffic.
func TestNegativeControl(t *testing.T) {
	tr, err := dataset.Load(dataset.Negative)
	if err != nil {
		t.Fatal(err)
	}
	cm, _ := sketch.New(oneMiB)
	tk, _ := topk.New(topk.Options{K: 100})
	for _, k := range tr.Keys {
		h := xxhash.Sum64String(k)
		tk.Offer(h, []byte(k), uint64(cm.Add(h, 1)), 0, 0)
	}
	limit := uint64(0.01 * float64(len(tr.Keys)))
	for _, e := range tk.AppendEntries(nil) {
		if e.Count >= limit {
			t.Errorf("key %q estimated at %d of %d requests: flagged hot at a 1%% share", e.Key, e.Count, len(tr.Keys))
		}
	}
}
