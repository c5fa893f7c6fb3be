package sfu

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/downtrack"
)

type recWriter struct {
	mu   sync.Mutex
	seqs []uint16
}

func (w *recWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	w.mu.Lock()
	w.seqs = append(w.seqs, h.SequenceNumber)
	w.mu.Unlock()
	return len(p), nil
}
func (w *recWriter) Write(b []byte) (int, error) { return len(b), nil }

func (w *recWriter) count(seq uint16) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := 0
	for _, s := range w.seqs {
		if s == seq {
			k++
		}
	}
	return k
}

type bindCtx struct{ w *recWriter }

func (c bindCtx) CodecParameters() []webrtc.RTPCodecParameters {
	return []webrtc.RTPCodecParameters{{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: MimeTypePointCloud, ClockRate: 90000}, PayloadType: 125}}
}
func (c bindCtx) HeaderExtensions() []webrtc.RTPHeaderExtensionParameter { return nil }
func (c bindCtx) SSRC() webrtc.SSRC                                      { return 1 }
func (c bindCtx) SSRCRetransmission() webrtc.SSRC                        { return 0 }
func (c bindCtx) SSRCForwardErrorCorrection() webrtc.SSRC                { return 0 }
func (c bindCtx) WriteStream() webrtc.TrackLocalWriter                   { return c.w }
func (c bindCtx) ID() string                                             { return "ctx" }
func (c bindCtx) RTCPReader() interceptor.RTCPReader                     { return nil }

// fetchClock is a fetcher's clock and batch timer, run by the test: the
// time moves only when the test says, and the batches go when it runs
// them.
type fetchClock struct {
	at      time.Time
	batches []func()
}

func newFetchClock(f *fetcher) *fetchClock {
	c := &fetchClock{at: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	f.now = func() time.Time { return c.at }
	f.afterFunc = func(d time.Duration, run func()) {
		if d != fetchBatch {
			panic("fetcher timer of " + d.String() + ", not fetchBatch")
		}
		c.batches = append(c.batches, run)
	}
	return c
}

// flush runs the batch timers set so far, as if they fired now.
func (c *fetchClock) flush() {
	b := c.batches
	c.batches = nil
	for _, run := range b {
		run()
	}
}

// TestRelayNACKForwarded: a packet lost on the relay link is missing from
// the relayed source's buffer. Two subscribers NACK it; the origin is asked
// once, and when it arrives each subscriber that asked gets it once as a
// retransmission, while one that did not ask gets it as a late packet.
// The fetcher runs on the test's clock: both NACKs come at the same
// instant, however long the machine holds the test back between them.
func TestRelayNACKForwarded(t *testing.T) {
	var asked [][]uint16
	s := newSource(TrackInfo{Session: "s", Client: "a", Track: "pc0", Kind: "video", Mime: MimeTypePointCloud, Node: "1"}, func() {})
	s.fetch = newFetcher(func(seqs []uint16) { asked = append(asked, seqs) })
	clock := newFetchClock(s.fetch)
	var ws []*recWriter
	var dts []*downtrack.DownTrack
	for i := 0; i < 3; i++ {
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
		ws, dts = append(ws, w), append(dts, dt)
	}
	pkt := func(seq uint16) []byte {
		b, _ := (&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, PayloadType: 125}, Payload: []byte{1, 2, 3}}).Marshal()
		return b
	}
	s.write(pkt(100))
	s.write(pkt(101)) // 102 lost on the relay link
	s.write(pkt(103))
	nack := []rtcp.Packet{&rtcp.TransportLayerNack{Nacks: rtcp.NackPairsFromSequenceNumbers([]uint16{102})}}
	dts[0].HandleRTCP(nack)
	dts[1].HandleRTCP(nack)
	clock.flush()
	if len(asked) != 1 || len(asked[0]) != 1 || asked[0][0] != 102 {
		t.Fatalf("origin asked for %v, want once [102]", asked)
	}
	s.write(pkt(102)) // the origin's answer
	for i, w := range ws {
		if n := w.count(102); n != 1 {
			t.Errorf("subscriber %d got packet 102 %d times, want 1", i, n)
		}
	}
	for i := 0; i < 2; i++ {
		if st := dts[i].Stats(); st.Retransmits != 1 || st.Fetches != 1 || st.RetransmitMisses != 0 {
			t.Errorf("subscriber %d stats %+v, want 1 fetch answered as 1 retransmit", i, st)
		}
	}
	if s.fetch.requested.Load() != 1 || s.fetch.recovered.Load() != 1 {
		t.Errorf("fetcher requested %d recovered %d, want 1 and 1", s.fetch.requested.Load(), s.fetch.recovered.Load())
	}
}

