package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/hotkeyd/hotkeyd/agent"
)

func top(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("top", stderr)
	addr := fs.String("addr", "http://127.0.0.1:9736", "the agent's HTTP `URL`")
	n := fs.Int("n", 20, "how many keys to show")
	op := fs.String("op", "all", "ranking: all, read or write")
	interval := fs.Duration("interval", time.Second, "refresh interval")
	once := fs.Bool("once", false, "print one frame and exit (for scripts)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *interval <= 0 {
		return fmt.Errorf("--interval %v: want a positive duration such as 1s", *interval)
	}
	u, err := url.Parse(strings.TrimSuffix(*addr, "/") + "/v1/topk")
	if err != nil || u.Host == "" {
		return fmt.Errorf("--addr %q: want a URL such as http://127.0.0.1:9736", *addr)
	}
	u.RawQuery = url.Values{"n": {fmt.Sprint(*n)}, "op": {*op}}.Encode()
	client := &http.Client{Timeout: 5 * time.Second}
	if *once {
		reply, err := fetchTop(ctx, client, u.String())
		if err != nil {
			return err
		}
		renderTop(stdout, reply, *addr, time.Now())
		return nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if f, ok := stdin.(*os.File); ok {
		if restore, err := rawTerminal(f); err == nil {
			defer restore()
		}
	}
	go func() { // q quits; Ctrl-C arrives as a signal
		b := make([]byte, 1)
		for {
			if _, err := stdin.Read(b); err != nil {
				return
			}
			if b[0] == 'q' || b[0] == 'Q' || b[0] == 3 {
				cancel()
				return
			}
		}
	}()
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		reply, err := fetchTop(ctx, client, u.String())
		fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear
		if err != nil {
			fmt.Fprintf(stdout, "hotkeyd top — %s\n\n%v\n\nretrying every %v; q to quit\n", *addr, err, *interval)
		} else {
			renderTop(stdout, reply, *addr, time.Now())
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout)
			return nil
		case <-t.C:
		}
	}
}

func fetchTop(ctx context.Context, c *http.Client, u string) (*agent.TopK, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	var r agent.TopK
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("GET %s: bad reply: %w", u, err)
	}
	return &r, nil
}

// renderTop writes one frame: a header line and a table of keys.
func renderTop(w io.Writer, r *agent.TopK, addr string, now time.Time) {
	fmt.Fprintf(w, "hotkeyd top — %s — %s — q to quit\n", addr, now.Format("15:04:05"))
	fmt.Fprintf(w, "traffic %s/s over %.1fs · %d distinct keys · %d hot\n\n", human(r.TotalRate), r.WindowSeconds, r.DistinctKeys, r.HotKeys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\tRATE/s\tSHARE\tREAD/s\tWRITE/s\tHOT SINCE\t KEY\t")
	for i, k := range r.Keys {
		since := "-"
		if k.Hot && k.HotSince != nil {
			since = fmt.Sprintf("HOT %s (%s)", k.HotSince.Local().Format("15:04:05"), now.Sub(*k.HotSince).Round(time.Second))
		}
		key := k.Key
		if strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			key = strconv.Quote(key) // no control character reaches the terminal
		}
		if len(key) > 60 {
			key = key[:57] + "..."
		}
		if len(k.PredictedBy) > 0 {
			key += " [predicted: " + strings.Join(k.PredictedBy, ",") + "]"
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f%%\t%s\t%s\t%s\t %s\t\n", i+1, human(k.Rate), 100*k.Share, human(k.ReadRate), human(k.WriteRate), since, key)
	}
	tw.Flush()
	if len(r.Keys) == 0 {
		fmt.Fprintln(w, "(no traffic in the window)")
	}
}

// human formats a rate with k/M suffixes.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
