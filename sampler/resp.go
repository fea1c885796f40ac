package sampler

import (
	"bytes"
	"fmt"

	"github.com/hotkeyd/hotkeyd/internal/defaults"
)

// RESPOptions configure a RESPParser. The zero value keeps the first 256 arguments of a
// command and the first 512 bytes of each.
type RESPOptions struct {
	// MaxArgs is how many arguments of a command are kept, its name included. Later
	// arguments are parsed and skipped; NArgs still counts them. Default 256.
	MaxArgs int
	// MaxArgBytes is how many leading bytes of each argument are kept. The rest of a
	// longer argument is skipped as it streams past, never buffered; ArgSize reports the
	// argument's full length. Default 512.
	MaxArgBytes int
}

// Defaults and limits of RESPParser.
const (
	DefaultRESPMaxArgs     = 256
	DefaultRESPMaxArgBytes = 512

	// respMaxInline is the longest inline command, as in Redis (PROTO_INLINE_MAX_SIZE).
	respMaxInline = 64 << 10
	// respMaxMultibulk is the most arguments a command may declare, as in Redis (INT_MAX).
	respMaxMultibulk = 1<<31 - 1
	// respMaxBulk bounds a bulk string's declared length; Redis's default limit,
	// proto-max-bulk-len, is 512 MiB, and it may be raised.
	respMaxBulk = 1 << 46
)

// ProtocolError is a RESP protocol error: the bytes at Offset in the stream do not form a
// request. After one, a RESPParser parses nothing more until Reset; Redis itself answers
// a protocol error by closing the connection.
type ProtocolError struct {
	// Offset is the position in the stream of the offending byte, counting from 0.
	Offset int64
	// Reason says what was wrong.
	Reason string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("resp: protocol error at byte %d: %s", e.Offset, e.Reason)
}

type respState uint8

const (
	respCommand    respState = iota // at the start of a command
	respArrayLen                    // in the digits after '*'
	respBulkPrefix                  // expecting '$'
	respBulkLen                     // in the digits after '$'
	respBulkData                    // in a bulk string's payload
	respBulkCR                      // expecting the '\r' after a payload
	respBulkLF                      // expecting the '\n' after a payload
	respInline                      // gathering an inline command's line
)

// RESPParser parses the client-to-server half of a Redis connection: commands sent as
// RESP arrays of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or inline
// (`GET k\r\n`). It takes the stream in chunks split anywhere, even inside a length or a
// "\r\n", and keeps only a bounded prefix of each command, so a 10 MB value streams past
// without being buffered. In steady state it allocates nothing.
//
// Use it as a scanner:
//
//	p.Feed(chunk)
//	for p.Next() {
//		use(p.Args())
//	}
//	if err := p.Err(); err != nil { … }
//
// A RESPParser is not safe for concurrent use; use one per connection.
type RESPParser struct {
	maxArgs, maxArgBytes int

	data []byte // fed and not yet consumed
	off  int64  // stream offset of data[0]
	err  error  // sticky

	st   respState
	skip bool // the command in progress keeps nothing (begun by Skip)

	// A length being parsed.
	num  int64
	ndig int
	neg  bool
	cr   bool // saw its '\r'

	nargs    int   // arguments the command in progress declared
	argi     int   // index of the argument in progress
	rem      int64 // payload bytes of the argument in progress still to come
	keepRem  int   // of which still to keep
	argStart int   // where the argument in progress starts in buf

	buf   []byte   // kept bytes of the command in progress
	name  []byte   // the command's name (its first argument) kept, a view into buf
	sub   []byte   // its second argument kept (a subcommand, say), a view into buf
	args  [][]byte // kept arguments, views into buf
	sizes []int64  // full length of each kept argument
	line  []byte   // an inline command gathered across chunks

	done  bool // args, sizes and nargs describe a complete command
	total int  // arguments of the last complete command
}

