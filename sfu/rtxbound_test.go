package sfu

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/sfu/downtrack"
)

// TestNACKRetransmitsBounded: bob receives alice's video and NACKs the
// last 1024 packets he received (all in the node's buffer), ten times over. The node retransmits to him at
// most downtrack.RetransmitBytesPerSecond a second (and a second's worth
// at once), and counts the NACKs it left unanswered, on its metrics too.
// It fails if the node answers every NACK of a packet in the buffer: a
// subscriber that NACKs everything would make it resend without bound.
func TestNACKRetransmitsBounded(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := dialAVPublisher(ctx, t, c)
	go publishVideo(ctx, pub.Tracks["cam"], 12000) // 12 packets of at most 1000 bytes a frame, 30 frames a second
	var ssrc, last atomic.Uint32                   // the video's SSRC and newest sequence number at bob
	sub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "sub"), Session: "s1", Client: "bob", Site: "a", ICEAddresses: loopback,
		VideoSlots: 1, OnTrack: func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
			ssrc.Store(uint32(tr.SSRC()))
			go func() {
				for {
					pkt, _, err := tr.ReadRTP()
					if err != nil {
						return
					}
					last.Store(uint32(pkt.SequenceNumber))
				}
			}()
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	p := n.peerOf("s1", "bob")
	var dt *downtrack.DownTrack
	waitFor(t, "bob to receive alice's video", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, s := range p.slots {
			if s.src != nil && s.src.info.Track == "cam" {
				dt = s.dt
			}
		}
		return ssrc.Load() != 0 && dt != nil
	})
	// the buffer full (1024 packets of 1012 bytes): ten storms ask for
	// ten times the bound
	waitFor(t, "1100 video packets sent to bob", func() bool { return dt.Stats().Packets >= 1100 })
	before := dt.Stats()
	start := time.Now()
	// each storm NACKs the 1024 packets bob received last, all in the
	// buffer: 1 MB to resend
	const storms, window = 10, 1024
	for range storms {
		seqs := make([]uint16, window)
		newest := uint16(last.Load())
		for i := range seqs {
			seqs[i] = newest - window + 1 + uint16(i)
		}
		if err := sub.PC.WriteRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{MediaSSRC: ssrc.Load(), Nacks: rtcp.NackPairsFromSequenceNumbers(seqs)}}); err != nil {
			t.Fatal(err)
		}
	}
	// a NACK packet may be lost on the way; half of them ask for five
	// times the bound
	waitForExplained(t, "the node to take half of bob's NACKs", func() bool { return dt.Stats().NACKs-before.NACKs >= storms*window/2 },
		func() string { return fmt.Sprint("NACKs taken: ", dt.Stats().NACKs-before.NACKs) })
	elapsed := time.Since(start)
	st := dt.Stats()
	rtx, limited := st.Retransmits-before.Retransmits, st.LimitedNACKs-before.LimitedNACKs
	// every packet of this video is 1012 bytes (1000 of payload and the
	// RTP header); a second's worth at once, and the rate for the time
	// the storms took
	bound := float64(downtrack.RetransmitBytesPerSecond) * (1 + elapsed.Seconds())
	t.Logf("%d NACKs in %v: retransmitted %d, limited %d, stale %d, missed %d", st.NACKs-before.NACKs, elapsed.Round(time.Millisecond),
		rtx, limited, st.StaleNACKs-before.StaleNACKs, st.RetransmitMisses-before.RetransmitMisses)
	if float64(rtx)*1012 > bound {
		t.Fatalf("bob's NACK storms made the node retransmit %d packets (%d bytes) in %v, want at most %.0f bytes (%d a second, a second's worth at once)",
			rtx, rtx*1012, elapsed, bound, downtrack.RetransmitBytesPerSecond)
	}
	if limited == 0 {
		t.Fatal("no NACK counted as limited")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{n: n})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, f := range fams {
		if f.GetName() != "xrealm_sfu_subscriber_nacks_ignored_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "limited" {
					got += m.GetCounter().GetValue()
				}
			}
		}
	}
	if got < float64(limited) {
		t.Fatalf("xrealm_sfu_subscriber_nacks_ignored_total{reason=\"limited\"} = %v, want at least %d", got, limited)
	}
}
