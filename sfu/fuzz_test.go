package sfu

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/sfu/downtrack"
	"github.com/xrealm/xrealm/volumetric"
)

// relayRec records what a source hands to a relay link.
type relayRec struct {
	mu   sync.Mutex
	pkts [][]byte
}

func (r *relayRec) send(_ string, pkt []byte) error {
	r.mu.Lock()
	r.pkts = append(r.pkts, append([]byte(nil), pkt...))
	r.mu.Unlock()
	return nil
}

// FuzzSourceWrite feeds raw RTP from a publisher (or a relay link) to a
// point-cloud source with a subscriber and a relay, then the subscriber's
// RTCP. The input is a stream of packets, each a length byte and that many
// bytes, then RTCP. A packet that pion does not parse as RTP is dropped
// uncounted; one it parses is counted, kept in the retransmission buffer
// byte for byte (when it fits), and relayed unchanged. The subscriber's
// NACKs are answered from the buffer: never more retransmissions than
// NACKed sequence numbers, and every one a packet the buffer holds.
func FuzzSourceWrite(f *testing.F) {
	pkt := func(seq uint16, ts uint32, payload []byte, ext bool) []byte {
		p := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, Timestamp: ts, PayloadType: 125}, Payload: payload}
		if ext {
			_ = p.SetExtension(1, []byte{0x20})
		}
		b, _ := p.Marshal()
		return b
	}
	frame := func(seq uint16) []byte {
		frags, _ := volumetric.Packetize(volumetric.Header{Client: 1, Frame: uint32(seq), CaptureUs: uint64(time.Now().UnixMicro())}, []byte("pointcloud"), 200)
		return frags[0]
	}
	stream := func(pkts ...[]byte) []byte {
		var b []byte
		for _, p := range pkts {
			b = append(append(b, byte(len(p))), p...)
		}
		return b
	}
	nack, _ := rtcp.Marshal([]rtcp.Packet{&rtcp.TransportLayerNack{MediaSSRC: 1, Nacks: rtcp.NackPairsFromSequenceNumbers([]uint16{100, 101, 5000})}, &rtcp.PictureLossIndication{MediaSSRC: 1}})
	f.Add(append(stream(pkt(100, 3000, frame(100), false), pkt(101, 3000, frame(101), true), pkt(103, 6000, nil, false), nil), nack...))
	f.Add(append(stream(pkt(1, 0, []byte{1, 2, 3, 4}, false)), nack...))
	padded := pkt(7, 1, []byte{9, 9, 9, 3}, false)
	padded[0] |= 0x20 // padding: the last byte counts it
	f.Add(stream(padded, []byte{0x80}, []byte{0x90, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xbe, 0xde, 0xff, 0xff}))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := newSource(TrackInfo{Session: "s", Client: "a", Track: "pc0", Kind: "video", Mime: MimeTypePointCloud, Node: "1"}, func() {})
		s.levelExt = 1
		s.hops = newHopHists()
		dt, err := downtrack.New(downtrack.Config{ID: "d", StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: MimeTypePointCloud}})
		if err != nil {
			t.Fatal(err)
		}
		w := &recWriter{}
		if _, err := dt.Bind(bindCtx{w}); err != nil {
			t.Fatal(err)
		}
		if err := dt.SetSource(s.downSource()); err != nil {
			t.Fatal(err)
		}
		s.addDown(dt)
		var rel relayRec
		s.addRelay("2", nil, rel.send)

		var parsed int
		for len(in) > 0 {
			n := int(in[0])
			if n == 0 {
				in = in[1:]
				break // the rest is RTCP
			}
			raw := in[1:min(1+n, len(in))]
			in = in[len(raw)+1:]
			var h rtp.Header
			_, herr := h.Unmarshal(raw)
			before, relayed := s.packets.Load(), len(rel.pkts)
			s.write(append([]byte(nil), raw...))
			if herr != nil {
				if s.packets.Load() != before || len(rel.pkts) != relayed {
					t.Fatalf("a packet pion refuses (%v) was counted or relayed: % x", herr, raw)
				}
				continue
			}
			parsed++
			if s.packets.Load() != before+1 {
				t.Fatalf("packet % x: count went from %d to %d", raw, before, s.packets.Load())
			}
			if len(rel.pkts) != relayed+1 || !bytes.Equal(rel.pkts[relayed], raw) {
				t.Fatalf("packet % x not relayed unchanged", raw)
			}
			if len(raw) <= 1500 {
				got := make([]byte, 1500)
				if k, ok := s.buf.Get(h.SequenceNumber, got); !ok || !bytes.Equal(got[:k], raw) {
					t.Fatalf("buffer holds % x for sequence number %d, want % x", got[:k], h.SequenceNumber, raw)
				}
			}
		}
		if int(s.packets.Load()) != parsed {
			t.Fatalf("%d packets counted, %d parsed", s.packets.Load(), parsed)
		}
		pkts, err := rtcp.Unmarshal(in)
		if err != nil {
			return
		}
		nacked := 0
		for _, p := range pkts {
			if n, ok := p.(*rtcp.TransportLayerNack); ok {
				for _, pair := range n.Nacks {
					nacked += len(pair.PacketList())
				}
			}
		}
		w.mu.Lock()
		sent := len(w.seqs)
		w.mu.Unlock()
		st := dt.Stats()
		dt.HandleRTCP(pkts)
		after := dt.Stats()
		w.mu.Lock()
		resent := len(w.seqs) - sent
		w.mu.Unlock()
		if rtx := int(after.Retransmits - st.Retransmits); rtx > nacked || rtx != resent {
			t.Fatalf("%d NACKed sequence numbers gave %d retransmissions and %d packets written", nacked, rtx, resent)
		}
	})
}

