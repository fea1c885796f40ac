package mitigate

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// validPlan is a plan with one entry of every kind, as a client would receive it.
func validPlan() Plan {
	exp := t0.Add(time.Minute)
	return Plan{Version: 7, Generated: t0, Primaries: 3, Entries: []Entry{
		{Key: "c", Kind: ShardedCounter, Mode: Enforce, Reason: "r", Since: t0, Expires: exp,
			SubCounters: []Node{{Name: "{hc0}c", Slot: 1, Primary: "a:1"}, {Name: "{hc1}c", Slot: 2, Primary: "b:1"}}},
		{Key: "c", Kind: BatchedCounter, Mode: Enforce, Reason: "r", Since: t0, Expires: exp, FlushInterval: Duration(100 * time.Millisecond)},
		{Key: "k", Kind: L1, Mode: Enforce, Reason: "r", Since: t0, Expires: exp, TTL: Duration(time.Second), PredictedBy: []string{"final"}},
		{Key: "k", Kind: Copies, Mode: Recommend, Reason: "r", Since: t0, Expires: exp, Override: Pinned,
			Copies: []Node{{Name: "{hk0}k", Slot: 1, Primary: "a:1"}, {Name: "{hk1}k", Slot: 16383, Primary: "b:1"}}},
		{Key: "w", Kind: Report, Mode: Recommend, Reason: "r", Since: t0, Expires: exp, Override: Forbidden},
	}}
}

