package agent

import (
	"bytes"
	"context"
	"math"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/client"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// TestSDKDatagramsWithinSampleLimit sends many samples of one-byte keys from the SDK with
// the largest MaxDatagram it allows to an agent with the default max_samples_per_report:
// every datagram the SDK sends must be one the agent takes, not one it drops as too_large.
func TestSDKDatagramsWithinSampleLimit(t *testing.T) {
	a := runAgent(t, Options{})
	rep, err := client.NewReporter(client.ReporterOptions{
		Agent: a.UDPAddr().String(), Source: "sdk", SampleEvery: 1,
		MaxDatagram: sampler.MaxReportSize, Buffer: 1 << 15, FlushInterval: 60e9,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	process := rep.Hook().ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	const n = 12000
	for i := range n {
		process(ctx, redis.NewStringCmd(ctx, "get", string(rune('a'+i%26))))
	}
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	if st := rep.Stats(); st.Sent != n {
		t.Fatalf("reporter stats %+v; want all %d sent", st, n)
	}
	received := func() float64 { return testutil.ToFloat64(a.metrics.samples.WithLabelValues("sdk")) }
	tooLarge := func() float64 {
		return testutil.ToFloat64(a.metrics.drops.WithLabelValues("sdk", sampler.DropTooLarge))
	}
	waitFor(t, func() bool { return received() == n || tooLarge() > 0 })
	if got, drops := received(), tooLarge(); got != n || drops != 0 {
		t.Errorf("agent received %v samples and dropped %v datagrams as too_large; want %d received, none dropped", got, drops, n)
	}
}

// TestUDPDropsBySourceAndReason sends bad datagrams to a real agent and checks that each
// is counted in hotkeyd_samples_dropped_total under its source (or "unknown" when the
// header did not get that far) and the documented reason, and that good datagrams around
// them are counted in full.
func TestUDPDropsBySourceAndReason(t *testing.T) {
	a := runAgent(t, Options{AuthToken: "s3cret"})
	conn, err := net.Dial("udp", a.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	report := func(src, token string, samples ...sampler.Sample) []byte {
		t.Helper()
		var tok []byte
		if token != "" {
			tok = []byte(token)
		}
		d, err := sampler.AppendReport(nil, sampler.Batch{Source: src, Rate: 0.5, Samples: samples}, tok)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	read := func(k string) sampler.Sample { return sampler.Sample{Key: []byte(k), Op: sampler.OpRead} }
	good := report("good", "s3cret", read("a"), read("b"))
	wrongToken := report("intruder", "wrong", read("x"), read("y"), read("z"))
	noToken := report("careless", "", read("x"))
	trailing := append(report("sloppy", "s3cret", read("x")), 0)
	version2 := bytes.Clone(good)
	version2[1] = 2
	for range 3 {
		for _, d := range [][]byte{good, wrongToken, noToken, trailing, version2} {
			if _, err := conn.Write(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	drops := func(src, reason string) float64 {
		return testutil.ToFloat64(a.metrics.drops.WithLabelValues(src, reason))
	}
	received := func(src string) float64 { return testutil.ToFloat64(a.metrics.samples.WithLabelValues(src)) }
	// Until every datagram is counted (the readers take them in any order), or 5 s: the
	// checks below then say which count is off.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if received("good") == 6 && drops("intruder", sampler.DropAuth) >= 9 && drops("careless", sampler.DropAuth) >= 3 &&
			drops("sloppy", sampler.DropMalformed) >= 3 && drops("unknown", sampler.DropMalformed) >= 3 {
			break
		}
	}
	if got := received("good"); got != 6 {
		t.Errorf(`received{source="good"} = %v; want 6`, got)
	}
	if s, u := drops("sloppy", sampler.DropMalformed), drops("unknown", sampler.DropMalformed); s != 3 || u != 3 {
		t.Errorf(`dropped{reason="malformed"}: source sloppy %v, unknown %v; want 3 and 3`, s, u)
	}
	// A datagram with the wrong token counts its samples (3 each), as its header says.
	if got := drops("intruder", sampler.DropAuth); got != 9 {
		t.Errorf(`dropped{source="intruder",reason="auth"} = %v; want 9`, got)
	}
	if got := drops("careless", sampler.DropAuth); got != 3 {
		t.Errorf(`dropped{source="careless",reason="auth"} = %v; want 3`, got)
	}
	for _, src := range []string{"intruder", "careless", "sloppy"} {
		if got := received(src); got != 0 {
			t.Errorf("received{source=%q} = %v; want 0", src, got)
		}
	}
}

// TestJSONTinySampleRate posts samples at the smallest sample rates JSON can carry: each
// sample is scaled by 1/rate, which overflows to +Inf for 5e-324; the agent must cap it,
// keep other keys' counts and answer the API with finite numbers.
func TestJSONTinySampleRate(t *testing.T) {
	a, _, h := newTestAgent(t, Options{})
	for _, rate := range []string{"1e-300", "5e-324", "2.2250738585072014e-308"} {
		body := `{"source":"tiny","sample_rate":` + rate + `,"samples":[{"key":"tiny:` + rate + `","op":"read","bytes":100}]}`
		if w := do(t, h, "POST", "/v1/samples", body); w.Code != http.StatusAccepted {
			t.Fatalf("rate %s: %d %s; want 202", rate, w.Code, w.Body)
		}
	}
	do(t, h, "POST", "/v1/samples", `{"source":"n","samples":[{"key":"normal","op":"read"}]}`)
	if r, _ := a.det.Estimate([]byte("normal")); r != 1 {
		t.Errorf("normal key: %d reads; want 1", r)
	}
	a.evaluate()
	w := do(t, h, "GET", "/v1/topk?n=10", "")
	if w.Code != http.StatusOK {
		t.Fatalf("/v1/topk: %d %s", w.Code, w.Body)
	}
	got := decode[TopK](t, w)
	if math.IsInf(got.TotalRate, 0) || math.IsNaN(got.TotalRate) {
		t.Errorf("total_rate %v; want a finite number", got.TotalRate)
	}
	for _, k := range got.Keys {
		if math.IsInf(k.Rate, 0) || math.IsNaN(k.Rate) || k.Rate < 0 {
			t.Errorf("key %q: rate %v; want a finite number ≥ 0", k.Key, k.Rate)
		}
	}
}

// TestUDPTooManySamplesCountsSamples: a datagram over max_samples_per_report is dropped
// whole, and hotkeyd_samples_dropped_total, a count of samples, grows by the samples it
// held (sampler.Sink.Drop: n samples, or 1 only when the count is unknown), as a datagram
// with a wrong token does.
func TestUDPTooManySamplesCountsSamples(t *testing.T) {
	a := runAgent(t, Options{MaxSamplesPerReport: 5})
	conn, err := net.Dial("udp", a.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var samples []sampler.Sample
	for i := range 8 {
		samples = append(samples, sampler.Sample{Key: []byte{'k', byte('0' + i)}, Op: sampler.OpRead})
	}
	d, err := sampler.AppendReport(nil, sampler.Batch{Source: "big", Rate: 1, Samples: samples}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(d); err != nil {
		t.Fatal(err)
	}
	drops := func() float64 {
		return testutil.ToFloat64(a.metrics.drops.WithLabelValues("big", sampler.DropTooLarge))
	}
	waitFor(t, func() bool { return drops() > 0 })
	if got := drops(); got != 8 {
		t.Errorf(`dropped{source="big",reason="too_large"} = %v; want 8, the samples of the datagram`, got)
	}
}
