package downtrack

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/buffer"
)

type sent struct {
	seq     uint16
	payload string
}

type fakeWriter struct {
	mu  sync.Mutex
	out []sent
	pts []uint8 // the payload type of each packet in out
}

func (w *fakeWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	w.mu.Lock()
	w.out = append(w.out, sent{h.SequenceNumber, string(p)})
	w.pts = append(w.pts, h.PayloadType)
	w.mu.Unlock()
	return len(p), nil
}
func (w *fakeWriter) Write(b []byte) (int, error) { return len(b), nil }

// fakeCtx is a transceiver that negotiated VP8 (96) and the codecs in
// extra.
type fakeCtx struct {
	w     *fakeWriter
	extra []webrtc.RTPCodecParameters
}

func (c fakeCtx) CodecParameters() []webrtc.RTPCodecParameters {
	return append([]webrtc.RTPCodecParameters{{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, PayloadType: 96}}, c.extra...)
}
func (c fakeCtx) HeaderExtensions() []webrtc.RTPHeaderExtensionParameter { return nil }
func (c fakeCtx) SSRC() webrtc.SSRC                                      { return 1234 }
func (c fakeCtx) SSRCRetransmission() webrtc.SSRC                        { return 0 }
func (c fakeCtx) SSRCForwardErrorCorrection() webrtc.SSRC                { return 0 }
func (c fakeCtx) WriteStream() webrtc.TrackLocalWriter                   { return c.w }
func (c fakeCtx) ID() string                                             { return "ctx" }
func (c fakeCtx) RTCPReader() interceptor.RTCPReader                     { return nil }

// source feeds packets to the shared buffer and the down tracks, as the
// SFU's track reader does.
func source(t testing.TB, buf *buffer.Buffer, seq uint16, payload string, dts ...*DownTrack) {
	pkt := rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, SSRC: 99, PayloadType: 100}, Payload: []byte(payload)}
	raw, _ := pkt.Marshal()
	if err := buf.Write(seq, raw); err != nil {
		t.Fatal(err)
	}
	for _, d := range dts {
		if err := d.WriteRTP(&pkt.Header, pkt.Payload); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGateAndNACK(t *testing.T) {
	buf, _ := buffer.New(64)
	kf := 0
	d, err := New(Config{ID: "v", StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, Buffer: buf, OnKeyframeRequest: func() { kf++ }})
	if err != nil {
		t.Fatal(err)
	}
	w := &fakeWriter{}
	if _, err := d.Bind(fakeCtx{w: w}); err != nil {
		t.Fatal(err)
	}
	source(t, buf, 1000, "a", d)
	source(t, buf, 1001, "b", d)
	d.SetActive(false)
	source(t, buf, 1002, "c", d)
	source(t, buf, 1003, "d", d)
	d.SetActive(true)
	source(t, buf, 1004, "e", d)
	source(t, buf, 1005, "f", d)
	want := []sent{{1000, "a"}, {1001, "b"}, {1002, "e"}, {1003, "f"}}
	if fmt.Sprint(w.out) != fmt.Sprint(want) {
		t.Fatalf("sent %v, want %v (contiguous after the gap)", w.out, want)
	}
	if kf != 1 {
		t.Errorf("%d keyframe requests on resume, want 1", kf)
	}
	// the subscriber lost its 1003 ("f") and an unknown one
	w.out = nil
	d.HandleRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{Nacks: []rtcp.NackPair{{PacketID: 1003}, {PacketID: 5000}}}})
	if fmt.Sprint(w.out) != fmt.Sprint([]sent{{1003, "f"}}) {
		t.Fatalf("retransmitted %v, want [{1003 f}]", w.out)
	}
	st := d.Stats()
	if st.NACKs != 2 || st.Retransmits != 1 || st.RetransmitMisses != 1 || st.Dropped != 2 {
		t.Fatalf("stats %+v", st)
	}
	// 1001 ("b") went before the pause: stale, not answered (the offset
	// now maps it to "d", a packet the subscriber was never to get)
	w.out = nil
	d.HandleRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{Nacks: []rtcp.NackPair{{PacketID: 1001}}}})
	if len(w.out) != 0 {
		t.Fatalf("a NACK from before the resume retransmitted %v", w.out)
	}
	if st := d.Stats(); st.NACKs != 3 || st.StaleNACKs != 1 || st.Retransmits != 1 {
		t.Fatalf("stale NACK: stats %+v, want 3 NACKs, 1 stale, 1 retransmit", st)
	}
	// paused, it answers no NACK, nor a deferred one (Resend): the
	// subscriber's budget has no room for it, and it resumes with a
	// keyframe
	d.SetActive(false)
	w.out = nil
	d.HandleRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{Nacks: []rtcp.NackPair{{PacketID: 1002}, {PacketID: 1003}}}})
	d.Resend(buf, 1004)
	if len(w.out) != 0 {
		t.Fatalf("a paused track retransmitted %v", w.out)
	}
	if st := d.Stats(); st.NACKs != 5 || st.Retransmits != 1 || st.PausedNACKs != 3 {
		t.Fatalf("paused: stats %+v, want 5 NACKs, 1 retransmit, 3 paused NACKs", st)
	}
	if _, err := New(Config{Codec: webrtc.RTPCodecCapability{MimeType: "application/x"}}); err == nil {
		t.Error("New with a non-media MIME type succeeded")
	}
	d2, _ := New(Config{ID: "o", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus}})
	if _, err := d2.Bind(fakeCtx{w: w}); err == nil {
		t.Error("Bind without the codec succeeded")
	}
}

