package agent

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBodyTimeout: a client that sends a request's headers and then only part of its
// body (a stalled or hostile client) is cut off after BodyTimeout instead of holding a
// connection and a goroutine for as long as it likes. A keep-alive connection that sent
// its bodies in time goes on serving after the timeout has passed.
func TestBodyTimeout(t *testing.T) {
	a := runAgent(t, Options{BodyTimeout: 200 * time.Millisecond})
	addr := a.HTTPAddr().String()
	const body = `{"source":"t","sample_rate":1,"samples":[{"key":"k","op":"read"}]}`
	post := "POST /v1/samples HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "

	t.Run("stalled body", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, post+"100\r\n\r\n{\"source\":"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		got, err := io.ReadAll(c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection still open %v after a stalled body; want it closed after BodyTimeout", time.Since(start).Round(time.Millisecond))
		}
		if !strings.HasPrefix(string(got), "HTTP/1.1 400") || !strings.Contains(string(got), "i/o timeout") {
			t.Errorf("answer to a stalled body: %q; want a 400 naming the timeout", got)
		}
	})

	t.Run("keep-alive after the timeout", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(c)
		for i := range 2 {
			if _, err := io.WriteString(c, post+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("request %d: status %d; want 202", i, resp.StatusCode)
			}
			time.Sleep(400 * time.Millisecond) // past BodyTimeout, idle between requests
		}
	})
}
