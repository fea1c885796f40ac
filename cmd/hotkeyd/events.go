package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hotkeyd/hotkeyd/config"
	"github.com/hotkeyd/hotkeyd/registry"
	"github.com/redis/go-redis/v9"
)

// eventStore opens the registry's store: the events of the config file (registry.events),
// read-only, merged over the writable store of writableStore. Call closeStore when the
// agent has stopped: it releases registry.file's lock.
func eventStore(ctx context.Context, cfg config.Config, log *slog.Logger) (_ registry.Store, closeStore func(), err error) {
	rw, closeStore, err := writableStore(ctx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			closeStore()
		}
	}()
	if len(cfg.Registry.Events) == 0 {
		return rw, closeStore, nil
	}
	events := make([]registry.Event, 0, len(cfg.Registry.Events))
	for i, ce := range cfg.Registry.Events {
		// Load has validated the events; this decodes them as the API would.
		data, err := ce.JSON()
		if err != nil {
			return nil, nil, fmt.Errorf("registry.events[%d]: %w", i, err)
		}
		e, err := registry.DecodeEvent(data)
		if err != nil {
			return nil, nil, fmt.Errorf("registry.events[%d]: %w", i, err)
		}
		events = append(events, e)
	}
	static, err := registry.NewStatic(events)
	if err != nil {
		return nil, nil, fmt.Errorf("registry.events: %w", err)
	}
	log.Info("registry: events from the config file, read-only", "events", len(events))
	return registry.Merge(static, rw), closeStore, nil
}

// localStore is where an agent keeps its events: the file, or memory. With Redis, it
// holds the agent's copy of the fleet's registry (registry.Mirror).
type localStore interface {
	registry.Store
	Replace(ctx context.Context, events []registry.Event) error
}

// writableStore opens the store that the API writes to: Redis when addresses are
// configured, else the file, else memory. With Redis, the file (or memory) keeps this
// agent's copy of the fleet's registry: it seeds Redis at start, and restores it when
// Redis is found to have lost it (registry.Mirror). When Redis does not answer at start,
// the agent keeps its events in the file (or memory) and moves to Redis, seeding it, once
// it answers. closeStore releases the file's lock.
func writableStore(ctx context.Context, cfg config.Config, log *slog.Logger) (_ registry.Store, closeStore func(), err error) {
	var local localStore
	where := "memory (registry.file is empty)"
	closeStore = func() {}
	if cfg.Registry.File != "" {
		f, err := registry.OpenFile(cfg.Registry.File, registry.FileOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("registry.file: %w", err)
		}
		local, where = f, "registry.file "+f.Path()
		closeStore = func() {
			if err := f.Close(); err != nil {
				log.Warn("registry.file: releasing its lock", "file", f.Path(), "err", err)
			}
		}
	} else {
		local = registry.NewMemory(registry.MemoryOptions{})
	}
	if len(cfg.Redis.Addrs) == 0 {
		return local, closeStore, nil
	}
	mirror := func(rs *registry.RedisStore) *registry.Mirror {
		return registry.NewMirror(ctx, rs, local, registry.MirrorOptions{Logger: log, Where: where})
	}
	rs, err := redisStore(ctx, cfg, local, log)
	if err == nil {
		return mirror(rs), closeStore, nil
	}
	log.Warn("registry: Redis unreachable at start; keeping events in the file (or memory) of this agent until it answers",
		"err", err, "retry_every", redisRetry)
	sw := registry.NewSwitch(local)
	go func() {
		t := time.NewTicker(redisRetry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Connected without holding the API's writes; seeded with them held, so that
			// none lands in local after the seed read it.
			if rs, err := openRedis(ctx, cfg); err == nil {
				sw.Move(mirror(rs), func(from registry.Store) { seedRedis(ctx, cfg, rs, from, log) })
				log.Info("registry: Redis answers; events live there from now on, shared by the fleet")
				return
			}
		}
	}()
	return sw, closeStore, nil
}

// storeKind names where the writable store of s keeps its events, for the log: "redis",
// "file", "memory", or, while Redis has not answered since the start, "file until Redis
// answers" (or memory).
func storeKind(s registry.Store) string {
	if m, ok := s.(*registry.Merged); ok {
		s = m.Writable()
	}
	if sw, ok := s.(*registry.Switch); ok {
		if _, moved := sw.Current().(*registry.Mirror); moved {
			return "redis"
		}
		return storeKind(sw.Current()) + " until Redis answers"
	}
	switch s.(type) {
	case *registry.Mirror, *registry.RedisStore:
		return "redis"
	case *registry.FileStore:
		return "file"
	}
	return "memory"
}

// redisRetry is how often an agent whose Redis did not answer at start tries again to
// move its registry there.
const redisRetry = 2 * time.Second

// redisStore opens the registry's store in Redis and seeds it with the events of from
// (the file, or what the agent kept while Redis was away) that Redis does not have.
func redisStore(ctx context.Context, cfg config.Config, from registry.Store, log *slog.Logger) (*registry.RedisStore, error) {
	rs, err := openRedis(ctx, cfg)
	if err != nil {
		return nil, err
	}
	seedRedis(ctx, cfg, rs, from, log)
	return rs, nil
}

// openRedis opens the registry's store in Redis.
func openRedis(ctx context.Context, cfg config.Config) (*registry.RedisStore, error) {
	rdb, err := redisClient(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	rs, err := registry.NewRedis(rdb, registry.RedisOptions{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return rs, nil
}

// seedRedis seeds rs with the events of from that Redis does not have, and logs how it went.
func seedRedis(ctx context.Context, cfg config.Config, rs *registry.RedisStore, from registry.Store, log *slog.Logger) {
	n, err := registry.Seed(ctx, rs, from)
	if err != nil {
		log.Warn("registry: seeding Redis from the file", "file", cfg.Registry.File, "err", err)
	} else if n > 0 {
		log.Info("registry: seeded Redis from the file", "file", cfg.Registry.File, "events", n)
	}
}

// redisClient returns a cluster client when the first reachable address is a cluster
// node, else a plain client, authenticating with r's credentials.
func redisClient(ctx context.Context, r config.Redis) (redis.UniversalClient, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var last error
	for _, addr := range r.Addrs {
		o := &redis.Options{Addr: addr, Username: r.Username, Password: r.Password}
		c := redis.NewClient(o)
		info, err := c.ClusterInfo(ctx).Result()
		c.Close()
		switch {
		case err == nil && strings.Contains(info, "cluster_state:"):
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.Addrs, Username: r.Username, Password: r.Password}), nil
		case err != nil && strings.Contains(err.Error(), "cluster support disabled"):
			return redis.NewClient(o), nil
		}
		last = err
	}
	return nil, fmt.Errorf("no Redis at %v answered: %w", r.Addrs, last)
}