// NewRESPParser returns a parser, or an error when an option is out of range.
func NewRESPParser(o RESPOptions) (*RESPParser, error) {
	if o.MaxArgs < 0 || o.MaxArgs > 1<<20 {
		return nil, fmt.Errorf("sampler: RESPOptions.MaxArgs %d: must be between 0 (default %d) and %d",
			o.MaxArgs, DefaultRESPMaxArgs, 1<<20)
	}
	if o.MaxArgBytes < 0 || o.MaxArgBytes > respMaxInline {
		return nil, fmt.Errorf("sampler: RESPOptions.MaxArgBytes %d: must be between 0 (default %d) and %d",
			o.MaxArgBytes, DefaultRESPMaxArgBytes, respMaxInline)
	}
	p := &RESPParser{
		maxArgs:     defaults.Or(o.MaxArgs, DefaultRESPMaxArgs),
		maxArgBytes: defaults.Or(o.MaxArgBytes, DefaultRESPMaxArgBytes),
	}
	p.buf = make([]byte, 0, 1024)
	p.args = make([][]byte, 0, 16)
	p.sizes = make([]int64, 0, 16)
	return p, nil
}

// Reset forgets all state, including a protocol error, to parse a new stream.
func (p *RESPParser) Reset() {
	*p = RESPParser{
		maxArgs: p.maxArgs, maxArgBytes: p.maxArgBytes,
		buf: p.buf[:0], args: p.args[:0], sizes: p.sizes[:0], line: p.line[:0],
	}
}

// Feed hands the parser the next chunk of the stream. Call it only after Next or Skip
// has returned false (all earlier input consumed). The parser reads data during the
// following Next and Skip calls and keeps no reference to it once they return false, so
// the caller may then reuse it.
func (p *RESPParser) Feed(data []byte) {
	if p.err != nil {
		p.off += int64(len(data))
		return
	}
	p.data = data
}

// Buffered is the number of bytes fed and not yet parsed: above 0 when the caller stopped
// calling Next and Skip before they returned false.
func (p *RESPParser) Buffered() int { return len(p.data) }

// Refeed tells a parser stopped before the end of its input (Buffered above 0) that the
// caller moved that input: data must hold the same Buffered bytes, now elsewhere.
// Parsing goes on from its start as if nothing had happened.
func (p *RESPParser) Refeed(data []byte) { p.data = data }

// Next parses up to the end of the next complete command and reports whether there was
// one; false means the fed input is used up (feed more) or a protocol error (see Err).
// The command's arguments are then in Args, valid until the next call to Next, Skip,
// Feed or Reset.
func (p *RESPParser) Next() bool { return p.advance(false) }

// Skip is Next without keeping the command's arguments: Args is empty afterwards, NArgs
// still counts them, and Name and Sub still have its first two. It is for commands the caller does not sample. A command that Skip
// began is finished without keeping arguments even if Next finishes it, and one that Next
// began is kept even if Skip finishes it.
func (p *RESPParser) Skip() bool { return p.advance(true) }

// Args returns the kept arguments of the last command that Next returned: at most
// MaxArgs of them, each at most MaxArgBytes long (see ArgSize). They alias the parser's
// buffer: copy what you keep.
func (p *RESPParser) Args() [][]byte {
	if !p.done {
		return nil
	}
	return p.args
}

// Name returns the name of the last command that Next or Skip returned (its first
// argument, at most MaxArgBytes of it), with the same lifetime as Args; nil when there
// is none.
func (p *RESPParser) Name() []byte {
	if !p.done {
		return nil
	}
	return p.name
}

// Sub returns the second argument of the last command that Next or Skip returned (a
// subcommand: SETINFO in CLIENT SETINFO), at most MaxArgBytes of it, with the same
// lifetime as Args; nil when there is none.
func (p *RESPParser) Sub() []byte {
	if !p.done {
		return nil
	}
	return p.sub
}

// ArgSize returns the full length of Args()[i], which may be longer than what was kept.
func (p *RESPParser) ArgSize(i int) int64 {
	if !p.done || i < 0 || i >= len(p.sizes) {
		return 0
	}
	return p.sizes[i]
}

// NArgs returns how many arguments the last command had, kept or not.
func (p *RESPParser) NArgs() int {
	if !p.done {
		return 0
	}
	return p.total
}

// Truncated reports whether the last command had arguments or argument bytes that were
// not kept.
func (p *RESPParser) Truncated() bool {
	if !p.done {
		return false
	}
	if len(p.args) < p.total {
		return true
	}
	for i, a := range p.args {
		if int64(len(a)) != p.sizes[i] {
			return true
		}
	}
	return false
}

