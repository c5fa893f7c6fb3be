package sfu

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/rtcp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/allocator"
	"github.com/xrealm/xrealm/sfu/downtrack"
)

// Nominal bitrates for tracks not measured yet (TrackInfo.Rate).
const (
	nominalAudio      = 64_000
	nominalVideo      = 1_500_000
	nominalPointCloud = 10_000_000
)

// probeLoss is the share of the packets sent to a subscriber over an
// interval that its feedback reports lost above which a probe ends (GCC's
// own threshold for a decrease).
const probeLoss = 0.10

// peer is one client's PeerConnection on this node: its publications and
// its pre-negotiated receive slots.
type peer struct {
	n               *Node
	session, client string
	pc              *webrtc.PeerConnection
	est             atomic.Pointer[estimatorBox]
	probe           atomic.Pointer[queueProbe] // queueing delays from TWCC feedback (qprobe.go)
	estName         string                     // as the client asked, "default" for Config.Estimator
	estFactory      cc.BandwidthEstimatorFactory
	frames          atomic.Pointer[FrameReport] // the client's last report
	pcSlots         int                         // data-channel slots asked for (Signal.PointClouds)
	pcc             *pcChannel                  // the point-cloud data channel, if pcSlots > 0
	pub             *dcPublication              // point clouds the client publishes on that channel (pcpublish.go), if it offered one
	pcTaken         atomic.Bool                 // a PointCloudLabel channel was taken; later ones are closed
	extraWarned     atomic.Bool                 // a second PointCloudLabel channel was logged
	rtpRefused      atomic.Uint64               // RTP packets of tracks refused: the client publishes them on its data channel
	// rtx bounds what the node retransmits to the client, over all its
	// slots (downtrack.RetransmitBytesPerSecond)
	rtx *downtrack.RetransmitBudget

	mu        sync.Mutex
	closed    bool
	ready     bool // slots are bound; set once by start
	slots     []*slot
	alloc     *allocator.Allocator
	avAlloc   *allocator.Allocator // audio and video when point clouds ride the data channel (pcc)
	prober    *allocator.Prober    // probes for floors paused for budget on the RTP (probe below)
	budget    float64              // bit/s of the last allocation
	allocated float64
	link      peerLink        // the shared-path budget (shared.go)
	rtpTracks map[string]bool // ids of the tracks the client publishes over RTP (onTrack)
}

type estimatorBox struct{ cc.BandwidthEstimator }

type slot struct {
	kind   webrtc.RTPCodecType
	mid    string
	dt     *downtrack.DownTrack
	src    *source
	sender *webrtc.RTPSender
	dc     bool    // a data-channel slot (datachannel.go)
	noPC   bool    // an RTP slot whose client did not negotiate point clouds
	told   *source // what the client was last told the slot carries (notify)
}

// MaxMediaSections bounds the m-lines of a client's offer: its published
// tracks, its receive slots and its data channel. A browser offers a
// dozen, a bench client 64; each receive slot is a down track with an
// RTCP reader on the node, and each published track a source announced to
// every node. An offer with more is refused. Without the bound, a 1 MB
// offer of 7000 receive-only m-lines costs the node a second of CPU and
// 7000 down tracks, and its 2.8 MB answer cannot go back over the bus, so
// the client times out and tries the next node, which takes the same load.
const MaxMediaSections = 256

// MaxPublishedTracks bounds the audio and video tracks a client's offer
// publishes (send-only or send-receive m-lines): a browser publishes two,
// a volumetric client three descriptions. Each published track is a
// source with its own retransmission buffer (1.5 MB), announced to every
// node and allocated for every subscriber of the session; within
// MaxMediaSections alone a client could cost a node 384 MB.
const MaxPublishedTracks = 16

// publishedTracks counts the audio and video m-lines of an offer that send:
// send-only or send-receive (the default), not rejected (port 0).
func publishedTracks(sd *sdp.SessionDescription) int {
	n := 0
	for _, m := range sd.MediaDescriptions {
		if publishes(m) {
			n++
		}
	}
	return n
}

