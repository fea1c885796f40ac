// Package client is the Go SDK that applications embed to work with hotkeyd. Its first
// part, the Reporter, samples the app's Redis commands through a go-redis v9 hook and
// sends the samples to the hotkeyd agent in UDP datagrams (the report protocol of package
// sampler, docs/protocol.md):
//
//	r, err := client.NewReporter(client.ReporterOptions{Source: "checkout", SampleEvery: 100})
//	rdb.AddHook(r.Hook())
//	defer r.Close()
//
// The hook works with *redis.Client and *redis.ClusterClient, single commands and
// pipelines. It never slows the command path down or fails it: one command in
// SampleEvery is chosen with a lock-free random draw, a chosen command becomes one sample
// per key (MGET a b c gives three) and goes into a bounded buffer without waiting; when
// the buffer is full, or the agent is away, samples are dropped and counted (Stats).
// A background goroutine packs samples into datagrams of at most 1,400 bytes and sends
// them when a datagram is full or every 100 ms.
//
// A Reporter and its hook are safe for concurrent use.
package client
