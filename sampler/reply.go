package sampler

import (
	"bytes"
	"fmt"
)

// replyScanner finds where each reply ends in the server-to-client half of a Redis
// connection, without keeping any of it. It knows every RESP2 and RESP3 type: simple
// lines (+ - : , # _ ( and the big number), bulk strings ($ = !) and aggregates (* ~ > %
// and the attribute |, which prefixes the reply it annotates). It takes the stream in
// chunks split anywhere, so a reply of any size streams through in constant memory.
//
// The proxy uses it on a connection that several clients share, to hand each reply to
// the client whose command it answers. A reply stream that does not parse cannot be
// split safely: the caller must then give up the connection.
type replyScanner struct {
	st    replyState
	agg   byte  // the type byte of the length being parsed
	num   int64 // the length being parsed
	neg   bool
	ndig  int
	rem   int64   // bulk bytes still to come, the closing "\r\n" included
	open  []int64 // elements still to come in each open aggregate, innermost last
	err   error   // sticky
	total int64   // bytes scanned before the current call, for error offsets
	at    int     // index in the current call's data of the '\n' ending a length
}

type replyState uint8

const (
	replyType   replyState = iota // expecting a type byte
	replyLine                     // in a simple line, up to its '\n'
	replyLength                   // in the length of a bulk string or an aggregate
	replyBulk                     // in a bulk string's payload and its "\r\n"
)

// Limits of replyScanner: how deep aggregates nest, and how long a length may be.
const (
	replyMaxDepth = 1024
	replyMaxLen   = 1 << 46
)

// scan reads data and returns n, the number of its bytes that belong to the reply in
// progress, and done, whether the reply ends at data[n-1]. When done is false all of data
// belongs to the reply (n == len(data)). After an error (see err) it returns 0, false.
func (s *replyScanner) scan(data []byte) (n int, done bool) {
	if s.err != nil {
		return 0, false
	}
	i := 0
	for i < len(data) {
		switch s.st {
		case replyType:
			t := data[i]
			i++
			switch t {
			case '+', '-', ':', ',', '#', '_', '(':
				// A simple line: most often it is whole in data.
				j := bytes.IndexByte(data[i:], '\n')
				if j < 0 {
					s.st = replyLine
					i = len(data)
					continue
				}
				i += j + 1
				if s.element() {
					return s.advance(i), true
				}
			case '$', '=', '!', '*', '~', '>', '%', '|':
				s.agg, s.num, s.neg, s.ndig = t, 0, false, 0
				s.st = replyLength
			default:
				return s.fail(i-1, "got %q; want a RESP type byte", t)
			}

		case replyLine:
			j := bytes.IndexByte(data[i:], '\n')
			if j < 0 {
				i = len(data)
				continue
			}
			i += j + 1
			s.st = replyType
			if s.element() {
				return s.advance(i), true
			}

		case replyLength:
			c := data[i]
			i++
			switch {
			case '0' <= c && c <= '9':
				s.num = s.num*10 + int64(c-'0')
				s.ndig++
				if s.num > replyMaxLen {
					return s.fail(i-1, "length over %d", int64(replyMaxLen))
				}
			case c == '-' && s.ndig == 0 && !s.neg:
				s.neg = true
			case c == '\r':
			case c == '\n':
				if s.ndig == 0 {
					return s.fail(i-1, "length without digits")
				}
				s.at = i - 1
				if s.length() {
					return s.advance(i), true
				}
				if s.err != nil {
					return 0, false
				}
			default:
				return s.fail(i-1, "length: got %q; want a digit", c)
			}

		case replyBulk:
			k := int64(len(data) - i)
			if k > s.rem {
				k = s.rem
			}
			i += int(k)
			s.rem -= k
			if s.rem == 0 {
				s.st = replyType
				if s.element() {
					return s.advance(i), true
				}
			}
		}
	}
	return s.advance(i), false
}

// between reports whether the scanner is between replies: the next byte starts one.
func (s *replyScanner) between() bool {
	return s.err == nil && s.st == replyType && len(s.open) == 0
}

// length acts on a complete length line and reports whether that completed the reply.
func (s *replyScanner) length() bool {
	s.st = replyType
	n := s.num
	if s.neg {
		if n != 1 { // only -1, a null, is allowed
			s.fail(-1, "length -%d: want -1 or ≥ 0", n)
			return false
		}
		return s.element() // a null bulk string or array
	}
	switch s.agg {
	case '$', '=', '!':
		s.rem = n + 2
		s.st = replyBulk
		return false
	case '%':
		n *= 2
	case '|':
		// An attribute's pairs, then the reply it annotates, which counts in its place.
		n = 2*n + 1
	}
	if n == 0 {
		return s.element()
	}
	if len(s.open) >= replyMaxDepth {
		s.fail(-1, "aggregates nested over %d deep", replyMaxDepth)
		return false
	}
	s.open = append(s.open, n)
	return false
}

// element counts one finished element and reports whether it finished the reply.
func (s *replyScanner) element() bool {
	for len(s.open) > 0 {
		top := len(s.open) - 1
		s.open[top]--
		if s.open[top] > 0 {
			return false
		}
		s.open = s.open[:top]
	}
	return true
}

func (s *replyScanner) advance(n int) int {
	s.total += int64(n)
	return n
}

// fail records a protocol error at data offset i (or at the '\n' ending the length
// just parsed when i < 0).
func (s *replyScanner) fail(i int, format string, args ...any) (int, bool) {
	if i < 0 {
		i = s.at
	}
	at := s.total + int64(i)
	s.err = &ProtocolError{Offset: at, Reason: "reply: " + fmt.Sprintf(format, args...)}
	return 0, false
}
