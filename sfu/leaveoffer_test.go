package sfu

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLeaveDuringOfferTakesEffect: a client's leave that comes over the bus
// while the node handles its offer (before the node registered its peer,
// or after it made the connection and before it answered) takes effect:
// the offer is answered with an error saying the client left, and no peer
// stays. It fails if a leave before the registration, finding no peer, is
// lost (the peer, made after it, stays until liveness removes it), or if
// one after the connection was made lets the offer be answered.
func TestLeaveDuringOfferTakesEffect(t *testing.T) {
	for _, stage := range []string{stageRegister, stageAnswer} {
		t.Run(stage, func(t *testing.T) {
			c := startCluster(t, "a")
			n := c.nodes[0]
			nc := c.conn(t, "client")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const key = "s1/u1"
			at, release := make(chan struct{}), make(chan struct{})
			n.joinStage = func(k, s string) {
				if k == key && s == stage {
					close(at)
					<-release
				}
			}
			type result struct {
				rep Reply
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := requestSignal(ctx, nc, subjectSignal(n.ID()), Signal{Op: "offer", Session: "s1", Client: "u1", SDP: recvOffer(t, 1)})
				done <- result{rep, err}
			}()
			select {
			case <-at:
			case <-ctx.Done():
				t.Fatal("the offer did not reach join's stage " + stage)
			}
			if rep, err := requestSignal(ctx, nc, subjectSignal(n.ID()), Signal{Op: "leave", Session: "s1", Client: "u1"}); err != nil || rep.Op != "ok" {
				t.Fatalf("leave during the offer: %+v, %v; want ok", rep, err)
			}
			close(release)
			r := <-done
			if r.err == nil || !strings.Contains(r.rep.Error, "left while its offer was handled") || !strings.Contains(r.rep.Error, key) {
				t.Fatalf("offer whose client left meanwhile: reply %s %q, err %v; want an error naming the client and saying it left", r.rep.Op, r.rep.Error, r.err)
			}
			t.Logf("error: %s", r.rep.Error)
			waitFor(t, "no peer for the client that left", func() bool { return !hasPeer(n, key) })
			n.mu.Lock()
			pending := len(n.offers)
			n.mu.Unlock()
			if pending != 0 {
				t.Fatalf("%d offers still noted in flight after the answer", pending)
			}
			// the client may come back with a new offer
			n.joinStage = nil
			if rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: "u1", SDP: recvOffer(t, 1)}); rep.Op != "answer" {
				t.Fatalf("offer after the leave: %s %s, want an answer", rep.Op, rep.Error)
			}
			n.Signal(Signal{Op: "leave", Session: "s1", Client: "u1"})
		})
	}
}

// TestLeaveAfterFailedStartKeepsError: when making a client's connection
// fails (here its offer has no DTLS fingerprint) and a leave of the client
// came meanwhile, the offer's error says both: that the client left, and
// why its connection failed, not only that the client left.
func TestLeaveAfterFailedStartKeepsError(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	nc := c.conn(t, "client")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "s1/u1"
	n.joinStage = func(k, s string) {
		if k == key && s == stageStartFailed {
			if rep, err := requestSignal(ctx, nc, subjectSignal(n.ID()), Signal{Op: "leave", Session: "s1", Client: "u1"}); err != nil || rep.Op != "ok" {
				t.Errorf("leave during the offer: %+v, %v; want ok", rep, err)
			}
		}
	}
	var lines []string
	for _, l := range strings.Split(recvOffer(t, 1), "\r\n") {
		if !strings.HasPrefix(l, "a=fingerprint:") {
			lines = append(lines, l)
		}
	}
	rep, err := requestSignal(ctx, nc, subjectSignal(n.ID()), Signal{Op: "offer", Session: "s1", Client: "u1", SDP: strings.Join(lines, "\r\n")})
	if err == nil || !strings.Contains(rep.Error, "left while its offer was handled") || !strings.Contains(rep.Error, "fingerprint") {
		t.Fatalf("offer without a fingerprint whose client left meanwhile: %s %q; want an error saying the client left and why its connection failed", rep.Op, rep.Error)
	}
	t.Logf("error: %s", rep.Error)
	waitFor(t, "no peer for the client that left", func() bool { return !hasPeer(n, key) })
}
