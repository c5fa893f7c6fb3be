package sfu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/sfu/downtrack"
)

// Point clouds over a data channel, for clients that cannot negotiate the
// custom RTP codec MimeTypePointCloud (browsers).
//
// A client asks for it in its one offer: it opens a data channel labelled
// PointCloudLabel (unordered, with a packet lifetime: partially reliable)
// and sets Signal.PointClouds to the number of point-cloud descriptions it
// wants to receive at once. The node makes that many extra receive slots,
// with mids "dc0", "dc1", …, each a DownTrack like an RTP slot but bound to
// the data channel instead of an RTP sender. The allocator, gating and
// source switching are the same as for RTP slots; only the transport
// differs, and the slot Events name these mids too. Every forwarded RTP
// packet becomes one message:
//
//	0      1       2          4
//	+------+-------+----------+-----------------------------------------+
//	| slot | flags | seq (BE) | RTP payload: volumetric.Header + data   |
//	+------+-------+----------+-----------------------------------------+
//
// slot is the slot's index (mid "dc<slot>"), flags bit 0 the RTP marker
// (last fragment of a description), seq the slot's continuous sequence
// number (gaps are losses). Nothing is retransmitted: SCTP's partial
// reliability does what it can within the channel's packet lifetime.
const (
	// PointCloudLabel is the label of the data channel that carries point
	// clouds to a client.
	PointCloudLabel = "pointcloud"
	// PointCloudPrefix is the size of the per-message prefix.
	PointCloudPrefix = 4
	// MaxPointCloudSlots bounds Signal.PointClouds (the slot index is a byte).
	MaxPointCloudSlots = 64
)

// dcMid is the mid of data-channel slot i.
func dcMid(i int) string { return "dc" + strconv.Itoa(i) }

// Data-channel estimator range and step (bit/s).
const (
	dcInitialRate = 20e6
	dcMinRate     = 1e6
	dcMaxRate     = 300e6
)

// pcChannel is a client's point-cloud data channel: the writer of its
// data-channel slots and the channel's own rate estimate, since the
// peer's TWCC estimator sees only RTP.
type pcChannel struct {
	mu sync.Mutex
	dc *webrtc.DataChannel // nil until the client's channel opened

	sent, dropped atomic.Uint64 // messages
	sentBytes     atomic.Uint64

	// estimate (reconcile only)
	rate       float64
	at         time.Time
	atBytes    uint64
	atDrops    uint64
	atBuffered uint64
}

func newPCChannel() *pcChannel { return &pcChannel{rate: dcInitialRate} }

// attach binds the client's data channel once it opened.
func (c *pcChannel) attach(dc *webrtc.DataChannel) {
	c.mu.Lock()
	c.dc = dc
	c.mu.Unlock()
}

// maxBuffered is how much may wait in the channel's send buffer: 500 ms
// of the estimate, within [256 KiB, 4 MiB]. Beyond it packets are dropped
// rather than delayed.
func (c *pcChannel) maxBuffered(rate float64) uint64 {
	return uint64(min(max(rate/8/2, 256<<10), 4<<20))
}

// errDCDropped reports a message not sent (channel not open or full).
var errDCDropped = errors.New("sfu: point-cloud data channel full or not open")

// send writes one message for slot.
func (c *pcChannel) send(slot int, h *rtp.Header, payload []byte) (int, error) {
	c.mu.Lock()
	dc, rate := c.dc, c.rate
	c.mu.Unlock()
	if dc == nil || dc.ReadyState() != webrtc.DataChannelStateOpen || dc.BufferedAmount() > c.maxBuffered(rate) {
		c.dropped.Add(1)
		return 0, errDCDropped
	}
	msg := make([]byte, PointCloudPrefix+len(payload))
	msg[0] = byte(slot)
	if h.Marker {
		msg[1] = 1
	}
	binary.BigEndian.PutUint16(msg[2:], h.SequenceNumber)
	copy(msg[PointCloudPrefix:], payload)
	if err := dc.Send(msg); err != nil {
		c.dropped.Add(1)
		return 0, err
	}
	c.sent.Add(1)
	c.sentBytes.Add(uint64(len(msg)))
	return len(payload), nil
}

