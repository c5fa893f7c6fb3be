package relay

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

func TestSlotPool(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newSlotPool([]*outSlot{{mid: "0", next: 500}, {mid: "1", next: 7}}, ReuseAfter)
	a, err := p.get("A", 100, t0)
	if err != nil || a.slot.mid != "0" || a.seq != 500 || a.announce == nil ||
		!reflect.DeepEqual(*a.announce, Control{Op: "slot", Track: "A", Mid: "0", Seq: 500, Offset: 400}) {
		t.Fatalf("first track: %+v %v", a, err)
	}
	if a, _ := p.get("A", 101, t0); a.seq != 501 || a.announce != nil {
		t.Fatalf("next packet: %+v", a)
	}
	if a, _ := p.get("A", 100, t0); a.seq != 500 || a.slot.next != 502 {
		t.Fatalf("a retransmission keeps its number: %+v next %d", a, a.slot.next)
	}
	if _, err := p.get("A", 99, t0); err != errBeforeStart {
		t.Fatalf("packet older than the assignment: %v, want errBeforeStart", err)
	}
	if b, _ := p.get("B", 65535, t0); b.slot.mid != "1" || b.seq != 7 {
		t.Fatalf("second track: %+v", b)
	}
	if b, _ := p.get("B", 0, t0); b.seq != 8 {
		t.Fatalf("origin wrap: %+v", b)
	}
	if _, err := p.get("C", 1, t0); err != ErrNoSlot {
		t.Fatalf("pool full: %v", err)
	}
	if p.inUse() != 2 {
		t.Fatalf("in use %d", p.inUse())
	}
	un := p.release("A", t0)
	if un == nil || !reflect.DeepEqual(*un, Control{Op: "unslot", Track: "A", Mid: "0", Seq: 502}) {
		t.Fatalf("release: %+v", un)
	}
	if p.release("A", t0) != nil {
		t.Fatal("released twice")
	}
	if _, err := p.get("C", 1, t0.Add(ReuseAfter/2)); err != ErrNoSlot {
		t.Fatalf("a freed slot rests before reuse: %v", err)
	}
	c, err := p.get("C", 1, t0.Add(ReuseAfter))
	if err != nil || c.slot.mid != "0" || c.seq != 502 || c.announce.Seq != 502 {
		t.Fatalf("reuse after unsub: %+v %v (slot seqs continue)", c, err)
	}
}

func pkt(seq uint16, payload byte) []byte {
	b, _ := (&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, PayloadType: relayPT, SSRC: 9}, Payload: []byte{payload}}).Marshal()
	return b
}

func TestInSlotsRoute(t *testing.T) {
	r := newInSlots("0")
	// RTP overtakes the announcement: kept, then delivered
	if _, ok := r.route("0", pkt(500, 1)); ok {
		t.Fatal("routed before any announcement")
	}
	out, err := r.announce(Control{Op: "slot", Track: "A", Mid: "0", Seq: 500, Offset: 400})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].track != "A" || binary.BigEndian.Uint16(out[0].pkt[2:4]) != 100 {
		t.Fatalf("pending after slot: %+v", out)
	}
	got, ok := r.route("0", pkt(501, 2))
	if !ok || got.track != "A" || binary.BigEndian.Uint16(got.pkt[2:4]) != 101 {
		t.Fatalf("route: %+v %v", got, ok)
	}
	// the slot moves to track C at 502: A's late packet (a retransmission
	// of 100) still maps to A, C's first packets before the announcements wait
	mustAnnounce(t, r, Control{Op: "unslot", Track: "A", Mid: "0", Seq: 502})
	if got, ok := r.route("0", pkt(500, 3)); !ok || got.track != "A" || binary.BigEndian.Uint16(got.pkt[2:4]) != 100 {
		t.Fatalf("late packet of the old track: %+v %v", got, ok)
	}
	if _, ok := r.route("0", pkt(502, 4)); ok {
		t.Fatal("packet after unslot routed to the old track")
	}
	out = mustAnnounce(t, r, Control{Op: "slot", Track: "C", Mid: "0", Seq: 502, Offset: 501})
	if len(out) != 1 || out[0].track != "C" || binary.BigEndian.Uint16(out[0].pkt[2:4]) != 1 {
		t.Fatalf("reused slot: %+v", out)
	}
	// an unslot of another track does not end the current one
	mustAnnounce(t, r, Control{Op: "unslot", Track: "A", Mid: "0", Seq: 600})
	if got, ok := r.route("0", pkt(700, 5)); !ok || got.track != "C" {
		t.Fatalf("stale unslot ended the slot: %+v %v", got, ok)
	}
	if _, ok := r.route("0", []byte{1, 2}); ok {
		t.Fatal("short packet routed")
	}
}

