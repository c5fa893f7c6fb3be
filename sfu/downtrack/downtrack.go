// Package downtrack forwards one source track to one subscriber.
//
// A DownTrack is a webrtc.TrackLocal bound to a transceiver that was
// negotiated once. Gating it on or off (SetActive) is how the SFU follows
// the allocator without renegotiating: an inactive down track drops packets
// and, when it resumes, continues its own sequence numbers so that the
// subscriber sees no gap. NACKs from the subscriber are answered from the
// source track's shared retransmission buffer (package buffer): the down
// track keeps only its sequence-number offset, not a copy of the packets.
package downtrack

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/buffer"
)

// Config describes a down track.
type Config struct {
	// ID and StreamID are the track and stream IDs the subscriber sees.
	ID, StreamID string
	// Codec is the source's codec; Bind picks the negotiated codec with
	// the same MIME type. A down track that is a pre-negotiated slot
	// changes its source later with SetSource.
	Codec webrtc.RTPCodecCapability
	// Buffer is the source track's shared retransmission buffer; nil
	// disables retransmission.
	Buffer *buffer.Buffer
	// OnKeyframeRequest is called on a PLI or FIR from the subscriber and
	// when the track resumes; it should ask the publisher for a keyframe.
	OnKeyframeRequest func()
	// Retransmits, if set, bounds the bytes this down track retransmits;
	// a subscriber's down tracks share one (RetransmitBytesPerSecond). A
	// NACK it has no room for is not answered (Stats.LimitedNACKs). nil
	// is no bound.
	Retransmits *RetransmitBudget
}

// RetransmitBytesPerSecond is what the SFU gives each subscriber's
// RetransmitBudget: 1 MB/s (8 Mbit/s) of retransmissions over all its
// slots, with bursts of up to a second's worth. A subscriber losing 10 %
// of 30 Mbit/s of point clouds is repaired within it; one that NACKs
// everything (a buggy or hostile client) costs the node no more than
// this in retransmissions (each a buffer copy, an SRTP encryption and a
// write).
const RetransmitBytesPerSecond = 1_000_000

// RetransmitBudget is a token bucket of retransmitted bytes, shared by a
// subscriber's down tracks: it fills at its rate up to a second's worth,
// and each retransmission takes its size. It is safe for concurrent use.
type RetransmitBudget struct {
	rate float64 // bytes per second, also the bucket's size
	now  func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewRetransmitBudget returns a full budget of bytesPerSecond; now is the
// clock (nil: time.Now).
func NewRetransmitBudget(bytesPerSecond int, now func() time.Time) *RetransmitBudget {
	if now == nil {
		now = time.Now
	}
	return &RetransmitBudget{rate: float64(bytesPerSecond), now: now, tokens: float64(bytesPerSecond), last: now()}
}

// refill adds what the budget earned since it was last looked at. b.mu
// must be held.
func (b *RetransmitBudget) refill() {
	now := b.now()
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.rate, b.tokens+dt*b.rate)
	}
	b.last = now
}

// room reports whether the budget has any bytes left, taking none: a
// retransmission is looked up (or fetched from upstream) only then.
func (b *RetransmitBudget) room() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	return b.tokens > 0
}

// take takes n bytes from the budget, if it has them, and reports whether
// it did.
func (b *RetransmitBudget) take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if b.tokens < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// Source is what a down track forwards from: the source's codec, its shared
// buffer and how to ask its publisher for a keyframe.
type Source struct {
	Codec             webrtc.RTPCodecCapability
	Buffer            *buffer.Buffer
	OnKeyframeRequest func()
	// OnMiss, if set, is called with the source sequence number of a NACKed
	// packet that is not in Buffer (a relayed source asks the origin node
	// for it); whoever gets the packet later calls Resend.
	OnMiss func(seq uint16, d *DownTrack)
}

