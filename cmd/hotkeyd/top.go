package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/agent"
	"golang.org/x/text/width"
)

// topMaxN is the largest n that GET /v1/topk accepts.
const topMaxN = 10000

func top(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("top", args, stdout, stderr)
	addr := fs.String("addr", "http://127.0.0.1:9736", "the agent's HTTP `URL`")
	n := fs.Int("n", 20, "how many keys to show (1 to 10000; fewer if the terminal is shorter)")
	op := fs.String("op", "all", "ranking: all, read, write (or bytes, with detector.bytes on)")
	interval := fs.Duration("interval", time.Second, "refresh interval")
	once := fs.Bool("once", false, "print one frame and exit (for scripts)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: hotkeyd top [--addr URL] [flags]\n\n"+
			"A live view of the agent's hot keys (GET /v1/topk), refreshed every --interval; q or\n"+
			"Ctrl-C quits. Into a pipe or a file it writes plain frames one after another. With\n"+
			"redis.addrs on the agent, each key's primary and slot, and a table of the primaries\n"+
			"(GET /v1/nodes: failing ones first, then by CPU), are shown too.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("top takes no arguments, got %q; to watch another agent use --addr http://%s", fs.Args(), strings.TrimPrefix(fs.Arg(0), "http://"))
	}
	if *interval <= 0 {
		return fmt.Errorf("--interval %v: want a positive duration such as 1s", *interval)
	}
	if *n < 1 || *n > topMaxN {
		return fmt.Errorf("--n %d: want a whole number from 1 to %d", *n, topMaxN)
	}
	switch *op {
	case "all", "read", "write", "bytes":
	default:
		return fmt.Errorf("--op %q: want all, read or write (or bytes, with detector.bytes on)", *op)
	}
	u, err := agentURL(*addr, "/v1/topk")
	if err != nil {
		return err
	}
	u.RawQuery = url.Values{"n": {fmt.Sprint(*n)}, "op": {*op}}.Encode()
	client := &http.Client{Timeout: 5 * time.Second}
	if *once {
		reply, err := fetchTop(ctx, client, u.String())
		if err != nil {
			return err
		}
		renderTop(stdout, reply, fetchNodes(ctx, client, *addr), *addr, time.Now(), 0, false)
		return nil
	}

	// A hang-up (the terminal closed) ends the view as q does.
	ctx, stopHangup := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stopHangup()
	if f, ok := stdin.(*os.File); ok {
		if restore, err := rawTerminal(f); err == nil {
			defer restore()
		}
	}
	v := &topView{client: client, url: u.String(), addr: *addr, interval: *interval}
	return v.run(ctx, stdin, stdout)
}

// topView is the live view of top, apart from its flags and the terminal's modes.
type topView struct {
	client   *http.Client
	url      string        // of GET /v1/topk, with n and op
	addr     string        // the agent's base URL, --addr
	interval time.Duration // between refreshes
}

// run shows the view on stdout, refreshed every interval, until ctx ends or q or Ctrl-C
// comes on stdin.
func (v *topView) run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // q quits; Ctrl-C arrives as a signal, or as itself in raw mode
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
	out, _ := stdout.(*os.File)
	t := time.NewTicker(v.interval)
	defer t.Stop()
	type answer struct {
		reply *agent.TopK
		nodes *agent.Nodes
		err   error
		at    time.Time // when it came
	}
	var (
		last  answer // shown last; none yet when both reply and err are nil
		frame bytes.Buffer
		drawn bool
	)
	draw := func(a answer, waited time.Duration) {
		frame.Reset()
		cols, rows, tty := 0, 0, false
		if out != nil {
			cols, rows, tty = termSize(out)
		}
		writeFrameWaiting(&frame, a.reply, a.nodes, a.err, v.addr, v.interval, a.at, cols, rows, tty, !drawn, waited)
		_, _ = stdout.Write(frame.Bytes())
		drawn = true
	}
	for {
		asked := time.Now()
		answers := make(chan answer, 1)
		go func() {
			reply, err := fetchTop(ctx, v.client, v.url)
			var nodes *agent.Nodes
			if err == nil {
				nodes = fetchNodes(ctx, v.client, v.addr)
			}
			answers <- answer{reply: reply, nodes: nodes, err: err, at: time.Now()}
		}()
	wait:
		for {
			select {
			case last = <-answers:
				break wait
			case <-t.C: // a refresh interval and no answer: say that the frame shown is stale
				draw(last, time.Since(asked))
			case <-ctx.Done():
				<-answers // the request ends with ctx
				fmt.Fprintln(stdout)
				return nil // q, Ctrl-C, SIGTERM or SIGHUP during the request: not an error to show
			}
		}
		if ctx.Err() != nil {
			fmt.Fprintln(stdout)
			return nil
		}
		draw(last, 0)
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout)
			return nil
		case <-t.C:
		}
	}
}

