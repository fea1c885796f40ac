package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
)

// kind is how a key's value is written and parsed.
type kind uint8

const (
	kString    kind = iota + 1 // any text
	kInt                       // a whole number
	kFloat                     // a number
	kBool                      // true or false
	kDuration                  // a Go duration: 1s, 500ms
	kStrings                   // a list of strings; comma-separated when written as text
	kOverrides                 // a list of Override
	kEvents                    // a list of Event
	kList                      // a list of strings kept exactly as written: the lists of an Event
)

// field is one key of the file: a leaf of Config.
type field struct {
	key   string // path in the file, "http.listen"
	env   string // environment variable, "HOTKEYD_HTTP_LISTEN"
	kind  kind
	index []int // reflect field index in Config
}

// envPrefix starts the environment variable of every key.
const envPrefix = "HOTKEYD_"

// envName returns the environment variable of a key: HOTKEYD_ and the key's path in upper
// case with dots as underscores.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	stringsType   = reflect.TypeFor[[]string]()
	overridesType = reflect.TypeFor[[]Override]()
	overrideType  = reflect.TypeFor[Override]()
	eventsType    = reflect.TypeFor[[]Event]()
	eventType     = reflect.TypeFor[Event]()
)

// fields lists every key of Config in the order of its declaration. It is computed once
// and never changed.
var fields = sync.OnceValue(func() []field {
	var out []field
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			key := prefix + yamlName(sf)
			idx := append(append([]int(nil), index...), i)
			k := kindOf(sf.Type)
			if k == 0 && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, key+".", idx)
				continue
			}
			if k == 0 {
				panic(fmt.Sprintf("config: key %s has type %v, which has no kind", key, sf.Type))
			}
			out = append(out, field{key: key, env: envName(key), kind: k, index: idx})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
})

// yamlName returns the yaml tag name of a struct field.
func yamlName(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	return name
}

// kindOf returns the kind of a leaf type, or 0 for a section (a struct) or an unknown type.
func kindOf(t reflect.Type) kind {
	switch t {
	case durationType:
		return kDuration
	case stringsType:
		return kStrings
	case overridesType:
		return kOverrides
	case eventsType:
		return kEvents
	}
	switch t.Kind() {
	case reflect.String:
		return kString
	case reflect.Int:
		return kInt
	case reflect.Float64:
		return kFloat
	case reflect.Bool:
		return kBool
	}
	return 0
}

// parseText parses the text form of a scalar value of kind k, as written in the file, the
// environment or a flag. The error names the value and what is allowed but not the key.
func parseText(k kind, s string) (any, error) {
	switch k {
	case kString:
		return s, nil
	case kInt:
		t := strings.TrimSpace(s)
		n, err := strconv.ParseInt(t, 10, strconv.IntSize)
		if err == nil {
			return int(n), nil
		}
		outOfRange := fmt.Errorf("%q is out of range; use a whole number between %d and %d", s, math.MinInt, math.MaxInt)
		if errors.Is(err, strconv.ErrRange) {
			return nil, outOfRange
		}
		// YAML writes some whole numbers as floats: 1e3, 1024.0.
		f, err := strconv.ParseFloat(t, 64)
		switch {
		case err == nil && f == math.Trunc(f) && f >= math.MinInt && f < -math.MinInt:
			return int(f), nil
		case err == nil && math.IsInf(f, 0) && strings.Contains(strings.ToLower(t), "inf"):
			// "inf", ".inf": not a number of any size.
		case err == nil && f == math.Trunc(f), errors.Is(err, strconv.ErrRange) && math.IsInf(f, 0):
			// Whole, but beyond an int (1e400 parses as ±Inf with ErrRange).
			return nil, outOfRange
		}
		return nil, fmt.Errorf("%q is not an integer; use a whole number in digits, without a unit (16777216, not 16MiB)", s)
	case kFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number; use a number like 1000 or 0.05", s)
		}
		return f, nil
	case kBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not a boolean; use true or false", s)
		}
		return b, nil
	case kDuration:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration; use a number with a unit, like 1s or 500ms", s)
		}
		return d, nil
	case kStrings:
		return splitList(s), nil
	}
	return nil, fmt.Errorf("%q: this key cannot be written as a single value", s)
}

// splitList splits a comma-separated list, trimming spaces and dropping empty items.
func splitList(s string) []string {
	out := []string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// zeroOf returns the value a key of kind k takes when it is written as YAML null.
func zeroOf(k kind) any {
	switch k {
	case kString:
		return ""
	case kInt:
		return 0
	case kFloat:
		return 0.0
	case kBool:
		return false
	case kDuration:
		return time.Duration(0)
	case kStrings, kList:
		return []string{}
	case kOverrides:
		return []Override{}
	case kEvents:
		return []Event{}
	}
	return nil
}

// nest turns a flat map of dotted keys into the nested map viper reads as a config layer.
func nest(flat map[string]any) map[string]any {
	out := map[string]any{}
	for key, v := range flat {
		m := out
		parts := strings.Split(key, ".")
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = v
	}
	return out
}

// closest returns the candidate nearest to s by edit distance when it is near enough to be
// a likely typo, or "".
func closest(s string, candidates []string) string {
	best, bestD := "", len(s)/2+2
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