// Stats are a down track's counters.
type Stats struct {
	Packets, Bytes   uint64 // forwarded
	Dropped          uint64 // not forwarded while inactive
	NACKs            uint64 // sequence numbers the subscriber asked for
	Retransmits      uint64 // of those, answered from the buffer
	RetransmitMisses uint64 // of those, no longer in the buffer
	Fetches          uint64 // of those, asked from upstream (Source.OnMiss)
	// PausedNACKs are, of NACKs, those not answered because the track was
	// inactive (asked then, or fetched and arrived once it was; see
	// HandleRTCP).
	PausedNACKs uint64
	// StaleNACKs are, of NACKs, those not answered because they ask for a
	// packet sent before the track last resumed or switched source
	// (retransmit).
	StaleNACKs uint64
	// LimitedNACKs are, of NACKs, those not answered because the
	// subscriber's RetransmitBudget had no room for the packet.
	LimitedNACKs     uint64
	KeyframeRequests uint64
	// Lost is the subscriber's own count of packets it never got, from its
	// last receiver report: the loss that NACKs and retransmissions did
	// not repair (NACKs count it before repair).
	Lost uint64
}

// DownTrack is a TrackLocal that forwards one source to one subscriber.
type DownTrack struct {
	cfg  Config
	kind webrtc.RTPCodecType

	mu     sync.Mutex
	writer webrtc.TrackLocalWriter
	ssrc   uint32
	pt     uint8
	pts    map[string]uint8 // negotiated payload type by lower-case MIME type
	src    Source
	// timestamp munging across source switches: out = src + tsOffset
	tsOffset, lastTS uint32
	switched         bool
	// sequence munging: out = src + offset
	started bool
	resync  bool
	offset  uint16
	lastOut uint16
	// resumeSeq is the first sequence number sent after the last resync
	// (a resume or a source switch), when resumed: NACKs for earlier ones
	// are stale (retransmit). resumed is cleared once the packets sent
	// since are more than the buffer holds (staleWindow): the earlier ones
	// are then out of the buffer anyway, and the comparison in sequence
	// space would wrap.
	resumed   bool
	resumeSeq uint16

	active atomic.Bool
	// rtt is the last round-trip time from a receiver report (µs, 0 =
	// none yet) and rttAt when it was measured (unix ns).
	rtt, rttAt atomic.Int64

	packets, bytes, dropped, nacks, rtx, misses, fetches, kfr atomic.Uint64
	pausedNACKs, staleNACKs, limitedNACKs                     atomic.Uint64
	lost                                                      atomic.Uint64 // from the last receiver report
}

// ErrNoCodec reports that the subscriber did not negotiate the codec.
var ErrNoCodec = errors.New("downtrack: codec not negotiated")

// New returns an active down track.
func New(cfg Config) (*DownTrack, error) {
	var kind webrtc.RTPCodecType
	switch mt := strings.ToLower(cfg.Codec.MimeType); {
	case strings.HasPrefix(mt, "audio/"):
		kind = webrtc.RTPCodecTypeAudio
	case strings.HasPrefix(mt, "video/"):
		kind = webrtc.RTPCodecTypeVideo
	default:
		return nil, fmt.Errorf("downtrack: MIME type %q is neither audio/ nor video/", cfg.Codec.MimeType)
	}
	d := &DownTrack{cfg: cfg, kind: kind, src: Source{Codec: cfg.Codec, Buffer: cfg.Buffer, OnKeyframeRequest: cfg.OnKeyframeRequest}}
	d.active.Store(true)
	return d, nil
}

// ID implements webrtc.TrackLocal.
func (d *DownTrack) ID() string { return d.cfg.ID }

// StreamID implements webrtc.TrackLocal.
func (d *DownTrack) StreamID() string { return d.cfg.StreamID }

// RID implements webrtc.TrackLocal; down tracks are not simulcast.
func (d *DownTrack) RID() string { return "" }

// Kind implements webrtc.TrackLocal.
func (d *DownTrack) Kind() webrtc.RTPCodecType { return d.kind }

// Bind implements webrtc.TrackLocal.
func (d *DownTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	pts := map[string]uint8{}
	for _, c := range ctx.CodecParameters() {
		if _, ok := pts[strings.ToLower(c.MimeType)]; !ok {
			pts[strings.ToLower(c.MimeType)] = uint8(c.PayloadType)
		}
	}
	for _, c := range ctx.CodecParameters() {
		if strings.EqualFold(c.MimeType, d.cfg.Codec.MimeType) {
			d.mu.Lock()
			d.writer = ctx.WriteStream()
			d.ssrc = uint32(ctx.SSRC())
			// A source set before the bind (SetSource on a slot whose
			// sender pion binds only at SetLocalDescription) keeps its
			// codec's payload type: with the slot's codec's, a point
			// cloud forwarded on a video slot would go out labelled VP8.
			d.pt = uint8(c.PayloadType)
			if pt, ok := pts[strings.ToLower(d.src.Codec.MimeType)]; ok {
				d.pt = pt
			}
			d.pts = pts
			d.mu.Unlock()
			return c, nil
		}
	}
	return webrtc.RTPCodecParameters{}, fmt.Errorf("%w: %s for track %s", ErrNoCodec, d.cfg.Codec.MimeType, d.cfg.ID)
}

