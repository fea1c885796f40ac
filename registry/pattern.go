package registry

import (
	"fmt"
	"strings"
)

// PatternKind says how a key pattern is matched.
type PatternKind uint8

// The kinds of pattern. Compile picks the cheapest kind that gives the same answers as
// Redis's glob matching.
const (
	// Exact patterns contain no wildcard: they match one key (escapes removed).
	Exact PatternKind = iota
	// Prefix patterns are literal characters followed by one or more '*' ("sale:sku:*"):
	// they match every key that starts with the literal part.
	Prefix
	// Glob patterns are everything else, matched like Redis's KEYS and SCAN MATCH.
	Glob
)

// String names the kind.
func (k PatternKind) String() string {
	switch k {
	case Exact:
		return "exact"
	case Prefix:
		return "prefix"
	}
	return "glob"
}

// MaxPatternLen bounds a pattern's length in bytes, and so the cost of matching it.
const MaxPatternLen = 1024

// Pattern is a compiled key pattern. Its zero value matches only the empty key.
type Pattern struct {
	// Source is the pattern as written.
	Source string
	// Kind is how it is matched.
	Kind PatternKind
	// Literal is, for Exact, the key it matches and, for Prefix, the prefix every matching
	// key starts with, escapes removed. It is empty for Glob.
	Literal string
	// Broad reports a pattern with no literal character at all: only '*', '?' and
	// character classes, such as "*", "?*" or "[a-z]*". It matches every key or close to
	// it; events need "allow_broad": true to use one.
	Broad bool
}

// CompilePattern checks a pattern and classifies it. It fails on an empty pattern or one
// longer than MaxPatternLen; every other string is a valid Redis glob.
func CompilePattern(src string) (Pattern, error) {
	switch {
	case src == "":
		return Pattern{}, fmt.Errorf("empty: want a key, a prefix such as \"sale:sku:*\" or a Redis glob")
	case len(src) > MaxPatternLen:
		return Pattern{}, fmt.Errorf("%d bytes long: at most %d allowed", len(src), MaxPatternLen)
	}
	p := Pattern{Source: src, Kind: Glob, Broad: !hasLiteral(src)}
	lit, rest := splitLiteral(src)
	switch {
	case rest == "":
		p.Kind, p.Literal = Exact, lit
	case strings.Trim(rest, "*") == "":
		p.Kind, p.Literal = Prefix, lit
	}
	return p, nil
}

// splitLiteral splits src at its first unescaped '*', '?' or '[': lit is what comes
// before it, escapes removed, and rest starts at it ("" when src has none). A glob's
// matches all start with lit.
func splitLiteral(src string) (lit, rest string) {
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '*', '?', '[':
			return b.String(), src[i:]
		case '\\':
			// Redis: a backslash escapes the next byte; a trailing one is itself.
			if i+1 < len(src) {
				i++
			}
			b.WriteByte(src[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), ""
}

// hasLiteral says whether src has a character outside '*', '?' and [...] classes.
func hasLiteral(src string) bool {
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '*', '?':
		case '\\':
			return true
		case '[':
			// Skip the class the way the matcher reads it.
			i++
			if i < len(src) && src[i] == '^' {
				i++
			}
			for i < len(src) && src[i] != ']' {
				if src[i] == '\\' && i+1 < len(src) {
					i++
				}
				i++
			}
			// An unterminated class runs to the end, as in Redis.
		default:
			return true
		}
	}
	return false
}

// Match reports whether key matches the pattern. It does not allocate.
func (p *Pattern) Match(key string) bool {
	switch p.Kind {
	case Exact:
		return key == p.Literal
	case Prefix:
		if key == "" {
			return MatchGlob(p.Source, key)
		}
		return strings.HasPrefix(key, p.Literal)
	}
	return MatchGlob(p.Source, key)
}

// MatchGlob reports whether key matches the Redis glob pattern, with the semantics of
// Redis's stringmatchlen (src/util.c), which KEYS, SCAN MATCH and PSUBSCRIBE use:
//
//   - any run of bytes, empty included
//     ?      exactly one byte
//     [abc]  one byte of the set; [a-z] a range (reversed ends are swapped);
//     [^...] negates; \ escapes inside a class; an unterminated class runs to
//     the end of the pattern
//     \x     the byte x literally; a trailing \ is a literal backslash
//
// A pattern of one '*' matches every key, the empty key included, as KEYS * and SCAN
// do (they skip matching for it); for other patterns stringmatchlen decides
// ("**" does not match the empty key).
//
// Matching is on bytes, case-sensitive. It departs from Redis in one corner only: range
// ends are compared as unsigned bytes (Redis compares C chars, signed on most platforms,
// so ranges with bytes ≥ 0x80 differ). Like Redis it stops recursing beyond 1,000 nested
// '*' and answers no match. It does not allocate.
func MatchGlob(pattern, key string) bool {
	if pattern == "*" {
		return true
	}
	skip := false
	return globMatch(pattern, key, &skip, 0)
}

// globMatch is stringmatchlen_impl with nocase off; skipLonger is Redis's
// skipLongerMatches, which keeps patterns with many '*' from going exponential.
func globMatch(p, s string, skipLonger *bool, nesting int) bool {
	if nesting > 1000 {
		return false
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if globMatch(p[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for {
				if len(p) == 0 {
					// Unterminated: Redis steps back onto the last byte so that the
					// step below consumes it.
					p = " "
					break
				}
				if p[0] == '\\' && len(p) >= 2 {
					p = p[1:]
					if p[0] == s[0] {
						match = true
					}
				} else if p[0] == ']' {
					break
				} else if len(p) >= 3 && p[1] == '-' {
					lo, hi, c := p[0], p[2], s[0]
					if lo > hi {
						lo, hi = hi, lo
					}
					p = p[2:]
					if c >= lo && c <= hi {
						match = true
					}
				} else if p[0] == s[0] {
					match = true
				}
				p = p[1:]
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}
