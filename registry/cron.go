package registry

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed standard 5-field cron expression: minute, hour, day of month, month,
// day of week. Its zero value never fires. See ParseCron for the syntax.
type Cron struct {
	minute uint64 // bits 0–59
	hour   uint32 // bits 0–23
	dom    uint32 // bits 1–31
	month  uint16 // bits 1–12
	dow    uint8  // bits 0–6, Sunday = 0
	// domStar and dowStar record a day field that starts with '*'. As in Vixie cron,
	// when both day fields are restricted a day matches if either matches; when one
	// starts with '*', only the other one counts.
	domStar, dowStar bool
}

// MaxCronLen bounds the length of a cron expression.
const MaxCronLen = 256

// cronField describes one field of the expression.
type cronField struct {
	name     string
	min, max int
	names    []string // names for min, min+1, …; nil when the field takes none
}

var (
	monthNames = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
	dayNames   = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

	cronFields = [5]cronField{
		{name: "minute", min: 0, max: 59},
		{name: "hour", min: 0, max: 23},
		{name: "day of month", min: 1, max: 31},
		{name: "month", min: 1, max: 12, names: monthNames},
		{name: "day of week", min: 0, max: 7, names: dayNames}, // 7 is Sunday too
	}

	cronMacros = map[string]string{
		"@yearly":   "0 0 1 1 *",
		"@annually": "0 0 1 1 *",
		"@monthly":  "0 0 1 * *",
		"@weekly":   "0 0 * * 0",
		"@daily":    "0 0 * * *",
		"@midnight": "0 0 * * *",
		"@hourly":   "0 * * * *",
	}
)

// ParseCron parses a standard 5-field cron expression:
//
//	minute hour day-of-month month day-of-week
//	0-59   0-23 1-31         1-12  0-7 (0 and 7 are Sunday)
//
// Each field is a comma-separated list of items; an item is '*', a number, or a range
// "a-b", optionally followed by "/step" ("*/15", "0-30/10"; "5/15" means "5-max/15").
// Months take the names jan–dec and days of the week sun–sat, in any case, in ranges too
// ("mon-fri"). The macros @yearly (@annually), @monthly, @weekly, @daily (@midnight) and
// @hourly stand for their usual expressions. When both day fields are restricted, a day
// matches if either matches (Vixie cron); a field that starts with '*' is unrestricted.
// Not supported: seconds or year fields, L, W, #, ?, H and @reboot.
func ParseCron(expr string) (Cron, error) {
	if len(expr) > MaxCronLen {
		return Cron{}, fmt.Errorf("cron expression is %d bytes long: at most %d allowed", len(expr), MaxCronLen)
	}
	s := strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(s)]; ok {
		s = m
	} else if strings.HasPrefix(s, "@") {
		return Cron{}, fmt.Errorf("cron macro %q: want @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly", s)
	}
	fs := strings.Fields(s)
	if len(fs) != 5 {
		return Cron{}, fmt.Errorf("cron expression %q has %d fields: want 5 (minute hour day-of-month month day-of-week)", expr, len(fs))
	}
	var sets [5]uint64
	for i, f := range fs {
		set, err := parseCronField(f, cronFields[i])
		if err != nil {
			return Cron{}, err
		}
		sets[i] = set
	}
	dow := sets[4]
	if dow&(1<<7) != 0 {
		dow = dow&^(1<<7) | 1
	}
	return Cron{
		minute:  sets[0],
		hour:    uint32(sets[1]),
		dom:     uint32(sets[2]),
		month:   uint16(sets[3]),
		dow:     uint8(dow),
		domStar: strings.HasPrefix(fs[2], "*"),
		dowStar: strings.HasPrefix(fs[4], "*"),
	}, nil
}