// SetSource switches the down track to another source without
// renegotiation: the source's codec must be one the subscriber negotiated
// on this transceiver. Sequence numbers and timestamps continue. Before
// Bind the codec cannot be checked; Bind then sends with its payload type
// if negotiated (else the slot codec's).
func (d *DownTrack) SetSource(src Source) error {
	d.mu.Lock()
	pt, ok := d.pts[strings.ToLower(src.Codec.MimeType)]
	if d.pts != nil && !ok {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s on slot %s", ErrNoCodec, src.Codec.MimeType, d.cfg.ID)
	}
	if d.pts != nil {
		d.pt = pt
	}
	d.src = src
	d.resync = true
	d.switched = true
	d.mu.Unlock()
	d.keyframe()
	return nil
}

// Unbind implements webrtc.TrackLocal.
func (d *DownTrack) Unbind(webrtc.TrackLocalContext) error {
	d.mu.Lock()
	d.writer = nil
	d.mu.Unlock()
	return nil
}

// SetActive gates forwarding. Resuming asks for a keyframe.
func (d *DownTrack) SetActive(on bool) {
	if d.active.Swap(on) == on {
		return
	}
	if !on {
		d.mu.Lock()
		d.resync = true
		d.mu.Unlock()
		return
	}
	d.keyframe()
}

// Active reports whether the track forwards.
func (d *DownTrack) Active() bool { return d.active.Load() }

// WriteRTP forwards one packet of the source. The header is copied, not
// modified. Header extensions are dropped: their IDs were negotiated with
// the publisher, and the subscriber's interceptors add their own
// (transport-wide sequence numbers for TWCC).
func (d *DownTrack) WriteRTP(h *rtp.Header, payload []byte) error {
	if !d.active.Load() {
		d.dropped.Add(1)
		return nil
	}
	d.mu.Lock()
	w := d.writer
	if w == nil {
		d.mu.Unlock()
		return nil
	}
	switch {
	case !d.started:
		d.offset = 0
		d.started = true
	case d.resync:
		d.offset = d.lastOut + 1 - h.SequenceNumber
		d.resumed, d.resumeSeq = true, d.lastOut+1
	}
	if d.switched && d.packets.Load() > 0 {
		d.tsOffset = d.lastTS + 3000 - h.Timestamp
	}
	d.resync, d.switched = false, false
	out := h.SequenceNumber + d.offset
	if since := out - d.resumeSeq; d.resumed && since < 0x8000 && int(since) >= staleWindow(d.src.Buffer) {
		d.resumed = false
	}
	ts := h.Timestamp + d.tsOffset
	if int16(out-d.lastOut) > 0 || d.packets.Load() == 0 {
		d.lastOut = out
		d.lastTS = ts
	}
	hdr := rtp.Header{Version: 2, Marker: h.Marker, PayloadType: d.pt, SequenceNumber: out, Timestamp: ts, SSRC: d.ssrc}
	d.mu.Unlock()
	if _, err := w.WriteRTP(&hdr, payload); err != nil {
		return fmt.Errorf("downtrack %s: %w", d.cfg.ID, err)
	}
	d.packets.Add(1)
	d.bytes.Add(uint64(len(payload) + 12))
	return nil
}

