package registry

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// poisson draws from a Poisson distribution of mean l: Knuth's method below 30, the normal
// approximation above.
func poisson(r *rand.Rand, l float64) float64 {
	if l >= 30 {
		return max(0, math.Round(l+math.Sqrt(l)*r.NormFloat64()))
	}
	limit, k, p := math.Exp(-l), 0.0, 1.0
	for {
		p *= r.Float64()
		if p < limit {
			return k
		}
		k++
	}
}

// TestPeakSamplingBias is how high a report's observed peak reads by sampling alone: a
// steady key whose window holds l samples on average, observed over 240 windows (four
// minutes of one-second windows), peaks at the highest of 240 Poisson draws. The medians
// over 300 such runs are the figures docs/registry.md quotes (go test ./registry -run
// TestPeakSamplingBias -v).
func TestPeakSamplingBias(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	last := math.Inf(1)
	for _, l := range []float64{4, 14, 50, 200, 1000} {
		runs := make([]float64, 300)
		for i := range runs {
			peak := 0.0
			for range 240 {
				peak = max(peak, poisson(r, l))
			}
			runs[i] = peak / l
		}
		slices.Sort(runs)
		bias := runs[len(runs)/2]
		t.Logf("%4.0f samples a window: the peak reads %.2f× the rate", l, bias)
		if !(bias > 1 && bias < last) {
			t.Errorf("%v samples a window: peak %.2f× the rate; want above 1 and below %.2f (fewer samples)", l, bias, last)
		}
		last = bias
	}
}
