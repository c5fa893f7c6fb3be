package sfu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/volumetric"
)

// browserLike is a subscriber that negotiates what a browser can: VP8 and
// Opus slots, no point-cloud codec, and a data channel for point clouds.
type browserLike struct {
	pc    *webrtc.PeerConnection
	nc    *nats.Conn
	sig   string
	sess  string
	id    string
	evSub *nats.Subscription
	dc    *webrtc.DataChannel // the point-cloud channel, if asked for
	open  chan struct{}       // closed when dc opened

	mu       sync.Mutex
	slots    map[string]*TrackInfo // by mid, from the last Event
	complete map[string]map[int]int
	rtp      int // packets on the RTP slot
	seqs     map[int]uint16
	gaps     int
}

// newBrowserLikePC returns a PeerConnection with a browser's codecs (no
// point-cloud codec) on the loopback address; the caller closes it.
func newBrowserLikePC(t *testing.T) *webrtc.PeerConnection {
	t.Helper()
	m := &webrtc.MediaEngine{}
	if err := m.RegisterDefaultCodecs(); err != nil {
		t.Fatal(err)
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(NewSettingEngine(loopback, 0, 0)))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

func dialBrowserLike(t *testing.T, ctx context.Context, nc *nats.Conn, session, client, site string, pointClouds int, dc *webrtc.DataChannelInit) *browserLike {
	t.Helper()
	a, err := RequestJoin(ctx, nc, JoinRequest{Session: session, Client: client, Site: site})
	if err != nil {
		t.Fatal(err)
	}
	pc := newBrowserLikePC(t)
	b := &browserLike{pc: pc, nc: nc, sig: a.Signal, sess: session, id: client, slots: map[string]*TrackInfo{},
		complete: map[string]map[int]int{}, seqs: map[int]uint16{}, open: make(chan struct{})}
	t.Cleanup(b.close)
	b.evSub, err = nc.Subscribe(subjectEvents(session, client), func(m *nats.Msg) {
		var ev Event
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		b.mu.Lock()
		for _, s := range ev.Slots {
			b.slots[s.Mid] = s.Track
		}
		b.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			if _, _, err := tr.ReadRTP(); err != nil {
				return
			}
			b.mu.Lock()
			b.rtp++
			b.mu.Unlock()
		}
	})
	if dc != nil {
		ch, err := pc.CreateDataChannel(PointCloudLabel, dc)
		if err != nil {
			t.Fatal(err)
		}
		b.dc = ch
		ch.OnOpen(func() { close(b.open) })
		re := volumetric.NewReassembler(500 * time.Millisecond)
		ch.OnMessage(func(msg webrtc.DataChannelMessage) {
			pm, err := ParsePointCloudMessage(msg.Data)
			if err != nil {
				t.Errorf("data channel: %v", err)
				return
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if last, ok := b.seqs[pm.Slot]; ok && pm.Seq != last+1 {
				b.gaps++
			}
			b.seqs[pm.Slot] = pm.Seq
			tr := b.slots[dcMid(pm.Slot)]
			if tr == nil {
				return // fragments in flight before the slot event
			}
			d, err := re.Push(time.Now(), pm.Payload)
			if err == nil && d != nil {
				if b.complete[tr.Client] == nil {
					b.complete[tr.Client] = map[int]int{}
				}
				b.complete[tr.Client][int(d.Description)]++
			}
			re.Expire(time.Now())
		})
	}
	connected := make(chan struct{})
	var once sync.Once
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateConnected {
			once.Do(func() { close(connected) })
		}
	})
	sdp, err := Gathered(pc, true)
	if err != nil {
		t.Fatal(err)
	}
	rep := b.signal(t, Signal{Op: "offer", SDP: sdp, PointClouds: pointClouds})
	if rep.Op != "answer" {
		t.Fatalf("offer: %s %s", rep.Op, rep.Error)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: rep.SDP}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("browser-like client not connected")
	}
	return b
}