// HandleRTCP acts on the subscriber's feedback for this track: NACKs are
// answered from the shared buffer, PLI and FIR become keyframe requests.
// An inactive (paused) track answers no NACK: it was paused because the
// subscriber's budget has no room for it, and it resumes with a keyframe,
// which needs none of the packets it lost. Nor would the subscriber take
// the retransmissions: pion's SRTP refuses a packet more than 64 behind
// the newest as a replay, and a paused track sends no newer one, so the
// subscriber asks for them again every 100 ms. Answering them would send
// it retransmissions without end (14 Mbit/s to a subscriber whose
// estimate is 100 kbit/s, in TestPausedVideoResumes), all reported lost,
// which holds its loss-based estimate at its minimum, for 12 s after its
// link recovered there.
func (d *DownTrack) HandleRTCP(pkts []rtcp.Packet) {
	for _, p := range pkts {
		switch p := p.(type) {
		case *rtcp.TransportLayerNack:
			for _, pair := range p.Nacks {
				for _, seq := range pair.PacketList() {
					d.nacks.Add(1)
					if !d.active.Load() {
						d.pausedNACKs.Add(1)
						continue
					}
					d.retransmit(seq, true)
				}
			}
		case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
			d.keyframe()
		case *rtcp.ReceiverReport:
			d.mu.Lock()
			ssrc := d.ssrc
			d.mu.Unlock()
			for _, r := range p.Reports {
				if r.SSRC == ssrc {
					d.lost.Store(uint64(r.TotalLost))
				}
				if r.SSRC == ssrc && r.LastSenderReport != 0 {
					now := time.Now()
					if rtt, ok := RTT(now, r.LastSenderReport, r.Delay); ok {
						d.rtt.Store(rtt.Microseconds())
						d.rttAt.Store(now.UnixNano())
					}
				}
			}
		}
	}
}

// RTT computes the round-trip time from a receiver report block that
// arrived at now: lsr is the middle 32 bits of the NTP time of the last
// sender report the receiver got, dlsr the time it held it (both in
// 1/65536 s, RFC 3550 section 6.4.1). ok is false for an impossible
// (negative or over 10 s) result.
func RTT(now time.Time, lsr, dlsr uint32) (time.Duration, bool) {
	rtt := CompactNTP(now) - lsr - dlsr
	if int32(rtt) < 0 || rtt > 10<<16 {
		return 0, false
	}
	return time.Duration(uint64(rtt) * uint64(time.Second) >> 16), true
}

// CompactNTP is the middle 32 bits of t's NTP timestamp (16.16 fixed
// point seconds), as in sender and receiver reports.
func CompactNTP(t time.Time) uint32 {
	const ntpEpochOffset = 2208988800 // 1900 → 1970, seconds
	ns := t.UnixNano()
	secs := uint64(ns/1e9) + ntpEpochOffset
	frac := uint64(ns%1e9) << 32 / 1e9
	return uint32((secs<<32 | frac) >> 16)
}

// LastRTT is the round-trip time of the last receiver report for this
// track and when it was measured (zero times: none yet).
func (d *DownTrack) LastRTT() (time.Duration, time.Time) {
	at := d.rttAt.Load()
	if at == 0 {
		return 0, time.Time{}
	}
	return time.Duration(d.rtt.Load()) * time.Microsecond, time.Unix(0, at)
}

// ReadRTCP reads the subscriber's RTCP for this track from sender until it
// is closed, and handles it. Run it in its own goroutine.
func (d *DownTrack) ReadRTCP(sender *webrtc.RTPSender) {
	for {
		pkts, _, err := sender.ReadRTCP()
		if err != nil {
			return
		}
		d.HandleRTCP(pkts)
	}
}

var pktPool = sync.Pool{New: func() any { b := make([]byte, buffer.MaxPacket); return &b }}

// retransmit resends subscriber sequence number out from the buffer; on a
// miss with fetch set it defers to Source.OnMiss.
//
// A packet sent before the track last resumed (or switched source) is not
// sent again: the resume started with a keyframe, which needs none of
// them, and the offset now maps it to another packet of the source (of
// another source, after a switch). A pion subscriber, whose SRTP refuses
// a packet more than 64 behind the newest as a replay, NACKs such a
// packet again and again; answered, the retransmissions it never takes
// were reported lost in its feedback (95 % of what was sent), and a probe
// (allocator.Prober) that resumed a paused video failed on that loss.
func (d *DownTrack) retransmit(out uint16, fetch bool) {
	d.mu.Lock()
	w, off, ssrc, pt, buf, tsOff := d.writer, d.offset, d.ssrc, d.pt, d.src.Buffer, d.tsOffset
	stale := d.resumed && isStale(out, d.lastOut, d.resumeSeq)
	fetchable := d.fetchable(out, buf)
	d.mu.Unlock()
	if stale {
		d.staleNACKs.Add(1)
		return
	}
	if buf == nil || w == nil {
		d.misses.Add(1)
		return
	}
	// With no room left the packet is neither copied from the buffer nor
	// asked from upstream: a relayed source would otherwise fetch it over
	// the relay link (work on the origin too) only to drop it here.
	if d.cfg.Retransmits != nil && !d.cfg.Retransmits.room() {
		d.limitedNACKs.Add(1)
		return
	}
	bp := pktPool.Get().(*[]byte)
	defer pktPool.Put(bp)
	n, ok := buf.Get(out-off, *bp)
	if !ok {
		d.mu.Lock()
		onMiss := d.src.OnMiss
		d.mu.Unlock()
		if onMiss != nil && fetch && fetchable {
			d.fetches.Add(1)
			onMiss(out-off, d)
			return
		}
		d.misses.Add(1)
		return
	}
	if d.cfg.Retransmits != nil && !d.cfg.Retransmits.take(n) {
		d.limitedNACKs.Add(1)
		return
	}
	var pkt rtp.Packet
	if err := pkt.Unmarshal((*bp)[:n]); err != nil {
		d.misses.Add(1)
		return
	}
	hdr := rtp.Header{Version: 2, Marker: pkt.Marker, PayloadType: pt, SequenceNumber: out, Timestamp: pkt.Timestamp + tsOff, SSRC: ssrc}
	if _, err := w.WriteRTP(&hdr, pkt.Payload); err == nil {
		d.rtx.Add(1)
		d.bytes.Add(uint64(len(pkt.Payload) + 12))
	}
}

