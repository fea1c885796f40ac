// Command newconns measures what a client that connects for each request pays, as PHP,
// scripts and serverless functions do: it connects, writes a pipeline of -gets GETs in
// one write, reads every reply and closes, -n times against each address (50 to each in
// turn), and prints the quartiles of that time per address and, with -redis, how many
// connections the Redis behind them received meanwhile (INFO stats
// total_connections_received, less newconns's own):
//
//	go run ./cmd/newconns -n 500 -gets 1 -redis 127.0.0.1:6379 127.0.0.1:6379 127.0.0.1:6380
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotkeyd/hotkeyd/bench/internal/resp"
)

// block is how many connections go to one address before the next one's turn.
const block = 50

func main() {
	n := flag.Int("n", 500, "connections per address")
	gets := flag.Int("gets", 1, "GETs each connection sends, in one write")
	redis := flag.String("redis", "", "host:port of the Redis behind the addresses, to count the connections it received")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of each connection")
	flag.Parse()
	if flag.NArg() == 0 || *n < 1 || *gets < 1 {
		fmt.Fprintln(os.Stderr, "usage: newconns [-n N] [-gets N] [-redis ADDR] ADDR...; counts ≥ 1")
		os.Exit(2)
	}
	const key, value = "newconns:v", "abc"
	pipe := strings.Repeat(resp.Command("GET", key), *gets)
	reply := int64(*gets) * int64(len(resp.Bulk(value)))
	for _, addr := range flag.Args() {
		if err := set(addr, key, value, *timeout); err != nil {
			fail(addr, err)
		}
	}
	took := make([][]time.Duration, flag.NArg())
	received := make([]int, flag.NArg())
	for done := 0; done < *n; done += block {
		for i, addr := range flag.Args() {
			before, err := connections(*redis, *timeout)
			if err != nil {
				fail(*redis, err)
			}
			for range min(block, *n-done) {
				d, err := once(addr, pipe, reply, *timeout)
				if err != nil {
					fail(addr, err)
				}
				took[i] = append(took[i], d)
			}
			after, err := connections(*redis, *timeout)
			if err != nil {
				fail(*redis, err)
			}
			received[i] += after - before - 1 // less the INFO that read before
		}
	}
	for i, addr := range flag.Args() {
		d := took[i]
		slices.Sort(d)
		fmt.Printf("%s: %d connections of %d GET(s): p25 %v, p50 %v, p75 %v",
			addr, *n, *gets, us(d[len(d)/4]), us(d[len(d)/2]), us(d[3*len(d)/4]))
		if *redis != "" {
			fmt.Printf("; Redis received %d connections", received[i])
		}
		fmt.Println()
	}
}

// once connects to addr, writes pipe, reads want bytes of replies and closes.
func once(addr, pipe string, want int64, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := io.WriteString(c, pipe); err != nil {
		return 0, err
	}
	if n, err := io.CopyN(io.Discard, c, want); err != nil {
		return 0, fmt.Errorf("read %d of %d reply bytes: %w", n, want, err)
	}
	return time.Since(start), nil
}

// set sets key to value at addr.
func set(addr, key, value string, timeout time.Duration) error {
	line, err := roundTrip(addr, resp.Command("SET", key, value), timeout)
	if err == nil && line != "+OK\r\n" {
		err = fmt.Errorf("SET %s: %q", key, line)
	}
	return err
}

// connections reads total_connections_received from the INFO stats of the Redis at
// addr; 0 when addr is empty.
func connections(addr string, timeout time.Duration) (int, error) {
	if addr == "" {
		return 0, nil
	}
	info, err := roundTrip(addr, resp.Command("INFO", "stats"), timeout)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO stats without total_connections_received")
}

// roundTrip sends cmd on a new connection to addr and returns the reply: the line of a
// simple reply, or a bulk string's body.
func roundTrip(addr, cmd string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "$") {
		return line, err
	}
	size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || size < 0 {
		return "", fmt.Errorf("bulk reply %q", line)
	}
	body := make([]byte, size+2)
	_, err = io.ReadFull(r, body)
	return string(body[:size]), err
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func fail(addr string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", addr, err)
	os.Exit(1)
}
