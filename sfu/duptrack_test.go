package sfu

import (
	"strings"
	"testing"

	"github.com/pion/webrtc/v4"
)

// tracksOffer is an offer (not gathered) of a PeerConnection that
// publishes a video track with each of ids, in stream "s".
func tracksOffer(t *testing.T, ids ...string) string {
	t.Helper()
	pc := newBrowserLikePC(t)
	defer pc.Close()
	for _, id := range ids {
		tr, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, id, "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.AddTransceiverFromTrack(tr, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			t.Fatal(err)
		}
	}
	off, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	return off.SDP
}

// TestDuplicateTrackIDRefused: an offer that publishes two tracks with one
// track id is refused with an error naming the id; distinct ids are taken.
// It fails if both are taken: their sources would have one key
// (session/client/track), so the second to arrive would silently replace
// the first on the node, in the directory and on every node it was
// relayed to.
func TestDuplicateTrackIDRefused(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	for _, tc := range []struct {
		name    string
		ids     []string
		wantErr string
	}{
		{"same id twice", []string{"cam", "cam"}, `track id "cam"`},
		{"same id among others", []string{"a", "cam", "b", "cam"}, `track id "cam"`},
		{"distinct ids", []string{"cam", "screen"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: "dup", SDP: tracksOffer(t, tc.ids...)})
			defer n.Signal(Signal{Op: "leave", Session: "s1", Client: "dup"})
			if tc.wantErr == "" {
				if rep.Op != "answer" {
					t.Fatalf("%s %s, want an answer", rep.Op, rep.Error)
				}
				return
			}
			if rep.Op != "error" || !strings.Contains(rep.Error, tc.wantErr) || !strings.Contains(rep.Error, "s1/dup") {
				t.Fatalf("reply %s %q, want an error naming the client and the %s", rep.Op, rep.Error, tc.wantErr)
			}
			t.Logf("error: %s", rep.Error)
			if hasPeer(n, "s1/dup") {
				t.Fatal("the refused client has a peer on the node")
			}
		})
	}
}
