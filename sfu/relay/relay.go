// Package relay links two SFU nodes.
//
// A Link is one WebRTC PeerConnection between two nodes, negotiated exactly
// once when the link is created and never again, so that no renegotiation
// can race. It carries two data channels:
//
//   - "ctl" (ordered, reliable): JSON control messages, Sub and Unsub of a
//     track, NACKs and keyframe requests travelling back to the origin;
//   - "media" (unordered, retransmitted for at most MediaLifetime): one RTP packet per message,
//     prefixed with the track's key, so that adding or removing a relayed
//     track needs no new transceiver and no SDP.
//
// Which node offers is fixed by the node IDs (the lower offers; see Offerer),
// and the offer/answer itself travels over the bus; the sfu package does
// that part.
package relay

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"
)

// Offerer reports whether node a creates the offer of the link to node b:
// the one with the lower ID does, comparing numerically when both are
// integers and as strings otherwise.
func Offerer(a, b string) bool {
	ai, errA := strconv.ParseUint(a, 10, 64)
	bi, errB := strconv.ParseUint(b, 10, 64)
	if errA == nil && errB == nil {
		return ai < bi
	}
	return a < b
}

// Control is a message on the ctl channel.
type Control struct {
	Op    string   `json:"op"` // "sub", "unsub", "nack", "pli"; "slot", "unslot" (RTP media, handled here)
	Track string   `json:"track"`
	Seqs  []uint16 `json:"seqs,omitempty"`
	// RTP slots: the slot's mid, the first slot sequence number of the
	// track ("slot") or the first after it ("unslot"), and slot seq -
	// origin seq.
	Mid    string `json:"mid,omitempty"`
	Seq    uint16 `json:"seq,omitempty"`
	Offset uint16 `json:"offset,omitempty"`
}

// Handler receives what arrives on a link.
type Handler interface {
	// OnControl is called for each control message, in order.
	OnControl(l *Link, c Control)
	// OnMedia is called for each RTP packet; pkt is valid only during the
	// call.
	OnMedia(l *Link, track string, pkt []byte)
	// OnClose is called once when the link fails or closes.
	OnClose(l *Link)
	// OnRefused is called for each control message the link refused
	// itself (a "slot" or "unslot" for a mid that is not one of its RTP
	// receive slots), with the reason; Link.Refused counts them.
	OnRefused(l *Link, c Control, err error)
}

// Link is one node-to-node connection.
type Link struct {
	Peer string // the other node's ID
	pc   *webrtc.PeerConnection
	h    Handler

	ctl, media *webrtc.DataChannel
	ready      chan struct{}
	opened     atomic.Int32
	channels   atomic.Int32 // data channels to open before Ready: 2, or 1 with RTP slots
	closeOnce  sync.Once

	pool *slotPool // RTP media: send slots (nil: the media data channel)
	in   *inSlots  // RTP media: what the peer's slots carry

	BytesIn, BytesOut, PacketsIn, PacketsOut, Dropped atomic.Uint64
	// Refused counts the control messages the link refused (OnRefused).
	Refused atomic.Uint64

	rateMu  sync.Mutex
	rateAt  time.Time
	rateB   uint64
	rateBps float64 // bytes/s sent over the last window
}

// MediaLifetime is how long SCTP may retransmit a relayed packet.
const MediaLifetime = 150 * time.Millisecond

// MaxQueue is how much sending time the media channel may buffer (SCTP
// counts unacknowledged bytes as buffered, so this includes a round trip).
const MaxQueue = 500 * time.Millisecond

// maxBuffered is the send-buffer cap: MaxQueue at the rate measured over
// the last half second, within [256 KiB, 4 MiB].
func (l *Link) maxBuffered() uint64 {
	now := time.Now()
	l.rateMu.Lock()
	defer l.rateMu.Unlock()
	if dt := now.Sub(l.rateAt); dt >= 500*time.Millisecond {
		b := l.BytesOut.Load()
		if !l.rateAt.IsZero() {
			l.rateBps = float64(b-l.rateB) / dt.Seconds()
		}
		l.rateAt, l.rateB = now, b
	}
	return uint64(min(max(l.rateBps*MaxQueue.Seconds(), 256<<10), 4<<20))
}

// ErrNotReady reports a send before both channels opened.
var ErrNotReady = errors.New("relay: link not ready")

func newLink(peer string, pc *webrtc.PeerConnection, h Handler) *Link {
	l := &Link{Peer: peer, pc: pc, h: h, ready: make(chan struct{}), in: newInSlots()} // receive slots: useSlots
	l.channels.Store(2)
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateClosed {
			l.Close()
		}
	})
	pc.OnTrack(l.readSlot)
	return l
}

