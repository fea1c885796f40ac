package resp

import (
	"strconv"
	"strings"
)

// Command encodes a command as a RESP array of bulk strings.
func Command(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString(Bulk(a))
	}
	return b.String()
}

// Bulk encodes s as a RESP bulk string.
func Bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }
