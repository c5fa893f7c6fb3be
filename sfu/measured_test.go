package sfu

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/xrealm/xrealm/sfu/allocator"
	"github.com/xrealm/xrealm/sfu/bwe"
)

// TestRemoteVideoMeasuredRate: a subscriber on node 2 whose estimate
// (pinned at 1.2 Mbit/s) fits the measured rate of a video published on
// node 1 (about 370 kbit/s) but not the nominal rate of a video
// (1.5 Mbit/s) gets that video, with probes off: node 2 budgets it at the
// rate node 1 measured (TrackInfo.Rate). It fails if node 2 budgets a
// track not relayed to it at its nominal rate: the video is then paused
// from the start (and after each pause, the relayed source and its
// measurement being gone) and comes back only through a probe.
func TestRemoteVideoMeasuredRate(t *testing.T) {
	const estimate = 1_200_000
	c := startClusterWith(t, func(_ int, cfg *Config) {
		cfg.Estimator = bwe.NewFactory(bwe.Config{Min: estimate, Max: estimate, Initial: estimate})
		cfg.Probe = allocator.ProbeConfig{Wait: time.Hour} // only the allocation may forward the video
	}, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := dialAVPublisher(ctx, t, c)
	if pub.Node != "1" {
		t.Fatalf("publisher at site a assigned to node %s, want 1", pub.Node)
	}
	publishAudio(ctx, pub)
	go publishVideo(ctx, pub.Tracks["cam"], 1500)
	rcvd := &kindBytes{}
	sub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "sub"), Session: "s1", Client: "bob", Site: "b", ICEAddresses: loopback,
		AudioSlots: 1, VideoSlots: 1, OnTrack: rcvd.onTrack})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	n := c.nodes[1]
	if sub.Node != n.ID() {
		t.Fatalf("subscriber at site b assigned to node %s, want %s", sub.Node, n.ID())
	}
	p := n.peerOf("s1", "bob")
	waitForExplained(t, "bob's slots to carry alice's audio and video", func() bool {
		return slices.Equal(p.carriedKeys(), []string{"s1/alice/cam", "s1/alice/mic"})
	}, func() string { return p.explain(n) })
	waitForExplained(t, "bob to receive the video", func() bool { _, v := rcvd.peek(); return v > 0 }, func() string { return p.explain(n) })
	n.mu.Lock()
	rate := n.directory["s1/alice/cam"].Rate
	n.mu.Unlock()
	if rate < 200_000 || rate > 800_000 {
		t.Errorf("node 2's directory has the video at %d bit/s, want its measured rate, about 370 kbit/s", rate)
	}
}
