package dataset

import "testing"

// The sizes come from ../shared/data/README.md.
func TestLoad(t *testing.T) {
	tests := []struct {
		name           string
		requests, keys int
	}{
		{"domains.txt", 100000, 17634},
		{"war_and_peace.txt", 566310, 41992},
		{"cache2k_web07.trace.xz", 76118, 20484},
		{"cache2k_web12.trace.xz", 95607, 13756},
		{"corda_trace_vaultservice.gz", 135702, 90468},
	}
	for _, tt := range tests {
		tr, err := Load(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		exact := Exact(tr.Keys)
		if len(tr.Keys) != tt.requests || len(exact) != tt.keys {
			t.Errorf("%s: %d requests, %d keys; want %d, %d", tt.name, len(tr.Keys), len(exact), tt.requests, tt.keys)
		}
	}
}

func TestScore(t *testing.T) {
	exact := []Count{{"a", 10}, {"b", 8}, {"c", 5}, {"d", 5}, {"e", 1}}
	tests := []struct {
		reported          []string
		k                 int
		recall, precision float64
	}{
		{[]string{"a", "b"}, 2, 1, 1},
		{[]string{"a", "c"}, 2, 0.5, 0.5},
		{[]string{"a", "b", "d"}, 3, 1, 1}, // d ties with c at rank 3
		{[]string{"a", "b", "e"}, 3, 1, 2.0 / 3},
		{[]string{"e"}, 1, 0, 0},
	}
	for _, tt := range tests {
		r, p := Score(exact, tt.reported, tt.k)
		if r != tt.recall || p != tt.precision {
			t.Errorf("Score(%v, k=%d) = %v, %v; want %v, %v", tt.reported, tt.k, r, p, tt.recall, tt.precision)
		}
	}
}
