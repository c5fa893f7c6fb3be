package sfu

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
)

// talker sends Opus-sized RTP packets every 20 ms until ctx ends, with
// the audio level (RFC 6464) in level when the client negotiated it.
type talker struct {
	level atomic.Uint32 // -dBov, 127 is silence
}

func (tk *talker) run(ctx context.Context, cl *Client, id string) {
	var ext uint8
	for _, tr := range cl.PC.GetTransceivers() {
		if s := tr.Sender(); s != nil && s.Track() != nil && s.Track().ID() == id {
			for _, e := range s.GetParameters().HeaderExtensions {
				if e.URI == sdp.AudioLevelURI {
					ext = uint8(e.ID)
				}
			}
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	payload := make([]byte, 80)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(i), Timestamp: uint32(i * 960)}, Payload: payload}
		if ext != 0 {
			b, _ := rtp.AudioLevelExtension{Level: uint8(tk.level.Load())}.Marshal()
			_ = p.Header.SetExtension(ext, b)
		}
		_ = cl.Tracks[id].WriteRTP(p)
	}
}

func publishAudio(ctx context.Context, cl *Client) *talker {
	tk := &talker{}
	tk.level.Store(127)
	go tk.run(ctx, cl, "mic")
	return tk
}

// audioSetup starts talkers at the given distances (metres in front of
// the listener) and a listener with two audio slots; heard returns the
// clients its slots carry, sorted.
func audioSetup(t *testing.T, ctx context.Context, c *cluster, session string, at map[string]float64) (pubs map[string]*Client, heard func() []string) {
	t.Helper()
	pubs = map[string]*Client{}
	for name, z := range at {
		cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, name), Session: session, Client: name, Site: "a", ICEAddresses: loopback,
			Publish: []PublishTrack{{ID: "mic", Mime: webrtc.MimeTypeOpus}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := cl.SetPose(ctx, Pose{Position: [3]float64{0, 1.6, -z}, Forward: [3]float64{0, 0, 1}, FOV: 1.5}); err != nil {
			t.Fatal(err)
		}
		pubs[name] = cl
	}
	var mu sync.Mutex
	carried := map[string]string{} // mid → client
	sub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "listener"), Session: session, Client: "listener", Site: "a", ICEAddresses: loopback,
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
	t.Cleanup(sub.Close)
	if err := sub.SetPose(ctx, Pose{Position: [3]float64{0, 1.6, 0}, Forward: [3]float64{0, 0, -1}, FOV: 1.5}); err != nil {
		t.Fatal(err)
	}
	return pubs, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Values(carried))
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
	pubs, heard := audioSetup(t, ctx, c, "talk", map[string]float64{"alice": 1, "bob": 5, "carol": 10})
	mute := map[string]context.CancelFunc{}
	for name, cl := range pubs {
		pctx, stop := context.WithCancel(ctx)
		mute[name] = stop
		publishAudio(pctx, cl)
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
	publishAudio(ctx, pubs["alice"])
	waitFor(t, "alice back", func() bool { return slices.Equal(heard(), []string{"alice", "carol"}) })
}

// TestSpeakersFirst: among three open microphones and two audio slots,
// one who speaks (by the RTP audio level) is heard even when farthest, and
// the nearer of the two silent ones keeps the other slot.
func TestSpeakersFirst(t *testing.T) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pubs, heard := audioSetup(t, ctx, c, "class", map[string]float64{"alice": 1, "bob": 2, "carol": 8})
	talkers := map[string]*talker{}
	for name, cl := range pubs {
		talkers[name] = publishAudio(ctx, cl)
	}
	waitFor(t, "the two nearest talkers", func() bool { return slices.Equal(heard(), []string{"alice", "bob"}) })
	talkers["carol"].level.Store(20) // -20 dBov: speech
	waitFor(t, "carol, who speaks", func() bool { return slices.Equal(heard(), []string{"alice", "carol"}) })
	if e := c.nodes[0].directoryEntry("class/carol/mic"); !e.Speaking || e.Idle {
		t.Fatalf("carol's directory entry %+v, want speaking", e)
	}
	talkers["carol"].level.Store(127) // silent again: after the hold she is not speaking
	waitFor(t, "carol not speaking", func() bool { return !c.nodes[0].directoryEntry("class/carol/mic").Speaking })
}

// TestActivityAcrossNodes: idle and speaking states reach other nodes'
// directories, and a track removed at its origin leaves them for good.
func TestActivityAcrossNodes(t *testing.T) {
	c := startCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "alice"), Session: "hall", Client: "alice", Site: "a", ICEAddresses: loopback,
		Publish: []PublishTrack{{ID: "mic", Mime: webrtc.MimeTypeOpus}}})
	if err != nil {
		t.Fatal(err)
	}
	pctx, mute := context.WithCancel(ctx)
	tk := publishAudio(pctx, cl)
	const key = "hall/alice/mic"
	far := c.nodes[1]
	waitFor(t, "the track on node 2", func() bool { _, ok := far.directoryHas(key); return ok })
	tk.level.Store(10)
	waitFor(t, "speaking on node 2", func() bool { return far.directoryEntry(key).Speaking })
	mute()
	waitFor(t, "idle, not speaking, on node 2", func() bool { e := far.directoryEntry(key); return e.Idle && !e.Speaking })
	cl.Close()
	waitFor(t, "the track gone from both nodes", func() bool {
		_, a := c.nodes[0].directoryHas(key)
		_, b := far.directoryHas(key)
		return !a && !b
	})
	// periodic announcements must not bring it back
	time.Sleep(500 * time.Millisecond)
	if _, ok := far.directoryHas(key); ok {
		t.Fatal("the removed track came back on node 2")
	}
}

func (n *Node) directoryHas(key string) (TrackInfo, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.directory[key]
	return t, ok
}

func (n *Node) directoryEntry(key string) TrackInfo {
	t, _ := n.directoryHas(key)
	return t
}
