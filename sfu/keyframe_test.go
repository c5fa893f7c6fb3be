package sfu

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

// plisAt is a publisher whose sender's RTCP the test reads: it counts the
// keyframe requests (PLI, FIR) the node sends it.
type plisAt struct {
	pc    *webrtc.PeerConnection
	track *webrtc.TrackLocalStaticRTP
	plis  atomic.Int64
}

// dialPLIPublisher joins client on site a of c with one VP8 track, "cam",
// as a raw pion PeerConnection that counts the node's keyframe requests.
func dialPLIPublisher(t *testing.T, ctx context.Context, c *cluster, client string) *plisAt {
	t.Helper()
	pc := newBrowserLikePC(t)
	t.Cleanup(func() { _ = pc.Close() })
	tr, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, "cam", client)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pc.AddTransceiverFromTrack(tr, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
	if err != nil {
		t.Fatal(err)
	}
	p := &plisAt{pc: pc, track: tr}
	go func() {
		for {
			pkts, _, err := tx.Sender().ReadRTCP()
			if err != nil {
				return
			}
			for _, pkt := range pkts {
				switch pkt.(type) {
				case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
					p.plis.Add(1)
				}
			}
		}
	}()
	connected := make(chan struct{})
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateConnected {
			select {
			case <-connected:
			default:
				close(connected)
			}
		}
	})
	nc := c.conn(t, client)
	a, err := RequestJoin(ctx, nc, JoinRequest{Session: "s1", Client: client, Site: "a"})
	if err != nil {
		t.Fatal(err)
	}
	sdp, err := Gathered(pc, true)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := requestSignal(ctx, nc, a.Signal, Signal{Op: "offer", Session: "s1", Client: client, SDP: sdp})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: rep.SDP}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("publisher not connected")
	}
	return p
}

// TestKeyframeRequestsThrottled: a subscriber that sends a storm of PLIs
// (a hostile or broken client; a decoder that fails on every frame) makes
// the node ask the publisher for a keyframe at most once per
// keyframeInterval, and still at least once after the storm; locally and
// through a relay link. It fails if every PLI of every subscriber goes on
// to the publisher: 200 PLIs in a second would make it send 200
// keyframes, and its bitrate would rise for every subscriber of the track.
func TestKeyframeRequestsThrottled(t *testing.T) {
	for _, tc := range []struct {
		name, site string
	}{{"local", "a"}, {"relayed", "b"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, "a", "b")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			pub := dialPLIPublisher(t, ctx, c, "alice")
			go publishVideo(ctx, pub.track, 1500)
			var ssrc atomic.Uint32
			sub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "sub"), Session: "s1", Client: "bob", Site: tc.site, ICEAddresses: loopback,
				VideoSlots: 1, OnTrack: func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
					ssrc.Store(uint32(tr.SSRC()))
					go func() {
						for {
							if _, _, err := tr.ReadRTP(); err != nil {
								return
							}
						}
					}()
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			waitFor(t, "bob to receive alice's video", func() bool { return ssrc.Load() != 0 })
			waitFor(t, "the keyframe request of bob's slot at alice", func() bool { return pub.plis.Load() > 0 })
			before := pub.plis.Load()
			start := time.Now()
			const storm = 200
			for range storm {
				if err := sub.PC.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: ssrc.Load()}}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			// one request after the storm's last PLI reaches alice
			waitFor(t, "a keyframe request at alice after the storm", func() bool { return pub.plis.Load() > before })
			// and none of those held back comes later: a second of grace
			// (a slow machine only lets fewer through)
			time.Sleep(time.Second)
			got := pub.plis.Load() - before
			// one at the storm's start, one per interval after it; a relay
			// throttles at both nodes, each with a request of its own
			limit := int64(time.Since(start)/keyframeInterval) + 3
			if got > limit {
				t.Fatalf("alice got %d keyframe requests for bob's %d PLIs in %v, want at most %d (one per %v)",
					got, storm, time.Since(start).Round(time.Millisecond), limit, keyframeInterval)
			}
			t.Logf("alice got %d keyframe requests for bob's %d PLIs in %v", got, storm, time.Since(start).Round(time.Millisecond))
		})
	}
}
