package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/client"
	"github.com/hotkeyd/hotkeyd/mitigate"
)

// The three lines that make an app follow hotkeyd's plan: Attach, check the error, Close.
// Here the plan caches score:match42 for a second (L1), so 1,000 GETs cost Redis one read.
func ExampleAttach() {
	redisAddr, stop := startRedis() // a real redis-server for the example
	defer stop()
	agent := standInAgent(mitigate.Entry{Key: "score:match42", Kind: mitigate.L1, Mode: mitigate.Enforce,
		Since: planTime, Expires: planTime.Add(time.Minute), TTL: mitigate.Duration(time.Second)})
	defer agent.Close()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	c, err := client.Attach(rdb, client.Options{Agent: agent.URL, Source: "checkout"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	if err := c.WaitPlan(ctx); err != nil { // optional: the first requests follow the plan too
		log.Fatal(err)
	}
	rdb.Set(ctx, "score:match42", "2-1", 0)
	for range 1000 {
		rdb.Get(ctx, "score:match42")
	}
	st := c.Stats().L1
	fmt.Printf("1000 GETs: %d read from Redis, %d from L1\n", st.Loads, st.Hits)
	// Output: 1000 GETs: 1 read from Redis, 999 from L1
}

// The cache-aside helper protects any load, here a database query: 100 concurrent
// requests for a cold key cost one query, and MaxLoads caps the queries a cold start can
// run at once.
func ExampleCache_Get() {
	cache, err := client.NewCache(client.CacheOptions{TTL: time.Minute, MaxLoads: 8})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	var queries atomic.Int32
	loadUser := func(ctx context.Context) ([]byte, error) {
		queries.Add(1)
		time.Sleep(20 * time.Millisecond) // SELECT … FROM users WHERE id = 42
		return []byte(`{"name":"alice"}`), nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { cache.Get(ctx, "user:42", loadUser) })
	}
	wg.Wait()
	v, err := cache.Get(ctx, "user:42", loadUser)
	fmt.Printf("%s, %v: %d query for 101 reads\n", v, err, queries.Load())
	// Output: {"name":"alice"}, <nil>: 1 query for 101 reads
}

// Client.Get is the same helper on an attached client. It works whether or not the agent
// is there: hotkeyd is not needed for the app to run.
func ExampleClient_Get() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used below
	defer rdb.Close()
	c, err := client.Attach(rdb, client.Options{Agent: "http://127.0.0.1:1", NoReports: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for range 3 {
		v, err := c.Get(ctx, "price:sku:9", func(ctx context.Context) ([]byte, error) {
			return []byte("19.99"), nil // a call to the pricing service
		})
		fmt.Println(string(v), err)
	}
	fmt.Println("loads:", c.Stats().Aside.Loads)
	// Output:
	// 19.99 <nil>
	// 19.99 <nil>
	// 19.99 <nil>
	// loads: 1
}

// Counters get an explicit API, because a batched increment cannot return the new value.
// Here the plan batches likes:post7 with a flush every minute: 1,000 Adds cost Redis
// nothing until the flush, Get counts what is pending, and Close flushes it in one
// INCRBY. With no entry for the key, Add is a plain INCRBY; under a sharded_counter entry
// it increments a random sub-counter and Get reads them all.
func ExampleCounter() {
	redisAddr, stop := startRedis()
	defer stop()
	agent := standInAgent(mitigate.Entry{Key: "likes:post7", Kind: mitigate.BatchedCounter, Mode: mitigate.Enforce,
		Since: planTime, Expires: planTime.Add(time.Minute), FlushInterval: mitigate.Duration(time.Minute)})
	defer agent.Close()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	c, err := client.Attach(rdb, client.Options{Agent: agent.URL, NoReports: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := c.WaitPlan(ctx); err != nil {
		log.Fatal(err)
	}

	likes := c.Counter()
	for range 1000 {
		if err := likes.Add(ctx, "likes:post7", 1); err != nil { // never fails when batched
			log.Fatal(err)
		}
	}
	n, _ := likes.Get(ctx, "likes:post7")
	fmt.Printf("Get: %d, in Redis: %q\n", n, rdb.Get(ctx, "likes:post7").Val())
	if err := c.Close(); err != nil { // flushes what is pending
		log.Fatal(err)
	}
	fmt.Printf("after Close, in Redis: %q\n", rdb.Get(ctx, "likes:post7").Val())
	// Output:
	// Get: 1000, in Redis: ""
	// after Close, in Redis: "1000"
}

var planTime = time.Date(2026, 3, 1, 20, 0, 0, 0, time.UTC)

// standInAgent serves a fixed plan at /v1/plan as the agent does: at once without after,
// else a wait until the client goes away (the plan never changes).
func standInAgent(entries ...mitigate.Entry) *httptest.Server {
	plan := mitigate.Plan{Version: 1, Generated: planTime, Primaries: 1, Entries: entries}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("after") == "1" {
			<-r.Context().Done()
			return
		}
		json.NewEncoder(w).Encode(plan)
	}))
}

// startRedis starts a redis-server on a free loopback port for an example, which has no
// *testing.T for internal/redistest.
func startRedis() (addr string, stop func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "hotkeyd-example-")
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		log.Fatalf("redis-server: %v (run ./scripts/test.sh, which installs it)", err)
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for i := 0; rdb.Ping(context.Background()).Err() != nil; i++ {
		if i == 200 {
			log.Fatal("redis-server did not answer PING within 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return addr, func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
}
