package mitigate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestSlotVectors(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		{"123456789", 12739}, // the CRC-16/XMODEM check value 0x31C3, from the cluster spec
		{"", 0},
		{"foo", 12182},
		{"{user1000}.following", crcSlot("user1000")},
		{"{user1000}.followers", crcSlot("user1000")},
		{"foo{}{bar}", crcSlot("foo{}{bar}")}, // empty first tag: the whole key
		{"foo{{bar}}zap", crcSlot("{bar")},    // first '{', first '}' after it
		{"foo{bar}{zap}", crcSlot("bar")},     // only the first tag
		{"{}", crcSlot("{}")},                 // empty tag alone
		{"{", crcSlot("{")},                   // no closing brace
		{"}{", crcSlot("}{")},                 // closing brace before opening
		{"a}b{c}d", crcSlot("c")},             // a '}' before the '{' does not count
		{"{a}", crcSlot("a")},                 // whole key a tag
		{"x{y", crcSlot("x{y")},               // unterminated
		{"{hk:copy1:7}{user:1}p", crcSlot("hk:copy1:7")},
	}
	for _, tt := range tests {
		if got := Slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q) = %d; want %d", tt.key, got, tt.want)
		}
		if got := SlotBytes([]byte(tt.key)); got != tt.want {
			t.Errorf("SlotBytes(%q) = %d; want %d", tt.key, got, tt.want)
		}
	}
	if a, b := Slot("{user1000}.following"), Slot("{user1000}.followers"); a != b {
		t.Errorf("Slot of {user1000}.following = %d, of {user1000}.followers = %d; want equal", a, b)
	}
}

// slotKeys returns n keys of every shape that matters to hash tags, with a fixed seed.
func slotKeys(n int) []string {
	r := rand.New(rand.NewPCG(7, 11))
	randBytes := func(max int) string {
		b := make([]byte, r.IntN(max+1))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return string(b)
	}
	shapes := []func(i int) string{
		func(i int) string { return fmt.Sprintf("user:%d", i) },
		func(i int) string { return fmt.Sprintf("{user:%d}profile", i%97) },
		func(i int) string { return fmt.Sprintf("pre{tag%d}post{other}", i) },
		func(i int) string { return fmt.Sprintf("foo{}{bar%d}", i) },
		func(i int) string { return fmt.Sprintf("foo{{bar%d}}zap", i) },
		func(i int) string { return fmt.Sprintf("open{only%d", i) },
		func(i int) string { return fmt.Sprintf("}{%d", i) },
		func(i int) string { return fmt.Sprintf("%d}close", i) },
		func(i int) string { return fmt.Sprintf("ключ:%d:{é%d}:日本", i, i%13) },
		func(i int) string { return randBytes(40) },
		func(i int) string { return "{" + randBytes(8) + "}" + randBytes(8) },
		func(i int) string { return randBytes(5) + "{}" + randBytes(5) },
		func(i int) string { return strings.Repeat("{", i%5) + randBytes(6) + strings.Repeat("}", i%3) },
		func(i int) string { return strings.Repeat("k", 200+i%300) },
	}
	keys := []string{"", "{", "}", "{}", "}{", "{{}}", "{}}", "{{}", "123456789", "foo",
		"{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap",
		"foo{bar}{zap}", "a}b{c}d", "{a}", "x{y", "{hk:copy1:7}{user:1}p"}
	for i := 0; len(keys) < n; i++ {
		keys = append(keys, shapes[i%len(shapes)](i))
	}
	return keys
}