// FuzzParseDelayRoutes: --delay-routes is refused, or gives one route per
// non-empty comma-separated field, each with a network and a non-negative
// delay that a route string of the same values reads back as.
func FuzzParseDelayRoutes(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8=20ms", "10.0.0.0/8=20ms, 192.168.1.0/24=1.5s", "", ",,", "::1/128=0s", "10.0.0.0/8", "10.0.0.0/8=-1ms", "x=1ms", "10.0.0.0/33=1ms", "1.2.3.4/32=1h2m3s4ms5us6ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		routes, err := ParseDelayRoutes(s)
		if err != nil {
			if routes != nil {
				t.Fatalf("ParseDelayRoutes(%q) returned routes with error %v", s, err)
			}
			return
		}
		want := 0
		for _, fld := range strings.Split(s, ",") {
			if strings.TrimSpace(fld) != "" {
				want++
			}
		}
		if len(routes) != want {
			t.Fatalf("ParseDelayRoutes(%q) = %d routes, want %d", s, len(routes), want)
		}
		var parts []string
		for _, r := range routes {
			if r.Net == nil || r.Delay < 0 {
				t.Fatalf("ParseDelayRoutes(%q): route %+v", s, r)
			}
			parts = append(parts, r.Net.String()+"="+r.Delay.String())
		}
		back, err := ParseDelayRoutes(strings.Join(parts, ","))
		if err != nil || len(back) != len(routes) {
			t.Fatalf("routes %v do not read back: %v", parts, err)
		}
		for i := range back {
			if back[i].Net.String() != routes[i].Net.String() || back[i].Delay != routes[i].Delay {
				t.Fatalf("route %d reads back as %+v, want %+v", i, back[i], routes[i])
			}
		}
	})
}

// fuzzNode is one SFU node (running the manager) on its own bus.
func fuzzNode(tb testing.TB) *Node {
	tb.Helper()
	b, err := bus.Start(bus.Config{DataDir: tb.TempDir(), Name: "sfu-fuzz", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Shutdown)
	nc, err := b.Connect("node1")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	n, err := Start(context.Background(), Config{NC: nc, ID: "1", Site: "a", Manager: true, Logger: slog.New(slog.DiscardHandler),
		ICEAddresses: loopback, Registerer: prometheus.NewRegistry(), Heartbeat: 200 * time.Millisecond, AllocateEvery: 100 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(n.Close)
	return n
}

// clientOffer is the offer of a client that publishes nothing and
// receives video and audio slots (and point clouds on a data channel).
func clientOffer(tb testing.TB, dc bool) string {
	tb.Helper()
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		tb.Fatal(err)
	}
	defer pc.Close()
	for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
		if _, err := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			tb.Fatal(err)
		}
	}
	if dc {
		if _, err := pc.CreateDataChannel(PointCloudLabel, nil); err != nil {
			tb.Fatal(err)
		}
	}
	offer, err := Gathered(pc, true)
	if err != nil {
		tb.Fatal(err)
	}
	return offer
}