// parseCronField returns the set of values a field allows, one bit per value.
func parseCronField(s string, f cronField) (uint64, error) {
	var set uint64
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, step := f.min, f.max, 1
		rng, stepStr, hasStep := strings.Cut(item, "/")
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > f.max {
				return 0, fmt.Errorf("cron %s field %q: step %q: want a number from 1 to %d", f.name, s, stepStr, f.max)
			}
			step = n
		}
		switch {
		case rng == "*":
		case rng == "":
			return 0, fmt.Errorf("cron %s field %q: empty item: want *, a value, a range a-b, or any of these with /step", f.name, s)
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = cronValue(a, f); err != nil {
				return 0, fmt.Errorf("cron %s field %q: %w", f.name, s, err)
			}
			switch {
			case isRange:
				if hi, err = cronValue(b, f); err != nil {
					return 0, fmt.Errorf("cron %s field %q: %w", f.name, s, err)
				}
				if hi < lo {
					return 0, fmt.Errorf("cron %s field %q: range %s runs backwards: want low-high", f.name, s, rng)
				}
			case !hasStep:
				hi = lo
			}
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

// cronValue reads one number or name of field f.
func cronValue(s string, f cronField) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < f.min || v > f.max || s == "" || s[0] == '+' || s[0] == '-' {
		if f.names != nil {
			return 0, fmt.Errorf("value %q: want %d–%d or a name %s–%s", s, f.min, f.max, f.names[0], f.names[len(f.names)-1])
		}
		return 0, fmt.Errorf("value %q: want %d–%d", s, f.min, f.max)
	}
	return v, nil
}

// Matches reports whether t's wall clock, in t's location, is a time the expression fires
// at (to the minute: seconds are ignored).
func (c Cron) Matches(t time.Time) bool {
	y, m, d := t.Date()
	return c.matchesDay(y, m, d) && c.hour&(1<<uint(t.Hour())) != 0 && c.minute&(1<<uint(t.Minute())) != 0
}

// matchesDay reports whether the expression fires on some minute of the given date.
func (c Cron) matchesDay(y int, m time.Month, d int) bool {
	if c.month&(1<<uint(m)) == 0 {
		return false
	}
	domOK := c.dom&(1<<uint(d)) != 0
	dowOK := c.dow&(1<<uint(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday())) != 0
	switch {
	case c.domStar || c.dowStar:
		return domOK && dowOK
	default:
		return domOK || dowOK
	}
}

// times calls fn with each hour and minute the expression fires at, in order, until fn
// returns false.
func (c Cron) times(fn func(h, m int) bool) {
	for hs := c.hour; hs != 0; hs &= hs - 1 {
		h := bits.TrailingZeros32(hs)
		for ms := c.minute; ms != 0; ms &= ms - 1 {
			if !fn(h, bits.TrailingZeros64(ms)) {
				return
			}
		}
	}
}

// String returns the expression in canonical form: plain numbers and ranges, "*" for a
// full field. ParseCron of it gives the same Cron.
func (c Cron) String() string {
	dow := uint64(c.dow)
	return strings.Join([]string{
		cronSetString(c.minute, cronFields[0], false, false),
		cronSetString(uint64(c.hour), cronFields[1], false, false),
		cronSetString(uint64(c.dom), cronFields[2], true, c.domStar),
		cronSetString(uint64(c.month), cronFields[3], false, false),
		cronSetString(dow, cronField{name: "day of week", min: 0, max: 6}, true, c.dowStar),
	}, " ")
}

// cronSetString writes a set as a list of values and ranges. A full star field is "*"
// (minute, hour and month are always star fields: only the day fields care). A
// stepped star field ("*/2") must still start with '*' so that the day rule stays the
// same: it is written "*/N" (N the field's size, which selects only its minimum, always
// in such a set) followed by the other values. A restricted field that happens to be full
// is written as its range, so that restriction survives too.
func cronSetString(set uint64, f cronField, day, star bool) string {
	full := uint64(0)
	for v := f.min; v <= f.max; v++ {
		full |= 1 << uint(v)
	}
	if set == full && (star || !day) {
		return "*"
	}
	if star {
		set &^= 1 << uint(f.min)
	}
	var parts []string
	if star {
		parts = append(parts, "*/"+strconv.Itoa(f.max-f.min+1))
	}
	for v := f.min; v <= f.max; {
		if set&(1<<uint(v)) == 0 {
			v++
			continue
		}
		w := v
		for w+1 <= f.max && set&(1<<uint(w+1)) != 0 {
			w++
		}
		if w == v {
			parts = append(parts, strconv.Itoa(v))
		} else {
			parts = append(parts, strconv.Itoa(v)+"-"+strconv.Itoa(w))
		}
		v = w + 1
	}
	return strings.Join(parts, ",")
}