func mustAnnounce(t *testing.T, r *inSlots, c Control) []routed {
	t.Helper()
	out, err := r.announce(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInSlotsUnknownMid: the receive-slot router keeps state for the
// link's own receive slots only, and refuses a "slot" or "unslot" for any
// other mid. It fails if every mid a peer names in a "slot" or "unslot"
// (or an RTP packet on it) gets an entry, each holding up to maxPending
// packets and never removed: a peer that named ever new mids would grow
// the map without bound.
func TestInSlotsUnknownMid(t *testing.T) {
	tests := []struct {
		name string
		mids []string // the link's receive slots
		c    Control
		want string
	}{
		{"slot on an unknown mid", []string{"0", "1"}, Control{Op: "slot", Track: "s/a/pc0", Mid: "7"},
			`relay: "slot" announcement for mid "7", which is not one of the link's 2 RTP receive slots; refused`},
		{"unslot on an unknown mid", []string{"0"}, Control{Op: "unslot", Track: "s/a/pc0", Mid: "x"},
			`relay: "unslot" announcement for mid "x", which is not one of the link's 1 RTP receive slots; refused`},
		{"slot on a link without slots", nil, Control{Op: "slot", Track: "s/a/pc0", Mid: "0"},
			`relay: "slot" announcement for mid "0", which is not one of the link's 0 RTP receive slots; refused`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newInSlots(tt.mids...)
			out, err := r.announce(tt.c)
			if err == nil || err.Error() != tt.want || out != nil {
				t.Fatalf("announce: %v %v, want error %q", out, err, tt.want)
			}
			if len(r.byMid) != 0 {
				t.Fatalf("refused announcement left state: %v", r.byMid)
			}
		})
	}
	r := newInSlots("0", "1")
	for i := range 10000 {
		mid := strconv.Itoa(i + 2)
		if _, err := r.announce(Control{Op: "slot", Track: "s/a/pc0", Mid: mid, Seq: 1}); err == nil {
			t.Fatalf("mid %s accepted", mid)
		}
		if _, ok := r.route(mid, pkt(1, 1)); ok {
			t.Fatalf("packet on mid %s routed", mid)
		}
	}
	if len(r.byMid) != 0 {
		t.Fatalf("%d receive slots after announcements on unknown mids, want 0", len(r.byMid))
	}
	// the link's own slots still work
	if _, ok := r.route("1", pkt(9, 1)); ok {
		t.Fatal("routed before its announcement")
	}
	if out := mustAnnounce(t, r, Control{Op: "slot", Track: "s/a/pc0", Mid: "1", Seq: 9, Offset: 4}); len(out) != 1 || out[0].track != "s/a/pc0" {
		t.Fatalf("own slot: %+v", out)
	}
}

type mediaRec struct {
	mu   sync.Mutex
	got  map[string][]uint16
	ctl  []Control
	gotC chan struct{}
	// refused: the errors of OnRefused
	refused []string
}

func (m *mediaRec) OnControl(_ *Link, c Control) {
	m.mu.Lock()
	m.ctl = append(m.ctl, c)
	m.mu.Unlock()
}

func (m *mediaRec) OnMedia(_ *Link, track string, p []byte) {
	m.mu.Lock()
	m.got[track] = append(m.got[track], binary.BigEndian.Uint16(p[2:4]))
	m.mu.Unlock()
	select {
	case m.gotC <- struct{}{}:
	default:
	}
}

func (m *mediaRec) OnClose(*Link) {}

func (m *mediaRec) OnRefused(_ *Link, c Control, err error) {
	m.mu.Lock()
	m.refused = append(m.refused, err.Error())
	m.mu.Unlock()
}

func (m *mediaRec) seqs(track string) []uint16 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]uint16(nil), m.got[track]...)
}

