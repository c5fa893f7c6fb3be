package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
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
// placements (JoinRequest.Exclude); one that refused the offer for its load
// (Reply.Full) is excluded too, with no leave, so that another node may
// take the client. One that refused it for its clients (MaxClients), not
// its signal slots (Reply.Busy), is named in JoinRequest.Full on the next
// attempt only: the manager counts it full until its next heartbeat, which
// a later attempt may come after. When the manager then has no node left,
// the nodes refused for load are asked again after the backoff (they were
// busy, not failed; a single node's 64 signal slots fill when every tab
// offers at once after a restart), and a placement that ends so ends with
// the last refusal's error (errNodeFull, Reply.Full), not with "no node is
// available". A signal waits at most offerTimeout for its node, a join
// request joinRequestTimeout for the manager, and the whole placement at
// most placementTimeout.
const (
	joinAttempts       = 5
	offerTimeout       = 10 * time.Second
	joinRequestTimeout = 10 * time.Second // the manager probes up to 3 nodes for 2 s each
)

// placementTimeout bounds a whole placement, all attempts and the waits
// between them: without it, nodes that take an offer and never answer cost
// up to joinAttempts join requests and offers of 10 s each, a minute or
// more before a browser heard why it has no connection. 25 s still leaves
// room for the usual failover, a node that does not answer its offer
// (10 s) and a second one that does, and is about as long as someone
// looking at a connecting page waits before taking it for hung. After it
// the placement ends with an error that names its attempts and the nodes
// it placed the client on and excluded.
const placementTimeout = 25 * time.Second

// errPlacementTimeout is the cause of a placement's context when
// placementTimeout (placement.deadline) ran out; its error wraps it.
var errPlacementTimeout = errors.New("gave up placing the client")

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
	// deadline, if set, bounds the placement instead of placementTimeout
	// (tests).
	deadline time.Duration
}

// run places the client. It returns the assignment of the node that
// answered the first signal (its answer, or an error it replied), with
// the reply; an assignment with no Node when no node answered. When
// placementTimeout runs out first it returns an error wrapping
// errPlacementTimeout that names the attempts and the nodes excluded.
func (p placement) run(ctx context.Context, first Signal) (Assignment, Reply, error) {
	req := p.req
	req.Exclude = append([]string(nil), req.Exclude...)
	// full are the nodes excluded because they refused the client for
	// their load (errNodeFull), fullErr the last such refusal; req.Full
	// names the node of the last attempt when it refused the client for
	// its clients (not errNodeBusy)
	full := append([]string(nil), req.Full...)
	var fullErr error
	limit := placementTimeout
	if p.deadline > 0 {
		limit = p.deadline
	}
	pctx, cancel := context.WithTimeoutCause(ctx, limit, errPlacementTimeout)
	defer cancel()
	var tried []string // the nodes the client was placed on, in order
	placed := p.placed
	p.placed = func(a Assignment) {
		tried = append(tried, a.Node)
		if placed != nil {
			placed(a)
		}
	}
	timedOut := func(attempts int, err error) error {
		nodes := "none"
		if len(tried) > 0 {
			nodes = fmt.Sprint(tried)
		}
		excluded := "none"
		if len(req.Exclude) > 0 {
			excluded = fmt.Sprint(req.Exclude)
		}
		return fmt.Errorf("sfu: join %s/%s: %w after %v: %d attempts, placed on nodes %s, excluded %s as they did not answer or were full; last error: %w",
			req.Session, req.Client, errPlacementTimeout, limit, attempts, nodes, excluded, err)
	}
	for attempt := 1; ; attempt++ {
		a, rep, failed, err := p.once(pctx, req, first)
		// a refusal is named to the manager once: a later attempt may
		// come after the node's next heartbeat, which has its count
		req.Full = nil
		if failed != "" {
			req.Exclude = append(req.Exclude, failed)
			if errors.Is(err, errNodeFull) {
				full, fullErr = append(full, failed), err
				if !errors.Is(err, errNodeBusy) {
					// its clients, not its signal slots: the
					// manager's count was low
					req.Full = []string{failed}
				}
			}
		}
		if err != nil && a.Node == "" && failed == "" && len(full) > 0 && !errors.Is(err, ErrBusy) {
			// The manager has no node but those excluded, some only for
			// their load: they were busy, not failed. Ask them again
			// after the backoff, and tell the client of the refusal, not
			// that no node is available.
			req.Exclude = slices.DeleteFunc(req.Exclude, func(id string) bool { return slices.Contains(full, id) })
			full = nil
			err = fmt.Errorf("%w; no other node took the client (%v)", fullErr, err)
		}
		if err != nil && a.Node == "" && ctx.Err() == nil && context.Cause(pctx) == errPlacementTimeout {
			return Assignment{}, Reply{}, timedOut(attempt, err)
		}
		retry := failed != "" || errors.Is(err, ErrBusy) || errors.Is(err, errNodeFull)
		if err == nil || !retry || ctx.Err() != nil {
			return a, rep, err
		}
		if attempt == joinAttempts {
			return Assignment{}, Reply{}, fmt.Errorf("%w (%d attempts)", err, attempt)
		}
		d := joinBackoff.delay(attempt)
		p.log.Info(p.retryMsg, "session", req.Session, "client", req.Client, "node", failed,
			"attempt", attempt, "retry_in", d, "exclude", req.Exclude, "full", full, "err", err)
		if werr := wait(pctx, d); werr != nil {
			if ctx.Err() == nil {
				return Assignment{}, Reply{}, timedOut(attempt, err)
			}
			return Assignment{}, Reply{}, fmt.Errorf("%w; then %w", err, werr)
		}
	}
}

// once asks the manager for a node, not one of req.Exclude, and sends it
// s. A node that does not answer (no responders, or no answer within the
// timeout or before the placement's deadline) is returned as failed, after
// a leave for the client was sent to it: one that hangs, or is only slow,
// may have registered the client, and would refuse its next offer
// ("already connected") and keep a peer nobody uses.
func (p placement) once(ctx context.Context, req JoinRequest, s Signal) (a Assignment, rep Reply, failed string, err error) {
	jctx, jcancel := context.WithTimeout(ctx, joinRequestTimeout)
	a, err = RequestJoin(jctx, p.nc, req)
	jcancel()
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
	// a context that the caller ended is not the node's failure; the
	// placement's deadline is: the node did not answer in the time left
	gaveUp := ctx.Err() != nil && context.Cause(ctx) != errPlacementTimeout
	if !gaveUp && errors.Is(err, errNodeFull) {
		// refused for its load, so it took nothing: no leave; another
		// node may have room
		return Assignment{}, Reply{}, a.Node, err
	}
	if gaveUp || !nodeGone(err) {
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
		return rep, replyError(s.Op, rep)
	}
	return rep, nil
}
