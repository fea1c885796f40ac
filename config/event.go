package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hotkeyd/hotkeyd/registry"
)

// eventJSON is the registry's JSON form of an event (docs/registry.md).
type eventJSON struct {
	ID                string   `json:"id"`
	Name              string   `json:"name,omitempty"`
	Patterns          []string `json:"patterns"`
	AllowBroad        bool     `json:"allow_broad,omitempty"`
	Start             string   `json:"start"`
	End               string   `json:"end"`
	Lead              string   `json:"lead"`
	Recurrence        string   `json:"recurrence,omitempty"`
	Zone              string   `json:"zone,omitempty"`
	ExpectedReadRate  float64  `json:"expected_read_rate"`
	ExpectedWriteRate float64  `json:"expected_write_rate"`
	Mitigations       []string `json:"mitigations"`
	Owner             string   `json:"owner,omitempty"`
	Note              string   `json:"note,omitempty"`
}

// JSON returns the event as the JSON document of the registry API, for
// registry.DecodeEvent. It fails only when a rate is not a finite number, which Validate
// rejects.
func (e Event) JSON() ([]byte, error) {
	b, err := json.Marshal(eventJSON{
		ID:                e.ID,
		Name:              e.Name,
		Patterns:          e.Patterns,
		AllowBroad:        e.AllowBroad,
		Start:             e.Start,
		End:               e.End,
		Lead:              e.Lead.String(),
		Recurrence:        e.Recurrence,
		Zone:              e.Zone,
		ExpectedReadRate:  e.ExpectedReadRate,
		ExpectedWriteRate: e.ExpectedWriteRate,
		Mitigations:       e.Mitigations,
		Owner:             e.Owner,
		Note:              e.Note,
	})
	if err != nil {
		return nil, fmt.Errorf("event %q: %w", e.ID, err)
	}
	return b, nil
}

// timeExample is an RFC 3339 time with a zone, for messages.
const timeExample = `"2026-12-01T19:30:00+01:00"`

// events checks registry.events: what the config alone can name precisely (a missing or
// repeated id, a time that is not RFC 3339, a rate that is not a number), then, when the
// event can be written as JSON, everything registry.DecodeEvent checks, each of its
// problems named registry.events[i].field.
func (v *validator) events(events []Event) {
	ids := make(map[string]int, len(events))
	for i, e := range events {
		key := fmt.Sprintf("registry.events[%d]", i)
		if e.ID == "" {
			v.add(key+".id", "", "is empty", "give every event of the config file an id: 1 to 64 of a-z, 0-9, '.', '_' and '-'")
		} else if j, dup := ids[e.ID]; dup {
			v.add(key+".id", e.ID, fmt.Sprintf("is also the id of registry.events[%d]", j), "give each event its own id")
		} else {
			ids[e.ID] = i
		}
		decodable := true
		for _, t := range []struct{ name, value string }{{"start", e.Start}, {"end", e.End}} {
			switch _, err := time.Parse(time.RFC3339, t.value); {
			case t.value == "":
				v.add(key+"."+t.name, "", "is empty", "use an RFC 3339 time with a zone, like "+timeExample)
				decodable = false
			case err != nil:
				v.add(key+"."+t.name, t.value, "is not an RFC 3339 time with a zone", "use one like "+timeExample)
				decodable = false
			}
		}
		for _, r := range []struct {
			name  string
			value float64
		}{{"expected_read_rate", e.ExpectedReadRate}, {"expected_write_rate", e.ExpectedWriteRate}} {
			if math.IsNaN(r.value) || math.IsInf(r.value, 0) {
				v.add(key+"."+r.name, r.value, "is out of range", "use a rate in requests per second ≥ 0")
				decodable = false
			}
		}
		if !decodable {
			continue
		}
		data, err := e.JSON()
		if err == nil {
			_, err = registry.DecodeEvent(data)
		}
		var inv *registry.InvalidError
		switch {
		case err == nil:
		case errors.As(err, &inv):
			for _, p := range inv.Problems {
				k := key
				if p.Field != "" {
					k += "." + p.Field
				}
				v.fail(k, fmt.Errorf("%s: %s", k, p.Problem))
			}
		default:
			v.fail(key, fmt.Errorf("%s: %w", key, err))
		}
	}
}