// publishes tells whether m is an audio or video m-line the client sends
// on (send-only or send-receive).
func publishes(m *sdp.MediaDescription) bool {
	if (m.MediaName.Media != "audio" && m.MediaName.Media != "video") || m.MediaName.Port.Value == 0 {
		return false
	}
	for _, a := range m.Attributes {
		if a.Key == "recvonly" || a.Key == "inactive" {
			return false
		}
	}
	return true
}

// duplicateTrackID returns a track id that two of the offer's published
// m-lines declare (in a=msid or a=ssrc ... msid:), and "" when there is
// none. Ids that are no valid name are left out: onTrack names those
// tracks by their SSRC.
func duplicateTrackID(sd *sdp.SessionDescription) string {
	seen := map[string]bool{}
	for _, m := range sd.MediaDescriptions {
		if !publishes(m) {
			continue
		}
		ids := map[string]bool{} // an m-line's ssrc lines (RTX too) repeat its id
		for _, a := range m.Attributes {
			var f []string
			switch a.Key {
			case "msid":
				f = strings.Fields(a.Value)
			case "ssrc":
				if v := strings.Fields(a.Value); len(v) == 3 && strings.HasPrefix(v[1], "msid:") {
					f = v[1:]
				}
			}
			if len(f) == 2 && validName("track", f[1]) == nil {
				ids[f[1]] = true
			}
		}
		for id := range ids {
			if seen[id] {
				return id
			}
			seen[id] = true
		}
	}
	return ""
}

// join creates the peer of a client from its offer and returns the answer.
// The offer must carry the client's send-only tracks and the receive-only
// transceivers (slots) it wants; there is no renegotiation afterwards.
//
// tok is the offer's token (beginOffer): a leave of the client while the
// offer is handled marks it, and join then makes no peer, or closes the
// one it made, and returns an error wrapping errLeft.
func (n *Node) join(session, client, offer, estimator string, pointClouds int, tok *offerToken) (string, error) {
	if pointClouds < 0 || pointClouds > MaxPointCloudSlots {
		return "", fmt.Errorf("sfu: pointclouds %d: want 0-%d", pointClouds, MaxPointCloudSlots)
	}
	var sd sdp.SessionDescription
	if err := sd.UnmarshalString(offer); err != nil {
		return "", fmt.Errorf("sfu: client %s/%s: offer of %d bytes is not an SDP: %w", session, client, len(offer), err)
	}
	if len(sd.MediaDescriptions) > MaxMediaSections {
		return "", fmt.Errorf("sfu: client %s/%s: offer has %d m-lines (tracks, slots, data channel), at most %d", session, client, len(sd.MediaDescriptions), MaxMediaSections)
	}
	if pub := publishedTracks(&sd); pub > MaxPublishedTracks {
		return "", fmt.Errorf("sfu: client %s/%s: offer publishes %d tracks (send-only or send-receive audio and video m-lines), at most %d", session, client, pub, MaxPublishedTracks)
	}
	if id := duplicateTrackID(&sd); id != "" {
		return "", fmt.Errorf("sfu: client %s/%s: offer publishes track id %q on two m-lines; a client's tracks need distinct ids (their key is session/client/track)", session, client, id)
	}
	if pointClouds > 0 && !offersApplication(offer) {
		return "", fmt.Errorf("sfu: pointclouds %d without a data channel %q in the offer", pointClouds, PointCloudLabel)
	}
	est, err := n.cfg.estimator(estimator)
	if err != nil {
		return "", err
	}
	key := session + "/" + client
	if n.joinStage != nil {
		n.joinStage(key, stageRegister)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return "", errClosed
	}
	if tok.left {
		n.mu.Unlock()
		return "", fmt.Errorf("sfu: client %s left while its offer was handled; no connection made (%w)", key, errLeft)
	}
	if n.peers[key] != nil {
		n.mu.Unlock()
		return "", fmt.Errorf("sfu: client %s already connected (one offer per connection: pre-negotiate receive slots)", key)
	}
	if len(n.peers) >= n.cfg.MaxClients {
		n.mu.Unlock()
		return "", fmt.Errorf("sfu: client %s refused: %w: node %s has %d clients connected, at most %d (Config.MaxClients)", key, errNodeFull, n.cfg.ID, len(n.peers), n.cfg.MaxClients)
	}
	p := &peer{n: n, session: session, client: client, alloc: allocator.New(n.cfg.Mode), prober: allocator.NewProber(n.cfg.Probe), estName: estimator, estFactory: est, pcSlots: pointClouds,
		rtx: downtrack.NewRetransmitBudget(downtrack.RetransmitBytesPerSecond, nil)}
	if pointClouds > 0 {
		p.pcc = newPCChannel()
		p.avAlloc = allocator.New(n.cfg.Mode)
	}
	if offersApplication(offer) {
		p.pub = &dcPublication{p: p}
	}
	if p.estName == "" {
		p.estName = "default"
	}
	n.peers[key] = p
	n.mu.Unlock()
	sdp, err := p.start(offer)
	if err != nil {
		if n.joinStage != nil {
			n.joinStage(key, stageStartFailed)
		}
		p.close()
		if n.offerLeft(tok) {
			if errors.Is(err, errLeft) {
				return "", fmt.Errorf("sfu: client %s left while its offer was handled; its connection closed (%w)", key, errLeft)
			}
			// the start failed for its own reason too: say it, or the
			// client hears only that it left
			return "", fmt.Errorf("sfu: client %s left while its offer was handled; its connection closed (%w), and making it failed: %w", key, errLeft, err)
		}
		return "", fmt.Errorf("sfu: client %s: %w", key, err)
	}
	if n.joinStage != nil {
		n.joinStage(key, stageAnswer)
	}
	if n.offerLeft(tok) {
		// the leave closed the peer (it was registered by then); its
		// answer is for nobody
		p.close()
		return "", fmt.Errorf("sfu: client %s left while its offer was handled; its connection closed (%w)", key, errLeft)
	}
	go p.reconcile()
	return sdp, nil
}

