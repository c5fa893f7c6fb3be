package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/xrealm/xrealm/auth"
)

// logAdapter sends the NATS server's log lines to slog. The server reports
// a client's permission violations only in its log, so the adapter also
// tells onViolation of them.
type logAdapter struct {
	l           *slog.Logger
	onViolation func(kind string)
	// denials, if not nil, logs the lines of the server's refusals of
	// clients (see refusal), a bounded number, rather than one error line
	// each.
	denials *auth.DenyLog
	// fatal, if not nil, receives the first fatal error the server logs
	// (a listener it cannot bind): Start waits for it.
	fatal chan<- string
	// routes, if not nil, keeps the last error line about a route.
	routes *routeStatus
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
	kind := refusal(msg)
	switch {
	case kind == "authentication" && clientLine(msg):
		// The authenticator logged this refusal, with its reason, through
		// the same bounded log: a second line would halve what it shows.
		a.l.Debug(msg)
	case kind != "" && a.denials != nil:
		a.denials.Deny(a.l, msg)
	default:
		a.l.Error(msg)
	}
	if a.routes != nil && routeLine(msg) && !clientLine(msg) {
		a.routes.set(msg)
	}
	if a.onViolation != nil && (kind == "publish" || kind == "subscribe") {
		a.onViolation(kind)
	}
}

// clientLine reports whether a NATS server log line is about a client
// connection (NATS, WebSocket or MQTT client: "- cid:", "- wid:", "- mid:"),
// whose authentication xrealm's authenticator decides and logs, rather than
// a route, gateway or leaf node (rid, gid, lid), whose refusals only NATS
// reports.
func clientLine(msg string) bool {
	return strings.Contains(msg, " - cid:") || strings.Contains(msg, " - wid:") || strings.Contains(msg, " - mid:")
}

// refusal says which refusal of a client an error line of the NATS server
// reports: "publish" or "subscribe" for a permission violation,
// "authentication" for a refused connection (after the authenticator's own
// line), "" for any other line.
func refusal(msg string) string {
	switch {
	case strings.Contains(msg, "Publish Violation"):
		return "publish"
	case strings.Contains(msg, "Subscription Violation"):
		return "subscribe"
	case strings.Contains(msg, server.ErrAuthentication.Error()):
		return "authentication"
	}
	return ""
}
func (a *logAdapter) Debugf(format string, v ...any) {
	if a.l.Enabled(context.Background(), slog.LevelDebug) {
		a.l.Debug(fmt.Sprintf(format, v...))
	}
}
func (a *logAdapter) Tracef(format string, v ...any) {}