// estimate returns the point-cloud budget in bit/s. It is additive-
// increase, multiplicative-decrease on the channel's own back pressure:
// SCTP is congestion-controlled, so a send buffer that fills up (packets
// dropped at maxBuffered, or more than half of it queued) means the path
// is saturated; the estimate then falls to 85 % of what was delivered (at
// most by half).
// Otherwise it grows by 10 % per update (at most every 400 ms), which also
// probes when the allocator forwards less than the estimate.
func (c *pcChannel) estimate(now time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		c.at, c.atBytes, c.atDrops = now, c.sentBytes.Load(), c.dropped.Load()
		if c.dc != nil {
			c.atBuffered = c.dc.BufferedAmount()
		}
		return c.rate
	}
	dt := now.Sub(c.at).Seconds()
	if dt < 0.4 {
		return c.rate
	}
	var buffered uint64
	if c.dc != nil {
		buffered = c.dc.BufferedAmount()
	}
	bytes, drops := c.sentBytes.Load(), c.dropped.Load()
	// what left the send buffer: written in the window less the growth
	// of the buffer
	delivered := (float64(bytes-c.atBytes) - (float64(buffered) - float64(c.atBuffered))) * 8 / dt
	opened := c.dc != nil && c.dc.ReadyState() == webrtc.DataChannelStateOpen
	if opened { // drops before the channel opened say nothing of the path
		congested := drops > c.atDrops || buffered > c.maxBuffered(c.rate)/2
		c.rate = nextDCRate(c.rate, max(delivered, 0), congested)
	}
	c.at, c.atBytes, c.atDrops, c.atBuffered = now, bytes, drops, buffered
	return c.rate
}

// nextDCRate is one step of the data-channel estimate: on congestion 85 %
// of the delivered rate, but never more than before nor less than half of
// it (a window in which forwarding just resumed delivers little), else 10 %
// more, within [dcMinRate, dcMaxRate].
func nextDCRate(rate, delivered float64, congested bool) float64 {
	if congested {
		return max(dcMinRate, min(rate, max(0.85*delivered, 0.5*rate)))
	}
	return min(dcMaxRate, max(dcMinRate, rate*1.1))
}

// PointCloudMessage is one data-channel message parsed.
type PointCloudMessage struct {
	Slot    int
	Marker  bool
	Seq     uint16
	Payload []byte // volumetric.Header + fragment data
}

// ParsePointCloudMessage splits a data-channel message into its prefix and
// the RTP payload.
func ParsePointCloudMessage(b []byte) (PointCloudMessage, error) {
	if len(b) < PointCloudPrefix {
		return PointCloudMessage{}, fmt.Errorf("sfu: point-cloud message of %d bytes, shorter than its %d-byte prefix", len(b), PointCloudPrefix)
	}
	if b[0] >= MaxPointCloudSlots {
		return PointCloudMessage{}, fmt.Errorf("sfu: point-cloud message for slot %d, at most %d", b[0], MaxPointCloudSlots-1)
	}
	return PointCloudMessage{Slot: int(b[0]), Marker: b[1]&1 != 0, Seq: binary.BigEndian.Uint16(b[2:]), Payload: b[PointCloudPrefix:]}, nil
}

// dcWriter is the RTP writer of one data-channel slot.
type dcWriter struct {
	c    *pcChannel
	slot int
}

func (w dcWriter) WriteRTP(h *rtp.Header, payload []byte) (int, error) {
	return w.c.send(w.slot, h, payload)
}

func (w dcWriter) Write(b []byte) (int, error) {
	var p rtp.Packet
	if err := p.Unmarshal(b); err != nil {
		return 0, err
	}
	return w.c.send(w.slot, &p.Header, p.Payload)
}

// dcBinding is the webrtc.TrackLocalContext a data-channel slot's down
// track is bound with: one codec (point clouds) and the slot's writer.
type dcBinding struct {
	id string
	w  dcWriter
}

var dcCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: MimeTypePointCloud, ClockRate: 90000}, PayloadType: 125}

func (b dcBinding) CodecParameters() []webrtc.RTPCodecParameters {
	return []webrtc.RTPCodecParameters{dcCodec}
}
func (b dcBinding) HeaderExtensions() []webrtc.RTPHeaderExtensionParameter { return nil }
func (b dcBinding) SSRC() webrtc.SSRC                                      { return webrtc.SSRC(b.w.slot + 1) }
func (b dcBinding) SSRCRetransmission() webrtc.SSRC                        { return 0 }
func (b dcBinding) SSRCForwardErrorCorrection() webrtc.SSRC                { return 0 }
func (b dcBinding) WriteStream() webrtc.TrackLocalWriter                   { return b.w }
func (b dcBinding) ID() string                                             { return b.id }
func (b dcBinding) RTCPReader() interceptor.RTCPReader                     { return nil }

