// Package syncbuf is a bytes.Buffer safe for one writer goroutine (a
// logger, a child process's output) and a reader (the test checking it).
// Tests only.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is written and read under a lock. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