// join's stages for Node.joinStage (tests).
const (
	stageRegister    = "register"
	stageAnswer      = "answer"
	stageStartFailed = "start failed" // its connection failed to start
)

// offerLeft reports whether a leave came for the offer of tok.
func (n *Node) offerLeft(tok *offerToken) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return tok.left
}

func (p *peer) start(offer string) (string, error) {
	// with a data channel (point clouds): SCTP tuned as for relay links
	api, err := p.n.newPeerAPI(p.estFactory, func(e cc.BandwidthEstimator) { p.est.Store(&estimatorBox{e}) }, p.probe.Store, p.pub != nil)
	if err != nil {
		return "", err
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	closed := p.closed
	p.pc = pc
	p.mu.Unlock()
	if closed { // the client left (a leave after its offer timed out) while the node made its connection
		_ = pc.Close()
		return "", errLeft
	}
	pc.OnTrack(p.onTrack)
	if p.pub != nil {
		pc.OnDataChannel(p.onDataChannel)
	}
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateClosed {
			p.close()
		}
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		return "", err
	}
	// Remote receive-only m-lines became send-only transceivers without a
	// sender: bind one slot down track to each.
	var slots []*slot
	for _, t := range pc.GetTransceivers() {
		if t.Direction() != webrtc.RTPTransceiverDirectionSendonly || t.Sender() != nil {
			continue
		}
		codec := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}
		if t.Kind() == webrtc.RTPCodecTypeAudio {
			codec = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus}
		}
		dt, err := downtrack.New(downtrack.Config{ID: "slot-" + t.Mid(), StreamID: "xrealm-" + t.Mid(), Codec: codec, Retransmits: p.rtx})
		if err != nil {
			return "", err
		}
		dt.SetActive(false)
		sender, err := pc.AddTrack(dt)
		if err != nil {
			return "", fmt.Errorf("slot %s: %w", t.Mid(), err)
		}
		s := &slot{kind: t.Kind(), dt: dt, sender: sender, noPC: !negotiated(sender, MimeTypePointCloud)}
		for _, t2 := range pc.GetTransceivers() {
			if t2.Sender() == sender {
				s.mid = t2.Mid()
			}
		}
		slots = append(slots, s)
		go dt.ReadRTCP(sender)
	}
	if p.pcc != nil {
		dcs, err := newDCSlots(p.pcc, p.pcSlots)
		if err != nil {
			return "", err
		}
		slots = append(slots, dcs...)
	}
	p.mu.Lock()
	p.slots, p.ready = slots, true
	p.mu.Unlock()
	return Gathered(pc, false)
}

