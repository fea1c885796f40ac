package client

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestHookKeyAsRedisSeesIt checks that a key argument that is not a string is reported
// as the bytes go-redis writes to Redis (internal/proto.Writer.WriteArg), not as Go
// formats the value: the agent must count the key Redis sees.
func TestHookKeyAsRedisSeesIt(t *testing.T) {
	ctx := context.Background()
	s, i64, u, f32, f64, yes := "ptr:key", int64(-7), uint(9), float32(0.1), 2.5, true
	var nilStr *string
	tests := []struct {
		name string
		key  any
		want string
	}{
		{"[]byte", []byte("b:1"), "b:1"},
		{"int", 42, "42"},
		{"uint8", uint8(200), "200"},
		{"uintptr", uintptr(5), "5"},
		{"bool", true, "1"},
		// go-redis writes a float32 as float64(v) in its shortest 64-bit form.
		{"float32", float32(0.1), "0.10000000149011612"},
		{"float64", 0.25, "0.25"},
		// go-redis dereferences pointers to the basic types; nil is "" or 0.
		{"*string", &s, "ptr:key"},
		{"nil *string", nilStr, ""},
		{"*int64", &i64, "-7"},
		{"*uint", &u, "9"},
		{"*float32", &f32, "0.10000000149011612"},
		{"*float64", &f64, "2.5"},
		{"*bool", &yes, "1"},
		// net.IP is written as its raw bytes, not its text form.
		{"net.IP", net.IPv4(10, 0, 0, 1).To4(), "\x0a\x00\x00\x01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c capture
			r := newTestReporter(t, ReporterOptions{Source: "app", SampleEvery: 1}, c.send)
			if err := r.Hook().ProcessHook(nop)(ctx, redis.NewStringCmd(ctx, "get", tt.key)); err != nil {
				t.Fatal(err)
			}
			r.Close()
			if got, want := c.get(), []string{"app read " + tt.want}; !slices.Equal(got, want) {
				t.Errorf("got %q; want %q", got, want)
			}
		})
	}
}

// TestHookKeyAsRedisSeesItRedis writes with keys of other types through a real go-redis
// client and redis-server, and checks that each key the hook reports exists in Redis.
func TestHookKeyAsRedisSeesItRedis(t *testing.T) {
	srv := redistest.Start(t)
	var c capture
	r := newTestReporter(t, ReporterOptions{Source: "app", SampleEvery: 1}, c.send)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	rdb.AddHook(r.Hook())
	ctx := context.Background()
	s, f := "ptr:key", float32(0.1)
	keys := []any{[]byte("b:1"), 42, float32(0.1), &s, &f, net.IPv4(10, 0, 0, 1).To4()}
	for _, k := range keys {
		if err := rdb.Do(ctx, "set", k, "v").Err(); err != nil {
			t.Fatalf("SET %T: %v", k, err)
		}
	}
	r.Close()
	got := c.get()
	if len(got) != len(keys) {
		t.Fatalf("got %q; want %d samples", got, len(keys))
	}
	check := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer check.Close()
	for i, sample := range got {
		key, ok := strings.CutPrefix(sample, "app write ")
		key, _, _ = strings.Cut(key, " bytes=")
		if !ok {
			t.Fatalf("sample %q", sample)
		}
		if n, err := check.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Errorf("key of type %T: reported %q, which Redis does not hold (%d, %v)", keys[i], key, n, err)
		}
	}
}