func TestDecodePlanRoundTrip(t *testing.T) {
	want := validPlan()
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePlan(data)
	if err != nil {
		t.Fatalf("got %v; want the plan back", err)
	}
	if got.Version != want.Version || !got.Generated.Equal(want.Generated) || got.Primaries != want.Primaries ||
		!sameEntries(got.Entries, want.Entries, true) {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	// Field names are snake_case, parameters of other kinds are left out.
	for _, s := range []string{`"sub_counters":[`, `"flush_interval":"100ms"`, `"ttl":"1s"`, `"predicted_by":["final"]`, `"override":"pinned"`} {
		if !bytes.Contains(data, []byte(s)) {
			t.Errorf("JSON %s; want it to hold %s", data, s)
		}
	}
	if bytes.Contains(data, []byte(`"copies":null`)) || bytes.Contains(data, []byte(`"ttl":"0s"`)) {
		t.Errorf("JSON %s; want no empty parameters", data)
	}
}

// A plan the planner makes passes the decoder clients run.
func TestPlannerPlanDecodes(t *testing.T) {
	p := newPlanner(t, PlannerOptions{Rules: Rules{Modes: map[Kind]Mode{Copies: Enforce, ShardedCounter: Recommend}}})
	plan, _ := p.Update(t0, []KeyStats{
		{Key: "k", ReadRate: 240_000, Hot: true, SDKShare: 0.5},
		{Key: "c", WriteRate: 240_000, Counter: true, Hot: true, SDKShare: 0.5},
		{Key: "w", WriteRate: 240_000, Hot: true},
		{Key: "p", PredictedBy: []string{"sale"}},
	}, planNamer{primaries: 3})
	got := publishAndDecode(t, plan)
	if len(got.Entries) != 6 {
		t.Fatalf("got %d entries; want 6 (l1+copies, batched+sharded, report, l1)", len(got.Entries))
	}
}

func TestDecodePlanErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *Plan)
		want string
	}{
		{"version 0", func(p *Plan) { p.Version = 0 }, "version 0: versions start at 1"},
		{"no generated", func(p *Plan) { p.Generated = time.Time{} }, "generated missing"},
		{"no primaries", func(p *Plan) { p.Primaries = 0 }, "primaries 0: must be ≥ 1"},
		{"bad kind", func(p *Plan) { p.Entries[2].Kind = "cache" }, `entry 2: key "k": kind "cache": use l1, copies, sharded_counter, batched_counter or report`},
		{"bad mode", func(p *Plan) { p.Entries[2].Mode = "on" }, `entry 2: key "k" kind l1: mode "on": use observe, recommend or enforce`},
		{"no mode", func(p *Plan) { p.Entries[2].Mode = "" }, `mode "": use observe`},
		{"enforced report", func(p *Plan) { p.Entries[4].Mode = Enforce }, "a report has nothing to enforce"},
		{"no since", func(p *Plan) { p.Entries[2].Since = time.Time{} }, "since missing"},
		{"expired before since", func(p *Plan) { p.Entries[2].Expires = t0 }, "expires 2026-03-01T20:00:00Z: must be after since"},
		{"bad override", func(p *Plan) { p.Entries[2].Override = "manual" }, `override "manual": use pinned, forbidden`},
		{"empty event", func(p *Plan) { p.Entries[2].PredictedBy = []string{""} }, "predicted_by[0] empty"},
		{"L1 without TTL", func(p *Plan) { p.Entries[2].TTL = 0 }, "ttl 0s: must be in (0, 1h0m0s]"},
		{"negative TTL", func(p *Plan) { p.Entries[2].TTL = Duration(-time.Second) }, "ttl -1s: must be in (0, 1h0m0s]"},
		{"TTL too long", func(p *Plan) { p.Entries[2].TTL = Duration(2 * time.Hour) }, "ttl 2h0m0s: must be in"},
		{"TTL on copies", func(p *Plan) { p.Entries[3].TTL = Duration(time.Second) }, "ttl 1s: only for kind l1"},
		{"no flush interval", func(p *Plan) { p.Entries[1].FlushInterval = 0 }, "flush_interval 0s: must be in (0, 1m0s]"},
		{"flush on L1", func(p *Plan) { p.Entries[2].FlushInterval = Duration(time.Second) }, "flush_interval 1s: only for kind batched_counter"},
		{"one copy", func(p *Plan) { p.Entries[3].Copies = p.Entries[3].Copies[:1] }, "1 copies: want at least 2"},
		{"copies on L1", func(p *Plan) { p.Entries[2].Copies = p.Entries[3].Copies }, "copies given: only for kind copies"},
		{"copy without the key", func(p *Plan) { p.Entries[3].Copies[0].Name = "other" }, `copies[0] name "other": must contain the key verbatim`},
		{"copy that is the key", func(p *Plan) { p.Entries[3].Copies[0].Name = "k" }, `copies[0] name "k": must contain the key verbatim and differ`},
		{"copy slot out of range", func(p *Plan) { p.Entries[3].Copies[1].Slot = 16384 }, "copies[1] slot 16384: must be in [0, 16383]"},
		{"copy twice", func(p *Plan) { p.Entries[3].Copies[1].Name = p.Entries[3].Copies[0].Name }, `copies[1] name "{hk0}k": listed twice`},
		{"no sub-counters", func(p *Plan) { p.Entries[0].SubCounters = nil }, "0 sub_counters: want at least 2"},
		{"entry twice", func(p *Plan) { p.Entries = append(p.Entries, p.Entries[2]) }, `entry 5: key "k" kind l1: listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPlan()
			tt.edit(&p)
			data, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodePlan(data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestDecodePlanJSON(t *testing.T) {
	tests := []struct {
		name, json, want string // want "" for valid
	}{
		{"not JSON", `{`, "plan: unexpected EOF"},
		{"trailing data", `{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[]} {}`, "trailing data"},
		{"trailing brace", `{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[]} }`, "trailing data"},
		{"trailing bracket", `{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[]}]`, "trailing data"},
		{"trailing space", "{\"version\":1,\"generated\":\"2026-03-01T20:00:00Z\",\"primaries\":1,\"entries\":[]}\n ", ""},
		{"bad duration", `{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[{"key":"k","kind":"l1","mode":"enforce","since":"2026-03-01T20:00:00Z","expires":"2026-03-01T20:01:00Z","ttl":"soon"}]}`, `duration "soon"`},
		{"numeric duration", `{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[{"key":"k","kind":"l1","mode":"enforce","since":"2026-03-01T20:00:00Z","expires":"2026-03-01T20:01:00Z","ttl":1000}]}`, `want a string such as "1s"`},
		{"unknown fields are ignored", `{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":null,"epoch":"x"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodePlan([]byte(tt.json))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v; want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v; want an error saying %q", err, tt.want)
			}
		})
	}
}

