package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
)

// Placing a client: the Go client (Dial) and the WebSocket handler ask the
// manager for a node and send that node the client's first signal (its
// offer) the same way (placement). When the manager answers busy, or the
// node does not answer (it died after the manager's ping, hangs, or is
// slow), they ask the manager again, joinAttempts times in all, waiting
// joinBackoff between attempts. A node that did not answer is sent a leave
// for the client (it may have taken the offer) and excluded from the next
// placements (JoinRequest.Exclude). A signal waits at most offerTimeout for
// its node.
const (
	joinAttempts = 5
	offerTimeout = 10 * time.Second
)

// joinBackoff spaces the attempts: 250 ms, 500 ms, 1 s, 2 s (at most 4 s),
// each shortened by up to half at random, so that the clients a busy
// manager refused together do not all come back in the same instant.
var joinBackoff = backoff{base: 250 * time.Millisecond, max: 4 * time.Second}

// backoff is a bounded exponential backoff with jitter.
type backoff struct {
	base, max time.Duration
	// rand returns a number in [0, 1); nil is math/rand/v2's Float64.
	rand func() float64
}

// delay is the wait after the retry-th failure (1 for the first): base
// doubled retry-1 times, at most max, of which a random part up to half
// is taken off.
func (b backoff) delay(retry int) time.Duration {
	d := b.base
	for i := 1; i < retry && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	r := rand.Float64
	if b.rand != nil {
		r = b.rand
	}
	return d - time.Duration(r()*float64(d/2))
}

// wait waits d or until ctx ends, whichever is first, and returns ctx's
// error in the second case.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// placement puts one client on a node: it asks the manager for a node
// (RequestJoin with req) and sends that node the client's first signal.
type placement struct {
	nc  *nats.Conn
	req JoinRequest
	log *slog.Logger
	// retryMsg is what a retry logs.
	retryMsg string
	// send sends s to the node of a and returns its reply. An error for
	// which nodeGone holds means that the node did not answer; a reply
	// with op "error" comes back with an error that does not.
	send func(ctx context.Context, a Assignment, s Signal) (Reply, error)
	// placed, if set, is called with each assignment before send (tests).
	placed func(Assignment)
	// timeout, if set, is how long a signal to node waits instead of
	// offerTimeout (tests).
	timeout func(node string) time.Duration
}

// run places the client. It returns the assignment of the node that
// answered the first signal (its answer, or an error it replied), with
// the reply; an assignment with no Node when no node answered.
func (p placement) run(ctx context.Context, first Signal) (Assignment, Reply, error) {
	req := p.req
	req.Exclude = append([]string(nil), req.Exclude...)
	for attempt := 1; ; attempt++ {
		a, rep, failed, err := p.once(ctx, req, first)
		if failed != "" {
			req.Exclude = append(req.Exclude, failed)
		}
		retry := failed != "" || errors.Is(err, ErrBusy)
		if err == nil || !retry || ctx.Err() != nil {
			return a, rep, err
		}
		if attempt == joinAttempts {
			return Assignment{}, Reply{}, fmt.Errorf("%w (%d attempts)", err, attempt)
		}
		d := joinBackoff.delay(attempt)
		p.log.Info(p.retryMsg, "session", req.Session, "client", req.Client, "node", failed,
			"attempt", attempt, "retry_in", d, "exclude", req.Exclude, "err", err)
		if werr := wait(ctx, d); werr != nil {
			return Assignment{}, Reply{}, fmt.Errorf("%w; then %w", err, werr)
		}
	}
}

// once asks the manager for a node, not one of req.Exclude, and sends it
// s. A node that does not answer (no responders, or no answer within the
// timeout) is returned as failed, after a leave for the client was sent
// to it: one that hangs, or is only slow, may have registered the client,
// and would refuse its next offer ("already connected") and keep a peer
// nobody uses.
func (p placement) once(ctx context.Context, req JoinRequest, s Signal) (a Assignment, rep Reply, failed string, err error) {
	a, err = RequestJoin(ctx, p.nc, req)
	if err != nil {
		return Assignment{}, Reply{}, "", err
	}
	if p.placed != nil {
		p.placed(a)
	}
	timeout := offerTimeout
	if p.timeout != nil {
		timeout = p.timeout(a.Node)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err = p.send(sctx, a, s)
	if err == nil {
		return a, rep, "", nil
	}
	err = fmt.Errorf("%w (node %s)", err, a.Node)
	if ctx.Err() != nil || !nodeGone(err) {
		return a, rep, "", err
	}
	b, _ := json.Marshal(Signal{Op: "leave", Session: s.Session, Client: s.Client})
	if perr := p.nc.Publish(a.Signal, b); perr != nil {
		p.log.Debug("sfu: leave for a client its node did not answer not sent", "node", a.Node, "session", s.Session, "client", s.Client, "err", perr)
	}
	return Assignment{}, Reply{}, a.Node, err
}

// requestSignal sends s to the node whose signal subject is subject and
// returns its reply; a reply with op "error" is returned with an error
// that carries its text.
func requestSignal(ctx context.Context, nc *nats.Conn, subject string, s Signal) (Reply, error) {
	b, _ := json.Marshal(s)
	m, err := nc.RequestWithContext(ctx, subject, b)
	if err != nil {
		return Reply{}, fmt.Errorf("%s: %w", s.Op, err)
	}
	var rep Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return Reply{}, fmt.Errorf("%s: reply from %s: %w", s.Op, subject, err)
	}
	if rep.Op == "error" {
		return rep, fmt.Errorf("%s: %s", s.Op, rep.Error)
	}
	return rep, nil
}
