package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
	"github.com/hotkeyd/hotkeyd/sampler"
	"github.com/redis/go-redis/v9"
)

// getJSON fetches url from a running agent and decodes its JSON answer into a T.
func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v T
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

// slotText shows an optional slot.
func slotText(s *int) string {
	if s == nil {
		return "none"
	}
	return fmt.Sprint(*s)
}

// TestKeyPlacementCluster: on a real 3-primary cluster, /v1/topk and /v1/keys/{key} place
// each key in the slot and on the primary that Redis itself names (CLUSTER KEYSLOT,
// CLUSTER SHARDS); a truncated key is placed only when its shown part holds a whole hash
// tag; /v1/nodes puts the hot key's primary first, with the key at its head.
func TestKeyPlacementCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	a := runAgent(t, Options{RedisAddrs: cl.Addrs(), MaxKeyBytes: 24})
	waitFor(t, func() bool { return a.namer() != nil })

	owner := map[int]string{}
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" {
				continue
			}
			for _, r := range sh.Slots {
				for s := r.Start; s <= r.End; s++ {
					owner[int(s)] = fmt.Sprintf("127.0.0.1:%d", n.Port)
				}
			}
		}
	}
	keySlot := func(key string) int {
		s, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(s)
	}

	const hot = "score:match42"
	tagged := "{user:77}:" + strings.Repeat("p", 40) // truncated to 24 bytes, tag kept
	untagged := "feed:" + strings.Repeat("x", 40)    // truncated, slot unknown
	cold := []string{"user:1", "user:2", "cart:9", "{user:77}:name", "sku:5", "sku:6"}
	send := func() {
		s := []sampler.Sample{{Key: []byte(hot), Op: sampler.OpRead, Count: 60},
			{Key: []byte(tagged), Op: sampler.OpRead, Count: 8}, {Key: []byte(untagged), Op: sampler.OpRead, Count: 8}}
		for _, k := range cold {
			s = append(s, sampler.Sample{Key: []byte(k), Op: sampler.OpWrite, Count: 2})
		}
		a.Accept(sampler.Batch{Source: "app", Rate: 0.01, Samples: s})
	}
	var top TopK
	deadline := time.Now().Add(10 * time.Second)
	for {
		send()
		top = getJSON[TopK](t, fmt.Sprintf("http://%s/v1/topk?n=20", a.HTTPAddr()))
		if len(top.Keys) == len(cold)+3 && top.Keys[0].Key == hot && top.Keys[0].Hot {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top-k never held the %d keys with %s hot: %+v", len(cold)+3, hot, top.Keys)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, k := range top.Keys {
		switch {
		case k.Truncated && strings.HasPrefix(tagged, k.Key):
			want := keySlot(tagged)
			if k.Slot == nil || *k.Slot != want || k.Primary != owner[want] {
				t.Errorf("truncated %q (tag kept): slot %v on %q; want the whole key's slot %d on %s", k.Key, slotText(k.Slot), k.Primary, want, owner[want])
			}
		case k.Truncated:
			if k.Slot != nil || k.Primary != "" {
				t.Errorf("truncated %q (no tag): slot %v on %q; want neither, the slot depends on bytes not kept", k.Key, slotText(k.Slot), k.Primary)
			}
		default:
			want := keySlot(k.Key)
			if k.Slot == nil || *k.Slot != want || k.Primary != owner[want] {
				t.Errorf("%q: slot %v on %q; want slot %d on %s", k.Key, slotText(k.Slot), k.Primary, want, owner[want])
			}
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", a.HTTPAddr()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("hotkeyd_key_primary{key=%q,primary=%q} 1", hot, owner[keySlot(hot)]); !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if !strings.Contains(string(body), `hotkeyd_key_rate{key="feed:`) || strings.Contains(string(body), `hotkeyd_key_primary{key="feed:`) {
		t.Error("/metrics: want the truncated key without a tag to have per-key series, but no primary")
	}
	one := getJSON[Key](t, fmt.Sprintf("http://%s/v1/keys/%s", a.HTTPAddr(), hot))
	if want := keySlot(hot); one.Slot == nil || *one.Slot != want || one.Primary != owner[want] {
		t.Errorf("/v1/keys/%s: slot %v on %q; want slot %d on %s", hot, slotText(one.Slot), one.Primary, want, owner[want])
	}

	nodes := getJSON[Nodes](t, fmt.Sprintf("http://%s/v1/nodes", a.HTTPAddr()))
	if !nodes.Cluster || len(nodes.Nodes) != 3 {
		t.Fatalf("/v1/nodes: %+v; want a cluster of 3 primaries", nodes)
	}
	first := nodes.Nodes[0]
	if want := owner[keySlot(hot)]; first.Primary != want || len(first.Keys) == 0 || first.Keys[0].Key != hot {
		t.Errorf("/v1/nodes first: %+v; want %s with %s at its head", first, want, hot)
	}
	var share float64
	slotsSum := 0
	for _, n := range nodes.Nodes {
		share += n.Share
		slotsSum += n.Slots
		for _, k := range n.Keys {
			if strings.HasPrefix(untagged, k.Key) {
				t.Errorf("/v1/nodes charges %s with %q, whose primary is unknown", n.Primary, k.Key)
			}
			if owner[k.Slot] != n.Primary {
				t.Errorf("/v1/nodes lists %q (slot %d, on %s) under %s", k.Key, k.Slot, owner[k.Slot], n.Primary)
			}
		}
	}
	if nodes.UnplacedRate <= 0 {
		t.Errorf("/v1/nodes unplaced_rate %v; want the rate of %q, which no primary could be named for", nodes.UnplacedRate, untagged)
	}
	rate := nodes.UnplacedRate
	for _, n := range nodes.Nodes {
		rate += n.Rate
	}
	if want := 1 - nodes.UnplacedRate/rate; math.Abs(share-want) > 1e-9 || slotsSum != 16384 {
		t.Errorf("/v1/nodes: shares sum to %v, slots to %d; want %v (the placed part of the ranked load) and 16384", share, slotsSum, want)
	}
}

// TestKeyPlacementStandalone: with one standalone server the primary is that server and
// no slot is given; with names hashed, /v1/nodes shows the hashes.
func TestKeyPlacementStandalone(t *testing.T) {
	srv := redistest.Start(t)
	a := runAgent(t, Options{RedisAddrs: []string{srv.Addr()}, HashKeys: true})
	waitFor(t, func() bool { return a.namer() != nil })
	const key = "cart:flash"
	var top TopK
	waitFor(t, func() bool {
		a.Accept(sampler.Batch{Source: "app", Rate: 0.01, Samples: []sampler.Sample{{Key: []byte(key), Op: sampler.OpRead, Count: 50}}})
		top = getJSON[TopK](t, fmt.Sprintf("http://%s/v1/topk", a.HTTPAddr()))
		return len(top.Keys) == 1 && top.Keys[0].Hot
	})
	if k := top.Keys[0]; k.Slot != nil || k.Primary != srv.Addr() || k.Key != a.display(key) {
		t.Errorf("standalone key %+v; want %s on %s, no slot", k, a.display(key), srv.Addr())
	}
	nodes := getJSON[Nodes](t, fmt.Sprintf("http://%s/v1/nodes", a.HTTPAddr()))
	if nodes.Cluster || len(nodes.Nodes) != 1 || nodes.Nodes[0].Primary != srv.Addr() || nodes.Nodes[0].Slots != 16384 ||
		len(nodes.Nodes[0].Keys) != 1 || nodes.Nodes[0].Keys[0].Key != a.display(key) || nodes.Nodes[0].Share != 1 {
		t.Errorf("/v1/nodes %+v; want one node %s, 16384 slots, share 1, key %s", nodes, srv.Addr(), a.display(key))
	}
}

// TestNodesWithoutRedis: with no redis.addrs, /v1/nodes answers an empty list and keys
// carry no placement.
func TestNodesWithoutRedis(t *testing.T) {
	a, c, h := newTestAgent(t, Options{})
	feed(a, c, "k", 5000, time.Second)
	if n := decode[Nodes](t, do(t, h, "GET", "/v1/nodes", "")); n.Cluster || n.Nodes == nil || len(n.Nodes) != 0 {
		t.Errorf("/v1/nodes without Redis: %+v; want cluster false, nodes []", n)
	}
	top := decode[TopK](t, do(t, h, "GET", "/v1/topk", ""))
	if len(top.Keys) != 1 || top.Keys[0].Slot != nil || top.Keys[0].Primary != "" {
		t.Errorf("keys without Redis: %+v; want one, unplaced", top.Keys)
	}
}

// TestNodesRedisLoad: the agent reads each primary's INFO; after a burst of reads of one
// key, /v1/nodes shows its primary's own load far above the others', and /metrics
// carries each primary's counters, clean by promtool. With RedisInfo negative, neither.
func TestNodesRedisLoad(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run ./scripts/test.sh, which installs Debian's prometheus package")
	}
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	a := runAgent(t, Options{RedisAddrs: cl.Addrs(), RedisInfo: 100 * time.Millisecond})
	off := runAgent(t, Options{RedisAddrs: cl.Addrs(), RedisInfo: -1})
	waitFor(t, func() bool { return a.namer() != nil && off.namer() != nil })
	const key = "sale:sku:4711"
	owner := a.redis.Load().topo.PrimaryOfKey(key)

	var nodes Nodes
	deadline := time.Now().Add(10 * time.Second)
	for {
		pipe := rdb.Pipeline()
		for range 2000 {
			pipe.Get(ctx, key)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		nodes = getJSON[Nodes](t, fmt.Sprintf("http://%s/v1/nodes", a.HTTPAddr()))
		busiest, others := 0.0, 0.0
		for _, n := range nodes.Nodes {
			if n.Redis == nil {
				continue
			}
			if n.Primary == owner {
				busiest = n.Redis.CommandsPerSecond
			} else {
				others = max(others, n.Redis.CommandsPerSecond)
			}
		}
		if busiest > 10*others && busiest > 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/v1/nodes never showed %s (owner of %s) far busier than the others: %+v", owner, key, nodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", a.HTTPAddr()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, p := range cl.Addrs() {
		if want := fmt.Sprintf("hotkeyd_redis_commands_total{primary=%q}", p); !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	offNodes := getJSON[Nodes](t, fmt.Sprintf("http://%s/v1/nodes", off.HTTPAddr()))
	if len(offNodes.Nodes) != 3 {
		t.Errorf("RedisInfo off: /v1/nodes lists %d primaries; want the 3, without their INFO load", len(offNodes.Nodes))
	}
	for _, n := range offNodes.Nodes {
		if n.Redis != nil {
			t.Errorf("RedisInfo off: node %s has redis load %+v", n.Primary, n.Redis)
		}
	}
	resp, err = http.Get(fmt.Sprintf("http://%s/metrics", off.HTTPAddr()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "hotkeyd_redis_commands_total{") {
		t.Error("RedisInfo off: /metrics has hotkeyd_redis_commands_total series")
	}
}

// TestNodesPrimaryWedged: a primary that stops answering (SIGSTOP, as a long script or a
// hung host leaves it) shows in /v1/nodes with its error and in /metrics with
// hotkeyd_redis_info_up 0, instead of vanishing; the log says so once, and again when it
// answers.
func TestNodesPrimaryWedged(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var logs logbuf.Buffer
	a := runAgent(t, Options{RedisAddrs: cl.Addrs(), RedisInfo: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitFor(t, func() bool { return a.namer() != nil })
	url := fmt.Sprintf("http://%s/v1/nodes", a.HTTPAddr())
	node := func(addr string) Node { // the zero Node while the agent has not listed it
		for _, n := range getJSON[Nodes](t, url).Nodes {
			if n.Primary == addr {
				return n
			}
		}
		return Node{}
	}
	wedged := cl.Nodes()[1]
	waitFor(t, func() bool { return node(wedged.Addr()).Redis != nil })
	wedged.Pause(t)
	paused := time.Now()
	waitFor(t, func() bool { return node(wedged.Addr()).RedisError != nil })
	n := node(wedged.Addr())
	if n.Redis != nil || !strings.Contains(n.RedisError.Error, "no answer within 100ms") ||
		n.RedisError.Since.Before(paused.Add(-time.Second)) || n.RedisError.Since.After(time.Now()) {
		t.Errorf("wedged %s in /v1/nodes: %+v, error %+v; want no load, the error, since about %v", wedged.Addr(), n.Redis, n.RedisError, paused)
	}
	time.Sleep(500 * time.Millisecond) // five failed readings more
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", a.HTTPAddr()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("hotkeyd_redis_info_up{primary=%q} 0", wedged.Addr()); !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if c := strings.Count(logs.String(), "a primary does not answer INFO"); c != 1 {
		t.Errorf("the log tells of the wedged primary %d times; want once:\n%s", c, logs.String())
	}
	wedged.Resume(t)
	waitFor(t, func() bool { return node(wedged.Addr()).Redis != nil })
	if !strings.Contains(logs.String(), "a primary answers INFO again") {
		t.Errorf("the log does not tell that %s answers again:\n%s", wedged.Addr(), logs.String())
	}
}
