// Command pipebefore writes a whole pipeline in one write before it reads a reply, as
// go-redis's Pipelined, redis-py's and Jedis's pipelines do, to each address in turn,
// and prints how long writing and reading took, or what failed:
//
//	go run ./cmd/pipebefore -gets 700 -value 10000 -exists 30000 127.0.0.1:6379 127.0.0.1:6380
//
// It first sets the key pb:v to a value of -value bytes, then writes -gets GETs of it
// and -exists EXISTS of absent keys of -keylen bytes, and reads every reply.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hotkeyd/hotkeyd/bench/internal/resp"
)

func main() {
	gets := flag.Int("gets", 700, "GETs of the value, first")
	value := flag.Int("value", 10000, "bytes of the value the GETs read")
	exists := flag.Int("exists", 30000, "EXISTS of absent keys, after the GETs")
	keylen := flag.Int("keylen", 1000, "bytes of each absent key")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline for each address")
	flag.Parse()
	if flag.NArg() == 0 || *gets < 0 || *exists < 0 || *value < 1 || *keylen < 1 {
		fmt.Fprintln(os.Stderr, "usage: pipebefore [-gets N] [-value BYTES] [-exists N] [-keylen BYTES] ADDR...; counts ≥ 0, sizes ≥ 1")
		os.Exit(2)
	}
	var pipe bytes.Buffer
	for range *gets {
		pipe.WriteString(resp.Command("GET", "pb:v"))
	}
	pad := strings.Repeat("p", *keylen)
	for range *exists {
		pipe.WriteString(resp.Command("EXISTS", pad))
	}
	want := int64(*gets)*int64(len(bulk(*value))) + int64(*exists)*int64(len(":0\r\n"))
	failed := false
	for _, addr := range flag.Args() {
		if err := run(addr, *value, pipe.Bytes(), want, *timeout); err != nil {
			fmt.Printf("%s: %v\n", addr, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// run sets the value at addr, then, on another connection, writes pipe in one write and
// reads want bytes of replies. The value is set apart so that the measured connection
// stays on the tap's shared connection: a SET larger than the tap's buffer pins its
// client to a connection of its own.
func run(addr string, value int, pipe []byte, want int64, timeout time.Duration) error {
	if err := set(addr, value, timeout); err != nil {
		return err
	}
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReaderSize(conn, 64<<10)
	start := time.Now()
	n, err := conn.Write(pipe)
	wrote := time.Since(start)
	if err != nil {
		return fmt.Errorf("wrote %d of %d bytes in %v, then: %w", n, len(pipe), wrote.Round(time.Millisecond), err)
	}
	got, err := io.CopyN(io.Discard, r, want)
	if err != nil {
		return fmt.Errorf("wrote %d bytes in %v, read %d of %d reply bytes, then: %w", n, wrote.Round(time.Millisecond), got, want, err)
	}
	fmt.Printf("%s: wrote %d bytes in %v, read all %d reply bytes in %v\n",
		addr, n, wrote.Round(time.Millisecond), got, time.Since(start).Round(time.Millisecond))
	return nil
}

// set sets pb:v to value bytes at addr.
func set(addr string, value int, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, resp.Command("SET", "pb:v", strings.Repeat("v", value))); err != nil {
		return fmt.Errorf("SET pb:v: %w", err)
	}
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+OK\r\n" {
		return fmt.Errorf("SET pb:v answered %q, %v; want +OK", line, err)
	}
	return nil
}

func bulk(n int) string { return resp.Bulk(strings.Repeat("v", n)) }
