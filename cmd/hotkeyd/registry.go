package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hotkeyd/hotkeyd/registry"
)

const registryUsage = `Usage:
  hotkeyd registry list                     the registered events
  hotkeyd registry show ID                  one event, with its report (observed against expected)
  hotkeyd registry add --file EVENT.json    register an event (--file - reads stdin); or with flags:
  hotkeyd registry add --id final --pattern score:match42 --start 2026-12-01T19:30:00+01:00 \
                       --end 2026-12-01T21:30:00+01:00 --lead 10m --expected-read-rate 200000
  hotkeyd registry rm ID                    delete an event

Flags --addr (default http://127.0.0.1:9736) and --token (default $HOTKEYD_AUTH_TOKEN) go
after the subcommand. The event format is in docs/registry.md.
`

// registryCmd manages predicted events through the agent's HTTP API.
func registryCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, registryUsage)
		return errors.New("registry: no subcommand; use list, show, add or rm")
	}
	sub := args[0]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, registryUsage)
		return nil
	}
	switch sub {
	case "list", "show", "add", "rm":
	default:
		fmt.Fprint(stderr, registryUsage)
		return fmt.Errorf("registry: unknown subcommand %q; use list, show, add or rm", sub)
	}
	fs := newFlags("registry "+sub, args[1:], stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), registryUsage, "\nFlags:\n")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "http://127.0.0.1:9736", "the agent's HTTP `URL`")
	token := fs.String("token", "", "bearer `token` for changes (default $HOTKEYD_AUTH_TOKEN)")
	var file string
	var ev struct {
		ID                string   `json:"id,omitempty"`
		Name              string   `json:"name,omitempty"`
		Patterns          []string `json:"patterns,omitempty"`
		AllowBroad        bool     `json:"allow_broad,omitempty"`
		Start             string   `json:"start,omitempty"`
		End               string   `json:"end,omitempty"`
		Lead              string   `json:"lead,omitempty"`
		Recurrence        string   `json:"recurrence,omitempty"`
		Zone              string   `json:"zone,omitempty"`
		ExpectedReadRate  float64  `json:"expected_read_rate,omitempty"`
		ExpectedWriteRate float64  `json:"expected_write_rate,omitempty"`
		Mitigations       []string `json:"mitigations,omitempty"`
		Owner             string   `json:"owner,omitempty"`
		Note              string   `json:"note,omitempty"`
	}
	if sub == "add" { // the event's flags are add's only, and so is its help
		fs.StringVar(&file, "file", "", "event JSON `file` (- for stdin)")
		fs.StringVar(&ev.ID, "id", "", "event id (generated when empty)")
		fs.StringVar(&ev.Name, "name", "", "event name")
		fs.StringArrayVar(&ev.Patterns, "pattern", nil, "key pattern: exact, prefix:* or glob (repeat for more)")
		fs.BoolVar(&ev.AllowBroad, "allow-broad", false, "allow patterns with no literal character (*, ?*, [a-z]*)")
		fs.StringVar(&ev.Start, "start", "", "start, RFC 3339 with zone")
		fs.StringVar(&ev.End, "end", "", "end, RFC 3339 with zone")
		fs.StringVar(&ev.Lead, "lead", "", "arm this long before the start (Go duration)")
		fs.StringVar(&ev.Recurrence, "recurrence", "", "daily, weekly, daily@19:30, weekly@sat 19:30 or cron:EXPR")
		fs.StringVar(&ev.Zone, "zone", "", "IANA zone of a recurrence, such as Europe/Madrid")
		fs.Float64Var(&ev.ExpectedReadRate, "expected-read-rate", 0, "expected peak reads/s on one key")
		fs.Float64Var(&ev.ExpectedWriteRate, "expected-write-rate", 0, "expected peak writes/s on one key")
		fs.StringSliceVar(&ev.Mitigations, "mitigation", nil, "auto (default), l1, copies, sharded_counter, batched_counter")
		fs.StringVar(&ev.Owner, "owner", "", "who to call")
		fs.StringVar(&ev.Note, "note", "", "free text")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if !fs.Changed("token") {
		*token = os.Getenv("HOTKEYD_AUTH_TOKEN") // not the flag's default: help would show it
	}
	u, err := agentURL(*addr, "/v1/registry")
	if err != nil {
		return err
	}
	base := u.String()
	c := &apiClient{http: &http.Client{Timeout: 10 * time.Second}, token: *token}
	switch sub {
	case "list":
		var reply struct {
			Events []struct {
				ID, Name, Start, End, Lead, Recurrence string
				Patterns                               []string
				ExpectedReadRate                       float64 `json:"expected_read_rate"`
			} `json:"events"`
		}
		if err := c.do(ctx, http.MethodGet, base, nil, &reply); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tPATTERNS\tSTART\tEND\tLEAD\tRECURRENCE\tEXPECTED READ/s")
		for _, e := range reply.Events {
			// The server's strings, escaped: no control character reaches the terminal or
			// breaks the table's columns.
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tableCell(e.ID), tableCell(e.Name),
				tableCell(strings.Join(e.Patterns, ",")), tableCell(e.Start), tableCell(e.End),
				tableCell(e.Lead), tableCell(e.Recurrence), human(e.ExpectedReadRate))
		}
		return tw.Flush()
	case "show", "rm":
		if fs.NArg() != 1 {
			return fmt.Errorf("registry %s: give one event id", sub)
		}
		u := base + "/" + url.PathEscape(fs.Arg(0))
		if sub == "rm" {
			if err := c.do(ctx, http.MethodDelete, u, nil, nil); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "deleted", fs.Arg(0))
			return nil
		}
		var reply json.RawMessage
		if err := c.do(ctx, http.MethodGet, u, nil, &reply); err != nil {
			return err
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, reply, "", "  ")
		_, err := fmt.Fprintln(stdout, terminalJSON(pretty.String()))
		return err
	case "add":
		var body []byte
		switch {
		case file == "-":
			b, err := io.ReadAll(stdin)
			if err != nil {
				return err
			}
			body = b
		case file != "":
			b, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			body = b
		default:
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			body = b
		}
		var stored struct {
			ID string `json:"id"`
		}
		if err := c.do(ctx, http.MethodPost, base, body, &stored); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "registered", tableCell(stored.ID)) // the server's words
	}
	return nil
}

