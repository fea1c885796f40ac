package agent

import (
	"net/http"
	"testing"
	"time"
)

// TestOwnNamesCountForTheirKey: a copy or a sub-counter is the key it stands for, split.
// Traffic a proxy tap or MONITOR sees on one (or a client that samples the names it
// sends) counts for the original key: otherwise splitting a key would make it look cold
// (its reads now go to copies), its mitigation would end, and the names themselves would
// turn hot and get mitigations of their own.
func TestOwnNamesCountForTheirKey(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	body := `{"source":"tap","sample_rate":1,"samples":[
		{"key":"{hk:copy1:123}score:match42","op":"read","count":300},
		{"key":"{hk:copy2:77}score:match42","op":"read","count":300},
		{"key":"{hk:sub3:9}likes:post9","op":"write","count":200},
		{"key":"{hk:copyX}not:ours","op":"read","count":1}]}`
	if w := do(t, h, "POST", "/v1/samples", body); w.Code != http.StatusAccepted {
		t.Fatalf("POST /v1/samples: %d %s; want 202", w.Code, w.Body)
	}
	c.add(500 * time.Millisecond)
	a.evaluate()
	got := decode[TopK](t, do(t, h, "GET", "/v1/topk?n=10", ""))
	rates := map[string][2]float64{}
	for _, k := range got.Keys {
		rates[k.Key] = [2]float64{k.ReadRate, k.WriteRate}
	}
	want := map[string][2]float64{
		"score:match42":      {1200, 0},
		"likes:post9":        {0, 400},
		"{hk:copyX}not:ours": {2, 0}, // not a name hotkeyd makes: a key like any other
	}
	if len(rates) != len(want) {
		t.Errorf("topk %v; want exactly %v", rates, want)
	}
	for k, r := range want {
		if rates[k] != r {
			t.Errorf("%s: read, write rates %v; want %v", k, rates[k], r)
		}
	}
}
