package sfu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// TokenHint says how to make a bus token with the rights an SFU node or a
// Go SFU client (bots) needs.
const TokenHint = "make one with `xrealm token --role sfu --user <name> --data <the server's data directory>`"

// PermissionError is a NATS permissions violation on the bus, explained:
// the connection's token lacks the rights of an SFU service. It wraps the
// NATS error (errors.Is(err, nats.ErrPermissionViolation) holds).
type PermissionError struct {
	Op      string // "publish to" or "subscribe to"
	Subject string // what the bus refused, as NATS names it
	Err     error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("sfu: the bus refused to let this connection %s %q: its token lacks the rights of an SFU node or client "+
		"(publish and subscribe on sfu.>, subscribe on _INBOX.>: a token of role sfu); %s (%v)", e.Op, e.Subject, TokenHint, e.Err)
}

func (e *PermissionError) Unwrap() error { return e.Err }

var permissionRE = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]*)"`)

// AsPermissionError explains err when it is a NATS permissions violation
// (as a nats.ErrHandler reports it) and returns nil otherwise.
func AsPermissionError(err error) *PermissionError {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	pe := &PermissionError{Op: "use", Subject: "?", Err: err}
	if m := permissionRE.FindStringSubmatch(err.Error()); m != nil {
		pe.Op, pe.Subject = "publish to", m[2]
		if m[1][0] == 's' || m[1][0] == 'S' {
			pe.Op = "subscribe to"
		}
	}
	return pe
}

// busWatch sees the permissions violations the bus reports to a
// connection from when it is made (watchBus), through the connection's
// error handler, which it wraps: Start fails on the first (the token lacks
// the rights of an SFU node). The wrapped handler still sees every error;
// the commands (internal/cli) report later violations through theirs.
//
// NATS calls the error handler on its own goroutine, unordered with the
// return of a Flush, so a check cannot just flush and look. It asks for a
// marker instead (check): NATS calls the handler in the order in which
// the bus's answers arrived, so once the handler has seen the marker it
// has seen every violation of what the connection sent before it. (The
// connection's LastError after a Flush would not do: it is one slot, which
// any later error, a slow consumer on another subscription of the same
// connection for instance, overwrites, and which a reconnect clears. Each
// check leaves the marker's slow consumer in it; nothing reads it.)
type busWatch struct {
	nc      *nats.Conn
	markers string // prefix of the marker subjects
	wrapped nats.ErrHandler

	mu      sync.Mutex
	active  bool
	refused *PermissionError         // the violation to report (handle)
	waiting map[string]chan struct{} // markers not yet seen, by subject
	seq     int
}

// watchBus starts watching nc. Marker subjects are prefix.<n>: prefix
// must be a subject the connection may publish and subscribe to that
// nothing else uses.
func watchBus(nc *nats.Conn, prefix string) *busWatch {
	w := &busWatch{nc: nc, markers: prefix, wrapped: nc.ErrorHandler(), active: true, waiting: map[string]chan struct{}{}}
	nc.SetErrorHandler(w.handle)
	return w
}

// stop ends the watch; the handler passes every error on from then on.
func (w *busWatch) stop() {
	w.mu.Lock()
	w.active = false
	w.mu.Unlock()
}

func (w *busWatch) handle(nc *nats.Conn, sub *nats.Subscription, err error) {
	w.mu.Lock()
	// a marker is never passed on, also one that comes after its check
	// gave up waiting
	marker := sub != nil && errors.Is(err, nats.ErrSlowConsumer) && strings.HasPrefix(sub.Subject, w.markers+".")
	if w.active {
		if marker {
			w.seen(sub.Subject)
		}
		if pe := AsPermissionError(err); pe != nil {
			// the first refusal of one of the node's own subjects says
			// best what it needs; an inbox's only if there is none
			if w.refused == nil || !strings.HasPrefix(w.refused.Subject, "sfu.") && strings.HasPrefix(pe.Subject, "sfu.") {
				w.refused = pe
			}
			w.seen(pe.Subject)
		}
	}
	w.mu.Unlock()
	if !marker && w.wrapped != nil {
		w.wrapped(nc, sub, err)
	}
}