// TestSlotMatchesRedis compares Slot with CLUSTER KEYSLOT of a real cluster-enabled
// redis-server for thousands of keys.
func TestSlotMatchesRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	keys := slotKeys(6000)
	cmds := make([]*redis.IntCmd, len(keys))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ClusterKeySlot(ctx, k)
		}
		return nil
	}); err != nil {
		t.Fatalf("CLUSTER KEYSLOT pipeline: %v", err)
	}
	bad := 0
	for i, k := range keys {
		want := int(cmds[i].Val())
		if got := Slot(k); got != want {
			bad++
			if bad <= 10 {
				t.Errorf("Slot(%q) = %d; want %d (CLUSTER KEYSLOT)", k, got, want)
			}
		}
		if got := SlotBytes([]byte(k)); got != want {
			t.Errorf("SlotBytes(%q) = %d; want %d (CLUSTER KEYSLOT)", k, got, want)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys disagree with CLUSTER KEYSLOT", bad, len(keys))
	}
}

// naiveSlot is the reference: a bitwise CRC and the tag found with strings.Index.
func naiveSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crcSlot(key)
}

// crcSlot is the bitwise CRC-16/XMODEM of the whole of s, mod 16384, with no hash tags.
func crcSlot(s string) int {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % SlotCount
}

func TestSlotMatchesNaive(t *testing.T) {
	for _, k := range slotKeys(3000) {
		if got, want := Slot(k), naiveSlot(k); got != want {
			t.Errorf("Slot(%q) = %d; want %d", k, got, want)
		}
	}
}

func FuzzSlot(f *testing.F) {
	for _, k := range slotKeys(40) {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got, want := Slot(key), naiveSlot(key)
		if got != want || got < 0 || got >= SlotCount {
			t.Fatalf("Slot(%q) = %d; want %d", key, got, want)
		}
		if b := SlotBytes([]byte(key)); b != got {
			t.Fatalf("SlotBytes(%q) = %d; want %d", key, b, got)
		}
	})
}

func TestSlotAllocs(t *testing.T) {
	key, bkey := "{user:1}profile:with:a:longer:name", []byte("plain:key:without:tag")
	var sink int
	if a := testing.AllocsPerRun(1000, func() { sink += Slot(key) + SlotBytes(bkey) }); a != 0 {
		t.Errorf("Slot and SlotBytes: %v allocations per call; want 0", a)
	}
	_ = sink
}

var slotSink int

func BenchmarkSlot(b *testing.B) {
	for _, bm := range []struct{ name, key string }{
		{"plain16", "user:1000:profil"},
		{"tagged", "{user:1000}profile:settings"},
		{"long256", strings.Repeat("k", 256)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				slotSink += Slot(bm.key)
			}
		})
		b.Run(bm.name+"/naive", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				slotSink += naiveSlot(bm.key)
			}
		})
	}
}

// TestPrefixSlot: a prefix that decides the slot gives the slot of every longer key with
// that prefix, and one that does not (no tag, or a tag that closes later) says so.
func TestPrefixSlot(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"{user:1}profile", true}, {"pre{tag}", true}, {"{a}", true},
		{"foo{{bar}", true}, // the tag is "{bar", whatever follows
		{"user:1", false}, {"{user:1", false}, {"foo{}", false}, {"foo{}{bar}", false}, {"", false},
	} {
		slot, ok := PrefixSlot(tc.prefix)
		if ok != tc.ok {
			t.Errorf("PrefixSlot(%q) ok = %v; want %v", tc.prefix, ok, tc.ok)
			continue
		}
		for _, tail := range []string{"", "x", "}{zz}", "{other}"} {
			if ok && Slot(tc.prefix+tail) != slot {
				t.Errorf("PrefixSlot(%q) = %d; Slot(%q) = %d", tc.prefix, slot, tc.prefix+tail, Slot(tc.prefix+tail))
			}
		}
	}
	// Every cut of every test key: when the prefix decides, it is right.
	decided := 0
	for _, key := range slotKeys(3000) {
		for cut := 0; cut <= len(key); cut++ {
			if slot, ok := PrefixSlot(key[:cut]); ok {
				decided++
				if want := Slot(key); slot != want {
					t.Fatalf("PrefixSlot(%q) = %d; the whole key %q is in slot %d", key[:cut], slot, key, want)
				}
			}
		}
	}
	if decided == 0 {
		t.Fatal("no prefix of the test keys decided its slot")
	}
}