func (b *browserLike) signal(t *testing.T, s Signal) Reply {
	t.Helper()
	s.Session, s.Client = b.sess, b.id
	data, _ := json.Marshal(s)
	m, err := b.nc.Request(b.sig, data, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func (b *browserLike) count(client string, desc int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.complete[client][desc]
}

func (b *browserLike) close() {
	if b.evSub != nil {
		_ = b.evSub.Unsubscribe()
	}
	data, _ := json.Marshal(Signal{Op: "leave", Session: b.sess, Client: b.id})
	_, _ = b.nc.Request(b.sig, data, 5*time.Second)
	_ = b.pc.Close()
}

var pcChannelInit = func() *webrtc.DataChannelInit {
	ordered, life := false, uint16(300)
	return &webrtc.DataChannelInit{Ordered: &ordered, MaxPacketLifeTime: &life}
}

// TestPointCloudDataChannel: a publisher of three descriptions on node 1
// and a browser-like subscriber (no point-cloud codec, a data channel) on
// node 2. The subscriber receives complete descriptions of all three over
// the data channel, relayed like RTP; its RTP video slot stays idle (it
// cannot carry the codec); with fewer data-channel slots than
// descriptions only that many are forwarded; when it leaves, node 1 stops
// relaying.
func TestPointCloudDataChannel(t *testing.T) {
	c := startCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var pubTracks []PublishTrack
	for d := 0; d < volumetric.Descriptions; d++ {
		pubTracks = append(pubTracks, PublishTrack{ID: fmt.Sprint("pc", d), Mime: MimeTypePointCloud})
	}
	pub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "pub"), Session: "s3", Client: "alice", Site: "a", ICEAddresses: loopback, Publish: pubTracks})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	for d := 0; d < volumetric.Descriptions; d++ {
		go publishFrames(pctx, pub.Tracks[fmt.Sprint("pc", d)], 9, uint8(d), 3000*(d+1))
	}

	b := dialBrowserLike(t, ctx, c.conn(t, "browser"), "s3", "bob", "b", 3, pcChannelInit())
	for d := 0; d < volumetric.Descriptions; d++ {
		waitFor(t, fmt.Sprintf("description %d over the data channel", d), func() bool { return b.count("alice", d) >= 10 })
	}
	b.mu.Lock()
	rtpPkts := b.rtp
	var mids []string
	for mid, tr := range b.slots {
		if tr != nil {
			mids = append(mids, mid)
			if !strings.HasPrefix(mid, "dc") {
				t.Errorf("slot %s carries %s: only data-channel slots may carry point clouds to this client", mid, tr.Key())
			}
		}
	}
	b.mu.Unlock()
	if rtpPkts != 0 {
		t.Errorf("%d RTP packets on the browser's video slot", rtpPkts)
	}
	if len(mids) != 3 {
		t.Errorf("slots %v carry tracks, want dc0-dc2", mids)
	}
	key := "s3/alice/pc0"
	waitFor(t, "node 1 to relay to node 2", func() bool { return c.nodes[0].localRelays(key) == 1 })

	// one slot: one description at a time
	one := dialBrowserLike(t, ctx, c.conn(t, "browser2"), "s3", "carol", "b", 1, pcChannelInit())
	waitFor(t, "frames on carol's one slot", func() bool {
		n := 0
		for d := 0; d < volumetric.Descriptions; d++ {
			n += one.count("alice", d)
		}
		return n >= 10
	})
	one.mu.Lock()
	if len(one.seqs) != 1 {
		t.Errorf("carol received on slots %v, want only slot 0", one.seqs)
	}
	one.mu.Unlock()

	// node 2 exports the data channel per subscriber
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&collector{n: c.nodes[1]})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "xrealm_sfu_subscriber_datachannel_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "client" && l.GetValue() == "s3/bob" {
					got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	if got["xrealm_sfu_subscriber_datachannel_messages_total"] <= 0 || got["xrealm_sfu_subscriber_datachannel_estimate_bps"] < dcMinRate {
		t.Errorf("data-channel metrics of s3/bob: %v", got)
	}

	b.close()
	one.close()
	waitFor(t, "node 1 to stop relaying after the browsers left", func() bool { return c.nodes[0].localRelays(key) == 0 })
}

// TestPointCloudOffer: the offer's pointclouds field is checked.
func TestPointCloudOffer(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	noDC := "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n"
	for _, tc := range []struct {
		name, sdp string
		n         int
		want      string
	}{
		{"negative", noDC, -1, "pointclouds -1"},
		{"too many", noDC, MaxPointCloudSlots + 1, "pointclouds 65"},
		{"no data channel", noDC, 2, "without a data channel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := n.Signal(Signal{Op: "offer", Session: "s", Client: "x", SDP: tc.sdp, PointClouds: tc.n})
			if rep.Op != "error" || !strings.Contains(rep.Error, tc.want) {
				t.Fatalf("reply %+v, want an error containing %q", rep, tc.want)
			}
		})
	}
}