// readSlot reads one of the peer's RTP slots until the link closes.
func (l *Link) readSlot(tr *webrtc.TrackRemote, rcv *webrtc.RTPReceiver) {
	mid := ""
	for _, t := range l.pc.GetTransceivers() {
		if t.Receiver() == rcv {
			mid = t.Mid()
		}
	}
	buf := make([]byte, 1500)
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			return
		}
		l.BytesIn.Add(uint64(n))
		l.PacketsIn.Add(1)
		if r, ok := l.in.route(mid, buf[:n]); ok {
			l.h.OnMedia(l, r.track, r.pkt)
		}
	}
}

// useSlots makes the link's RTP transceivers its send slots, and the
// receive slots of the peer's announcements (the transceivers are
// sendrecv: the same mids); after the local description is set, so that
// they have their mids.
func (l *Link) useSlots() {
	var slots []*outSlot
	var mids []string
	for _, t := range l.pc.GetTransceivers() {
		if t.Sender() == nil {
			continue
		}
		if st, ok := t.Sender().Track().(*slotTrack); ok {
			slots = append(slots, &outSlot{track: st, mid: t.Mid()})
			mids = append(mids, t.Mid())
		}
	}
	l.in.allow(mids)
	if len(slots) > 0 {
		l.pool = newSlotPool(slots, ReuseAfter)
		l.channels.Store(1)
	}
}

// Slots reports how many RTP send slots the link has and how many carry a
// track (0, 0 when media rides the data channel).
func (l *Link) Slots() (total, used int) {
	if l.pool == nil {
		return 0, 0
	}
	return len(l.pool.slots), l.pool.inUse()
}

func (l *Link) attach(dc *webrtc.DataChannel) {
	switch dc.Label() {
	case "ctl":
		l.ctl = dc
		dc.OnMessage(func(m webrtc.DataChannelMessage) {
			var c Control
			if json.Unmarshal(m.Data, &c) != nil {
				return
			}
			if c.Op == "slot" || c.Op == "unslot" {
				routed, err := l.in.announce(c)
				if err != nil {
					l.Refused.Add(1)
					l.h.OnRefused(l, c, err)
					return
				}
				for _, r := range routed {
					l.h.OnMedia(l, r.track, r.pkt)
				}
				return
			}
			l.h.OnControl(l, c)
		})
	case "media":
		l.media = dc
		dc.OnMessage(func(m webrtc.DataChannelMessage) {
			d := m.Data
			if len(d) < 1 || len(d) < 1+int(d[0]) {
				return
			}
			l.BytesIn.Add(uint64(len(d)))
			l.PacketsIn.Add(1)
			l.h.OnMedia(l, string(d[1:1+int(d[0])]), d[1+int(d[0]):])
		})
	default:
		return
	}
	dc.OnOpen(func() {
		if l.opened.Add(1) == l.channels.Load() {
			close(l.ready)
		}
	})
	dc.OnClose(l.Close)
}

// Ready is closed when both channels are open.
func (l *Link) Ready() <-chan struct{} { return l.ready }

// Dial creates the offering side of a link. Send the returned offer to the
// peer and pass its answer to Accept. With rtpSlots > 0, media travels as
// RTP on that many pre-negotiated sendrecv transceivers (the API must have
// RegisterCodec's codec); with 0, on the "media" data channel. The
// answering side follows the offer.
func Dial(api *webrtc.API, cfg webrtc.Configuration, peer string, h Handler, rtpSlots int) (*Link, string, error) {
	pc, err := api.NewPeerConnection(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("relay to %s: %w", peer, err)
	}
	l := newLink(peer, pc, h)
	ordered := true
	ctl, err := pc.CreateDataChannel("ctl", &webrtc.DataChannelInit{Ordered: &ordered})
	if err != nil {
		pc.Close()
		return nil, "", fmt.Errorf("relay to %s: %w", peer, err)
	}
	l.attach(ctl)
	if rtpSlots > 0 {
		for i := range rtpSlots {
			if _, err := pc.AddTransceiverFromTrack(&slotTrack{id: fmt.Sprintf("slot%d", i)},
				webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv}); err != nil {
				pc.Close()
				return nil, "", fmt.Errorf("relay to %s: slot: %w", peer, err)
			}
		}
	} else {
		// Timed partial reliability: a lost packet may be retransmitted by
		// SCTP for MediaLifetime and is abandoned after. With
		// maxRetransmits 0 instead, pion/sctp abandons every chunk at its
		// first transmission, which sets off a FORWARD-TSN/SACK exchange
		// per SACK (pion/sctp#505).
		unordered, lifetime := false, uint16(MediaLifetime/time.Millisecond)
		media, err := pc.CreateDataChannel("media", &webrtc.DataChannelInit{Ordered: &unordered, MaxPacketLifeTime: &lifetime})
		if err != nil {
			pc.Close()
			return nil, "", fmt.Errorf("relay to %s: %w", peer, err)
		}
		l.attach(media)
	}
	offer, err := pc.CreateOffer(nil)
	if err == nil {
		err = setLocal(pc, offer)
	}
	if err != nil {
		pc.Close()
		return nil, "", fmt.Errorf("relay offer to %s: %w", peer, err)
	}
	l.useSlots()
	return l, pc.LocalDescription().SDP, nil
}