// writeFrame writes one frame of the live view to frame: reply's keys, or err when the
// request failed, its cause wrapped over lines rather than cut. On a terminal (tty) of
// cols×rows cells (0: unknown) it first clears the screen, and the frame fits: no line is
// wider than cols, and there are at most rows lines, the last without its line end, so
// that the terminal never scrolls the header away. Elsewhere frames follow one another,
// after a blank line but the first.
func writeFrame(frame *bytes.Buffer, reply *agent.TopK, nodes *agent.Nodes, err error, addr string, interval time.Duration, now time.Time, cols, rows int, tty, first bool) {
	writeFrameWaiting(frame, reply, nodes, err, addr, interval, now, cols, rows, tty, first, 0)
}

// writeFrameWaiting is writeFrame for a frame made stale by the request after it, which
// has gone unanswered for waited (0: none has, and it is writeFrame). On a terminal the
// frame is shown again with a line under its header that says so (with no answer before,
// the header and that line); elsewhere that line alone follows the frame it makes stale.
func writeFrameWaiting(frame *bytes.Buffer, reply *agent.TopK, nodes *agent.Nodes, err error, addr string, interval time.Duration, now time.Time, cols, rows int, tty, first bool, waited time.Duration) {
	switch {
	case tty:
		frame.WriteString("\x1b[H\x1b[2J") // home, clear
	case !first:
		frame.WriteString("\n") // plain frames one after another, for a file or a pager
	}
	var waiting string
	room := rows // the lines the frame's own text may take
	if waited > 0 {
		waiting = fmt.Sprintf("waiting for the agent: no answer for %v\n", waited.Round(time.Second))
		if !tty {
			frame.WriteString(waiting)
			return
		}
		if rows > 1 {
			room--
		}
	}
	if tty && room > 0 && room-5-nodeLines(nodes, now, cols) < minKeyRows {
		// A short terminal shows keys; of the primaries, only those in trouble, if they fit.
		nodes = troubled(nodes)
		if room-5-nodeLines(nodes, now, cols) < minKeyRows-2 {
			nodes = nil
		}
	}
	var text bytes.Buffer
	switch keys := room - 5 - nodeLines(nodes, now, cols); {
	case err != nil:
		fmt.Fprintf(&text, "hotkeyd top — %s\n\n", addr)
		most := 0 // lines of the cause, with a header, a blank line before and after, and retrying
		if tty && room > 0 {
			most = max(room-4, 1)
		}
		for _, line := range wrapCells(escapeControls(errorCause(err)), cols, 0, most) {
			text.WriteString(line + "\n")
		}
		fmt.Fprintf(&text, "\nretrying every %v; q to quit\n", interval)
	case reply == nil: // waiting for the first answer
		fmt.Fprintf(&text, "hotkeyd top — %s\n", addr)
	case tty && keys >= 1 && len(reply.Keys) > keys:
		// Show as many keys as fit, at least one, and say how many do not: on the last
		// row when only one key fits, else on the row under the keys.
		shown := max(keys-1, 1)
		r := *reply
		r.Keys = r.Keys[:shown]
		renderTop(&text, &r, nodes, addr, now, cols, true)
		fmt.Fprintf(&text, "(%d more below; a taller terminal shows them)\n", len(reply.Keys)-shown)
	default:
		renderTop(&text, reply, nodes, addr, now, cols, true)
	}
	rest := text.String()
	if waiting != "" {
		header, after, _ := strings.Cut(rest, "\n")
		rest = header + "\n" + waiting + after
	}
	if !tty {
		frame.WriteString(rest)
		return
	}
	for i := 0; rest != ""; i++ {
		line, after, nl := strings.Cut(rest, "\n")
		frame.WriteString(truncateCells(line, cols))
		if !nl || i == rows-1 {
			return
		}
		frame.WriteByte('\n')
		rest = after
	}
}

