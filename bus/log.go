package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// logAdapter sends the NATS server's log lines to slog. The server reports
// a client's permission violations only in its log, so the adapter also
// tells onViolation of them.
type logAdapter struct {
	l           *slog.Logger
	onViolation func(kind string)
	// fatal, if not nil, receives the first fatal error the server logs
	// (a listener it cannot bind): Start waits for it.
	fatal chan<- string
}

func (a *logAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.l.Error(msg)
	if a.fatal != nil {
		select {
		case a.fatal <- msg:
		default:
		}
	}
}
func (a *logAdapter) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if a.onViolation != nil {
		switch {
		case strings.Contains(msg, "Publish Violation"):
			a.onViolation("publish")
		case strings.Contains(msg, "Subscription Violation"):
			a.onViolation("subscribe")
		}
	}
	a.l.Error(msg)
}
func (a *logAdapter) Debugf(format string, v ...any) {
	if a.l.Enabled(context.Background(), slog.LevelDebug) {
		a.l.Debug(fmt.Sprintf(format, v...))
	}
}
func (a *logAdapter) Tracef(format string, v ...any) {}
