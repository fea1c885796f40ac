// Package logbuf is a log destination that a test reads while a logger writes to it.
package logbuf

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writes and reads.
type Buffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns the lines written so far that match the regular expression re, without
// their line ends.
func (s *Buffer) Lines(re string) []string {
	m := regexp.MustCompile(re)
	var out []string
	for line := range strings.Lines(s.String()) {
		if m.MatchString(line) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}