// errorCause is err as a frame shows it, under a header that names the agent: for a
// request that failed, what went wrong, without the URL.
func errorCause(err error) string {
	if e, ok := errors.AsType[*agentError](err); ok {
		return e.cause
	}
	return err.Error()
}

// wrapCells breaks s into lines of at most n terminal cells (n <= 0: no limit): at its
// newlines, and at spaces where it can, else between characters. Lines after the first
// start with indent spaces, when that leaves room. With most > 0 it returns that many
// lines at most, the last ending in "..." when text is left out.
func wrapCells(s string, n, indent, most int) []string {
	if n <= 0 {
		return strings.Split(s, "\n")
	}
	if n-indent < 10 {
		indent = 0
	}
	var (
		lines []string
		line  strings.Builder
		w     int  // cells in line
		empty bool // line holds its indent at most
	)
	newLine := func() {
		line.Reset()
		w, empty = 0, true
		if len(lines) > 0 {
			line.WriteString(strings.Repeat(" ", indent))
			w = indent
		}
	}
	flush := func() {
		lines = append(lines, line.String())
		newLine()
	}
	newLine()
	for i, para := range strings.Split(s, "\n") {
		if i > 0 {
			flush()
		}
		for j, word := range strings.Split(para, " ") {
			if j > 0 {
				if w+1+cells(word) > n && !empty {
					flush()
				} else {
					line.WriteByte(' ')
					w++
				}
			}
			for w+cells(word) > n { // longer than a line: cut between characters
				k, kw := 0, 0
				for _, r := range word {
					if w+kw+runeCells(r) > n && (k > 0 || !empty) {
						break
					}
					k += utf8.RuneLen(r)
					kw += runeCells(r)
				}
				line.WriteString(word[:k])
				word = word[k:]
				flush()
			}
			line.WriteString(word)
			w += cells(word)
			empty = empty && word == ""
		}
	}
	lines = append(lines, line.String())
	if most > 0 && len(lines) > most {
		last := lines[most-1]
		for last != "" && cells(last) > n-3 {
			_, size := utf8.DecodeLastRuneInString(last)
			last = last[:len(last)-size]
		}
		lines = append(lines[:most-1], last+"...")
	}
	return lines
}

// agentURL returns the URL of path (such as "/v1/topk") at the agent whose base URL is
// addr, the value of --addr, or an error that says what --addr wants.
func agentURL(addr, path string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSuffix(addr, "/") + path)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--addr %q: want a URL such as http://127.0.0.1:9736", addr)
	}
	return u, nil
}

func fetchTop(ctx context.Context, c *http.Client, u string) (*agent.TopK, error) {
	return fetchJSON[agent.TopK](ctx, c, u)
}

// fetchJSON GETs u from the agent and decodes its JSON answer, or returns an error that
// says what went wrong: unreachable, an error status with the agent's message (escaped),
// or a reply that is not a T.
func fetchJSON[T any](ctx context.Context, c *http.Client, u string) (*T, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		cause := err
		if e, ok := errors.AsType[*url.Error](err); ok {
			cause = e.Err // such as "dial tcp 127.0.0.1:9736: connect: connection refused"
		}
		return nil, &agentError{msg: "agent unreachable: " + err.Error(), cause: "agent unreachable: " + cause.Error(), err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		cause := resp.Status + ": " + escapeControls(msg) // any server's reply: no escape sequence reaches the terminal
		return nil, &agentError{msg: "GET " + u + ": " + cause, cause: cause}
	}
	var r T
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, &agentError{msg: fmt.Sprintf("GET %s: bad reply: %v", u, err), cause: "bad reply: " + err.Error(), err: err}
	}
	return &r, nil
}

