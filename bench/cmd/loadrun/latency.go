package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hotkeyd/hotkeyd/sampler"
)

// spike is the key currently spiking and when its first datagram left.
type spike struct {
	key   string
	first chan time.Time // receives the send time of the key's first datagram
}

// traffic sends background reads (uniform over bgKeys keys, at 1/100) and, when a spike is
// set, the spiking key's reads (at 1/10), every 5 ms, until stop closes. Rates are in
// requests per second of the full traffic; samples are scaled by their sample rate.
type traffic struct {
	conn       net.Conn
	bgRate     float64
	bgKeys     int
	spikeRate  float64
	cur        atomic.Pointer[spike]
	sendErrors atomic.Int64
}

const (
	bgSampleRate    = 0.01
	spikeSampleRate = 0.1
)

func (t *traffic) run(stop <-chan struct{}) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var bgSent, bgKey int
	var sp *spike
	var spStart time.Time
	var spSent int
	samples := make([]sampler.Sample, 0, samplesPerReport)
	var keys, dgram []byte
	send := func(rate float64) {
		b, err := sampler.AppendReport(dgram[:0], sampler.Batch{Source: "bench", Rate: rate, Samples: samples}, nil)
		if err != nil {
			panic(err) // the samples are built here: a bug
		}
		dgram = b
		if _, err := t.conn.Write(dgram); err != nil {
			t.sendErrors.Add(1)
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		// Background: as many samples as are due, in datagrams of at most samplesPerReport.
		due := int(now.Sub(start).Seconds()*t.bgRate*bgSampleRate) - bgSent
		for due > 0 {
			n := min(due, samplesPerReport)
			samples, keys = samples[:0], keys[:0]
			var ends [samplesPerReport]int
			for j := range n {
				keys = strconv.AppendInt(append(keys, "bg:"...), int64(bgKey%t.bgKeys), 10)
				ends[j] = len(keys)
				bgKey++
			}
			s := 0
			for j := range n {
				samples = append(samples, sampler.Sample{Key: keys[s:ends[j]], Op: sampler.OpRead, Count: 1})
				s = ends[j]
			}
			send(bgSampleRate)
			due -= n
			bgSent += n
		}
		// Spike.
		if cur := t.cur.Load(); cur != sp {
			sp, spStart, spSent = cur, now, 0
		}
		if sp == nil {
			continue
		}
		due = int(now.Sub(spStart).Seconds()*t.spikeRate*spikeSampleRate) + 1 - spSent
		if due <= 0 {
			continue
		}
		samples = samples[:0]
		for range min(due, samplesPerReport) {
			samples = append(samples, sampler.Sample{Key: []byte(sp.key), Op: sampler.OpRead, Count: 1})
		}
		send(spikeSampleRate)
		if spSent == 0 {
			sp.first <- now
		}
		spSent += len(samples)
	}
}

type topkJSON struct {
	Keys []struct {
		Key string `json:"key"`
		Hot bool   `json:"hot"`
	} `json:"keys"`
}

