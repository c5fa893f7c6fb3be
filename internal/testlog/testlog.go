// Package testlog collects what a component under test logs, for tests
// that check its log lines: a Buffer is safe to write from the
// component's goroutines while the test reads it.
package testlog

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Buffer is an io.Writer that keeps everything written to it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger, at level Info and above, that writes to l.
func (l *Buffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Count returns how many lines written so far hold every one of parts.
func (l *Buffer) Count(parts ...string) int {
	n := 0
	for line := range strings.Lines(l.String()) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			n++
		}
	}
	return n
}