// newDCSlots makes n data-channel slots writing to c.
func newDCSlots(c *pcChannel, n int) ([]*slot, error) {
	if n < 0 || n > MaxPointCloudSlots {
		return nil, fmt.Errorf("pointclouds %d: want 0-%d", n, MaxPointCloudSlots)
	}
	out := make([]*slot, 0, n)
	for i := 0; i < n; i++ {
		mid := dcMid(i)
		dt, err := downtrack.New(downtrack.Config{ID: "slot-" + mid, StreamID: "xrealm-" + mid, Codec: dcCodec.RTPCodecCapability})
		if err != nil {
			return nil, err
		}
		if _, err := dt.Bind(dcBinding{id: mid, w: dcWriter{c: c, slot: i}}); err != nil {
			return nil, err
		}
		dt.SetActive(false)
		out = append(out, &slot{kind: webrtc.RTPCodecTypeVideo, mid: mid, dt: dt, dc: true})
	}
	return out, nil
}

// accepts reports whether the slot can carry t: a data-channel slot
// carries point clouds only, and an RTP slot does not carry point clouds
// when its client did not negotiate their codec (a browser).
func (s *slot) accepts(t TrackInfo) bool {
	if s.dc {
		return t.PointCloud()
	}
	return !t.PointCloud() || !s.noPC
}

// offersApplication reports whether an SDP has a data-channel m-line.
func offersApplication(sdp string) bool {
	return strings.HasPrefix(sdp, "m=application") || strings.Contains(sdp, "\nm=application")
}

// negotiated reports whether sender's transceiver negotiated mime.
func negotiated(sender *webrtc.RTPSender, mime string) bool {
	for _, c := range sender.GetParameters().Codecs {
		if strings.EqualFold(c.MimeType, mime) {
			return true
		}
	}
	return false
}

var (
	descDCSent     = prometheus.NewDesc("xrealm_sfu_subscriber_datachannel_messages_total", "Point-cloud messages sent on the subscriber's data channel.", []string{"node", "client"}, nil)
	descDCDropped  = prometheus.NewDesc("xrealm_sfu_subscriber_datachannel_dropped_total", "Point-cloud messages dropped: the subscriber's data channel was full or not open.", []string{"node", "client"}, nil)
	descDCRate     = prometheus.NewDesc("xrealm_sfu_subscriber_datachannel_estimate_bps", "The point-cloud data channel's own rate estimate (the allocator's budget for it).", []string{"node", "client"}, nil)
	descDCPubIn    = prometheus.NewDesc("xrealm_sfu_publisher_datachannel_messages_total", "Point-cloud messages the client published on its data channel and the node forwarded.", []string{"node", "client"}, nil)
	descDCPubDrop  = prometheus.NewDesc("xrealm_sfu_publisher_datachannel_dropped_total", "Point-cloud messages the client published on its data channel that were malformed or too large.", []string{"node", "client"}, nil)
	descRTPRefused = prometheus.NewDesc("xrealm_sfu_publisher_rtp_refused_packets_total", "RTP packets the client sent on a point-cloud track it already publishes on its data channel, or on a second track with one id, dropped.", []string{"node", "client"}, nil)
	dcDescs        = []*prometheus.Desc{descDCSent, descDCDropped, descDCRate, descDCPubIn, descDCPubDrop, descRTPRefused}
)

// collectDC reports a client's point-cloud data channel, if it has one.
func (p *peer) collectDC(ch chan<- prometheus.Metric, node, client string) {
	if d := p.pub; d != nil {
		ch <- prometheus.MustNewConstMetric(descDCPubIn, prometheus.CounterValue, float64(d.received.Load()), node, client)
		ch <- prometheus.MustNewConstMetric(descDCPubDrop, prometheus.CounterValue, float64(d.dropped.Load()), node, client)
		ch <- prometheus.MustNewConstMetric(descRTPRefused, prometheus.CounterValue, float64(p.rtpRefused.Load()), node, client)
	}
	c := p.pcc
	if c == nil {
		return
	}
	c.mu.Lock()
	rate := c.rate
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descDCSent, prometheus.CounterValue, float64(c.sent.Load()), node, client)
	ch <- prometheus.MustNewConstMetric(descDCDropped, prometheus.CounterValue, float64(c.dropped.Load()), node, client)
	ch <- prometheus.MustNewConstMetric(descDCRate, prometheus.GaugeValue, rate, node, client)
}