func runLatency(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	fs.SetOutput(e.log)
	bin, quick := commonFlags(fs)
	trials := fs.Int("trials", 20, "spikes per background level, each on a new key")
	threshold := fs.Float64("threshold", 1000, "the agent's hot read threshold (default config), req/s")
	factor := fs.Float64("factor", 10, "the spike's rate as a multiple of the threshold")
	gap := fs.Duration("gap", 1500*time.Millisecond, "pause after each detection, so that each key's window is clean")
	poll := fs.Duration("poll", 5*time.Millisecond, "GET /v1/topk?n=5 interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		*trials, *gap = 3, 300*time.Millisecond
	}
	hk, err := e.binary(ctx, *bin)
	if err != nil {
		return err
	}
	spikeRate := *threshold * *factor
	// Two background levels. At 5,000 req/s the spiking key's share of all traffic passes
	// the default share threshold (5%) when its rate is only about 260 req/s, so the
	// share rule (with min_rate 100) can flag it before its rate reaches the threshold.
	// At 250,000 req/s its share stays under 4% even at 10× the threshold: only the rate
	// rule can flag it.
	levels := []struct {
		name   string
		rate   float64
		keys   int
		expect string
	}{
		{"5,000 req/s over 10,000 keys", 5000, 10000, "share rule can fire first"},
		{"250,000 req/s over 100,000 keys", 250000, 100000, "rate rule only"},
	}
	var rows [][]string
	for li, lv := range levels {
		a, err := e.startAgent(ctx, hk, true, nil)
		if err != nil {
			return err
		}
		conn, err := net.Dial("udp", a.udp)
		if err != nil {
			return err
		}
		t := &traffic{conn: conn, bgRate: lv.rate, bgKeys: lv.keys, spikeRate: spikeRate}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); t.run(stop) }()
		finish := func() { close(stop); <-done; conn.Close() }
		if err := sleep(ctx, 1500*time.Millisecond); err != nil { // a full window of background first
			finish()
			return err
		}
		var lat []float64
		misses := 0
		for i := range *trials {
			d, err := spikeOnce(ctx, a, t, fmt.Sprintf("spike:%d:%d", li, i), *poll)
			if err != nil {
				finish()
				return err
			}
			if d < 0 {
				misses++
			} else {
				lat = append(lat, float64(d.Microseconds())/1000)
			}
			fmt.Fprintf(e.log, "%s: trial %d: %v\n", lv.name, i+1, d)
			if err := sleep(ctx, *gap); err != nil {
				finish()
				return err
			}
		}
		finish()
		ms := func(q float64) string { return f0(quantile(lat, q)) }
		rows = append(rows, []string{lv.name, lv.expect, fmt.Sprintf("%d/%d", len(lat), *trials),
			ms(0), "**" + ms(0.5) + "**", ms(0.9), ms(0.99), ms(1)})
	}
	e.header(fs, "Detection latency: a key jumps from 0 to 10× the hot threshold")
	fmt.Fprintf(e.out, "The agent runs with default settings (window 1 s in 10 ticks of 100 ms, hot read threshold %s req/s, "+
		"share 5%% with min_rate 100). Background reads over UDP at 1/100; then a new key jumps from 0 to %s req/s of full "+
		"traffic (%s samples/s at 1/10, a datagram every 5 ms). `GET /v1/topk?n=5` is polled every %v until the key shows "+
		"`\"hot\": true`; the time is from the first spike datagram to that answer. %d keys per background level, %v apart. "+
		"Target ≤ 1000 ms, aim 250 ms; the tick (100 ms) is the detector's resolution.\n\n",
		thousands(*threshold), thousands(spikeRate), thousands(spikeRate*spikeSampleRate), *poll, *trials, *gap)
	e.table([]string{"background", "which rule", "flagged", "min ms", "p50 ms", "p90 ms", "p99 ms", "max ms"}, rows)
	return nil
}

// spikeOnce starts a spike on key and returns how long until /v1/topk shows it hot, or -1
// when it did not within 5 s.
func spikeOnce(ctx context.Context, a *agent, t *traffic, key string, poll time.Duration) (time.Duration, error) {
	sp := &spike{key: key, first: make(chan time.Time, 1)}
	t.cur.Store(sp)
	defer t.cur.Store(nil)
	var first time.Time
	select {
	case first = <-sp.first:
	case <-time.After(5 * time.Second):
		return 0, fmt.Errorf("the traffic goroutine sent no spike datagram")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	url := a.http + "/v1/topk?n=5"
	for time.Since(first) < 5*time.Second {
		var tk topkJSON
		if err := getJSON(url, &tk); err != nil {
			return 0, err
		}
		now := time.Now()
		for _, k := range tk.Keys {
			if k.Key == key && k.Hot {
				return now.Sub(first), nil
			}
		}
		if err := sleep(ctx, poll); err != nil {
			return 0, err
		}
	}
	return -1, nil
}
