package sfu

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/volumetric"
)

// Point clouds published over the data channel, by clients that cannot
// send the custom RTP codec MimeTypePointCloud (browsers).
//
// A client sends on its PointCloudLabel data channel the messages a
// subscriber receives there (datachannel.go), with slot the description
// (0, 1 or 2), flags bit 0 the last fragment of a description, and seq
// numbering the messages of each description. The node publishes
// description d as the client's track "pc<d>", a point-cloud track like
// one sent over RTP: each message becomes one RTP packet of it (sequence
// number seq, timestamp the header's capture time on a 90 kHz clock), so
// subscribers, relays and the allocator see no difference. A message that
// is not a valid fragment of a description, or larger than an RTP packet
// may be, is dropped and counted, and so is every message of a description
// whose track the client already publishes over RTP (its "pc<d>" track on
// this node): the description is refused for the publication's lifetime.
// The capture times in these headers come from the browser's clock, so no
// node records hop ages for these tracks (TrackInfo.DataChannel, hops.go),
// neither this one nor those they are relayed to.
const (
	// MaxPublishMessage is the largest message a client may publish
	// (prefix, fragment header and data): its RTP packet must fit the
	// path's MTU.
	MaxPublishMessage = 1200
	// pcSSRCBase is the SSRC of description 0 of a data-channel
	// publication (only the node's buffers see it).
	pcSSRCBase = 0x7063_0000
)

// dcPublication is a client's point clouds published on its data channel.
type dcPublication struct {
	p       *peer
	mu      sync.Mutex
	sources [volumetric.Descriptions]*source
	refused [volumetric.Descriptions]bool // the client publishes the description's track over RTP
	closed  bool

	received, dropped atomic.Uint64 // messages
	warned            atomic.Bool   // a malformed message was logged
	warnedTaken       atomic.Bool   // a refused description was logged
}

// onMessage handles one message the client sent on its point-cloud channel.
func (d *dcPublication) onMessage(msg webrtc.DataChannelMessage) {
	raw, desc, err := publishedPacket(msg)
	if err != nil {
		d.dropped.Add(1)
		if d.warned.CompareAndSwap(false, true) { // once per client: a flood must not flood the log
			d.p.n.log.Warn("point-cloud message from client dropped", "session", d.p.session, "client", d.p.client, "err", err)
		}
		return
	}
	s := d.source(desc)
	if s == nil {
		d.dropped.Add(1)
		return
	}
	d.received.Add(1)
	s.write(raw)
}

// publishedPacket checks one published message and returns it as an RTP
// packet with its description.
func publishedPacket(msg webrtc.DataChannelMessage) ([]byte, int, error) {
	if msg.IsString {
		return nil, 0, fmt.Errorf("a text message of %d bytes; point clouds are binary", len(msg.Data))
	}
	if len(msg.Data) > MaxPublishMessage {
		return nil, 0, fmt.Errorf("a message of %d bytes, at most %d", len(msg.Data), MaxPublishMessage)
	}
	m, err := ParsePointCloudMessage(msg.Data)
	if err != nil {
		return nil, 0, err
	}
	if m.Slot >= volumetric.Descriptions {
		return nil, 0, fmt.Errorf("description %d, want 0-%d", m.Slot, volumetric.Descriptions-1)
	}
	h, _, err := volumetric.ParseHeader(m.Payload)
	if err != nil {
		return nil, 0, err
	}
	if int(h.Description) != m.Slot {
		return nil, 0, fmt.Errorf("the header's description %d differs from the prefix's %d", h.Description, m.Slot)
	}
	hdr := rtp.Header{
		Version: 2, PayloadType: uint8(dcCodec.PayloadType), Marker: m.Marker,
		SequenceNumber: m.Seq, Timestamp: uint32(h.CaptureUs * 9 / 100), SSRC: pcSSRCBase + uint32(m.Slot),
	}
	raw := make([]byte, hdr.MarshalSize()+len(m.Payload))
	n, err := hdr.MarshalTo(raw)
	if err != nil {
		return nil, 0, err
	}
	copy(raw[n:], m.Payload)
	return raw, m.Slot, nil
}

// source returns the source of description desc, announcing it on its
// first message; nil once the publication closed, or when the description
// is refused: the client already publishes its track over RTP, which
// announcing this one would replace (and the RTP track's end would then
// unannounce it and stop it on the relay links).
func (d *dcPublication) source(desc int) *source {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.refused[desc] {
		return nil
	}
	if s := d.sources[desc]; s != nil {
		return s
	}
	p := d.p
	info := TrackInfo{Session: p.session, Client: p.client, Track: fmt.Sprintf("pc%d", desc), Kind: webrtc.RTPCodecTypeVideo.String(), Mime: MimeTypePointCloud, Node: p.n.cfg.ID,
		DataChannel: true}
	// Every description is self-contained: nothing to ask for. No hop
	// ages: the capture times are the browser's clock.
	s := newSource(info, func() {})
	s.hops = p.n.hopsFor(info)
	if p.n.addLocal(s, func(*source) bool { return true }) != nil {
		d.refused[desc] = true
		if d.warnedTaken.CompareAndSwap(false, true) {
			p.n.log.Warn("client publishes a point-cloud description on its data channel that it already publishes over RTP; its messages are dropped",
				"session", p.session, "client", p.client, "track", info.Track)
		}
		return nil
	}
	d.sources[desc] = s
	p.n.log.Info("client publishes point clouds on its data channel", "session", p.session, "client", p.client, "track", info.Track)
	return s
}

// close unannounces the publication's tracks.
func (d *dcPublication) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	srcs := d.sources
	d.mu.Unlock()
	for _, s := range srcs {
		if s != nil {
			d.p.n.removeLocal(s)
		}
	}
}