// errLeft is what a join's error wraps when the client left while its
// offer was handled.
var errLeft = errors.New("left while joining")

// onDataChannel takes the client's first PointCloudLabel channel: it
// carries the point clouds the client receives (pcc) and publishes (pub),
// and the publication ends when it closes. A later channel with that label
// is closed (logged once per client): two channels would write to the same
// sources and re-attach the subscriber side. Other labels are ignored.
func (p *peer) onDataChannel(dc *webrtc.DataChannel) {
	if dc.Label() != PointCloudLabel {
		return
	}
	if !p.pcTaken.CompareAndSwap(false, true) {
		if p.extraWarned.CompareAndSwap(false, true) {
			p.n.log.Warn("client opened another point-cloud data channel; closed it (only the first one is used)",
				"session", p.session, "client", p.client, "label", dc.Label())
		}
		_ = dc.Close()
		return
	}
	if p.pcc != nil {
		dc.OnOpen(func() { p.pcc.attach(dc) })
	}
	dc.OnMessage(p.pub.onMessage)
	dc.OnClose(p.pub.close)
}

func (p *peer) onTrack(track *webrtc.TrackRemote, r *webrtc.RTPReceiver) {
	info := TrackInfo{Session: p.session, Client: p.client, Track: track.ID(), Kind: track.Kind().String(), Mime: track.Codec().MimeType, Node: p.n.cfg.ID}
	if validName("track", info.Track) != nil {
		info.Track = fmt.Sprintf("t%d", track.SSRC())
	}
	ssrc := uint32(track.SSRC())
	s := newSource(info, func() {
		_ = p.pc.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: ssrc}})
	})
	s.hops = p.n.hopsFor(info)
	if track.Kind() == webrtc.RTPCodecTypeAudio {
		for _, e := range r.GetParameters().HeaderExtensions {
			if e.URI == sdp.AudioLevelURI {
				s.levelExt = uint8(e.ID)
			}
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	dup := p.rtpTracks[info.Track]
	if !dup {
		if p.rtpTracks == nil {
			p.rtpTracks = map[string]bool{}
		}
		p.rtpTracks[info.Track] = true
	}
	p.mu.Unlock()
	buf := make([]byte, 1500)
	if dup {
		// join refuses offers that declare an id twice; this is a track
		// whose id came otherwise (an SSRC's msid in an m-line that
		// declared none): it would replace the client's first track of
		// that id, so its packets are read and dropped
		p.n.log.Warn("client publishes a second track with one id; its packets are dropped",
			"session", p.session, "client", p.client, "track", info.Track, "ssrc", ssrc)
		for {
			if _, _, err := track.Read(buf); err != nil {
				return
			}
			p.rtpRefused.Add(1)
		}
	}
	if p.n.addLocal(s, func(old *source) bool { return old.info.DataChannel }) != nil {
		// The client publishes this description on its data channel
		// already (pcpublish.go): the track would replace that one, whose
		// end would then unannounce it. Its packets are read (so that the
		// interceptors see them) and dropped.
		p.n.log.Warn("client publishes a point-cloud description over RTP that it already publishes on its data channel; its packets are dropped",
			"session", p.session, "client", p.client, "track", info.Track, "ssrc", ssrc)
		for {
			if _, _, err := track.Read(buf); err != nil {
				return
			}
			p.rtpRefused.Add(1)
		}
	}
	for {
		k, _, err := track.Read(buf)
		if err != nil {
			break
		}
		s.write(buf[:k])
	}
	p.n.removeLocal(s)
}

// reconcile re-runs the allocation and assigns slots accordingly.
func (p *peer) reconcile() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.ready {
		return
	}
	tracks := p.n.sessionTracks(p.session)
	sort.Slice(tracks, func(i, j int) bool { return tracks[i].Key() < tracks[j].Key() })
	estimate := math.Inf(1)
	if e := p.est.Load(); e != nil {
		estimate = float64(e.GetTargetBitrate())
	}
	share := p.linkShare()
	budget := math.Min(estimate, share)
	p.n.mu.Lock()
	myPose := p.n.poseOf(p.session + "/" + p.client)
	rateOf := func(t TrackInfo) float64 {
		if s := p.n.local[t.Key()]; s != nil && s.budget.Load() > 0 {
			return float64(s.budget.Load())
		}
		if s := p.n.relayed[t.Key()]; s != nil && s.budget.Load() > 0 {
			return float64(s.budget.Load())
		}
		if t.Rate > 0 {
			// measured at its origin: a track not relayed here (yet, or
			// no more since its last subscriber here paused it)
			return float64(t.Rate)
		}
		switch {
		case t.PointCloud():
			return nominalPointCloud * []float64{0.15, 0.25, 0.60}[max(t.Description(), 0)]
		case t.Kind == "audio":
			return nominalAudio
		}
		return nominalVideo
	}
	var myFOV float64
	if myPose != nil {
		myFOV = myPose.FOV
	}
	// interest ranks a publisher for this client; unknown is its value
	// when the client has a pose and the publisher none.
	interest := func(client string, fov, unknown float64) float64 {
		if myPose == nil {
			return 1
		}
		if pub := p.n.poseOf(p.session + "/" + client); pub != nil {
			return allocator.Interest(allocator.Pose{Position: myPose.Position, Forward: myPose.Forward, FOV: fov}, pub.Position)
		}
		return unknown
	}
	// Audio and video slots go to the nearest publishers, as many as the
	// client has slots of the kind (audio by distance alone: people behind
	// are heard too; speakers first); then those tracks and the point-cloud
	// descriptions, grouped by publisher, go through the allocator, which
	// forwards what fits the budget: audio first, then the floors (a
	// video, a point cloud's cheapest choice) by interest, then upgrades.
	groups := map[string]*allocator.Demand{}
	members := map[string][]TrackInfo{}
	av := map[webrtc.RTPCodecType][]allocator.Candidate{}
	avInfo := map[string]TrackInfo{}
	avInterest := map[string]float64{}
	for _, t := range tracks {
		if t.Client == p.client {
			continue
		}
		if t.Idle {
			continue // muted, or a point cloud that stopped: its slot goes to the next publisher
		}
		if !t.PointCloud() || t.Description() < 0 {
			kind := webrtc.NewRTPCodecType(t.Kind)
			fov := myFOV
			if kind == webrtc.RTPCodecTypeAudio {
				fov = 0
			}
			// a publisher without a pose ranks below everyone placed
			avInterest[t.Key()] = interest(t.Client, fov, 0)
			av[kind] = append(av[kind], allocator.Candidate{Key: t.Key(), Interest: avInterest[t.Key()], Held: p.holds(t.Key()), Active: t.Speaking})
			avInfo[t.Key()] = t
			continue
		}
		d := groups[t.Client]
		if d == nil {
			d = &allocator.Demand{ID: t.Client, Interest: interest(t.Client, myFOV, 1), Rates: make([]float64, 3)}
			groups[t.Client] = d
		}
		d.Rates[t.Description()] = rateOf(t)
		members[t.Client] = append(members[t.Client], t)
	}
	var avDemands []allocator.Demand
	demand := 0.0 // bit/s forwarded unconstrained
	for kind, cands := range av {
		for key := range allocator.Nearest(cands, p.rtpSlots(kind)) {
			t := avInfo[key]
			d := allocator.Demand{ID: key, Kind: allocator.Video, Interest: avInterest[key], Rates: []float64{rateOf(t)}}
			if kind == webrtc.RTPCodecTypeAudio {
				d.Kind, d.Active = allocator.Audio, t.Speaking
			}
			avDemands = append(avDemands, d)
			demand += d.Rates[0]
		}
	}
	p.n.mu.Unlock()
	demands := make([]allocator.Demand, 0, len(groups)+len(avDemands))
	for _, d := range groups {
		for _, r := range d.Rates {
			demand += r
		}
		// a description not announced has rate 0: choosing it costs
		// nothing and forwards nothing
		demands = append(demands, *d)
	}
	pcs := len(demands) // demands[:pcs] are the point clouds
	p.link.demand = demand
	if p.alloc.Mode == allocator.Layers {
		p.pathCosts(demands[:pcs])
	}
	// Nothing would flow on the PeerConnection when al's allocation
	// forwards nothing, so no feedback would come, and its estimator (GCC,
	// Hera), which moves only on feedback, would keep a low estimate for
	// good: a subscriber cut off by a burst of congestion (or of CPU load)
	// never received again. So the cheapest choice of the first in al's
	// order (audio, else the most interesting video or point cloud) flows,
	// as a WebRTC sender keeps its video at its minimum rate rather than
	// stopping it; its feedback lets the estimate rise again where the
	// path has room. Nothing else goes to this subscriber, so the flow
	// competes only with itself (on a path narrower than it, it congests
	// that path, where nothing would arrive otherwise); not when the share
	// of a group of subscribers on one path is the limit, nor when the
	// share is below the flow while the group's other members are sent
	// something (shared.go): their feedback keeps that budget moving, and
	// their flows would suffer. A group with nothing flowing would stay
	// starved: its budget follows what it is sent.
	//
	// A floor paused for budget is probed for (allocator.Prober): now and
	// then the cheapest one is forwarded above the budget, so that the
	// estimator, which learns only from what it is sent, can see that the
	// path carries it again (pion's GCC caps its increase at 1.5 × what
	// the subscriber received: with only audio flowing, its estimate could
	// stay at its minimum for good). A probe ends with its floor kept once
	// the estimate covers it, or paused again when the path congests (the
	// p95 queueing delay of TWCC feedback above allocator.TailHigh, or
	// more than probeLoss of the packets reported lost), when the estimate
	// falls, when the shared path's share becomes the limit, or after its
	// window.
	//
	// The probe's step comes after the slots are assigned: a demand the
	// allocation forwards but no slot could take (planSlots) counts as
	// paused (Allocator.Carried): it resumes with headroom, its rate is
	// not counted as sent, and a probe forced on it fits only once it
	// has a slot.
	allocate := func(al *allocator.Allocator, budget float64, demands []allocator.Demand) (allocator.Decision, float64, bool) {
		dec, used, fits := al.AllocateProbe(budget, demands, p.prober.Probing())
		if used == 0 && estimate <= share {
			if l := al.Least(demands); l > 0 && (l <= share || p.link.othersSent <= 0) {
				dec, used = al.AllocateLeast(demands)
			}
		}
		return dec, used, fits
	}
	probeStep := func(al *allocator.Allocator, demands []allocator.Demand, dec, carried allocator.Decision, fits bool) {
		probing := p.prober.Probing()
		// the share as the limit is congestion, not "nothing paused",
		// which would reset the prober's backoff; a probed floor that
		// got no slot does not fit
		in := allocator.ProbeInput{Estimate: estimate, Fits: fits && (dec[probing] == 0 || carried[probing] != 0),
			Congested: estimate > share || p.link.tail > allocator.TailHigh || p.link.loss > probeLoss}
		// a demand no slot could take is not probed for: a probe would
		// not give it one
		in.Paused, _ = al.CheapestPaused(demands, dec)
		if ev := p.prober.Step(time.Now(), in); ev != allocator.ProbeNone {
			if ev == allocator.ProbeStarted {
				probing = p.prober.Probing()
			}
			p.n.probes[ev].Add(1)
			p.n.log.Debug("sfu probe", "session", p.session, "client", p.client, "event", ev, "track", probing, "estimate", estimate, "budget", budget)
		}
	}
	// plans are the allocations made: the PeerConnection's (probed), and
	// with a data channel its point clouds'
	type plan struct {
		al      *allocator.Allocator
		demands []allocator.Demand
		dec     allocator.Decision
		fits    bool
		probed  bool
	}
	var plans []plan
	if p.pcc == nil {
		demands = append(demands, avDemands...)
		dec, _, fits := allocate(p.alloc, budget, demands)
		plans = []plan{{al: p.alloc, demands: demands, dec: dec, fits: fits, probed: true}}
	} else {
		// Point clouds ride the data channel, budgeted by its own
		// estimate (which grows by itself: nothing is forced there);
		// audio and video the PeerConnection's RTP.
		avDec, avUsed, fits := allocate(p.avAlloc, budget, avDemands)
		pcDec, _ := p.alloc.Allocate(math.Min(p.pcc.estimate(time.Now()), share-avUsed), demands)
		plans = []plan{{al: p.avAlloc, demands: avDemands, dec: avDec, fits: fits, probed: true}, {al: p.alloc, demands: demands, dec: pcDec}}
	}
	dec := allocator.Decision{}
	for _, pl := range plans {
		maps.Copy(dec, pl.dec)
	}
	want := map[string]wantedTrack{}
	for _, d := range avDemands {
		if dec[d.ID] != 0 {
			want[d.ID] = wantedTrack{info: avInfo[d.ID], interest: d.Interest}
		}
	}
	for client, ts := range members {
		for _, t := range ts {
			if dec[client].Has(t.Description()) {
				w := wantedTrack{info: t, rank: 1, interest: groups[client].Interest}
				if p.alloc.Mode == allocator.Layers && t.Description() > 0 {
					w.rank = 2 // an upgrade
				}
				want[t.Key()] = w
			}
		}
	}
	for i, t := range planSlots(p.slots, want) {
		s := p.slots[i]
		if s.src != nil && (t == nil || s.src.info.Key() != t.Key()) {
			p.unassign(s)
		}
		if t != nil && s.src == nil {
			p.assign(s, *t)
		}
	}
	// what the slots carry, by demand
	carried := allocator.Decision{}
	for _, s := range p.slots {
		if s.src == nil {
			continue
		}
		t := s.src.info
		if _, ok := avInfo[t.Key()]; ok {
			carried[t.Key()] = dec[t.Key()]
		} else if t.PointCloud() && t.Description() >= 0 {
			carried[t.Client] |= 1 << t.Description()
		}
	}
	used := 0.0
	for _, pl := range plans {
		used += pl.al.Carried(pl.demands, pl.dec, carried)
		if pl.probed {
			probeStep(pl.al, pl.demands, pl.dec, carried, pl.fits)
		}
	}
	fwd := make(map[string]float64, len(carried)) // per point-cloud publisher
	for _, d := range demands[:pcs] {
		for i, r := range d.Rates {
			if (dec[d.ID] & carried[d.ID]).Has(i) {
				fwd[d.ID] += r
			}
		}
	}
	p.setForwarded(fwd)
	p.budget, p.allocated = budget, used
	// The client is told what differs from what it was last told, not
	// only what this pass changed: a slot freed elsewhere (dropSources)
	// that nothing refills would otherwise stay, for the client, on its
	// old track.
	p.notify()
}