// apiClient calls the agent's JSON API and turns {"error": …} answers into errors.
type apiClient struct {
	http  *http.Client
	token string
}

// tableCell returns s as one cell of a table on a terminal: every character that is not
// printable, the newline too, as its Go escape.
func tableCell(s string) string { return strings.ReplaceAll(escapeControls(s), "\n", `\n`) }

// terminalJSON returns s, JSON text as json.Indent writes it, with each character that
// is not printable written as its \u escape and each byte that is not UTF-8 as \ufffd,
// which is what a JSON reader reads for it: the same JSON, with nothing a terminal takes
// for a control. Outside its strings, such JSON holds only printable ASCII and newlines.
func terminalJSON(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == '\n' || unicode.IsPrint(r) && !(r == utf8.RuneError && size == 1):
			b.WriteString(s[:size])
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default: // a bad byte decodes as utf8.RuneError, U+FFFD
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		s = s[size:]
	}
	return b.String()
}

// maxReply bounds what the CLI reads of a reply: GET /v1/registry lists at most
// registry.MaxEvents events of at most registry.MaxEventJSON bytes, plus the list's own
// text and an "unreadable" message.
const maxReply = registry.MaxEvents*registry.MaxEventJSON + 1<<20

func (c *apiClient) do(ctx context.Context, method, u string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent unreachable: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return fmt.Errorf("%s %s: the reply was cut after %d bytes (the agent stopped, or the connection broke): %w", method, u, len(b), err)
	}
	if len(b) > maxReply {
		return fmt.Errorf("%s %s: the reply is over %d bytes, more than an agent sends within its limits (%d events of at most %d bytes); is --addr an agent?",
			method, u, maxReply, registry.MaxEvents, registry.MaxEventJSON)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		// Any server's words: no escape sequence in them reaches the terminal.
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s %s: %s", method, u, escapeControls(e.Error))
		}
		return fmt.Errorf("%s %s: %s", method, u, escapeControls(resp.Status))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: bad reply: %w", method, u, err)
	}
	return nil
}