// TestPayloadTypeOfSource: a slot forwards with the payload type of its
// source's codec, whether the source was set before pion bound the slot's
// sender (the node assigns slots as soon as the offer is applied; pion
// binds at SetLocalDescription) or after.
func TestPayloadTypeOfSource(t *testing.T) {
	pointCloud := webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: "video/x-xrealm-pointcloud", ClockRate: 90000}, PayloadType: 125}
	h264 := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264}
	tests := []struct {
		name       string
		codec      webrtc.RTPCodecCapability // the source's; zero: none set
		beforeBind bool
		want       uint8
	}{
		{"slot codec", webrtc.RTPCodecCapability{}, false, 96},
		{"point cloud after bind", pointCloud.RTPCodecCapability, false, 125},
		{"point cloud before bind", pointCloud.RTPCodecCapability, true, 125},
		{"VP8 before bind", webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, true, 96},
		// not negotiated: cannot be refused before the bind; the slot's
		// codec's type (the node gives a slot only tracks it accepts)
		{"not negotiated, before bind", h264, true, 96},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(Config{ID: "slot-1", StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}})
			if err != nil {
				t.Fatal(err)
			}
			set := func() {
				if tc.codec.MimeType == "" {
					return
				}
				if err := d.SetSource(Source{Codec: tc.codec}); err != nil {
					t.Fatalf("SetSource(%s): %v", tc.codec.MimeType, err)
				}
			}
			if tc.beforeBind {
				set()
			}
			w := &fakeWriter{}
			if _, err := d.Bind(fakeCtx{w: w, extra: []webrtc.RTPCodecParameters{pointCloud}}); err != nil {
				t.Fatal(err)
			}
			if !tc.beforeBind {
				set()
			}
			if err := d.WriteRTP(&rtp.Header{Version: 2, SequenceNumber: 7, PayloadType: 100}, []byte("x")); err != nil {
				t.Fatal(err)
			}
			if len(w.pts) != 1 || w.pts[0] != tc.want {
				t.Errorf("payload types sent %v, want [%d]", w.pts, tc.want)
			}
		})
	}
	d, _ := New(Config{ID: "slot-2", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}})
	if _, err := d.Bind(fakeCtx{w: &fakeWriter{}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSource(Source{Codec: h264}); err == nil {
		t.Error("SetSource with a codec the bound slot did not negotiate succeeded")
	}
}

// BenchmarkMemoryPerSubscriber measures the heap that subscribers add to
// one source track: the retransmission buffer is shared, so the bytes per
// subscriber stay flat and small as subscribers are added.
func BenchmarkMemoryPerSubscriber(b *testing.B) {
	for _, subs := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("subs=%d", subs), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				buf, _ := buffer.New(1024)
				dts := make([]*DownTrack, subs)
				for k := range dts {
					dts[k], _ = New(Config{ID: "v", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, Buffer: buf})
					dts[k].Bind(fakeCtx{w: &fakeWriter{}})
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				total := float64(after.HeapAlloc - before.HeapAlloc)
				b.ReportMetric(float64(buf.Bytes()), "buffer-B")
				b.ReportMetric((total-float64(buf.Bytes()))/float64(subs), "B/subscriber")
				b.ReportMetric(float64(subs*buf.Bytes()), "per-sub-buffers-B")
				runtime.KeepAlive(dts)
			}
		})
	}
}