// FuzzSignal sends a client's signalling message, as the bus and the
// WebSocket carry it (JSON), to a node. The node answers every message
// with "answer", "ok" or "error"; an answer is an SDP that parses; and a
// client that leaves (or whose offer failed) is gone from the node.
func FuzzSignal(f *testing.F) {
	n := fuzzNode(f)
	for _, s := range []Signal{
		{Op: "offer", Session: "s", Client: "c", SDP: clientOffer(f, false)},
		{Op: "offer", Session: "s", Client: "c", SDP: clientOffer(f, true), PointClouds: 2},
		{Op: "offer", Session: "s", Client: "c", SDP: clientOffer(f, false), PointClouds: 1},
		{Op: "offer", Session: "s", Client: "c", SDP: "v=0\r\n", Estimator: "hera"},
		{Op: "offer", Session: "s", Client: "c", SDP: clientOffer(f, false), Estimator: "nope"},
		{Op: "pose", Session: "s", Client: "c", Pose: &Pose{Position: [3]float64{1, 2, 3}, Forward: [3]float64{0, 0, -1}, FOV: 1}},
		{Op: "pose", Session: "s", Client: "c"},
		{Op: "stats", Session: "s", Client: "c", Frames: &FrameReport{Complete: 1}},
		{Op: "leave", Session: "s", Client: "c"},
		{Op: "ping", Session: "s", Client: "c"},
		{Op: "ping", Session: "s.x", Client: "c"},
		{Op: "explode", Session: "s", Client: ""},
	} {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Add([]byte(`{"op":"offer","session":"s","client":"c","pointclouds":-1}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var s Signal
		if json.Unmarshal(msg, &s) != nil {
			return // handleSignal answers a decoding error itself
		}
		key := s.Session + "/" + s.Client
		rep := n.Signal(s)
		switch rep.Op {
		case "answer":
			if s.Op != "offer" {
				t.Fatalf("answer to %q", s.Op)
			}
			var d sdp.SessionDescription
			if err := d.UnmarshalString(rep.SDP); err != nil {
				t.Fatalf("the answer to %q does not parse: %v", msg, err)
			}
			if n.Signal(Signal{Op: "leave", Session: s.Session, Client: s.Client}).Op != "ok" {
				t.Fatal("leave not answered ok")
			}
		case "ok":
			if s.Op == "offer" {
				t.Fatalf("offer answered ok without SDP")
			}
		case "error":
			if rep.Error == "" {
				t.Fatalf("error reply without a reason to %q", msg)
			}
		default:
			t.Fatalf("reply %+v to %q", rep, msg)
		}
		n.mu.Lock()
		p := n.peers[key]
		n.mu.Unlock()
		if p != nil {
			t.Fatalf("client %s still connected after %s (reply %s: %s)", key, s.Op, rep.Op, rep.Error)
		}
	})
}

// FuzzBusMessages hands bus messages from other nodes (heartbeats, track
// announcements, poses) to a node's and its manager's handlers. Malformed
// ones change nothing; well-formed ones leave the state they describe: the
// manager knows only nodes with valid IDs, a heartbeat's node as it
// described itself (gone when it leaves), the directory the track under
// its key (gone when removed), and the pose under its client.
func FuzzBusMessages(f *testing.F) {
	n := fuzzNode(f)
	hb, _ := json.Marshal(NodeInfo{ID: "7", Site: "b", Clients: 3, Signal: subjectSignal("7")})
	leave, _ := json.Marshal(NodeInfo{ID: "7", Leaving: true})
	add, _ := json.Marshal(TrackEvent{Op: "add", Track: TrackInfo{Session: "s", Client: "c", Track: "pc0", Kind: "video", Mime: MimeTypePointCloud, Node: "7"}})
	rm, _ := json.Marshal(TrackEvent{Op: "remove", Track: TrackInfo{Session: "s", Client: "c", Track: "pc0", Node: "7"}})
	pose, _ := json.Marshal(PoseMessage{Session: "s", Client: "c", Pose: Pose{Position: [3]float64{1, 2, 3}, FOV: 1}})
	for _, m := range [][]byte{hb, leave, add, rm, pose, []byte(`{"id":"bad id!"}`), []byte(`{"op":"add","track":{"session":""}}`), []byte(`not json`)} {
		for k := range uint8(3) {
			f.Add(k, m)
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		msg := &nats.Msg{Data: data}
		switch kind % 3 {
		case 0:
			n.mgr.handleHeartbeat(msg)
			var info NodeInfo
			ok := json.Unmarshal(data, &info) == nil && validName("node", info.ID) == nil && info.ID != n.cfg.ID
			n.mgr.mu.Lock()
			defer n.mgr.mu.Unlock()
			for id := range n.mgr.nodes {
				if validName("node", id) != nil {
					t.Fatalf("manager knows node %q", id)
				}
			}
			if ok {
				ns, known := n.mgr.nodes[info.ID]
				if info.Leaving == known || (known && ns.info != info) {
					t.Fatalf("heartbeat %s: manager has %+v (known %v)", data, ns, known)
				}
			}
		case 1:
			n.handleTrackEvent(msg)
			var ev TrackEvent
			if json.Unmarshal(data, &ev) != nil || ev.Track.Session == "" || ev.Track.Node == n.cfg.ID {
				return
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			got, ok := n.directory[ev.Track.Key()]
			switch ev.Op {
			case "add":
				if !ok || got != ev.Track {
					t.Fatalf("track event %s: directory has %+v, %v", data, got, ok)
				}
			case "remove":
				if ok {
					t.Fatalf("track event %s: directory still has %+v", data, got)
				}
			}
		case 2:
			n.handlePose(msg)
			var pm PoseMessage
			if json.Unmarshal(data, &pm) != nil || pm.Session == "" || pm.Client == "" {
				return
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			if p := n.poseOf(pm.Session + "/" + pm.Client); p == nil || *p != pm.Pose {
				t.Fatalf("pose %s: node has %+v", data, p)
			}
		}
	})
}