// TestLinkRTPSlots links two PeerConnections on loopback with RTP slots and
// checks media both ways, origin sequence numbers, and a slot reused for
// another track after StopMedia.
func TestLinkRTPSlots(t *testing.T) {
	api := func() *webrtc.API {
		me := &webrtc.MediaEngine{}
		if err := RegisterCodec(me); err != nil {
			t.Fatal(err)
		}
		se := webrtc.SettingEngine{}
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
		se.SetIncludeLoopbackCandidate(true)
		se.DisableSRTPReplayProtection(true)
		return webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithSettingEngine(se))
	}
	ha := &mediaRec{got: map[string][]uint16{}, gotC: make(chan struct{}, 1)}
	hb := &mediaRec{got: map[string][]uint16{}, gotC: make(chan struct{}, 1)}
	a, offer, err := Dial(api(), webrtc.Configuration{}, "b", ha, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, answer, err := Answer(api(), webrtc.Configuration{}, "a", offer, hb)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Accept(answer); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Link{a, b} {
		select {
		case <-l.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("link not ready")
		}
		if total, _ := l.Slots(); total != 2 {
			t.Fatalf("%s: %d slots, want 2", l.Peer, total)
		}
	}
	waitSeqs := func(h *mediaRec, track string, want int) []uint16 {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for len(h.seqs(track)) < want {
			select {
			case <-h.gotC:
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				t.Fatalf("track %s: got %v, want %d packets", track, h.seqs(track), want)
			}
		}
		return h.seqs(track)
	}
	for i := uint16(0); i < 5; i++ {
		if err := a.SendMedia("s/alice/pc0", pkt(1000+i, 1)); err != nil {
			t.Fatal(err)
		}
		if err := b.SendMedia("s/bob/pc0", pkt(60000+i, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if got := waitSeqs(hb, "s/alice/pc0", 5); got[0] != 1000 || got[4] != 1004 {
		t.Fatalf("a→b seqs %v, want the origin's 1000..1004", got)
	}
	if got := waitSeqs(ha, "s/bob/pc0", 5); got[0] != 60000 {
		t.Fatalf("b→a seqs %v", got)
	}
	if err := a.SendMedia("s/carol/pc0", pkt(1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := a.SendMedia("s/dave/pc0", pkt(1, 4)); err != ErrNoSlot {
		t.Fatalf("third track on 2 slots: %v, want ErrNoSlot", err)
	}
	waitSeqs(hb, "s/carol/pc0", 1)
	// unsub alice: her slot is reused, after resting, by dave
	a.StopMedia("s/alice/pc0")
	a.pool.mu.Lock()
	for _, s := range a.pool.slots {
		if s.carries == "" {
			s.freedAt = time.Now().Add(-ReuseAfter) // skip the rest in the test
		}
	}
	a.pool.mu.Unlock()
	// ... but not the wait for the unslot, which is what the rest is for
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.in.mu.Lock()
		s := b.in.byMid[a.pool.slots[0].mid]
		ended := s != nil && s.ended
		b.in.mu.Unlock()
		if ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unslot not received")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := uint16(0); i < 3; i++ {
		if err := a.SendMedia("s/dave/pc0", pkt(300+i, 4)); err != nil {
			t.Fatal(err)
		}
	}
	if got := waitSeqs(hb, "s/dave/pc0", 3); got[0] != 300 || got[2] != 302 {
		t.Fatalf("reused slot: dave's seqs %v", got)
	}
	if n := len(hb.seqs("s/alice/pc0")); n != 5 {
		t.Fatalf("alice got %d packets after the slot moved, want 5", n)
	}
	if len(hb.ctl) != 0 {
		t.Fatalf("slot announcements reached the handler: %+v", hb.ctl)
	}
	// an announcement for a mid that is none of b's receive slots is
	// refused and reported, and changes nothing
	if err := a.SendControl(Control{Op: "slot", Track: "s/eve/pc0", Mid: "bogus", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	for b.Refused.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("announcement on an unknown mid not refused")
		}
		time.Sleep(10 * time.Millisecond)
	}
	hb.mu.Lock()
	refused := append([]string(nil), hb.refused...)
	hb.mu.Unlock()
	if want := `relay: "slot" announcement for mid "bogus", which is not one of the link's 2 RTP receive slots; refused`; len(refused) != 1 || refused[0] != want {
		t.Fatalf("refusals %q, want [%q]", refused, want)
	}
	b.in.mu.Lock()
	_, kept := b.in.byMid["bogus"]
	b.in.mu.Unlock()
	if kept || len(hb.ctl) != 0 {
		t.Fatalf("refused announcement kept (%v) or passed on (%+v)", kept, hb.ctl)
	}
}

// FuzzInSlots feeds received packets and ctl announcements (wire input from
// the peer node) to the receive-slot router: it must not panic, and every
// packet it routes must belong to an announced track.
func FuzzInSlots(f *testing.F) {
	f.Add([]byte(`{"op":"slot","track":"s/a/pc0","mid":"0","seq":500,"offset":400}`), pkt(500, 1), "0")
	f.Add([]byte(`{"op":"unslot","track":"s/a/pc0","mid":"0","seq":502}`), pkt(502, 1), "0")
	f.Add([]byte(`{}`), []byte{0x80}, "")
	f.Fuzz(func(t *testing.T, ctl, packet []byte, mid string) {
		r := newInSlots("0", "1")
		var c Control
		if json.Unmarshal(ctl, &c) == nil {
			out, err := r.announce(c)
			if (err != nil) != (c.Mid != "0" && c.Mid != "1") {
				t.Fatalf("announcement on mid %q: %v", c.Mid, err)
			}
			for _, out := range out {
				if out.track != c.Track {
					t.Fatalf("routed to %q, announced %q", out.track, c.Track)
				}
			}
		}
		if out, ok := r.route(mid, packet); ok && (c.Op != "slot" || out.track != c.Track) {
			t.Fatalf("routed to %q after %+v", out.track, c)
		}
		out, _ := r.announce(Control{Op: "slot", Track: "t", Mid: mid, Seq: 0, Offset: 7})
		for _, out := range out {
			if out.track != "t" {
				t.Fatalf("pending routed to %q", out.track)
			}
		}
		if len(r.byMid) > 2 {
			t.Fatalf("%d receive slots, the link has 2", len(r.byMid))
		}
	})
}
