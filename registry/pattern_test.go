package registry

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// globCases are patterns, keys, and whether Redis matches them. The corner cases follow
// Redis's stringmatchlen; TestMatchGlobAgainstRedis checks every one against a real server.
var globCases = []struct {
	pattern, key string
	want         bool
}{
	{"score:match42", "score:match42", true},
	{"score:match42", "score:match4", false},
	{"score:match42", "score:match421", false},
	{"sale:sku:*", "sale:sku:", true},
	{"sale:sku:*", "sale:sku:17", true},
	{"sale:sku:*", "sale:sk", false},
	{"*", "", true},
	{"*", "anything", true},
	{"**", "x", true},
	{"a*b", "ab", true},
	{"a*b", "axxb", true},
	{"a*b", "axxbc", false},
	{"a*b*c", "abbbc", true},
	{"*:price", "sale:sku:1:price", true},
	{"*:price", "sale:sku:1:prices", false},
	{"h?llo", "hello", true},
	{"h?llo", "hllo", false},
	{"?", "", false},
	{"h[ae]llo", "hallo", true},
	{"h[ae]llo", "hillo", false},
	{"h[^e]llo", "hallo", true},
	{"h[^e]llo", "hello", false},
	{"h[a-b]llo", "hbllo", true},
	{"h[a-b]llo", "hcllo", false},
	{"h[b-a]llo", "hallo", true}, // reversed range ends are swapped
	{"[a-]", "-", false},         // "a-]" is the range a..']', then the class is unterminated
	{"[a-]", "]", true},
	{"[]", "]", false},
	{"[]]", "]", false},
	{"[\\]]", "]", true},
	{"[\\-]", "-", true},
	{"[abc", "a", true}, // unterminated class runs to the end
	{"[abc", "ab", false},
	{"[^", "x", true},
	{"[", "x", false},
	{"a\\*b", "a*b", true},
	{"a\\*b", "axb", false},
	{"a\\", "a\\", true}, // a trailing backslash is itself
	{"\\?", "?", true},
	{"\\?", "x", false},
	{"[*]", "*", true},
	{"[?]", "x", false},
	{"a*", "a", true},
	{"*a", "", false},
	{"a**", "a", true},
	{"*?", "", false},
	{"*?", "x", true},
	{"user:[0-9][0-9]*", "user:42:profile", true},
	{"user:[0-9][0-9]*", "user:4x", false},
	{"*a*a*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 60), false},
	{"é*", "école", true},
	{"é*", "ecole", false},
	{"**", "", false}, // only "*" alone matches the empty key (KEYS * skips matching)
	{"\xc3*", "\xc3\xa9cole", true},
}

func TestMatchGlob(t *testing.T) {
	for _, c := range globCases {
		if got := MatchGlob(c.pattern, c.key); got != c.want {
			t.Errorf("MatchGlob(%q, %q) = %v; want %v", c.pattern, c.key, got, c.want)
		}
		p, err := CompilePattern(c.pattern)
		if err != nil {
			continue
		}
		if got := p.Match(c.key); got != c.want {
			t.Errorf("CompilePattern(%q) (%v).Match(%q) = %v; want %v", c.pattern, p.Kind, c.key, got, c.want)
		}
	}
}

// TestMatchGlobAgainstRedis asks a real redis-server which keys KEYS returns for each
// pattern and compares with MatchGlob.
func TestMatchGlobAgainstRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	keys := []string{"", "a", "ab", "abc", "b", "x", "-", "]", "[", "*", "?", "\\", "a\\", "a*b", "axb", "hello", "hallo", "hbllo", "hillo",
		"sale:sku:", "sale:sku:17", "user:42:profile", "user:4x", "\xc3\xa9cole", strings.Repeat("a", 60), "a-c", "z]"}
	for _, k := range keys {
		if err := rdb.Set(ctx, k, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	patterns := []string{"a*b"}
	for _, c := range globCases {
		patterns = append(patterns, c.pattern)
	}
	patterns = append(patterns, "[a-c]", "[^a-c]", "[a\\-c]", "*]", "[]a]*", "[!a]", "a[", "a[b", "\\", "\\\\", "[\\", "[a-\\]]", "?*?", "*\\*")
	for _, p := range patterns {
		got, err := rdb.Keys(ctx, p).Result()
		if err != nil {
			t.Fatalf("KEYS %q: %v", p, err)
		}
		slices.Sort(got)
		var want []string
		for _, k := range keys {
			if MatchGlob(p, k) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("pattern %q: Redis KEYS returns %q; MatchGlob matches %q", p, got, want)
		}
	}
}

func TestCompilePattern(t *testing.T) {
	cases := []struct {
		src     string
		kind    PatternKind
		literal string
		broad   bool
		err     bool
	}{
		{src: "score:match42", kind: Exact, literal: "score:match42"},
		{src: "a\\*b", kind: Exact, literal: "a*b"},
		{src: "a\\", kind: Exact, literal: "a\\"},
		{src: "sale:sku:*", kind: Prefix, literal: "sale:sku:"},
		{src: "sale:sku:**", kind: Prefix, literal: "sale:sku:"},
		{src: "sale\\*:*", kind: Prefix, literal: "sale*:"},
		{src: "*", kind: Prefix, broad: true},
		{src: "**", kind: Prefix, broad: true},
		{src: "?*", kind: Glob, broad: true},
		{src: "[a-z]*", kind: Glob, broad: true},
		{src: "[abc", kind: Glob, broad: true},
		{src: "*:price", kind: Glob},
		{src: "a*b", kind: Glob},
		{src: "user:?", kind: Glob},
		{src: "", err: true},
		{src: strings.Repeat("k", MaxPatternLen+1), err: true},
	}
	for _, c := range cases {
		p, err := CompilePattern(c.src)
		if (err != nil) != c.err {
			t.Errorf("CompilePattern(%.20q) error = %v; want error %v", c.src, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if p.Kind != c.kind || p.Literal != c.literal || p.Broad != c.broad {
			t.Errorf("CompilePattern(%q) = %v %q broad=%v; want %v %q broad=%v", c.src, p.Kind, p.Literal, p.Broad, c.kind, c.literal, c.broad)
		}
	}
}

func TestMatchGlobAllocs(t *testing.T) {
	key := "sale:sku:123456:price"
	n := testing.AllocsPerRun(100, func() {
		sink = MatchGlob("sale:*:[0-9]*:pri?e", key)
	})
	if n != 0 {
		t.Errorf("MatchGlob allocates %v times; want 0", n)
	}
}

var sink bool

func BenchmarkMatchGlob(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = MatchGlob("sale:*:[0-9]*:pri?e", "sale:sku:123456:price")
	}
}

// BenchmarkMatchGlobPathological is the pattern Redis's skipLongerMatches was added for.
func BenchmarkMatchGlobPathological(b *testing.B) {
	b.ReportAllocs()
	p, k := strings.Repeat("*a", 30)+"b", strings.Repeat("a", 100)
	for b.Loop() {
		sink = MatchGlob(p, k)
	}
}

func FuzzMatchGlob(f *testing.F) {
	for _, c := range globCases {
		f.Add(c.pattern, c.key)
	}
	f.Fuzz(func(t *testing.T, pattern, key string) {
		got := MatchGlob(pattern, key)
		p, err := CompilePattern(pattern)
		if err != nil {
			return
		}
		// The compiled shortcuts give Redis's answers.
		if p.Match(key) != got {
			t.Fatalf("CompilePattern(%q) as %v matches %q: %v; MatchGlob says %v", pattern, p.Kind, key, !got, got)
		}
		if p.Kind == Exact && !p.Match(p.Literal) {
			t.Fatalf("exact pattern %q does not match its literal %q", pattern, p.Literal)
		}
		// MatchGlob agrees with a plain dynamic-programming matcher, except past Redis's
		// 1,000 nested '*', where it answers no match.
		if strings.Count(pattern, "*") <= 1000 {
			if want := refGlob(pattern, key); got != want {
				t.Fatalf("MatchGlob(%q, %q) = %v; the reference matcher says %v", pattern, key, got, want)
			}
		}
	})
}

// refGlob is a reference for MatchGlob: the pattern is read into tokens the way Redis's
// stringmatchlen reads it, then matched by dynamic programming, with no recursion and no
// shortcuts. Redis's main loop stops when the key is empty, so the empty key matches only
// the empty pattern (and "*", which KEYS and SCAN special-case).
func refGlob(pattern, key string) bool {
	if key == "" {
		return pattern == "" || pattern == "*"
	}
	type token struct {
		star bool
		set  [4]uint64 // the bytes the token matches, when not a star
	}
	add := func(tk *token, b byte) { tk.set[b>>6] |= 1 << (b & 63) }
	toks := make([]token, 0, len(pattern))
	for i := 0; i < len(pattern); {
		var tk token
		switch c := pattern[i]; {
		case c == '*':
			tk.star = true
			i++
		case c == '?':
			tk.set = [4]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
			i++
		case c == '[':
			i++
			not := i < len(pattern) && pattern[i] == '^'
			if not {
				i++
			}
			for i < len(pattern) { // an unterminated class runs to the end
				switch {
				case pattern[i] == '\\' && i+1 < len(pattern):
					add(&tk, pattern[i+1])
					i += 2
					continue
				case pattern[i] == ']':
					i++
				case i+2 < len(pattern) && pattern[i+1] == '-':
					lo, hi := pattern[i], pattern[i+2]
					if lo > hi {
						lo, hi = hi, lo
					}
					for b := int(lo); b <= int(hi); b++ {
						add(&tk, byte(b))
					}
					i += 3
					continue
				default:
					add(&tk, pattern[i])
					i++
					continue
				}
				break
			}
			if not {
				for w := range tk.set {
					tk.set[w] = ^tk.set[w]
				}
			}
		case c == '\\' && i+1 < len(pattern):
			add(&tk, pattern[i+1])
			i += 2
		default:
			add(&tk, c)
			i++
		}
		toks = append(toks, tk)
	}
	// next[j], then cur[j]: toks[i:] matches key[j:], for i from the end down.
	next, cur := make([]bool, len(key)+1), make([]bool, len(key)+1)
	next[len(key)] = true
	for i := len(toks) - 1; i >= 0; i-- {
		tk := toks[i]
		for j := len(key); j >= 0; j-- {
			if tk.star {
				cur[j] = next[j] || j < len(key) && cur[j+1]
			} else {
				cur[j] = j < len(key) && tk.set[key[j]>>6]&(1<<(key[j]&63)) != 0 && next[j+1]
			}
		}
		next, cur = cur, next
	}
	return next[0]
}