// seen marks the marker subject as seen and reports whether it is one;
// w.mu is held.
func (w *busWatch) seen(subject string) bool {
	done, ok := w.waiting[subject]
	if ok {
		delete(w.waiting, subject)
		close(done)
	}
	return ok
}

// busCheckTimeout bounds the wait for a check's marker.
const busCheckTimeout = 10 * time.Second

// check returns a permissions violation the bus reported since the watch
// began, as a *PermissionError (the first on a subject under sfu., else
// the first), or nil, once the bus has answered everything the connection
// sent before the call. The marker is
// a message to a subscription on a subject of its own whose channel
// nobody reads: NATS reports it as a slow consumer to the error handler.
// If the bus refuses the connection that subject instead, the violation
// is the marker. A Flush that fails (the bus went away) fails the check
// with its error, since the bus's answers were not all seen. The wait is
// bounded by busCheckTimeout, not by ctx's end: a start that is cancelled
// still checks (the node stops with ctx after).
func (w *busWatch) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busCheckTimeout)
	defer cancel()
	w.mu.Lock()
	w.seq++
	subject := fmt.Sprintf("%s.%d", w.markers, w.seq)
	done := make(chan struct{})
	w.waiting[subject] = done
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiting, subject)
		w.mu.Unlock()
	}()
	sub, err := w.nc.ChanSubscribe(subject, make(chan *nats.Msg))
	if err != nil {
		return fmt.Errorf("sfu: bus check: subscribe %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := w.nc.Publish(subject, nil); err != nil {
		return fmt.Errorf("sfu: bus check: publish %s: %w", subject, err)
	}
	if err := w.nc.Flush(); err != nil {
		if pe := w.violation(); pe != nil {
			return pe
		}
		return fmt.Errorf("sfu: bus: %w", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		if pe := w.violation(); pe != nil {
			return pe
		}
		return fmt.Errorf("sfu: bus check: the connection's error handler did not report the marker %s (was it replaced?): %w", subject, ctx.Err())
	}
	if pe := w.violation(); pe != nil {
		return pe
	}
	return nil
}

// violation returns the violation to report, or nil.
func (w *busWatch) violation() *PermissionError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused
}

// newInstance returns a random NodeInfo.Instance.
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrDuplicateID is what Start's error wraps when a live node already has
// its ID.
var ErrDuplicateID = errors.New("sfu: duplicate node ID")

// duplicateTimeout bounds how long Start waits for a node with its ID to
// answer a ping; a bus with no such node answers "no responders" at once.
const duplicateTimeout = time.Second

// checkUnique asks, before the node subscribes, whether a node with its
// ID answers on its signal subject (op "ping"); two nodes with one ID
// would share the subject and the manager's bookkeeping. A node that
// answers that it is shutting down does not count. It also reports a
// permissions violation on the subjects it uses (the token lacks the
// rights) at once instead of after the timeout.
func (n *Node) checkUnique(ctx context.Context, w *busWatch) error {
	nc := n.cfg.NC
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("sfu: subscribe %s: %w", inbox, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, _ := json.Marshal(Signal{Op: "ping", Session: "startup", Client: "node-" + n.cfg.ID})
	signal := subjectSignal(n.cfg.ID)
	if err := nc.PublishRequest(signal, inbox, b); err != nil {
		return fmt.Errorf("sfu: ping %s: %w", signal, err)
	}
	if err := w.check(ctx); err != nil {
		return err
	}
	msg, err := sub.NextMsg(duplicateTimeout)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil // no node has this ID
		}
		if errors.Is(err, nats.ErrTimeout) {
			// something holds the subject but does not answer (a hung
			// node, or a client of another kind): not a live node
			n.log.Warn("sfu node: a subscriber of this node's signal subject did not answer a ping; starting anyway",
				"subject", signal, "waited", duplicateTimeout)
			return nil
		}
		return fmt.Errorf("sfu: ping %s: %w", signal, err)
	}
	var r Reply
	if json.Unmarshal(msg.Data, &r) != nil {
		return nil
	}
	if r.Op != "ok" {
		n.log.Info("sfu node: a node with this ID is shutting down; starting", "reply", r.Error)
		return nil
	}
	site := r.Site
	if site == "" {
		site = "unknown"
	}
	return fmt.Errorf("%w: an SFU node with id %s is already running (site %s); choose another --id", ErrDuplicateID, n.cfg.ID, site)
}