// wantedTrack is a track an allocation forwards, as planSlots ranks it:
// audio and video (rank 0) before point-cloud floors (1) before upgrades
// (2); within a rank the most interesting first, then by key.
type wantedTrack struct {
	info     TrackInfo
	rank     int
	interest float64
}

func (w wantedTrack) before(o wantedTrack) bool {
	if w.rank != o.rank {
		return w.rank < o.rank
	}
	if w.interest != o.interest {
		return w.interest > o.interest
	}
	return w.info.Key() < o.info.Key()
}

// planSlots returns, per slot, the track it is to carry (nil: none) for
// the tracks wanted, by key. A slot keeps a wanted track it carries; the
// other wanted tracks, in planSlots' order (wantedTrack), take a free slot
// of their kind that accepts them, else the slot of the last track in that
// order of a lower rank, which then has none. A Go client's RTP video
// slots carry video and point clouds alike: a point cloud may take the
// slot of a video paused for budget, and the video, wanted again, takes it
// back (the point cloud is of a lower rank) rather than find none free,
// for good. A wanted track left without a slot is paused
// (Allocator.Carried).
func planSlots(slots []*slot, want map[string]wantedTrack) []*TrackInfo {
	plan := make([]*TrackInfo, len(slots))
	held := map[string]int{} // key → slot
	for i, s := range slots {
		if s.src == nil {
			continue
		}
		if w, ok := want[s.src.info.Key()]; ok {
			plan[i] = &w.info
			held[w.info.Key()] = i
		}
	}
	pending := make([]wantedTrack, 0, len(want))
	for k, w := range want {
		if _, ok := held[k]; !ok {
			pending = append(pending, w)
		}
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].before(pending[j]) })
	for _, w := range pending {
		kind := webrtc.NewRTPCodecType(w.info.Kind)
		free, victim := -1, -1
		for i, s := range slots {
			if s.kind != kind || !s.accepts(w.info) {
				continue
			}
			if plan[i] == nil {
				free = i
				break
			}
			h := want[plan[i].Key()]
			if h.rank > w.rank && (victim < 0 || want[plan[victim].Key()].before(h)) {
				victim = i
			}
		}
		if free < 0 {
			free = victim
		}
		if free >= 0 {
			plan[free] = &w.info
		}
	}
	return plan
}