// bulkRemaining returns how many bytes of the bulk string in progress are still to come,
// its closing "\r\n" included; 0 when no payload is in progress.
func (p *RESPParser) bulkRemaining() int64 {
	if p.err != nil || p.st != respBulkData {
		return 0
	}
	return p.rem + 2
}

// Err returns the protocol error that stopped the parser, or nil.
func (p *RESPParser) Err() error { return p.err }

// Offset returns how many bytes of the stream the parser has consumed.
func (p *RESPParser) Offset() int64 { return p.off }

func (p *RESPParser) fail(at int, format string, args ...any) bool {
	p.err = &ProtocolError{Offset: p.off + int64(at), Reason: fmt.Sprintf(format, args...)}
	p.off += int64(len(p.data))
	p.data = nil
	p.done = false
	return false
}

// consume drops the first n bytes of data.
func (p *RESPParser) consume(n int) {
	p.data = p.data[n:]
	p.off += int64(n)
}

// begin starts a new command.
func (p *RESPParser) begin(skip bool) {
	p.skip = skip
	p.buf = p.buf[:0]
	p.name, p.sub = nil, nil
	p.args = p.args[:0]
	p.sizes = p.sizes[:0]
	p.nargs, p.argi = 0, 0
}

// length resets the state for parsing a length.
func (p *RESPParser) length() {
	p.num, p.ndig, p.neg, p.cr = 0, 0, false, false
}

// parseLength consumes the digits of a length and its "\r\n". It returns done when the
// length is complete, or ok false on a protocol error (already recorded).
func (p *RESPParser) parseLength(limit int64, what string) (done, ok bool) {
	d := p.data
	i := 0
	for ; i < len(d); i++ {
		c := d[i]
		if p.cr {
			if c != '\n' {
				p.consume(i)
				return false, p.fail(0, "%s: got %q after '\\r'; want '\\n'", what, c)
			}
			if p.ndig == 0 {
				p.consume(i)
				return false, p.fail(0, "%s: no digits", what)
			}
			p.consume(i + 1)
			if p.neg {
				p.num = -p.num
			}
			return true, true
		}
		switch {
		case '0' <= c && c <= '9':
			// Redis reads lengths with string2ll, which refuses "-0" and leading zeros.
			if p.ndig > 0 && p.num == 0 || p.neg && c == '0' && p.ndig == 0 {
				p.consume(i)
				return false, p.fail(0, "%s: a leading zero; Redis refuses it", what)
			}
			p.num = p.num*10 + int64(c-'0')
			p.ndig++
			if p.num > limit {
				p.consume(i)
				return false, p.fail(0, "%s: over %d", what, limit)
			}
		case c == '-' && p.ndig == 0 && !p.neg:
			p.neg = true
		case c == '\r':
			p.cr = true
		default:
			p.consume(i)
			return false, p.fail(0, "%s: got %q; want a digit", what, c)
		}
	}
	p.consume(i)
	return false, true
}

// startArg begins an argument whose payload is n bytes long.
func (p *RESPParser) startArg(n int64) {
	p.rem = n
	p.keepRem = 0
	if p.argi <= 1 || (!p.skip && p.argi < p.maxArgs) {
		p.keepRem = int(min(n, int64(p.maxArgBytes)))
		p.argStart = len(p.buf)
	}
}

// endArg finishes the argument in progress.
func (p *RESPParser) endArg(size int64) {
	keep := !p.skip && p.argi < p.maxArgs
	if keep || p.argi <= 1 {
		arg := p.buf[p.argStart:len(p.buf):len(p.buf)]
		switch p.argi {
		case 0:
			p.name = arg
		case 1:
			p.sub = arg
		}
		if keep {
			p.args = append(p.args, arg)
			p.sizes = append(p.sizes, size)
		}
	}
	p.argi++
}

