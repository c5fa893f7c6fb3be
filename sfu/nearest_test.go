package sfu

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

// publishAudio sends Opus-sized RTP packets every 20 ms until ctx ends.
func publishAudio(ctx context.Context, tr *webrtc.TrackLocalStaticRTP) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	payload := make([]byte, 80)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_ = tr.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(i), Timestamp: uint32(i * 960)}, Payload: payload})
	}
}

// TestNearestAudio: a subscriber with two audio slots among three
// talkers hears the two nearest, and when a third comes much nearer it
// takes the slot of the farther one. A talker who stops sending (a muted
// microphone) gives up the slot, and takes it back when she sends again.
// Nothing is renegotiated.
func TestNearestAudio(t *testing.T) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	talkers := map[string]float64{"alice": 1, "bob": 5, "carol": 10} // metres in front of the listener
	pubs := map[string]*Client{}
	mute := map[string]context.CancelFunc{}
	for name, z := range talkers {
		cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, name), Session: "talk", Client: name, Site: "a", ICEAddresses: loopback,
			Publish: []PublishTrack{{ID: "mic", Mime: webrtc.MimeTypeOpus}}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.SetPose(ctx, Pose{Position: [3]float64{0, 1.6, -z}, Forward: [3]float64{0, 0, 1}, FOV: 1.5}); err != nil {
			t.Fatal(err)
		}
		pubs[name] = cl
		pctx, stop := context.WithCancel(ctx)
		mute[name] = stop
		go publishAudio(pctx, cl.Tracks["mic"])
	}
	var mu sync.Mutex
	carried := map[string]string{} // mid → client
	sub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "listener"), Session: "talk", Client: "listener", Site: "a", ICEAddresses: loopback,
		AudioSlots: 2, OnEvent: func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range e.Slots {
				if s.Track != nil {
					carried[s.Mid] = s.Track.Client
				} else {
					delete(carried, s.Mid)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SetPose(ctx, Pose{Position: [3]float64{0, 1.6, 0}, Forward: [3]float64{0, 0, -1}, FOV: 1.5}); err != nil {
		t.Fatal(err)
	}
	heard := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Values(carried))
	}
	waitFor(t, "the two nearest talkers", func() bool { return slices.Equal(heard(), []string{"alice", "bob"}) })
	// carol comes to 0.5 m: she takes bob's slot; alice (1 m, held) stays
	if err := pubs["carol"].SetPose(ctx, Pose{Position: [3]float64{0, 1.6, -0.5}, Forward: [3]float64{0, 0, 1}, FOV: 1.5}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "carol instead of bob", func() bool { return slices.Equal(heard(), []string{"alice", "carol"}) })
	// alice mutes: bob has her slot once her track is idle
	mute["alice"]()
	waitFor(t, "bob instead of the muted alice", func() bool { return slices.Equal(heard(), []string{"bob", "carol"}) })
	if !c.nodes[0].directoryEntry("talk/alice/mic").Idle {
		t.Fatal("alice's track is not idle in the directory")
	}
	// and speaks again: 1 m beats bob's 5 m even with his hold
	go publishAudio(ctx, pubs["alice"].Tracks["mic"])
	waitFor(t, "alice back", func() bool { return slices.Equal(heard(), []string{"alice", "carol"}) })
}

func (n *Node) directoryEntry(key string) TrackInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.directory[key]
}
