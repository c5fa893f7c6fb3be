package sfu

import (
	"context"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/xrealm/xrealm/volumetric"
)

func TestHopHists(t *testing.T) {
	capture := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	tests := []struct {
		relayed          bool
		arrived, handled time.Duration
	}{
		{false, 2 * ms, 3 * ms},
		{true, 30 * ms, 31 * ms},
		{true, 50 * ms, 60 * ms},
	}
	h := newHopHists()
	for _, tc := range tests {
		h.record(tc.relayed, capture, capture.Add(tc.arrived), capture.Add(tc.handled))
	}
	got := h.take()
	near := func(v, want float64) bool { return v >= want && v <= want*1.01 } // 2 significant digits
	if got.InLocal.N != 1 || !near(got.InLocal.Max, 2) || got.InRelay.N != 2 || !near(got.InRelay.Max, 50) || !near(got.Out.Max, 60) || !near(got.Fanout.Max, 10) {
		t.Fatalf("take = %+v", got)
	}
	if again := h.take(); again.Out.N != 0 || again.InRelay.N != 0 {
		t.Fatalf("take after take = %+v, want empty", again)
	}
	var nilHops *hopHists
	nilHops.record(false, capture, capture, capture) // a source without a node
}

func TestCaptureTime(t *testing.T) {
	b := make([]byte, volumetric.HeaderSize+4)
	volumetric.Header{Client: 1, Frame: 2, Count: 1, CaptureUs: 1_700_000_000_000_000}.Marshal(b)
	tests := []struct {
		name    string
		payload []byte
		ok      bool
	}{
		{"header", b, true},
		{"short", b[:5], false},
		{"not a header", make([]byte, 30), false},
	}
	for _, tc := range tests {
		c, ok := captureTime(tc.payload)
		if ok != tc.ok || (ok && c.UnixMicro() != 1_700_000_000_000_000) {
			t.Errorf("%s: captureTime = %v, %v", tc.name, c, ok)
		}
	}
}

func TestLagProbe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := StartLagProbe(ctx, time.Millisecond)
	// The probe's goroutine may not run for a while on a loaded machine:
	// wait for its first samples rather than 30 ms.
	var q Quantiles
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(30 * time.Millisecond)
		if q = p.Take(); q.N > 0 {
			break
		}
	}
	if q.N == 0 || q.Max < 0 {
		t.Fatalf("Take = %+v, want samples", q)
	}
}

// TestRelayedHopAges: node 2 records the ages of the packets of a
// point-cloud track relayed from node 1 when its publisher sends it over
// RTP, and records none when the publisher sends it on its data channel
// (a browser: its capture times are its own clock), nor does node 1.
func TestRelayedHopAges(t *testing.T) {
	for _, tc := range []struct {
		name        string
		dataChannel bool
		// publish publishes description 0 (and, over the data channel, 1
		// and 2) as client alice of session s9 on node 1 until ctx ends.
		publish func(t *testing.T, ctx context.Context, c *cluster)
	}{
		{"RTP", false, func(t *testing.T, ctx context.Context, c *cluster) {
			cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "alice"), Session: "s9", Client: "alice", Site: "a", ICEAddresses: loopback,
				Publish: []PublishTrack{{ID: "pc0", Mime: MimeTypePointCloud}}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			go func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for frame := uint32(1); ; frame++ {
					frags, _ := volumetric.Packetize(volumetric.Header{Client: 7, Frame: frame, Description: 0, CaptureUs: uint64(time.Now().UnixMicro())}, make([]byte, 500), 1000)
					_ = cl.Tracks["pc0"].WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(frame), Timestamp: frame * 3000, Marker: true}, Payload: frags[0]})
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
				}
			}()
		}},
		{"data channel", true, func(t *testing.T, ctx context.Context, c *cluster) {
			alice := dialBrowserLike(t, ctx, c.conn(t, "alice"), "s9", "alice", "a", 0, pcChannelInit())
			select {
			case <-alice.open:
			case <-ctx.Done():
				t.Fatal("alice's data channel did not open")
			}
			go alice.publishOverDC(ctx, 500)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, "a", "b")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			tc.publish(t, ctx, c)
			bob := dialBrowserLike(t, ctx, c.conn(t, "bob"), "s9", "bob", "b", 3, pcChannelInit())
			waitFor(t, "bob on node 2 to receive alice's description 0", func() bool { return bob.count("alice", 0) >= 5 })
			var tr TrackInfo
			for _, ti := range c.nodes[1].sessionTracks("s9") {
				if ti.Client == "alice" && ti.Track == "pc0" {
					tr = ti
				}
			}
			if tr.DataChannel != tc.dataChannel {
				t.Errorf("node 2's directory entry %+v: datachannel %v, want %v", tr, tr.DataChannel, tc.dataChannel)
			}
			relayed, origin := c.nodes[1].HopStats(), c.nodes[0].HopStats()
			if tc.dataChannel {
				if relayed.InRelay.N != 0 || relayed.Out.N != 0 || origin.InLocal.N != 0 || origin.Out.N != 0 {
					t.Errorf("hop ages of a data channel's track recorded: node 2 %+v, node 1 %+v", relayed, origin)
				}
				return
			}
			if relayed.InRelay.N == 0 || origin.InLocal.N == 0 {
				t.Errorf("hop ages of an RTP track not recorded: node 2 %+v, node 1 %+v", relayed, origin)
			}
		})
	}
}