// The example in docs/plan.md is a plan clients accept.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/plan.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("docs/plan.md has no ```json block; want the example plan")
	}
	p, err := DecodePlan(blocks[0][1])
	if err != nil {
		t.Fatalf("the example in docs/plan.md: %v", err)
	}
	for _, k := range Kinds {
		found := false
		for _, e := range p.Entries {
			found = found || e.Kind == k
		}
		if !found {
			t.Errorf("the example in docs/plan.md has no %s entry; want one of every kind", k)
		}
	}
}

func FuzzDecodePlan(f *testing.F) {
	data, err := json.Marshal(validPlan())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[]}`))
	f.Add([]byte(`{"version":1,"generated":"2026-03-01T20:00:00Z","primaries":1,"entries":[{"key":"k","kind":"l1","mode":"enforce","since":"2026-03-01T20:00:00Z","expires":"2026-03-01T20:01:00Z","ttl":"1s"}]}`))
	f.Add([]byte(`{"version":1,"entries":[{"kind":"copies","copies":[{"name":"{a}k","slot":-1}]}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePlan(data)
		if err != nil {
			return
		}
		// What decodes is one JSON document: nothing after it is ignored.
		if !json.Valid(data) {
			t.Fatalf("DecodePlan accepted %q, which is not one JSON value", data)
		}
		// What decodes is valid, and survives a round trip unchanged.
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded plan is invalid: %v", err)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("decoded plan does not encode: %v", err)
		}
		q, err := DecodePlan(out)
		if err != nil {
			t.Fatalf("re-encoded plan %s does not decode: %v", out, err)
		}
		again, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("round trip changed the plan:\n%s\n%s", out, again)
		}
	})
}

// One key, however odd, never makes the planner's plan one that clients refuse whole
// (they would then follow no entry at all): the empty key (which Redis accepts), quotes,
// control characters and NUL, other scripts, a key that is not UTF-8 and one the agent cut
// short, all hot in one plan beside an ordinary key.
func TestPlannerPlanDecodesAnyKey(t *testing.T) {
	keys := []KeyStats{
		readHot("", true),
		readHot("a\"b\nc\x00d\\", true),
		readHot("ключ:🔥", true),
		readHot("k\xff", true),
		{Key: "session:", ReadRate: 80_000, Hot: true, SDKShare: 0.95, Truncated: true},
		readHot("plain", true),
	}
	p := newPlanner(t, PlannerOptions{})
	plan, _ := p.Update(t0, keys, planNamer{primaries: 3})
	got := publishAndDecode(t, plan)
	for key, want := range map[string]string{
		"":               "l1",
		"a\"b\nc\x00d\\": "l1",
		"ключ:🔥":         "l1",
		"k\uFFFD":        "report", // JSON writes the bad byte as U+FFFD
		"session:":       "report",
		"plain":          "l1",
	} {
		if k := kinds(got, key); k != want {
			t.Errorf("key %q: decoded entries %q; want %q", key, k, want)
		}
	}
}

// publishAndDecode publishes a planner's plan, as the agent does, and decodes its JSON
// with the decoder clients run.
func publishAndDecode(t *testing.T, plan Plan) Plan {
	t.Helper()
	plan = NewStore(StoreOptions{}).Publish(plan)
	data, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePlan(data)
	if err != nil {
		t.Fatalf("DecodePlan = %v; want the planner's plan to decode\n%s", err, data)
	}
	return got
}