// agentError is a request to the agent that failed. Its message names the URL, for top
// --once, where nothing else does; cause leaves the URL out, for a frame whose header
// names the agent.
type agentError struct {
	msg, cause string
	err        error // what failed underneath, or nil
}

func (e *agentError) Error() string { return e.msg }
func (e *agentError) Unwrap() error { return e.err }

// topNarrow is the width below which top drops the read, write and since columns.
const topNarrow = 80

// renderTop writes one frame: a header line and a table of keys. With cols > 0 (a
// terminal that wide) no line is wider than cols cells; 0 means no limit.
func renderTop(w io.Writer, r *agent.TopK, nodes *agent.Nodes, addr string, now time.Time, cols int, live bool) {
	var buf bytes.Buffer
	narrow := cols > 0 && cols < topNarrow
	if live {
		fmt.Fprintf(&buf, "hotkeyd top — %s — q to quit — %s\n", now.Format("15:04:05"), addr)
	} else {
		fmt.Fprintf(&buf, "hotkeyd top — %s — %s\n", now.Format("15:04:05"), addr)
	}
	if narrow {
		fmt.Fprintf(&buf, "%s/s · %d keys · %d hot\n\n", human(r.TotalRate), r.DistinctKeys, r.HotKeys)
	} else {
		fmt.Fprintf(&buf, "traffic %s/s over %.1fs · %d distinct keys · %d hot\n\n", human(r.TotalRate), r.WindowSeconds, r.DistinctKeys, r.HotKeys)
	}
	if nodes != nil && len(nodes.Nodes) > 0 {
		renderNodes(&buf, nodes, now, cols)
	}
	// Numbers are right-aligned cells; the key is the text after the last cell, so that
	// it starts in the same column whatever its length.
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	showPrimary := placed(r.Keys) && (cols <= 0 || cols >= topTiny)
	if narrow {
		fmt.Fprintln(tw, "#\tRATE/s\tSHARE\tHOT\t"+placedHeader(showPrimary)+"  KEY")
	} else {
		fmt.Fprintln(tw, "#\tRATE/s\tSHARE\tREAD/s\tWRITE/s\tHOT SINCE\t"+placedHeader(showPrimary)+"  KEY")
	}
	for i, k := range r.Keys {
		key := displayKey(k.Key)
		if !narrow {
			key = truncateCells(key, 60)
		}
		if len(k.PredictedBy) > 0 {
			key += " [predicted: " + escapeControls(strings.Join(k.PredictedBy, ",")) + "]"
		}
		if narrow {
			hot := "-"
			if k.Hot {
				hot = "HOT"
			}
			fmt.Fprintf(tw, "%d\t%s\t%.1f%%\t%s\t%s  %s\n", i+1, human(k.Rate), 100*k.Share, hot, placedCell(showPrimary, k), key)
			continue
		}
		since := "-"
		if k.Hot && k.HotSince != nil {
			since = fmt.Sprintf("HOT %s (%s)", k.HotSince.Local().Format("15:04:05"), now.Sub(*k.HotSince).Round(time.Second))
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f%%\t%s\t%s\t%s\t%s  %s\n", i+1, human(k.Rate), 100*k.Share, human(k.ReadRate), human(k.WriteRate), since, placedCell(showPrimary, k), key)
	}
	tw.Flush()
	if len(r.Keys) == 0 {
		fmt.Fprintln(&buf, "(no traffic in the window)")
	}
	if cols <= 0 {
		_, _ = w.Write(buf.Bytes())
		return
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fmt.Fprintln(w, truncateCells(sc.Text(), cols))
	}
}

// topNodes is how many primaries the primaries table shows; the rest are counted.
const topNodes = 6

// minKeyRows is the least number of key lines a terminal frame keeps: below it, the
// primaries table shows only the primaries in trouble, or none.
const minKeyRows = 5

// topTiny is the width below which the keys' PRIMARY column goes: the key comes first.
const topTiny = 60

// troubled returns the primaries of n whose INFO fails or whose command thread is
// saturated, at most two, for a short terminal; nil when none is.
func troubled(n *agent.Nodes) *agent.Nodes {
	if n == nil {
		return nil
	}
	out := &agent.Nodes{Cluster: n.Cluster}
	for _, node := range n.Nodes {
		if node.RedisError != nil || node.Redis != nil && node.Redis.CPU >= saturated {
			out.Nodes = append(out.Nodes, node)
		}
	}
	if len(out.Nodes) == 0 {
		return nil
	}
	slices.SortStableFunc(out.Nodes, byLoad)
	out.Nodes = out.Nodes[:min(len(out.Nodes), 2)]
	return out
}

// saturated is the command-thread CPU from which top marks a primary SATURATED, as the
// HotkeydPrimaryCPUSaturated alert does.
const saturated = 0.9

// fetchNodes returns the agent's GET /v1/nodes, or nil on any failure (an older agent
// without the endpoint): the table it feeds is an extra, never a reason to show an error
// instead of the keys.
func fetchNodes(ctx context.Context, c *http.Client, addr string) *agent.Nodes {
	u, err := agentURL(addr, "/v1/nodes")
	if err != nil {
		return nil
	}
	n, err := fetchJSON[agent.Nodes](ctx, c, u.String())
	if err != nil {
		return nil
	}
	return n
}

// nodeLines is the number of lines the primaries table takes in a frame cols cells wide
// (0: no limit), as renderNodes writes it; 0 without primaries.
func nodeLines(n *agent.Nodes, now time.Time, cols int) int {
	if n == nil || len(n.Nodes) == 0 {
		return 0
	}
	var b bytes.Buffer
	renderNodes(&b, n, now, cols)
	return bytes.Count(b.Bytes(), []byte("\n"))
}

// byLoad orders primaries for the table: those whose INFO fails first (down or wedged),
// then by how busy their command thread is, then by their share of the top-k load.
func byLoad(a, b agent.Node) int {
	failing := func(n agent.Node) int {
		if n.RedisError != nil {
			return 1
		}
		return 0
	}
	if c := cmp.Compare(failing(b), failing(a)); c != 0 {
		return c
	}
	cpu := func(n agent.Node) float64 { // as shown, so that idle primaries keep their order
		if n.Redis == nil {
			return -1
		}
		return math.Round(n.Redis.CPU*100) / 100
	}
	if c := cmp.Compare(cpu(b), cpu(a)); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Share, a.Share); c != 0 {
		return c
	}
	return cmp.Compare(a.Primary, b.Primary)
}

