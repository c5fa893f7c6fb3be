package sfu

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestWebSocketSilentClientLeaves: a browser's connection that goes
// silent (a laptop that sleeps, a network that drops without a FIN: its
// socket neither answers the node's pings nor sends) is closed by the
// node once it has been silent for wsIdle, and the client leaves. Before,
// the node never pinged nor timed a read: with nothing to send, such a
// socket was never found dead, and its handler, its bus subscription and
// the socket stayed for good (the peer itself went when ICE failed).
func TestWebSocketSilentClientLeaves(t *testing.T) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := c.nodes[0]
	n.wsPingEvery, n.wsIdle = 50*time.Millisecond, 300*time.Millisecond
	returned := make(chan struct{})
	ws := dialSignalling(t, ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		n.Handler().ServeHTTP(w, r)
	}), "a")
	// the client's side answers no ping (gorilla answers them by default)
	pings := 0
	ws.SetPingHandler(func(string) error { pings++; return nil })
	if err := ws.WriteJSON(Signal{Op: "offer", Session: "s1", Client: "w1", SDP: recvOffer(t, 1)}); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	var err error
	for err == nil {
		var rep Reply
		err = ws.ReadJSON(&rep)
		if err == nil && rep.Op == "error" {
			t.Fatalf("offer: %s", rep.Error)
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the node did not close a socket that answered none of its %d pings in 20 s", pings)
	}
	if pings == 0 {
		t.Errorf("the socket closed (%v) without the node pinging it", err)
	}
	select {
	case <-returned:
	case <-ctx.Done():
		t.Fatal("the handler did not return after closing the socket")
	}
	waitFor(t, "the silent client to leave", func() bool { return !hasPeer(n, "s1/w1") })
}