// holds reports whether one of the peer's slots carries the track; p.mu
// must be held.
func (p *peer) holds(key string) bool {
	for _, s := range p.slots {
		if s.src != nil && s.src.info.Key() == key {
			return true
		}
	}
	return false
}

// rtpSlots is the number of the peer's RTP slots of kind; p.mu must be
// held. A Go client's video slots also take point clouds: then the nearest
// videos chosen can be more than the slots point clouds leave, and the
// slots go to them in key order.
func (p *peer) rtpSlots(kind webrtc.RTPCodecType) int {
	n := 0
	for _, s := range p.slots {
		if !s.dc && s.kind == kind {
			n++
		}
	}
	return n
}

func (p *peer) assign(s *slot, t TrackInfo) {
	src := p.n.acquire(t)
	if src == nil {
		return
	}
	if err := s.dt.SetSource(src.downSource()); err != nil {
		p.n.log.Warn("slot cannot carry track", "client", p.client, "slot", s.mid, "track", t.Key(), "err", err)
		p.n.release(src, src.removeDown(s.dt))
		return
	}
	s.src = src
	src.addDown(s.dt)
	s.dt.SetActive(true)
}

func (p *peer) unassign(s *slot) {
	s.dt.SetActive(false)
	src := s.src
	s.src = nil
	p.n.release(src, src.removeDown(s.dt))
}

