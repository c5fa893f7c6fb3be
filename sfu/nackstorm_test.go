package sfu

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/downtrack"
)

// TestNACKStormFetchesBounded: bob, on node 2, receives alice's video
// relayed from node 1 and NACKs every sequence number there is, once.
// Node 2 asks node 1 for none that cannot be there (not sent yet, or
// further behind the newest than a buffer holds): at most a buffer's worth
// (and what was sent meanwhile).
// It fails if node 2 asks for each one missing from its buffer: 64
// thousand sequence numbers on the relay link's control channel for one
// burst of RTCP, and again every 100 ms that the subscriber repeats it, a
// control message flood on the link every relayed track of the two nodes
// shares.
func TestNACKStormFetchesBounded(t *testing.T) {
	c := startCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := dialAVPublisher(ctx, t, c)
	go publishVideo(ctx, pub.Tracks["cam"], 1500)
	var ssrc atomic.Uint32
	sub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "sub"), Session: "s1", Client: "bob", Site: "b", ICEAddresses: loopback,
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
	if sub.Node != "2" {
		t.Fatalf("bob placed on node %s, want 2", sub.Node)
	}
	waitFor(t, "bob to receive alice's video", func() bool { return ssrc.Load() != 0 })
	p := c.nodes[1].peerOf("s1", "bob")
	var dt *downtrack.DownTrack
	p.mu.Lock()
	for _, s := range p.slots {
		if s.src != nil && s.src.info.Track == "cam" {
			dt = s.dt
		}
	}
	p.mu.Unlock()
	if dt == nil {
		t.Fatal("bob's slot on node 2 carries no video")
	}
	before := dt.Stats()
	// every sequence number, in NACKs that each fit a packet
	const perPacket = 200 // pairs: 17 sequence numbers each
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	pairs := rtcp.NackPairsFromSequenceNumbers(all)
	for len(pairs) > 0 {
		k := min(perPacket, len(pairs))
		if err := sub.PC.WriteRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{MediaSSRC: ssrc.Load(), Nacks: pairs[:k]}}); err != nil {
			t.Fatal(err)
		}
		pairs = pairs[k:]
		time.Sleep(time.Millisecond) // not all in one burst of the socket's buffer
	}
	waitForExplained(t, "node 2 to take bob's NACKs", func() bool { return dt.Stats().NACKs-before.NACKs >= 1<<16 },
		func() string { st := dt.Stats(); return fmt.Sprint("NACKs taken: ", st.NACKs-before.NACKs) })
	st := dt.Stats()
	fetches := st.Fetches - before.Fetches
	// the window moves with what is sent meanwhile
	limit := 1024 + (st.Packets - before.Packets)
	if fetches > limit {
		t.Fatalf("bob's %d NACKed sequence numbers made node 2 ask node 1 for %d packets, want at most %d: a buffer's 1024 and the %d sent meanwhile",
			st.NACKs-before.NACKs, fetches, limit, st.Packets-before.Packets)
	}
	t.Logf("NACKs %d: retransmitted %d, fetched %d, missed %d, stale %d", st.NACKs-before.NACKs, st.Retransmits-before.Retransmits, fetches,
		st.RetransmitMisses-before.RetransmitMisses, st.StaleNACKs-before.StaleNACKs)
}