// TestCadence: frames every 40 ms of two packets each; while they keep
// coming nothing is asked (each frame replaces the previous one's timer,
// which would find a newer frame if it ran anyway); when one does not
// come, the timer of the last (at the interval plus the margin) asks for
// the two sequence numbers it would carry, once; retransmitted old packets
// do not count as frames. The clock is the test's: observe takes the
// arrival time, and the timers are run by hand.
func TestCadence(t *testing.T) {
	var asked [][]uint16
	var timers []*fakeTimer
	c := &cadence{fetch: func(s []uint16) { asked = append(asked, s) }, afterFunc: func(d time.Duration, f func()) interface{ Stop() bool } {
		ft := &fakeTimer{d: d, f: f}
		timers = append(timers, ft)
		return ft
	}}
	seq, ts := uint16(65530), uint32(1000) // the sequence numbers wrap
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	frame := func() {
		c.observe(seq, ts, now)
		c.observe(seq+1, ts, now)
		seq += 2
		ts += 3000
		now = now.Add(40 * time.Millisecond)
	}
	for range 8 {
		frame()
	}
	if len(timers) != 7 { // one per frame after the first (the interval is known)
		t.Fatalf("%d timers set for 8 frames, want 7", len(timers))
	}
	for i, ft := range timers[:len(timers)-1] {
		if !ft.stopped {
			t.Errorf("timer %d not stopped when the next frame came", i)
		}
		ft.f() // as if it had fired just before its Stop
	}
	if len(asked) != 0 {
		t.Fatalf("asked for %v while frames kept coming", asked)
	}
	last := timers[len(timers)-1]
	if want := 40*time.Millisecond + cadenceMargin; last.d != want {
		t.Errorf("the next frame is expected within %v, want %v (interval + margin)", last.d, want)
	}
	c.observe(seq-5, ts-6000, now) // an old packet again (a retransmission)
	if len(timers) != 7 || last.stopped {
		t.Fatalf("an old packet set a timer or stopped the last one (%d timers)", len(timers))
	}
	last.f() // the next frame does not come
	if len(asked) != 1 || len(asked[0]) != 2 || asked[0][0] != seq || asked[0][1] != seq+1 {
		t.Errorf("asked for %v, want once [%d %d]", asked, seq, seq+1)
	}
}

// fakeTimer is a cadence timer the test runs by hand.
type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (f *fakeTimer) Stop() bool { f.stopped = true; return true }

// TestFetcherWant: packets asked for without a down track are requested
// once and, when they arrive, have no down track waiting (they are
// forwarded as new packets).
func TestFetcherWant(t *testing.T) {
	sent := make(chan []uint16, 4)
	f := newFetcher(func(s []uint16) { sent <- s })
	f.want([]uint16{7, 8})
	f.want([]uint16{7}) // on its way already
	select {
	case s := <-sent:
		if len(s) != 2 || s[0] != 7 || s[1] != 8 {
			t.Errorf("requested %v, want [7 8]", s)
		}
	case <-time.After(time.Second):
		t.Fatal("nothing requested")
	}
	if d := f.arrived(7); len(d) != 0 {
		t.Errorf("down tracks waiting for 7: %d", len(d))
	}
	select {
	case s := <-sent:
		t.Errorf("requested again: %v", s)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestFetcherAsksOnce: a packet is asked from the origin once per
// fetchAgain interval (counted from when the request is sent) however
// often and however far apart down tracks ask for it before the batch
// goes, and again once that interval has passed without an answer. The
// steps run on the test's clock: "+N" moves it N ms on, "ask" is a
// down track's miss of packet 7, "arrived" is packet 7 arriving, and
// "flush" runs the batch timer.
func TestFetcherAsksOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
		want  [][]uint16
	}{
		{"two asks in one batch", []string{"ask", "ask", "flush"}, [][]uint16{{7}}},
		{"second ask after fetchAgain, batch not sent yet", []string{"ask", "+150", "ask", "flush"}, [][]uint16{{7}}},
		{"batch sent late, asked again soon after", []string{"ask", "+150", "flush", "+20", "ask", "flush"}, [][]uint16{{7}}},
		{"asked again within fetchAgain", []string{"ask", "flush", "+50", "ask", "flush"}, [][]uint16{{7}}},
		{"asked again after fetchAgain", []string{"ask", "flush", "+150", "ask", "flush"}, [][]uint16{{7}, {7}}},
		{"arrived before the batch went", []string{"ask", "arrived", "flush"}, nil},
		{"arrived, then lost again and asked", []string{"ask", "arrived", "ask", "flush"}, [][]uint16{{7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent [][]uint16
			f := newFetcher(func(s []uint16) { sent = append(sent, s) })
			clock := newFetchClock(f)
			d, err := downtrack.New(downtrack.Config{ID: "d", StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: MimeTypePointCloud}})
			if err != nil {
				t.Fatal(err)
			}
			for _, step := range tc.steps {
				switch step {
				case "ask":
					f.miss(7, d)
				case "arrived":
					f.arrived(7)
				case "flush":
					clock.flush()
				default:
					ms, err := strconv.Atoi(step)
					if err != nil {
						t.Fatalf("step %q: %v", step, err)
					}
					clock.at = clock.at.Add(time.Duration(ms) * time.Millisecond)
				}
			}
			if !slices.EqualFunc(sent, tc.want, slices.Equal) {
				t.Errorf("steps %v asked the origin for %v, want %v", tc.steps, sent, tc.want)
			}
			if n := f.requested.Load(); n != uint64(len(tc.want)) {
				t.Errorf("requested counts %d, want %d", n, len(tc.want))
			}
		})
	}
}