// dropSources frees the slots fed by sources that disappeared (a relay
// link closed); the reconcile that follows subscribes again, or gives the
// slots other tracks, and tells the client (notify), also when a slot
// stays empty.
func (p *peer) dropSources(gone []*source) {
	p.mu.Lock()
	p.dropLocked(gone)
	p.mu.Unlock()
	go p.reconcile()
}

// dropLocked frees the slots fed by the sources gone without telling the
// client; p.mu must be held.
func (p *peer) dropLocked(gone []*source) {
	for _, s := range p.slots {
		for _, g := range gone {
			if s.src == g {
				s.dt.SetActive(false)
				g.removeDown(s.dt)
				s.src = nil
			}
		}
	}
}

// notify tells the client what the slots that changed since the last event
// carry (idle slots never assigned are not listed), whatever changed them;
// it sends nothing when no slot did. p.mu must be held.
// Only changes are sent: every event crosses the bus, and full lists of 63
// slots on each allocation change saturated the bench's site uplinks.
func (p *peer) notify() {
	ev := Event{Op: "slots", Node: p.n.cfg.ID}
	for _, s := range p.slots {
		if s.src == s.told {
			continue
		}
		s.told = s.src
		st := SlotStatus{Mid: s.mid}
		if s.src != nil {
			info := s.src.info
			st.Track = &info
		}
		ev.Slots = append(ev.Slots, st)
	}
	if len(ev.Slots) == 0 {
		return
	}
	b, _ := json.Marshal(ev)
	_ = p.n.cfg.NC.Publish(subjectEvents(p.session, p.client), b)
}

func (p *peer) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for _, s := range p.slots {
		if s.src != nil {
			p.unassign(s)
		}
	}
	p.mu.Unlock()
	key := p.session + "/" + p.client
	p.n.mu.Lock()
	if p.n.peers[key] == p {
		delete(p.n.peers, key)
	}
	p.n.mu.Unlock()
	if p.pub != nil {
		p.pub.close()
	}
	p.mu.Lock()
	pc := p.pc
	p.mu.Unlock()
	if pc != nil {
		go pc.Close() // ends the publications' read loops, which unannounce them
	}
}
