package jsontext

import (
	"fmt"
	"strconv"
	"unicode/utf16"
)

// LoneSurrogate returns the offset in b, a JSON text, of the first \u escape that is
// half of a UTF-16 surrogate pair without its other half, or -1 when there is none.
// Backslashes stand only in strings in JSON, so the text need not be parsed; in text
// that is not JSON the result means nothing.
func LoneSurrogate(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := hexEscape(b[i:])
		switch {
		case !ok:
			i++ // another escape: skip the escaped character
		case !utf16.IsSurrogate(r):
			i += 5
		case r < 0xDC00: // a high half: the low one must follow
			if r2, ok := hexEscape(b[i+6:]); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
				i += 11
				continue
			}
			return i
		default:
			return i
		}
	}
	return -1
}

// LoneSurrogateError describes the escape at offset at of b, found by LoneSurrogate.
func LoneSurrogateError(b []byte, at int) error {
	return fmt.Errorf("%s at byte %d is half of a UTF-16 surrogate pair, which names no character", b[at:at+6], at)
}

// hexEscape decodes the \uXXXX escape b starts with.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	return rune(v), err == nil
}