// fetchable reports whether a packet of out, missing from buf, may be
// asked from upstream (Source.OnMiss): it was sent (out is not ahead of
// the newest sent) and is no further behind the newest than buf holds;
// upstream's buffer is as large and holds newer packets, so an older one
// is gone there too. The bound keeps a subscriber that NACKs every
// sequence number from making a relaying node ask the origin for 64
// thousand packets on the link's control channel, for one burst of its
// RTCP. d.mu must be held.
func (d *DownTrack) fetchable(out uint16, buf *buffer.Buffer) bool {
	if !d.started || buf == nil {
		return false
	}
	behind := d.lastOut - out
	return behind < 0x8000 && int(behind) < buf.Size()
}

// isStale reports whether out was sent before resumeSeq, the first packet
// after the last resume, with lastOut the newest sent: it is further behind
// lastOut than resumeSeq is. A sequence number ahead of lastOut was not sent
// yet, so it is not stale. Both are measured back from lastOut:
// int16(out-resumeSeq) < 0 alone would hold again from the 32768th packet
// after the resume on, and refuse every NACK as stale for the next 32768
// (9 minutes of a 500 kbit/s video).
func isStale(out, lastOut, resumeSeq uint16) bool {
	behind := lastOut - out
	return behind < 0x8000 && behind > lastOut-resumeSeq
}

// staleWindow is how many packets after a resume a NACK for one sent
// before it is still told apart: the buffer's size (beyond it such a packet
// is out of the buffer anyway), at most 0x4000, well inside half the
// sequence space.
func staleWindow(buf *buffer.Buffer) int {
	if buf == nil || buf.Size() > 0x4000 {
		return 0x4000
	}
	return buf.Size()
}

// Resend sends the source packet with sequence number seq from buf again,
// if buf is still the down track's source and the track is active: it
// answers a NACK that Source.OnMiss deferred, once the packet arrived.
func (d *DownTrack) Resend(buf *buffer.Buffer, seq uint16) {
	if !d.active.Load() {
		d.pausedNACKs.Add(1)
		return
	}
	d.mu.Lock()
	cur, off := d.src.Buffer, d.offset
	d.mu.Unlock()
	if cur != buf || buf == nil {
		d.misses.Add(1)
		return
	}
	d.retransmit(seq+off, false)
}

func (d *DownTrack) keyframe() {
	d.kfr.Add(1)
	d.mu.Lock()
	f := d.src.OnKeyframeRequest
	d.mu.Unlock()
	if f != nil {
		f()
	}
}

// Stats returns the counters.
func (d *DownTrack) Stats() Stats {
	return Stats{Packets: d.packets.Load(), Bytes: d.bytes.Load(), Dropped: d.dropped.Load(), NACKs: d.nacks.Load(),
		Retransmits: d.rtx.Load(), RetransmitMisses: d.misses.Load(), Fetches: d.fetches.Load(), PausedNACKs: d.pausedNACKs.Load(), StaleNACKs: d.staleNACKs.Load(), LimitedNACKs: d.limitedNACKs.Load(), KeyframeRequests: d.kfr.Load(), Lost: d.lost.Load()}
}
