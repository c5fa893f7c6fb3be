package sfu

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
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
// (as a nats.ErrHandler or Conn.LastError reports it) and returns nil
// otherwise.
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

// busCheck flushes nc and returns the permissions violation it reports
// since before (newPermissionError), or the Flush's error: a check whose
// Flush failed has not seen the server's answers.
//
// The connection's error handler would also see the violations, but NATS
// calls it on its own goroutine, unordered with the Flush's return, so
// Start relies on LastError, which the reader sets before it reads the
// PONG; the commands (internal/cli) report later violations through
// their handler.
func busCheck(nc *nats.Conn, before error) error {
	if err := nc.Flush(); err != nil {
		if pe := newPermissionError(nc, before); pe != nil {
			return pe
		}
		return fmt.Errorf("sfu: bus: %w", err)
	}
	return newPermissionError(nc, before)
}

// newPermissionError returns the permissions violation nc reports since
// before, its LastError when Start began, after a Flush: the server
// answers a subscription or publish it refuses before the Flush's PONG.
// A violation is a new error value each time, so a LastError other than
// before is a new one.
func newPermissionError(nc *nats.Conn, before error) error {
	err := nc.LastError()
	if err == nil || err == before {
		return nil
	}
	if pe := AsPermissionError(err); pe != nil {
		return pe
	}
	return nil
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
func (n *Node) checkUnique(before error) error {
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
	if err := busCheck(nc, before); err != nil {
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
