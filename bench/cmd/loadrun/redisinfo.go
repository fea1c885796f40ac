package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// redisCounters are two of Redis's INFO stats counters. Their quotient over a run is how
// many commands Redis found per read(2): 1 for unpipelined clients on their own
// connections, more when a proxy gathers several clients' commands into one write.
type redisCounters struct {
	commands int64 // total_commands_processed
	reads    int64 // total_reads_processed
}

func (c redisCounters) sub(o redisCounters) redisCounters {
	return redisCounters{commands: c.commands - o.commands, reads: c.reads - o.reads}
}

// readRedisCounters asks the Redis at address for INFO stats.
func readRedisCounters(address string) (redisCounters, error) {
	conn, err := net.DialTimeout("tcp", address, 2*time.Second)
	if err != nil {
		return redisCounters{}, fmt.Errorf("INFO stats: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "INFO stats\r\n"); err != nil {
		return redisCounters{}, fmt.Errorf("INFO stats to %s: %w", address, err)
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return redisCounters{}, fmt.Errorf("INFO stats from %s: %w", address, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 {
		return redisCounters{}, fmt.Errorf("INFO stats from %s: reply %q, want a bulk string", address, strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return redisCounters{}, fmt.Errorf("INFO stats from %s: %w", address, err)
	}
	return parseRedisCounters(string(body))
}

// parseRedisCounters reads the counters out of INFO's text ("name:value" lines).
func parseRedisCounters(info string) (redisCounters, error) {
	var c redisCounters
	fields := map[string]*int64{"total_commands_processed": &c.commands, "total_reads_processed": &c.reads}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return c, fmt.Errorf("INFO stats: %s: %q is not a number", name, value)
		}
		*dst = v
		delete(fields, name)
	}
	if len(fields) > 0 { // those not found
		missing := slices.Sorted(maps.Keys(fields))
		return c, fmt.Errorf("INFO stats has no %s (Redis 6 or later has both)", strings.Join(missing, " and no "))
	}
	return c, nil
}
