package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

// RTP media: instead of the "media" data channel, a link can carry relayed
// packets as RTP on a pool of sendrecv transceivers ("slots") negotiated
// once with the link, so that adding a track is still no renegotiation.
// Which track a slot carries is announced on the ctl channel ("slot" and
// "unslot"), and a slot's sequence numbers continue across the tracks it
// carries (slot seq = origin seq + offset), so that SRTP's rollover
// counting stays valid; the receiver maps them back to the origin's, which
// is what the relayed source's buffer and forwarded NACKs use.

// MimeTypeRelay is the codec of relay slots: any origin RTP packet with its
// payload untouched.
const MimeTypeRelay = "video/x-xrealm-relay"

const relayPT = 127

// RegisterCodec registers the relay slots' codec on m; both nodes' relay
// APIs need it.
func RegisterCodec(m *webrtc.MediaEngine) error {
	return m.RegisterCodec(webrtc.RTPCodecParameters{
		RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: MimeTypeRelay, ClockRate: 90000},
		PayloadType:        relayPT,
	}, webrtc.RTPCodecTypeVideo)
}

// ErrNoSlot reports that every RTP slot of a link is in use.
var ErrNoSlot = errors.New("relay: no free RTP slot")

// errBeforeStart reports a packet older than the first one its track sent
// on the slot (a retransmission the peer cannot have asked for): its slot
// sequence number would fall among the previous track's.
var errBeforeStart = errors.New("relay: packet older than its slot assignment")

// ReuseAfter is how long a freed slot rests before it carries another
// track, so that the peer has the "unslot" before the new track's packets.
const ReuseAfter = 2 * time.Second

// maxPending is how many packets a receive slot holds while its "slot"
// announcement has not arrived (RTP may overtake the ctl channel).
const maxPending = 256

// slotTrack is the local track of one send slot.
type slotTrack struct {
	id   string
	mu   sync.RWMutex
	w    webrtc.TrackLocalWriter
	ssrc uint32
	pt   uint8
}

func (t *slotTrack) ID() string                { return t.id }
func (t *slotTrack) StreamID() string          { return "relay" }
func (t *slotTrack) RID() string               { return "" }
func (t *slotTrack) Kind() webrtc.RTPCodecType { return webrtc.RTPCodecTypeVideo }

func (t *slotTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	for _, c := range ctx.CodecParameters() {
		if strings.EqualFold(c.MimeType, MimeTypeRelay) {
			t.mu.Lock()
			t.w, t.ssrc, t.pt = ctx.WriteStream(), uint32(ctx.SSRC()), uint8(c.PayloadType)
			t.mu.Unlock()
			return c, nil
		}
	}
	return webrtc.RTPCodecParameters{}, webrtc.ErrUnsupportedCodec
}

func (t *slotTrack) Unbind(webrtc.TrackLocalContext) error {
	t.mu.Lock()
	t.w = nil
	t.mu.Unlock()
	return nil
}

// write sends an origin packet with the slot's SSRC, payload type and
// sequence number seq; header extensions are not negotiated on the link
// and are dropped.
func (t *slotTrack) write(raw []byte, seq uint16) (int, error) {
	var h rtp.Header
	n, err := h.Unmarshal(raw)
	if err != nil {
		return 0, err
	}
	t.mu.RLock()
	w, ssrc, pt := t.w, t.ssrc, t.pt
	t.mu.RUnlock()
	if w == nil {
		return 0, ErrNotReady
	}
	h.SSRC, h.PayloadType, h.SequenceNumber = ssrc, pt, seq
	h.Extension, h.Extensions, h.ExtensionProfile = false, nil, 0
	return w.WriteRTP(&h, raw[n:])
}

// outSlot is one send slot.
type outSlot struct {
	track   *slotTrack
	mid     string
	carries string // track key; "" when free
	next    uint16 // the slot's next sequence number
	start   uint16 // the current track's first slot sequence number
	offset  uint16 // slot seq = origin seq + offset
	freedAt time.Time
}

// seq maps an origin sequence number to the slot's and advances next.
func (s *outSlot) seq(origin uint16) uint16 {
	out := origin + s.offset
	if int16(out-s.next) >= 0 {
		s.next = out + 1
	}
	return out
}

// slotPool assigns relayed tracks to send slots.
type slotPool struct {
	mu      sync.Mutex
	slots   []*outSlot
	byTrack map[string]*outSlot
	rest    time.Duration
}

func newSlotPool(slots []*outSlot, rest time.Duration) *slotPool {
	return &slotPool{slots: slots, byTrack: map[string]*outSlot{}, rest: rest}
}

// assignment is what a send needs: the slot and its sequence number, plus
// the announcement to make first when the track was just assigned.
type assignment struct {
	slot     *outSlot
	seq      uint16
	announce *Control
}