// fastArg parses a whole well-formed bulk string ("$3\r\nGET\r\n") at the start of
// data in one go; it returns false, having consumed nothing, when the argument is not
// all there or not well formed, for the byte-at-a-time states to handle.
func (p *RESPParser) fastArg() bool {
	d := p.data
	if len(d) < 6 || d[0] != '$' {
		return false
	}
	const maxDigits = 14 // respMaxBulk has 14 digits
	var n int64
	j := 1
	for ; j < len(d) && j <= maxDigits; j++ {
		c := d[j]
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	if j == 1 || j+1 >= len(d) || d[j] != '\r' || d[j+1] != '\n' || n > respMaxBulk ||
		d[1] == '0' && j > 2 { // a leading zero: the slow path reports it
		return false
	}
	start := int64(j + 2)
	end := start + n
	if int64(len(d)) < end+2 || d[end] != '\r' || d[end+1] != '\n' {
		return false
	}
	p.num = n
	p.startArg(n)
	if p.keepRem > 0 {
		p.buf = append(p.buf, d[start:start+int64(p.keepRem)]...)
		p.keepRem = 0
	}
	p.rem = 0
	p.consume(int(end + 2))
	p.endArg(n)
	return true
}

// complete marks the command in progress as the result.
func (p *RESPParser) complete() bool {
	p.st = respCommand
	p.done = true
	p.total = p.nargs
	return true
}

func (p *RESPParser) advance(skip bool) bool {
	if p.err != nil {
		return false
	}
	p.done = false
	for len(p.data) > 0 {
		switch p.st {
		case respCommand:
			p.begin(skip)
			if p.data[0] == '*' {
				p.consume(1)
				p.length()
				p.st = respArrayLen
			} else {
				p.line = p.line[:0]
				p.st = respInline
			}

		case respArrayLen:
			done, ok := p.parseLength(respMaxMultibulk, "array length")
			if !ok {
				return false
			}
			if !done {
				return false
			}
			if p.num <= 0 {
				// Redis ignores "*0" and "*-1" requests.
				p.st = respCommand
				continue
			}
			p.nargs = int(p.num)
			p.st = respBulkPrefix

		case respBulkPrefix:
			if p.fastArg() {
				if p.argi == p.nargs {
					return p.complete()
				}
				continue
			}
			if c := p.data[0]; c != '$' {
				return p.fail(0, "argument %d of %d: got %q; want '$'", p.argi, p.nargs, c)
			}
			p.consume(1)
			p.length()
			p.st = respBulkLen

		case respBulkLen:
			done, ok := p.parseLength(respMaxBulk, "bulk length")
			if !ok {
				return false
			}
			if !done {
				return false
			}
			if p.num < 0 {
				return p.fail(0, "argument %d of %d: bulk length %d: must be ≥ 0", p.argi, p.nargs, p.num)
			}
			p.startArg(p.num)
			p.st = respBulkData

		case respBulkData:
			n := len(p.data)
			if int64(n) > p.rem {
				n = int(p.rem)
			}
			if p.keepRem > 0 {
				k := min(p.keepRem, n)
				p.buf = append(p.buf, p.data[:k]...)
				p.keepRem -= k
			}
			p.consume(n)
			p.rem -= int64(n)
			if p.rem == 0 {
				p.st = respBulkCR
			}

		case respBulkCR:
			if c := p.data[0]; c != '\r' {
				return p.fail(0, "argument %d of %d: got %q after the payload; want '\\r'", p.argi, p.nargs, c)
			}
			p.consume(1)
			p.st = respBulkLF

		case respBulkLF:
			if c := p.data[0]; c != '\n' {
				return p.fail(0, "argument %d of %d: got %q after '\\r'; want '\\n'", p.argi, p.nargs, c)
			}
			p.consume(1)
			p.endArg(p.num)
			if p.argi == p.nargs {
				return p.complete()
			}
			p.st = respBulkPrefix

		case respInline:
			i := indexNewline(p.data)
			if i < 0 {
				if len(p.line)+len(p.data) > respMaxInline {
					return p.fail(0, "inline command over %d bytes", respMaxInline)
				}
				p.line = append(p.line, p.data...)
				p.consume(len(p.data))
				return false
			}
			line := p.data[:i]
			if len(p.line) > 0 {
				if len(p.line)+i > respMaxInline {
					return p.fail(0, "inline command over %d bytes", respMaxInline)
				}
				p.line = append(p.line, line...)
				line = p.line
			}
			start := p.off - int64(len(line)-i)
			p.consume(i + 1)
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if reason := p.inline(line); reason != "" {
				p.fail(0, "inline command: %s", reason)
				p.err.(*ProtocolError).Offset = start
				return false
			}
			p.st = respCommand
			if p.nargs > 0 {
				return p.complete()
			}
		}
	}
	return false
}

// inline splits an inline command into arguments, keeping them within the limits, and
// returns a reason when the line does not split.
func (p *RESPParser) inline(line []byte) string {
	// Redis finds the end of an inline command with strchr, which stops at a NUL byte:
	// with one before the newline it sees no newline and waits for one, for ever.
	if bytes.IndexByte(line, 0) >= 0 {
		return "a NUL byte: Redis reads the line as a C string and never sees its end"
	}
	for {
		start := len(p.buf)
		var ok bool
		var err string
		p.buf, line, ok, err = splitArg(p.buf, line)
		if err != "" {
			return err
		}
		if !ok {
			return ""
		}
		size := int64(len(p.buf) - start)
		keep := !p.skip && p.nargs < p.maxArgs
		if !keep && p.nargs > 1 {
			p.buf = p.buf[:start]
		} else {
			end := start + min(len(p.buf)-start, p.maxArgBytes)
			p.buf = p.buf[:end]
			switch p.nargs {
			case 0:
				p.name = p.buf[start:end:end]
			case 1:
				p.sub = p.buf[start:end:end]
			}
			if keep {
				p.args = append(p.args, p.buf[start:end:end])
				p.sizes = append(p.sizes, size)
			}
		}
		p.nargs++
	}
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// splitArg appends to dst the next argument of s, split and unquoted as Redis splits
// inline commands and as redis-cli reads (sdssplitargs): words separated by white space,
// "double quoted" strings with the escapes \" \\ \n \r \t \a \b \xHH, and 'single quoted'
// strings with \'. ok is false when s holds no more arguments; err says why s does not
// split (an unbalanced quote, or a closing quote not followed by a space). s must not
// hold a NUL byte, which ends the string for Redis.
func splitArg(dst, s []byte) (out, rest []byte, ok bool, err string) {
	i := 0
	for i < len(s) && isRedisSpace(s[i]) {
		i++
	}
	if i == len(s) {
		return dst, nil, false, ""
	}
	inq, insq := false, false
	for {
		if i >= len(s) {
			if inq || insq {
				return dst, nil, false, "unbalanced quotes in request"
			}
			return dst, nil, true, ""
		}
		c := s[i]
		switch {
		case inq:
			switch {
			case c == '\\' && i+3 < len(s) && s[i+1] == 'x' && isHex(s[i+2]) && isHex(s[i+3]):
				dst = append(dst, unhex(s[i+2])<<4|unhex(s[i+3]))
				i += 3
			case c == '\\' && i+1 < len(s):
				i++
				switch e := s[i]; e {
				case 'n':
					dst = append(dst, '\n')
				case 'r':
					dst = append(dst, '\r')
				case 't':
					dst = append(dst, '\t')
				case 'b':
					dst = append(dst, '\b')
				case 'a':
					dst = append(dst, '\a')
				default:
					dst = append(dst, e)
				}
			case c == '"':
				// The closing quote must be followed by a space or nothing.
				if i+1 < len(s) && !isRedisSpace(s[i+1]) {
					return dst, nil, false, "closing quote must be followed by a space"
				}
				return dst, s[i+1:], true, ""
			default:
				dst = append(dst, c)
			}
		case insq:
			switch {
			case c == '\\' && i+1 < len(s) && s[i+1] == '\'':
				dst = append(dst, '\'')
				i++
			case c == '\'':
				if i+1 < len(s) && !isRedisSpace(s[i+1]) {
					return dst, nil, false, "closing quote must be followed by a space"
				}
				return dst, s[i+1:], true, ""
			default:
				dst = append(dst, c)
			}
		default:
			switch c {
			case ' ', '\n', '\r', '\t':
				return dst, s[i:], true, ""
			case '"':
				inq = true
			case '\'':
				insq = true
			default:
				dst = append(dst, c)
			}
		}
		i++
	}
}

// isRedisSpace is C's isspace, which sdssplitargs uses between arguments.
func isRedisSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
