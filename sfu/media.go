package sfu

import (
	"fmt"
	"net"
	"time"

	"github.com/pion/ice/v4"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/interceptor/pkg/nack"
	"github.com/pion/interceptor/pkg/report"
	"github.com/pion/interceptor/pkg/twcc"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
)

// MimeTypePointCloud is the codec of point-cloud tracks: RTP payloads that
// start with a volumetric.Header. Clients that send or receive point clouds
// register it (RegisterCodecs does).
const MimeTypePointCloud = "video/x-xrealm-pointcloud"

// Codecs the SFU negotiates, with fixed payload types.
var codecs = []struct {
	kind webrtc.RTPCodecType
	p    webrtc.RTPCodecParameters
}{
	{webrtc.RTPCodecTypeAudio, webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"}, PayloadType: 111}},
	{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, RTCPFeedback: videoFeedback}, PayloadType: 96}},
	{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: MimeTypePointCloud, ClockRate: 90000, RTCPFeedback: []webrtc.RTCPFeedback{{Type: "nack"}, {Type: "transport-cc"}}}, PayloadType: 125}},
}

var videoFeedback = []webrtc.RTCPFeedback{{Type: "goog-remb"}, {Type: "ccm", Parameter: "fir"}, {Type: "nack"}, {Type: "nack", Parameter: "pli"}, {Type: "transport-cc"}}

// RegisterCodecs registers Opus, VP8 and the point-cloud codec on m, with
// the header extensions the node reads: transport-cc and audio levels.
func RegisterCodecs(m *webrtc.MediaEngine) error {
	for _, c := range codecs {
		if err := m.RegisterCodec(c.p, c.kind); err != nil {
			return fmt.Errorf("sfu: register %s: %w", c.p.MimeType, err)
		}
	}
	for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeAudio, webrtc.RTPCodecTypeVideo} {
		if err := m.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: sdp.TransportCCURI}, k); err != nil {
			return fmt.Errorf("sfu: register transport-cc: %w", err)
		}
	}
	// publishers' audio levels: who is speaking (TrackInfo.Speaking)
	if err := m.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: sdp.AudioLevelURI}, webrtc.RTPCodecTypeAudio); err != nil {
		return fmt.Errorf("sfu: register audio level: %w", err)
	}
	return nil
}

// newPeerAPI builds the API of one client PeerConnection: NACK generation
// towards the publisher (no NACK responder: down tracks answer from the
// shared buffer), receiver and sender reports (sent as compound packets,
// rtcpbatch.go), TWCC feedback for the
// publisher's estimator, and TWCC sequence numbers plus the send-side
// estimator for what the node sends. onEstimator receives the estimator,
// onProbe the queue probe (qprobe.go).
// With dataChannels (point clouds over a data channel) SCTP is tuned as
// for relay links (peerSettingEngine).
func (n *Node) newPeerAPI(est cc.BandwidthEstimatorFactory, onEstimator func(cc.BandwidthEstimator), onProbe func(*queueProbe), dataChannels bool) (*webrtc.API, error) {
	m := &webrtc.MediaEngine{}
	if err := RegisterCodecs(m); err != nil {
		return nil, err
	}
	reg := &interceptor.Registry{}
	// first: the report interceptors below write through the batcher
	reg.Add(RTCPBatcherFactory{})
	gen, err := nack.NewGeneratorInterceptor()
	if err != nil {
		return nil, err
	}
	reg.Add(gen)
	rr, err := report.NewReceiverInterceptor(reportOpts[report.ReceiverOption](n.cfg.ReportInterval, report.ReceiverInterval)...)
	if err != nil {
		return nil, err
	}
	reg.Add(rr)
	sr, err := report.NewSenderInterceptor(reportOpts[report.SenderOption](n.cfg.ReportInterval, report.SenderInterval)...)
	if err != nil {
		return nil, err
	}
	reg.Add(sr)
	tw, err := twcc.NewSenderInterceptor()
	if err != nil {
		return nil, err
	}
	reg.Add(tw)
	// The estimator must come before the TWCC header extension in the
	// registry: the last one added wraps the others and so stamps the
	// transport-wide sequence number before the estimator records it.
	// So must the queue probe.
	reg.Add(queueProbeFactory{onProbe: onProbe})
	if onEstimator != nil {
		ccf, err := cc.NewInterceptor(est)
		if err != nil {
			return nil, err
		}
		ccf.OnNewPeerConnection(func(_ string, e cc.BandwidthEstimator) { onEstimator(e) })
		reg.Add(ccf)
	}
	hx, err := twcc.NewHeaderExtensionInterceptor()
	if err != nil {
		return nil, err
	}
	reg.Add(hx)
	return webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(reg), webrtc.WithSettingEngine(n.peerSettingEngine(dataChannels))), nil
}

// settingEngine restricts ICE to the configured addresses and ports.
func (n *Node) settingEngine() webrtc.SettingEngine {
	se := NewSettingEngine(n.cfg.ICEAddresses, n.cfg.UDPPortMin, n.cfg.UDPPortMax)
	if n.cfg.Net != nil {
		se.SetNet(n.cfg.Net)
	}
	return se
}

// peerSettingEngine is a client peer's: with dataChannels (its point-cloud
// channel) SCTP is tuned as for relay links (tuneSCTP); SRTP replay
// protection stays on, as for any client.
func (n *Node) peerSettingEngine(dataChannels bool) webrtc.SettingEngine {
	se := n.settingEngine()
	if dataChannels {
		tuneSCTP(&se)
	}
	return se
}

// relaySettingEngine is the relay links': SCTP tuned (tuneSCTP) and, for
// their RTP slots, SRTP replay protection off.
func (n *Node) relaySettingEngine() webrtc.SettingEngine {
	se := n.settingEngine()
	tuneSCTP(&se)
	// RTP slots: a retransmission answering a forwarded NACK is an old
	// sequence number on its slot, which SRTP's replay window would drop.
	se.DisableSRTPReplayProtection(true)
	return se
}

// tuneSCTP tunes SCTP for media channels that are partially reliable and
// already rate-controlled (relay links' media channel, by the allocators;
// a client's point-cloud channel, by its estimate): after a loss, pion's
// defaults (RTO up to 60 s, congestion window down to one MTU) stall the
// channel for seconds while media keeps arriving; a short RTO ceiling and
// a floor under the window keep it flowing.
func tuneSCTP(se *webrtc.SettingEngine) {
	se.SetSCTPRTOMax(300 * time.Millisecond)
	se.SetSCTPMinCwnd(128 << 10)
	se.SetSCTPMaxReceiveBufferSize(4 << 20)
}

// NewSettingEngine returns a setting engine that uses UDP over IPv4 on the
// given local addresses only (all when empty), without mDNS.
func NewSettingEngine(addrs []string, portMin, portMax uint16) webrtc.SettingEngine {
	se := webrtc.SettingEngine{}
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	if len(addrs) > 0 {
		allowed := map[string]bool{}
		for _, a := range addrs {
			allowed[a] = true
		}
		se.SetIPFilter(func(ip net.IP) bool { return allowed[ip.String()] })
		se.SetIncludeLoopbackCandidate(true)
	}
	if portMin > 0 && portMax >= portMin {
		_ = se.SetEphemeralUDPPortRange(portMin, portMax)
	}
	return se
}

// reportOpts sets a report interceptor's interval when d > 0.
func reportOpts[O any](d time.Duration, interval func(time.Duration) O) []O {
	if d <= 0 {
		return nil
	}
	return []O{interval(d)}
}