// renderNodes writes the primaries table, busiest first (byLoad): each primary's share of
// the top-k load, and its own commands per second and command-thread CPU from INFO, or
// since when and why its INFO fails. On a terminal cols cells wide (0: no limit) a note
// that does not fit goes on over the next lines; narrow, the commands column goes.
func renderNodes(w io.Writer, n *agent.Nodes, now time.Time, cols int) {
	narrow := cols > 0 && cols < topNarrow
	nodes := slices.Clone(n.Nodes)
	slices.SortStableFunc(nodes, byLoad)
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	notes := []string{""} // by line of the table: the text after its cells

	if narrow {
		fmt.Fprintln(tw, "PRIMARY\tTOP-K\tCPU\t")
	} else {
		fmt.Fprintln(tw, "PRIMARY\tTOP-K SHARE\tCMD/s\tCPU\t")
	}
	for i, node := range nodes {
		if i == topNodes {
			break
		}
		name := escapeControls(node.Primary)
		if name == "" {
			name = "(no owner)"
		}
		cmds, cpu, note := "-", "-", ""
		switch {
		case node.RedisError != nil:
			// The reason first: "INFO stats: BUSY …" is "BUSY …", which a narrow terminal keeps.
			reason := node.RedisError.Error
			if section, rest, ok := strings.Cut(reason, ": "); ok && strings.HasPrefix(section, "INFO ") {
				reason = rest
			}
			reason = strings.TrimPrefix(reason, "dial tcp "+node.Primary+": ") // the row names it
			note = fmt.Sprintf("  INFO failing for %s: %s", now.Sub(node.RedisError.Since).Round(time.Second), escapeControls(reason))
		case node.Redis != nil:
			cmds, cpu = human(node.Redis.CommandsPerSecond), fmt.Sprintf("%.2f", node.Redis.CPU)
			if node.Redis.CPU >= saturated {
				note = "  SATURATED"
			}
		}
		if narrow {
			fmt.Fprintf(tw, "%s\t%.0f%%\t%s\t\n", name, 100*node.Share, cpu)
		} else {
			fmt.Fprintf(tw, "%s\t%.0f%%\t%s\t%s\t\n", name, 100*node.Share, cmds, cpu)
		}
		notes = append(notes, note)
	}
	if n.UnplacedRate > 0 { // truncated keys whose slot is unknown: on no primary
		total := n.UnplacedRate
		for _, node := range n.Nodes {
			total += node.Rate
		}
		if narrow {
			fmt.Fprintf(tw, "(unplaced)\t%.0f%%\t\t  truncated keys, slot unknown\n", 100*n.UnplacedRate/total)
		} else {
			fmt.Fprintf(tw, "(unplaced)\t%.0f%%\t\t\t  truncated keys, slot unknown\n", 100*n.UnplacedRate/total)
		}
	}
	tw.Flush()
	for i, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		if i < len(notes) && notes[i] != "" {
			for _, l := range wrapCells(line+notes[i], cols, 4, 3) {
				fmt.Fprintln(w, l)
			}
			continue
		}
		fmt.Fprintln(w, line)
	}
	if len(nodes) > topNodes {
		fmt.Fprintf(w, "(%d more primaries)\n", len(nodes)-topNodes)
	}
	fmt.Fprintln(w)
}