func TestRTT(t *testing.T) {
	now := time.Date(2026, 11, 22, 7, 0, 0, 123456789, time.UTC)
	q := func(d time.Duration) uint32 { return uint32(d * 65536 / time.Second) }
	tests := []struct {
		name      string
		sentAgo   time.Duration // the sender report's time before now
		held      time.Duration // DLSR
		want      time.Duration
		wantValid bool
	}{
		{"40 ms", 50 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond, true},
		{"no hold", 25 * time.Millisecond, 0, 25 * time.Millisecond, true},
		{"negative", 10 * time.Millisecond, 30 * time.Millisecond, 0, false},
		{"too long", 20 * time.Second, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RTT(now, CompactNTP(now.Add(-tt.sentAgo)), q(tt.held))
			if ok != tt.wantValid {
				t.Fatalf("valid = %v, want %v", ok, tt.wantValid)
			}
			if ok && (got-tt.want > 100*time.Microsecond || tt.want-got > 100*time.Microsecond) {
				t.Errorf("RTT = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDownTrackRTTFromReport(t *testing.T) {
	d, err := New(Config{ID: "a", StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Bind(fakeCtx{w: &fakeWriter{}}); err != nil {
		t.Fatal(err)
	}
	if _, at := d.LastRTT(); !at.IsZero() {
		t.Fatal("RTT before any report")
	}
	lsr := CompactNTP(time.Now().Add(-30 * time.Millisecond))
	d.HandleRTCP([]rtcp.Packet{&rtcp.ReceiverReport{Reports: []rtcp.ReceptionReport{
		{SSRC: 999, LastSenderReport: lsr, TotalLost: 50}, // another track's
		{SSRC: 1234, LastSenderReport: lsr, Delay: uint32(10 * 65536 / 1000), TotalLost: 7},
	}}})
	rtt, at := d.LastRTT()
	if at.IsZero() || rtt < 15*time.Millisecond || rtt > 200*time.Millisecond {
		t.Errorf("RTT %v at %v, want about 20 ms", rtt, at)
	}
	if lost := d.Stats().Lost; lost != 7 {
		t.Errorf("lost %d by the track's report, want 7", lost)
	}
}

// TestNACKLongAfterResume: a NACK for a recent packet is answered however
// many packets went out since the last resume, and one for a packet sent
// before the resume is stale while the buffer could still hold it. Before,
// the check wrapped: 32768 packets after a resume every NACK was refused as
// stale for the next 32768.
func TestNACKLongAfterResume(t *testing.T) {
	tests := []struct {
		name  string
		after int // packets forwarded after the resume
		nack  int // how far behind the newest the NACKed packet is
		want  bool
	}{
		{"recent, 10 after", 10, 3, true},
		{"recent, 32767 after", 32767, 3, true},
		{"recent, 32768 after", 32768, 3, true},
		{"recent, 40000 after", 40000, 3, true},
		{"recent, 65535 after", 65535, 3, true},
		{"recent, 70000 after", 70000, 3, true},
		{"before the resume, 10 after", 10, 12, false},
		{"first after the resume", 10, 9, true},
		{"ahead of the newest", 10, -5, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf, _ := buffer.New(64)
			d, err := New(Config{ID: "v", StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, Buffer: buf})
			if err != nil {
				t.Fatal(err)
			}
			w := &fakeWriter{}
			if _, err := d.Bind(fakeCtx{w: w}); err != nil {
				t.Fatal(err)
			}
			seq := uint16(1000)
			for range 100 {
				source(t, buf, seq, "x", d)
				seq++
			}
			d.SetActive(false)
			for range 10 {
				source(t, buf, seq, "x", d)
				seq++
			}
			d.SetActive(true)
			for i := range tc.after {
				source(t, buf, seq, fmt.Sprint(i), d)
				seq++
			}
			newest := w.out[len(w.out)-1].seq
			asked := newest - uint16(tc.nack)
			want := ""
			if tc.want {
				want = w.out[len(w.out)-1-tc.nack].payload
			}
			w.out = nil
			d.HandleRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{Nacks: []rtcp.NackPair{{PacketID: asked}}}})
			st := d.Stats()
			switch {
			case tc.want && (len(w.out) != 1 || w.out[0] != sent{asked, want}):
				t.Fatalf("NACK of %d (%d behind the newest) retransmitted %v, want [{%d %s}]; stats %+v", asked, tc.nack, w.out, asked, want, st)
			case !tc.want && len(w.out) != 0:
				t.Fatalf("NACK of %d (%d behind the newest) retransmitted %v, want none; stats %+v", asked, tc.nack, w.out, st)
			case tc.want && st.StaleNACKs != 0:
				t.Fatalf("stats %+v: a NACK of a recent packet counted stale", st)
			}
		})
	}
}

// TestFetchable: a NACKed packet missing from the buffer is asked from
// upstream only when it was sent and is within a buffer's size of the
// newest sent, across the sequence numbers' wrap.
func TestFetchable(t *testing.T) {
	buf, _ := buffer.New(64)
	for _, tc := range []struct {
		name    string
		lastOut uint16
		out     uint16
		want    bool
	}{
		{"the newest", 1000, 1000, true},
		{"just behind", 1000, 999, true},
		{"a buffer's size less one behind", 1000, 937, true},
		{"a buffer's size behind", 1000, 936, false},
		{"far behind", 1000, 100, false},
		{"not sent yet", 1000, 1001, false},
		{"far ahead", 1000, 40000, false},
		{"behind across the wrap", 10, 65530, true},
		{"ahead across the wrap", 65530, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &DownTrack{started: true, lastOut: tc.lastOut}
			if got := d.fetchable(tc.out, buf); got != tc.want {
				t.Fatalf("fetchable(%d) with %d the newest sent = %v, want %v", tc.out, tc.lastOut, got, tc.want)
			}
		})
	}
	if (&DownTrack{}).fetchable(0, buf) {
		t.Fatal("a down track that sent nothing asks upstream for packet 0")
	}
}