func TestNextDCRate(t *testing.T) {
	for _, tc := range []struct {
		name            string
		rate, delivered float64
		congested       bool
		want            float64
	}{
		{"grows", 20e6, 5e6, false, 22e6},
		{"capped", 290e6, 290e6, false, dcMaxRate},
		{"backs off to delivered", 20e6, 16e6, true, 13.6e6},
		{"at most by half", 20e6, 4e6, true, 10e6},
		{"never up on congestion", 10e6, 50e6, true, 10e6},
		{"floor", 1.5e6, 0, true, dcMinRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextDCRate(tc.rate, tc.delivered, tc.congested); got < tc.want*0.999 || got > tc.want*1.001 {
				t.Fatalf("nextDCRate(%g, %g, %v) = %g, want %g", tc.rate, tc.delivered, tc.congested, got, tc.want)
			}
		})
	}
}

func TestParsePointCloudMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want PointCloudMessage
		err  bool
	}{
		{"short", []byte{0, 1, 2}, PointCloudMessage{}, true},
		{"slot out of range", []byte{64, 0, 0, 1}, PointCloudMessage{}, true},
		{"empty payload", []byte{3, 1, 0x12, 0x34}, PointCloudMessage{Slot: 3, Marker: true, Seq: 0x1234, Payload: []byte{}}, false},
		{"payload", []byte{0, 0, 0, 7, 9, 9}, PointCloudMessage{Slot: 0, Seq: 7, Payload: []byte{9, 9}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePointCloudMessage(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if err == nil && (got.Slot != tc.want.Slot || got.Marker != tc.want.Marker || got.Seq != tc.want.Seq || !bytes.Equal(got.Payload, tc.want.Payload)) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParsePointCloudMessage(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 1, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParsePointCloudMessage(b)
		if err != nil {
			return
		}
		if m.Slot >= MaxPointCloudSlots || len(m.Payload) != len(b)-PointCloudPrefix {
			t.Fatalf("parsed %+v from %d bytes", m, len(b))
		}
		_, _, _ = volumetric.ParseHeader(m.Payload)
	})
}

// TestPeerSettingEngine: a client peer with a data channel gets the relay
// links' SCTP tuning but keeps SRTP replay protection, which only relay
// links turn off (for retransmissions answering forwarded NACKs on their
// RTP slots). It reads pion's unexported settings.
func TestPeerSettingEngine(t *testing.T) {
	n := &Node{}
	field := func(se webrtc.SettingEngine, path ...string) reflect.Value {
		v := reflect.ValueOf(se)
		for _, f := range path {
			if v = v.FieldByName(f); !v.IsValid() {
				t.Fatalf("pion's SettingEngine has no field %v: update this test", path)
			}
		}
		return v
	}
	for _, tc := range []struct {
		name            string
		se              webrtc.SettingEngine
		tuned, noReplay bool
	}{
		{"client", n.peerSettingEngine(false), false, false},
		{"client with a data channel", n.peerSettingEngine(true), true, false},
		{"relay link", n.relaySettingEngine(), true, true},
	} {
		tuned := field(tc.se, "sctp", "rtoMax").Int() == int64(300*time.Millisecond) &&
			field(tc.se, "sctp", "minCwnd").Uint() == 128<<10 && field(tc.se, "sctp", "maxReceiveBufferSize").Uint() == 4<<20
		noReplay := field(tc.se, "disableSRTPReplayProtection").Bool()
		if tuned != tc.tuned || noReplay != tc.noReplay {
			t.Errorf("%s: SCTP tuned %v, SRTP replay protection off %v; want %v, %v", tc.name, tuned, noReplay, tc.tuned, tc.noReplay)
		}
	}
}

// TestJoinAfterLeave: a leave that reaches a node while it makes the
// client's connection (the client gave up waiting for the answer) closes
// the connection being made instead of leaving it to ICE's timeout.
func TestJoinAfterLeave(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	est, err := n.cfg.estimator("")
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{n: n, session: "s", client: "c", estFactory: est}
	p.close() // the leave
	if _, err := p.start("v=0"); !errors.Is(err, errLeft) {
		t.Fatalf("start after leave: %v, want errLeft", err)
	}
	if s := p.pc.ConnectionState(); s != webrtc.PeerConnectionStateClosed {
		t.Errorf("connection %s, want closed", s)
	}
}
