package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkeyd/hotkeyd/client"
	"github.com/hotkeyd/hotkeyd/sampler"
)

// The three lines an app adds to report its Redis traffic to hotkeyd: create a Reporter,
// add its hook to the go-redis client, close it on the way out.
func Example() {
	// A stand-in for the hotkeyd agent, which prints the samples it receives. In
	// production the agent runs on 127.0.0.1:9736, the Reporter's default.
	received := make(chan string, 8)
	agent, err := sampler.NewUDPServer(sampler.UDPOptions{Listen: "127.0.0.1:0", Readers: 1,
		Sink: sampler.SinkFunc(func(b sampler.Batch) {
			for _, s := range b.Samples {
				received <- fmt.Sprintf("%s: %s %s (1 in %.0f)", b.Source, s.Op, s.Key, 1/b.Rate)
			}
		})})
	if err != nil {
		log.Fatal(err)
	}
	go agent.Serve(context.Background())
	defer agent.Close()

	// The app's client. No Redis runs in this example: the command fails, and the hook
	// reports it all the same without adding an error of its own.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()

	// The three lines (a real app keeps the default SampleEvery of 100).
	r, err := client.NewReporter(client.ReporterOptions{Agent: agent.Addr().String(), Source: "checkout", SampleEvery: 1})
	if err != nil {
		log.Fatal(err)
	}
	rdb.AddHook(r.Hook())
	defer r.Close()

	ctx := context.Background()
	rdb.MGet(ctx, "cart:7", "user:42")
	rdb.Incr(ctx, "orders:today")

	r.Close() // sends what is pending; a deferred Close does the same on exit
	for range 3 {
		select {
		case s := <-received:
			fmt.Println(s)
		case <-time.After(5 * time.Second):
			fmt.Println("timed out")
			return
		}
	}
	st := r.Stats()
	fmt.Printf("sampled %d, sent %d, dropped %d\n", st.Sampled, st.Sent, st.Dropped)
	// Output:
	// checkout: read cart:7 (1 in 1)
	// checkout: read user:42 (1 in 1)
	// checkout: write orders:today (1 in 1)
	// sampled 3, sent 3, dropped 0
}
