package sfu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/volumetric"
)

// publishOverDC sends synthetic encoded descriptions of size×(d+1) bytes
// on b's point-cloud channel, as a browser does (pcpublish.go), until ctx
// ends.
func (b *browserLike) publishOverDC(ctx context.Context, size int) {
	rng := rand.New(rand.NewPCG(1, 2))
	var seq [volumetric.Descriptions]uint16
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for frame := uint32(0); ; frame++ {
		for d := 0; d < volumetric.Descriptions; d++ {
			data := make([]byte, size*(d+1))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			frags, _ := volumetric.Packetize(volumetric.Header{Client: 7, Frame: frame, Description: uint8(d), CaptureUs: uint64(time.Now().UnixMicro())}, data, MaxPublishMessage-PointCloudPrefix)
			for i, f := range frags {
				msg := append([]byte{byte(d), 0, byte(seq[d] >> 8), byte(seq[d])}, f...)
				if i == len(frags)-1 {
					msg[1] = 1
				}
				seq[d]++
				_ = b.dc.Send(msg)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// TestPointCloudPublishedOverDataChannel: a browser-like client on node 1
// publishes three descriptions on its data channel (no point-cloud RTP
// codec, no receive slots). Node 1 announces them as its tracks pc0-pc2,
// and a browser-like subscriber on node 2 receives complete descriptions
// of all three, relayed like RTP. Malformed messages are dropped and
// counted; when the publisher stops, the subscriber's slots are freed, and
// when it leaves, its tracks are gone.
func TestPointCloudPublishedOverDataChannel(t *testing.T) {
	c := startCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dialBrowserLike(t, ctx, c.conn(t, "alice"), "s5", "alice", "a", 0, pcChannelInit())
	select {
	case <-alice.open:
	case <-ctx.Done():
		t.Fatal("alice's data channel did not open")
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go alice.publishOverDC(pctx, 2500)

	waitFor(t, "node 1 to announce alice's three descriptions", func() bool {
		n := 0
		for _, tr := range c.nodes[0].sessionTracks("s5") {
			if tr.Client == "alice" && tr.PointCloud() && tr.Description() >= 0 && tr.Node == c.nodes[0].ID() {
				n++
			}
		}
		return n == volumetric.Descriptions
	})

	bob := dialBrowserLike(t, ctx, c.conn(t, "bob"), "s5", "bob", "b", 3, pcChannelInit())
	for d := 0; d < volumetric.Descriptions; d++ {
		waitFor(t, fmt.Sprintf("bob to receive description %d", d), func() bool { return bob.count("alice", d) >= 10 })
	}

	// malformed messages: dropped and counted, the publication goes on
	header := make([]byte, volumetric.HeaderSize)
	volumetric.Header{Description: 1, Count: 1}.Marshal(header)
	bad := [][]byte{
		{0, 1},                                // shorter than the prefix
		append([]byte{3, 1, 0, 0}, header...), // description 3
		append([]byte{0, 1, 0, 0}, header...), // the header says description 1
		append([]byte{0, 1, 0, 0}, make([]byte, MaxPublishMessage)...), // too large
		{2, 1, 0, 0, 9, 9, 9}, // no fragment header
	}
	for _, m := range bad {
		if err := alice.dc.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := alice.dc.SendText("hello"); err != nil {
		t.Fatal(err)
	}
	counter := func(name string) float64 { return clientCounter(t, c.nodes[0], name, "s5/alice") }
	waitFor(t, "the malformed messages to be counted", func() bool {
		return counter("xrealm_sfu_publisher_datachannel_dropped_total") == float64(len(bad)+1)
	})
	if n := counter("xrealm_sfu_publisher_datachannel_messages_total"); n <= 0 {
		t.Errorf("forwarded messages of s5/alice: %v", n)
	}
	before := bob.count("alice", 2)
	waitFor(t, "bob to keep receiving", func() bool { return bob.count("alice", 2) >= before+5 })

	// alice stops publishing but stays: her tracks go idle and bob's
	// slots are freed
	stop()
	waitFor(t, "bob's slots to be freed once alice's tracks are idle", func() bool {
		bob.mu.Lock()
		defer bob.mu.Unlock()
		for _, tr := range bob.slots {
			if tr != nil && tr.Client == "alice" {
				return false
			}
		}
		return true
	})
	alice.close()
	waitFor(t, "alice's tracks to be gone from both nodes", func() bool {
		for _, n := range c.nodes {
			for _, tr := range n.sessionTracks("s5") {
				if tr.Client == "alice" {
					return false
				}
			}
		}
		return true
	})
}

// clientCounter returns the value of n's counter name for client
// ("session/client"), -1 when it has none.
func clientCounter(t *testing.T, n *Node, name, client string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&collector{n: n})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "client" && l.GetValue() == client {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

func TestPublishedPacket(t *testing.T) {
	frag := func(desc uint8, n int) []byte {
		f, _ := volumetric.Packetize(volumetric.Header{Description: desc, Frame: 9, CaptureUs: 1_000_000}, make([]byte, n), 1000)
		return f[0]
	}
	for _, tc := range []struct {
		name string
		msg  webrtc.DataChannelMessage
		desc int
		err  string
	}{
		{"description 2", webrtc.DataChannelMessage{Data: append([]byte{2, 1, 0, 5}, frag(2, 100)...)}, 2, ""},
		{"text", webrtc.DataChannelMessage{IsString: true, Data: []byte("x")}, 0, "text message"},
		{"short", webrtc.DataChannelMessage{Data: []byte{1}}, 0, "shorter than"},
		{"slot 3", webrtc.DataChannelMessage{Data: append([]byte{3, 1, 0, 5}, frag(2, 100)...)}, 0, "description 3"},
		{"mismatch", webrtc.DataChannelMessage{Data: append([]byte{0, 1, 0, 5}, frag(2, 100)...)}, 0, "differs"},
		{"too large", webrtc.DataChannelMessage{Data: append([]byte{0, 1, 0, 5}, make([]byte, MaxPublishMessage)...)}, 0, "at most"},
		{"no header", webrtc.DataChannelMessage{Data: []byte{0, 1, 0, 5, 1, 2}}, 0, "shorter than the fragment header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, desc, err := publishedPacket(tc.msg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || desc != tc.desc {
				t.Fatalf("desc %d, err %v", desc, err)
			}
			var h rtp.Header
			if _, err := h.Unmarshal(raw); err != nil {
				t.Fatal(err)
			}
			if !h.Marker || h.SequenceNumber != 5 || h.Timestamp != 90_000 || h.SSRC != pcSSRCBase+2 {
				t.Fatalf("RTP header %+v", h)
			}
		})
	}
}

func FuzzPublishedPacket(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, desc, err := publishedPacket(webrtc.DataChannelMessage{Data: b})
		if err != nil {
			return
		}
		var p rtp.Packet
		if err := p.Unmarshal(raw); err != nil {
			t.Fatalf("publishedPacket made an RTP packet that does not parse: %v", err)
		}
		if desc < 0 || desc >= volumetric.Descriptions || len(raw) > MaxPublishMessage+12 || string(p.Payload) != string(b[PointCloudPrefix:]) {
			t.Fatalf("description %d, %d bytes from %d", desc, len(raw), len(b))
		}
	})
}

// TestOnePointCloudChannel: a client that opens further pointcloud data
// channels after its first has them closed by the node (logged once);
// their closing does not end the publication on the first, which still
// publishes.
func TestOnePointCloudChannel(t *testing.T) {
	c, logs := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dialBrowserLike(t, ctx, c.conn(t, "alice"), "s6", "alice", "a", 0, pcChannelInit())
	select {
	case <-alice.open:
	case <-ctx.Done():
		t.Fatal("alice's data channel did not open")
	}
	for i := range 2 {
		extra, err := alice.pc.CreateDataChannel(PointCloudLabel, pcChannelInit())
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		extra.OnClose(func() { close(closed) })
		select {
		case <-closed:
		case <-ctx.Done():
			t.Fatalf("extra channel %d was not closed by the node", i+1)
		}
	}
	if n := logs[0].count("client opened another point-cloud data channel", "client=alice"); n != 1 {
		t.Errorf("the node logged %d times that alice opened another channel, want once", n)
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go alice.publishOverDC(pctx, 500)
	waitFor(t, "node 1 to announce alice's descriptions from her first channel", func() bool {
		n := 0
		for _, tr := range c.nodes[0].sessionTracks("s6") {
			if tr.Client == "alice" && tr.PointCloud() {
				n++
			}
		}
		return n == volumetric.Descriptions
	})
}

// TestDataChannelDescriptionTakenByRTP: a data-channel message for a
// description whose track the client already publishes over RTP is dropped
// and counted (logged once), and the RTP track stays the node's; another
// description is published, without hop ages (the browser's clock).
func TestDataChannelDescriptionTakenByRTP(t *testing.T) {
	c, logs := startLoggedCluster(t, "a")
	n := c.nodes[0]
	rtpTrack := newSource(TrackInfo{Session: "s7", Client: "alice", Track: "pc0", Kind: "video", Mime: MimeTypePointCloud, Node: n.ID()}, func() {})
	n.addLocal(rtpTrack, nil)
	d := &dcPublication{p: &peer{n: n, session: "s7", client: "alice"}}
	msg := func(desc uint8) webrtc.DataChannelMessage {
		f, _ := volumetric.Packetize(volumetric.Header{Description: desc, Frame: 1, CaptureUs: 1_000_000}, make([]byte, 100), 1000)
		return webrtc.DataChannelMessage{Data: append([]byte{desc, 1, 0, 1}, f[0]...)}
	}
	d.onMessage(msg(0))
	d.onMessage(msg(0))
	d.onMessage(msg(1))
	if got, dropped := d.received.Load(), d.dropped.Load(); got != 1 || dropped != 2 {
		t.Errorf("%d messages forwarded, %d dropped; want 1 and 2", got, dropped)
	}
	n.mu.Lock()
	pc0, pc1 := n.local["s7/alice/pc0"], n.local["s7/alice/pc1"]
	n.mu.Unlock()
	if pc0 != rtpTrack {
		t.Error("the data channel's description 0 replaced the client's RTP track pc0")
	}
	if pc1 == nil || pc1.hops != nil {
		t.Errorf("description 1: source %v, want one that records no hop ages", pc1)
	}
	if k := logs[0].count("already publishes over RTP", "client=alice", "track=pc0"); k != 1 {
		t.Errorf("the refusal was logged %d times, want once", k)
	}
	d.close()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.local["s7/alice/pc0"] != rtpTrack || n.local["s7/alice/pc1"] != nil {
		t.Error("closing the data-channel publication did not remove just its own track")
	}
}

// TestRTPDescriptionTakenByDataChannel: an RTP track pc0 of a client that
// already publishes description 0 on its data channel is refused, not
// announced in its place: its packets are dropped and counted, the
// refusal is logged once, and the data channel's track stays the node's
// and goes on.
func TestRTPDescriptionTakenByDataChannel(t *testing.T) {
	c, logs := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := c.nodes[0]
	m := &webrtc.MediaEngine{}
	if err := RegisterCodecs(m); err != nil {
		t.Fatal(err)
	}
	pc, err := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(NewSettingEngine(loopback, 0, 0))).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	track, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: MimeTypePointCloud}, "pc0", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.AddTransceiverFromTrack(track, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
		t.Fatal(err)
	}
	dc, err := pc.CreateDataChannel(PointCloudLabel, pcChannelInit())
	if err != nil {
		t.Fatal(err)
	}
	open := make(chan struct{})
	dc.OnOpen(func() { close(open) })
	offer, err := Gathered(pc, true)
	if err != nil {
		t.Fatal(err)
	}
	rep := n.Signal(Signal{Op: "offer", Session: "s8", Client: "alice", SDP: offer})
	if rep.Op != "answer" {
		t.Fatalf("offer: %+v", rep)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: rep.SDP}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-open:
	case <-ctx.Done():
		t.Fatal("alice's data channel did not open")
	}
	frag, _ := volumetric.Packetize(volumetric.Header{Description: 0, Frame: 1, Count: 1, CaptureUs: uint64(time.Now().UnixMicro())}, make([]byte, 100), 1000)
	sendDC := func(seq uint16) {
		if err := dc.Send(append([]byte{0, 1, byte(seq >> 8), byte(seq)}, frag[0]...)); err != nil {
			t.Error(err)
		}
	}
	sendDC(1)
	const key = "s8/alice/pc0"
	local := func() *source {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.local[key]
	}
	waitFor(t, "node 1 to announce pc0 from alice's data channel", func() bool { s := local(); return s != nil && s.info.DataChannel })
	dcSource := local()

	// then description 0 over RTP
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for seq := uint16(1); ; seq++ {
			_ = track.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, Timestamp: uint32(seq) * 3000, Marker: true}, Payload: frag[0]})
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	refused := func() float64 {
		return clientCounter(t, n, "xrealm_sfu_publisher_rtp_refused_packets_total", "s8/alice")
	}
	waitFor(t, "alice's RTP packets to be refused and counted", func() bool { return refused() >= 3 })
	if local() != dcSource {
		t.Error("alice's RTP track pc0 replaced her data channel's")
	}
	n.mu.Lock()
	entry := n.directory[key]
	n.mu.Unlock()
	if !entry.DataChannel {
		t.Errorf("directory entry %+v, want the data channel's", entry)
	}
	if k := logs[0].count("already publishes on its data channel", "client=alice", "track=pc0"); k != 1 {
		t.Errorf("the refusal was logged %d times, want once", k)
	}
	before := clientCounter(t, n, "xrealm_sfu_publisher_datachannel_messages_total", "s8/alice")
	sendDC(2)
	waitFor(t, "the data channel's publication to go on", func() bool {
		return clientCounter(t, n, "xrealm_sfu_publisher_datachannel_messages_total", "s8/alice") > before
	})
	if local() != dcSource {
		t.Error("alice's data channel's pc0 is gone")
	}
}