// get maps a packet of track with origin sequence number seq to its slot,
// assigning a free one (the lowest that has rested) to a new track.
func (p *slotPool) get(track string, seq uint16, now time.Time) (assignment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.byTrack[track]; s != nil {
		if int16(seq+s.offset-s.start) < 0 {
			return assignment{}, errBeforeStart
		}
		return assignment{slot: s, seq: s.seq(seq)}, nil
	}
	for _, s := range p.slots {
		if s.carries != "" || (!s.freedAt.IsZero() && now.Sub(s.freedAt) < p.rest) {
			continue
		}
		s.carries, s.offset, s.start = track, s.next-seq, s.next
		p.byTrack[track] = s
		out := s.seq(seq)
		return assignment{slot: s, seq: out, announce: &Control{Op: "slot", Track: track, Mid: s.mid, Seq: out, Offset: s.offset}}, nil
	}
	return assignment{}, ErrNoSlot
}

// release frees the slot of track and returns the "unslot" announcement,
// or nil when the track had no slot.
func (p *slotPool) release(track string, now time.Time) *Control {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.byTrack[track]
	if s == nil {
		return nil
	}
	delete(p.byTrack, track)
	s.carries, s.freedAt = "", now
	return &Control{Op: "unslot", Track: track, Mid: s.mid, Seq: s.next}
}

// inUse is the number of slots carrying a track.
func (p *slotPool) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byTrack)
}

// inSlot is what one receive slot carries, from the announcements.
type inSlot struct {
	track   string
	start   uint16 // first slot seq of track
	end     uint16 // first slot seq after it, once ended
	ended   bool
	offset  uint16
	pending [][]byte
}

func (s *inSlot) covers(seq uint16) bool {
	return s.track != "" && int16(seq-s.start) >= 0 && (!s.ended || int16(seq-s.end) < 0)
}

// inSlots routes received slot packets to tracks. It keeps state for the
// link's own receive slots only (the mids negotiated with the link, at
// most as many as the peer offered): an announcement or a packet for any
// other mid is refused, so that a peer that names ever new mids cannot
// grow it without bound (each slot also holds up to maxPending packets).
type inSlots struct {
	mu    sync.Mutex
	mids  map[string]bool // the receive slots, by mid
	byMid map[string]*inSlot
}

// newInSlots returns a router for the receive slots with the given mids
// (none: a link whose media rides the data channel).
func newInSlots(mids ...string) *inSlots {
	r := &inSlots{byMid: map[string]*inSlot{}}
	r.allow(mids)
	return r
}

// allow sets the receive slots' mids, once the link's descriptions are
// set.
func (r *inSlots) allow(mids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mids = make(map[string]bool, len(mids))
	for _, m := range mids {
		r.mids[m] = true
	}
}

// errUnknownSlot reports a "slot" or "unslot" announcement for a mid that
// is not one of the link's receive slots.
type errUnknownSlot struct {
	op, mid string
	slots   int
}

func (e errUnknownSlot) Error() string {
	return fmt.Sprintf("relay: %q announcement for mid %q, which is not one of the link's %d RTP receive slots; refused", e.op, e.mid, e.slots)
}

// slot returns the state of receive slot mid, creating it, or nil when mid
// is not one of the link's; r.mu must be held.
func (r *inSlots) slot(mid string) *inSlot {
	if !r.mids[mid] {
		return nil
	}
	s := r.byMid[mid]
	if s == nil {
		s = &inSlot{}
		r.byMid[mid] = s
	}
	return s
}

type routed struct {
	track string
	pkt   []byte // sequence number rewritten to the origin's
}

// route maps a packet received on slot mid to its track, rewriting its
// sequence number in place to the origin's. A packet the announcements do
// not cover yet is kept (a copy) until they do, and ok is false.
func (r *inSlots) route(mid string, pkt []byte) (routed, bool) {
	if len(pkt) < 12 {
		return routed{}, false
	}
	seq := binary.BigEndian.Uint16(pkt[2:4])
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slot(mid)
	if s == nil {
		return routed{}, false // not a slot of the link's: nothing to route it to
	}
	if !s.covers(seq) {
		if len(s.pending) < maxPending {
			s.pending = append(s.pending, append([]byte(nil), pkt...))
		}
		return routed{}, false
	}
	binary.BigEndian.PutUint16(pkt[2:4], seq-s.offset)
	return routed{track: s.track, pkt: pkt}, true
}

// announce applies a "slot" or "unslot" control and returns the pending
// packets it now covers, rewritten. An announcement for a mid that is not
// one of the link's receive slots changes nothing and is refused with an
// error that names it.
func (r *inSlots) announce(c Control) ([]routed, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slot(c.Mid)
	if s == nil {
		return nil, errUnknownSlot{op: c.Op, mid: c.Mid, slots: len(r.mids)}
	}
	switch c.Op {
	case "slot":
		s.track, s.start, s.offset, s.ended = c.Track, c.Seq, c.Offset, false
	case "unslot":
		if s.track != c.Track {
			return nil, nil
		}
		s.end, s.ended = c.Seq, true
	}
	var out []routed
	keep := s.pending[:0]
	for _, p := range s.pending {
		seq := binary.BigEndian.Uint16(p[2:4])
		if s.covers(seq) {
			binary.BigEndian.PutUint16(p[2:4], seq-s.offset)
			out = append(out, routed{track: s.track, pkt: p})
		} else if !s.ended || int16(seq-s.end) >= 0 {
			keep = append(keep, p) // for the next track on this slot
		}
	}
	s.pending = keep
	return out, nil
}
