package sfu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
)

// recvOffer is an offer (not gathered) of a PeerConnection with n receive
// video slots.
func recvOffer(t *testing.T, n int) string {
	t.Helper()
	pc := newBrowserLikePC(t)
	defer pc.Close()
	for range n {
		if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			t.Fatal(err)
		}
	}
	off, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	return off.SDP
}

// sendOffer is an offer (not gathered) of a PeerConnection that publishes
// n video tracks.
func sendOffer(t *testing.T, n int) string {
	t.Helper()
	pc := newBrowserLikePC(t)
	defer pc.Close()
	for range n {
		if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			t.Fatal(err)
		}
	}
	off, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	return off.SDP
}

// TestOfferMediaSectionsBounded: an offer with more than MaxMediaSections
// m-lines, or that publishes more than MaxPublishedTracks, is refused,
// with an error that gives their number and the bound, and leaves no peer
// on the node; one at the bounds is answered.
// It fails if any number is taken: a 1 MB offer of 7000 receive-only
// m-lines would cost the node a second of CPU, 7000 down tracks and their
// RTCP readers for as long as the connection lived, and its 2.8 MB answer
// could not go back over the bus, so the client would time out, be sent a
// leave and try the next node, which would take the same load.
func TestOfferMediaSectionsBounded(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	for _, tc := range []struct {
		name    string
		offer   string
		wantErr string
	}{
		{"over", recvOffer(t, MaxMediaSections+1), "m-lines"},
		{"at the bound", recvOffer(t, MaxMediaSections), ""},
		// each track published has its own 1.5 MB retransmission buffer
		{"publishes too many", sendOffer(t, MaxPublishedTracks+1), "publishes"},
		{"publishes at the bound", sendOffer(t, MaxPublishedTracks), ""},
		{"not an SDP", "v=0\r\nthis is no SDP", "not an SDP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: "many", SDP: tc.offer})
			defer n.Signal(Signal{Op: "leave", Session: "s1", Client: "many"})
			if tc.wantErr == "" {
				if rep.Op != "answer" {
					t.Fatalf("%s: %s %s, want an answer", tc.name, rep.Op, rep.Error)
				}
				return
			}
			if rep.Op != "error" || !strings.Contains(rep.Error, tc.wantErr) {
				t.Fatalf("reply %s %q, want an error about %s", rep.Op, rep.Error, tc.wantErr)
			}
			t.Logf("error: %s", rep.Error)
			if hasPeer(n, "s1/many") {
				t.Fatal("the refused client has a peer on the node")
			}
		})
	}
	// the client can join once it offers fewer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "many"), Session: "s1", Client: "many", Site: "a", ICEAddresses: loopback, VideoSlots: 2})
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
}