// Accept applies the peer's answer to a dialled link.
func (l *Link) Accept(answer string) error {
	if err := l.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return fmt.Errorf("relay answer from %s: %w", l.Peer, err)
	}
	return nil
}

// Answer creates the answering side of a link from the peer's offer.
func Answer(api *webrtc.API, cfg webrtc.Configuration, peer, offer string, h Handler) (*Link, string, error) {
	pc, err := api.NewPeerConnection(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("relay from %s: %w", peer, err)
	}
	l := newLink(peer, pc, h)
	pc.OnDataChannel(l.attach)
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		pc.Close()
		return nil, "", fmt.Errorf("relay offer from %s: %w", peer, err)
	}
	// RTP slots offered: send on each of them too
	for i, t := range pc.GetTransceivers() {
		if t.Kind() != webrtc.RTPCodecTypeVideo {
			continue
		}
		if _, err := pc.AddTrack(&slotTrack{id: fmt.Sprintf("slot%d", i)}); err != nil {
			pc.Close()
			return nil, "", fmt.Errorf("relay from %s: slot: %w", peer, err)
		}
	}
	ans, err := pc.CreateAnswer(nil)
	if err == nil {
		err = setLocal(pc, ans)
	}
	if err != nil {
		pc.Close()
		return nil, "", fmt.Errorf("relay answer to %s: %w", peer, err)
	}
	l.useSlots()
	return l, pc.LocalDescription().SDP, nil
}

// setLocal sets the local description and waits for ICE gathering, so that
// the description carries every candidate (no trickle on node links).
func setLocal(pc *webrtc.PeerConnection, d webrtc.SessionDescription) error {
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(d); err != nil {
		return err
	}
	<-done
	return nil
}

// SendControl sends a control message.
func (l *Link) SendControl(c Control) error {
	select {
	case <-l.ready:
	default:
		return ErrNotReady
	}
	b, _ := json.Marshal(c)
	return l.ctl.Send(b)
}

// SendMedia sends one RTP packet of track. Packets are dropped, and
// counted, while the channel's send buffer holds more than MaxQueue of
// sending at the link's recent rate (between 256 KiB and 4 MiB), so that a
// slow link loses packets instead of adding delay.
func (l *Link) SendMedia(track string, pkt []byte) error {
	select {
	case <-l.ready:
	default:
		return ErrNotReady
	}
	if l.pool != nil {
		return l.sendSlot(track, pkt)
	}
	if len(track) > 255 {
		return fmt.Errorf("relay: track key %q longer than 255 bytes", track)
	}
	if l.media.BufferedAmount() > l.maxBuffered() {
		l.Dropped.Add(1)
		return nil
	}
	b := make([]byte, 1+len(track)+len(pkt))
	b[0] = byte(len(track))
	copy(b[1:], track)
	copy(b[1+len(track):], pkt)
	if err := l.media.Send(b); err != nil {
		return err
	}
	l.BytesOut.Add(uint64(len(b)))
	l.PacketsOut.Add(1)
	return nil
}

// sendSlot sends pkt on track's RTP slot, assigning one (and announcing it
// on ctl first) to a new track; with every slot in use it drops pkt.
func (l *Link) sendSlot(track string, pkt []byte) error {
	if len(pkt) < 12 {
		return errors.New("relay: short RTP packet")
	}
	a, err := l.pool.get(track, binary.BigEndian.Uint16(pkt[2:4]), time.Now())
	if err == errBeforeStart {
		return nil
	}
	if err != nil {
		l.Dropped.Add(1)
		return err
	}
	if a.announce != nil {
		b, _ := json.Marshal(a.announce)
		if err := l.ctl.Send(b); err != nil {
			return err
		}
	}
	n, err := a.slot.track.write(pkt, a.seq)
	if err != nil {
		return err
	}
	l.BytesOut.Add(uint64(n))
	l.PacketsOut.Add(1)
	return nil
}

// StopMedia tells the link that track is no longer relayed: its RTP slot,
// if any, is freed (and reused after ReuseAfter).
func (l *Link) StopMedia(track string) {
	if l.pool == nil {
		return
	}
	if c := l.pool.release(track, time.Now()); c != nil {
		_ = l.SendControl(*c)
	}
}

// Close closes the link once and tells the handler.
func (l *Link) Close() {
	l.closeOnce.Do(func() {
		go func() {
			l.pc.Close()
			l.h.OnClose(l)
		}()
	})
}