// placedHeader returns the header cell of the PRIMARY column with its tab, when shown; ""
// otherwise.
func placedHeader(show bool) string {
	if !show {
		return ""
	}
	return "PRIMARY\t"
}

// placedCell returns k's PRIMARY cell with its tab, when the column is shown: the primary
// and, in a cluster, the slot; "-" for a key the agent could not place (truncated).
func placedCell(show bool, k agent.Key) string {
	if !show {
		return ""
	}
	switch {
	case k.Primary == "":
		return "-\t"
	case k.Slot != nil:
		return fmt.Sprintf("%s [%d]\t", escapeControls(k.Primary), *k.Slot)
	}
	return escapeControls(k.Primary) + "\t"
}

// placed reports whether any key carries its primary: the agent places keys in Redis
// (redis.addrs set), and the PRIMARY column is shown.
func placed(keys []agent.Key) bool {
	for _, k := range keys {
		if k.Primary != "" {
			return true
		}
	}
	return false
}

// displayKey returns the key as it can be shown on a terminal: as is when it is UTF-8 and
// every character is printable, else quoted with Go escapes, so that no control
// character, escape sequence or byte that is not UTF-8 in a key reaches the terminal; the
// empty key quoted too, as "", not a blank cell.
func displayKey(key string) string {
	if key == "" || !utf8.ValidString(key) || strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(key)
	}
	return key
}

// escapeControls replaces every character that is not printable (or a newline) by its Go
// escape, and every byte that is not UTF-8 by \xNN, for text from elsewhere, such as an
// error that quotes a server's reply.
func escapeControls(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '\n' || unicode.IsPrint(r):
			b.WriteString(s[:size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[size:]
	}
	return b.String()
}

// truncateCells cuts s to at most n terminal cells, ending it with "..." when cut.
// Characters are never split.
func truncateCells(s string, n int) string {
	if n <= 0 || cells(s) <= n {
		return s
	}
	if n <= 3 {
		return strings.Repeat(".", n)
	}
	w := 0
	for i, r := range s {
		if w+runeCells(r) > n-3 {
			return s[:i] + "..."
		}
		w += runeCells(r)
	}
	return s
}

// cells is the width of s on a terminal.
func cells(s string) int {
	w := 0
	for _, r := range s {
		w += runeCells(r)
	}
	return w
}

// runeCells is the number of terminal cells r takes: 0 for combining marks, 2 for the
// characters Unicode gives an East Asian Width of wide or fullwidth (ideographs, kana,
// Hangul, fullwidth forms and the emoji shown as emoji: 😀, 🚀, ⚡), else 1.
func runeCells(r rune) int {
	if unicode.In(r, unicode.Mn, unicode.Me) {
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
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
