package sfu

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/buffer"
	"github.com/xrealm/xrealm/sfu/downtrack"
	"github.com/xrealm/xrealm/sfu/relay"
	"github.com/xrealm/xrealm/volumetric"
)

// TrackInfo describes a published track. Key() identifies it on the bus
// and on relay links.
type TrackInfo struct {
	Session string `json:"session"`
	Client  string `json:"client"`
	Track   string `json:"track"`
	Kind    string `json:"kind"` // "audio" or "video"
	Mime    string `json:"mime"`
	Node    string `json:"node"` // where the publisher is connected
	// Idle: the publisher sent nothing for IdleAfter (a muted microphone,
	// a camera turned off, a point cloud stopped); nobody is forwarded an
	// idle track until it sends again. The publisher's node sets it.
	Idle bool `json:"idle,omitempty"`
	// Speaking: an audio track whose publisher spoke (an RTP audio level,
	// RFC 6464, of SpeakingLevel or louder) within SpeakingHold. Among more
	// microphones than a subscriber has audio slots, speakers go first.
	Speaking bool `json:"speaking,omitempty"`
	// DataChannel: a point-cloud description the client publishes on its
	// data channel (pcpublish.go), not over RTP. Its capture times are the
	// client's clock (a browser's), so no node records hop ages for it
	// (hops.go); and an RTP track with its key does not replace it.
	DataChannel bool `json:"datachannel,omitempty"`
	// Rate is the track's bitrate (bit/s) as its publisher's node measures
	// it, smoothed; announced again when it moves by more than rateStep
	// (0: not measured yet). A node budgets a track it does not relay at
	// this rate rather than a nominal one: before it relays it, and after
	// its last subscriber there paused it (the relayed source, and its
	// measurement, are gone then).
	Rate uint64 `json:"rate,omitempty"`
}

const (
	// IdleAfter is how long a published track may send nothing before it
	// is idle.
	IdleAfter = 2 * time.Second
	// SpeakingLevel is the quietest audio level that counts as speech, in
	// -dBov (0 is the loudest, 127 silence): -50 dBov.
	SpeakingLevel = 50
	// SpeakingHold is how long a track stays speaking after its last
	// packet at SpeakingLevel or louder (pauses between words).
	SpeakingHold = 2 * time.Second
)

// Key is "session/client/track".
func (t TrackInfo) Key() string { return t.Session + "/" + t.Client + "/" + t.Track }

// PointCloud reports whether the track carries point-cloud descriptions.
func (t TrackInfo) PointCloud() bool { return strings.EqualFold(t.Mime, MimeTypePointCloud) }

// Description is the MDC description index of a point-cloud track named
// "pc<i>" (pc0, pc1, pc2), or -1.
func (t TrackInfo) Description() int {
	if len(t.Track) == 3 && strings.HasPrefix(t.Track, "pc") && t.Track[2] >= '0' && t.Track[2] <= '2' {
		return int(t.Track[2] - '0')
	}
	return -1
}

// source is one track on this node: published by a local client or
// relayed from another node. It owns the track's one retransmission
// buffer and fans packets out to local down tracks and remote nodes.
type source struct {
	info  TrackInfo
	codec webrtc.RTPCodecCapability
	buf   *buffer.Buffer

	keyframe func()                   // asks the publisher (or the origin node) for a keyframe, at most once per keyframeInterval
	frames   *volumetric.FrameTracker // point-cloud tracks only
	fetch    *fetcher                 // relayed sources only: NACK misses go to the origin
	cadence  *cadence                 // relayed sources only: frames lost whole are asked for early
	hops     *hopHists                // the node's packet ages (hops.go); nil: not recorded

	mu     sync.RWMutex
	downs  map[*downtrack.DownTrack]struct{}
	relays map[string]relayOut // by node ID

	bytes   atomic.Uint64
	packets atomic.Uint64
	rate    atomic.Uint64 // bit/s over the last measurement window
	// budget is the rate subscribers' allocations count the source at:
	// smooth, bit/s (0: not measured yet). A single window's rate swings
	// with a video's keyframes, and falls for every source at once when
	// the publisher or the node stalls for a window (a loaded machine:
	// audio measured at 924 bit/s and a 500 kbit/s video at 108 kbit/s
	// in one 100 ms window); budgeted at that, a paused video fitted and
	// was forwarded for a window.
	budget  atomic.Uint64
	lastPkt atomic.Int64 // unix ns of the last packet
	// levelExt is the RTP header extension ID of the audio level
	// (local audio sources whose publisher negotiated it; set before the
	// first packet); lastVoice the unix ns of the last packet at
	// SpeakingLevel or louder.
	levelExt  uint8
	lastVoice atomic.Int64
	subAt     time.Time // relayed: when "sub" was last sent (node loop only)
	// subLink is, for a relayed source, the link its last "sub" went over
	// (nil before the first); under Node.mu
	subLink *relay.Link
	winAt   time.Time
	winB    uint64
	smooth  float64 // rate smoothed over the windows that carried packets (node loop only)
	flowing bool    // a window with packets was measured (node loop only)
}

func newSource(info TrackInfo, keyframe func()) *source {
	buf, _ := buffer.New(1024)
	s := &source{
		info: info, codec: webrtc.RTPCodecCapability{MimeType: info.Mime}, buf: buf, keyframe: (&keyframeLimiter{ask: keyframe}).request,
		downs: map[*downtrack.DownTrack]struct{}{}, relays: map[string]relayOut{},
	}
	if info.PointCloud() {
		s.frames = volumetric.NewFrameTracker(frameDeadline, 2048)
	}
	if info.Rate > 0 {
		// a relayed track: its origin's smoothed rate until this node
		// has measured it
		s.smooth = float64(info.Rate)
		s.budget.Store(info.Rate)
	}
	return s
}

// frameDeadline is how long a point-cloud description may take to
// complete at a node before it counts as lost.
const frameDeadline = 500 * time.Millisecond

// downSource is what a down track needs to forward from s.
func (s *source) downSource() downtrack.Source {
	ds := downtrack.Source{Codec: s.codec, Buffer: s.buf, OnKeyframeRequest: s.keyframe}
	if s.fetch != nil {
		ds.OnMiss = s.fetch.miss
	}
	return ds
}

// write handles one raw RTP packet of the source.
func (s *source) write(raw []byte) {
	var h rtp.Header
	n, err := h.Unmarshal(raw)
	if err != nil {
		return
	}
	s.bytes.Add(uint64(len(raw)))
	s.packets.Add(1)
	arrived := time.Now()
	s.lastPkt.Store(arrived.UnixNano())
	if s.levelExt != 0 {
		var al rtp.AudioLevelExtension
		if al.Unmarshal(h.GetExtension(s.levelExt)) == nil && al.Level <= SpeakingLevel {
			s.lastVoice.Store(arrived.UnixNano())
		}
	}
	_ = s.buf.Write(h.SequenceNumber, raw)
	if s.cadence != nil {
		s.cadence.observe(h.SequenceNumber, h.Timestamp, arrived)
	}
	payload := raw[n:]
	if h.Padding && len(payload) > 0 {
		p := int(payload[len(payload)-1])
		if p <= len(payload) {
			payload = payload[:len(payload)-p]
		}
	}
	if s.frames != nil {
		s.frames.Observe(arrived, payload)
	}
	var waiters []*downtrack.DownTrack
	if s.fetch != nil {
		waiters = s.fetch.arrived(h.SequenceNumber)
	}
	key := s.info.Key()
	s.mu.RLock()
	for d := range s.downs {
		if slices.Contains(waiters, d) {
			d.Resend(s.buf, h.SequenceNumber) // asked for it: a retransmission
			continue
		}
		_ = d.WriteRTP(&h, payload)
	}
	for _, r := range s.relays {
		_ = r.send(key, raw)
	}
	s.mu.RUnlock()
	if s.hops != nil && s.frames != nil {
		if c, ok := captureTime(payload); ok {
			s.hops.record(s.fetch != nil, c, arrived, time.Now())
		}
	}
}

// measure updates the bitrate over the time since the last call.
func (s *source) measure(now time.Time) {
	b := s.bytes.Load()
	if !s.winAt.IsZero() {
		if dt := now.Sub(s.winAt).Seconds(); dt > 0 {
			r := float64(b-s.winB) * 8 / dt
			s.rate.Store(uint64(r))
			switch {
			case r <= 0: // idle: the last rate stays
			case !s.flowing:
				// the first window with packets: they began somewhere
				// inside it, so its rate is a fraction of the track's
				s.flowing = true
			case s.smooth == 0:
				s.smooth = r
			default:
				s.smooth += rateSmoothing * (r - s.smooth)
			}
			s.budget.Store(uint64(s.smooth))
		}
	}
	s.winAt, s.winB = now, b
}

// rateSmoothing is the weight of a measurement window in a source's
// smoothed rate; rateStep how far (a fraction) that rate moves from the
// one in a local track's directory entry before the entry is announced
// again: a video's keyframes would otherwise announce it every few
// seconds, and every announcement re-allocates the session's
// subscribers on every node.
const (
	rateSmoothing = 0.25
	rateStep      = 0.25
)

// announcedRate is the rate for the directory entry of the source, a local
// track, whose entry has rate old: the smoothed rate once it is more than
// rateStep away from old, else old. Called from the node loop.
func (s *source) announcedRate(old uint64) uint64 {
	r := s.smooth
	if r <= 0 {
		return old
	}
	if o := float64(old); old == 0 || r > o*(1+rateStep) || r < o/(1+rateStep) {
		return uint64(r)
	}
	return old
}

// activity returns t (the source's directory entry) with the local
// source's idle and speaking states at now.
func (s *source) activity(t TrackInfo, now time.Time) TrackInfo {
	last := s.lastPkt.Load()
	t.Idle = last != 0 && now.Sub(time.Unix(0, last)) >= IdleAfter
	voice := s.lastVoice.Load()
	t.Speaking = voice != 0 && now.Sub(time.Unix(0, voice)) < SpeakingHold
	return t
}

func (s *source) addDown(d *downtrack.DownTrack) {
	s.mu.Lock()
	s.downs[d] = struct{}{}
	s.mu.Unlock()
}

// removeDown removes d and reports how many down tracks and relays remain.
func (s *source) removeDown(d *downtrack.DownTrack) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.downs, d)
	return len(s.downs) + len(s.relays)
}

// relayOut is where a source relays to one node: send, on the link the
// node subscribed over.
type relayOut struct {
	link *relay.Link
	send func(key string, pkt []byte) error
}

// addRelay relays s to node with send, on link (which its "sub" came over).
func (s *source) addRelay(node string, link *relay.Link, send func(string, []byte) error) {
	s.mu.Lock()
	s.relays[node] = relayOut{link: link, send: send}
	s.mu.Unlock()
}

// removeRelay stops relaying s to node (it unsubscribed).
func (s *source) removeRelay(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.relays, node)
	return len(s.downs) + len(s.relays)
}

// removeRelayOn stops relaying s to node if it relays on link: a link
// that closes takes only its own relays, not those a replacement link to
// that node has set up since.
func (s *source) removeRelayOn(node string, link *relay.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.relays[node]; ok && r.link == link {
		delete(s.relays, node)
	}
}

func (s *source) relayCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.relays)
}

func (s *source) downstream() []*downtrack.DownTrack {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*downtrack.DownTrack, 0, len(s.downs))
	for d := range s.downs {
		out = append(out, d)
	}
	return out
}

// stallAfter is how long a relayed source with subscribers may go without
// packets before the node subscribes again.
const stallAfter = 3 * time.Second

// stalled reports, for a relayed source with local subscribers, that no
// packet arrived for stallAfter since the last "sub"; it then restarts the
// clock. Called from the node loop with n.mu held.
func (s *source) stalled(now time.Time) bool {
	if len(s.downstream()) == 0 || now.Sub(s.subAt) < stallAfter {
		return false
	}
	if last := s.lastPkt.Load(); last != 0 && now.Sub(time.Unix(0, last)) < stallAfter {
		return false
	}
	s.subAt = now
	return true
}

// keyframeInterval is the shortest time between two keyframe requests a
// source sends its publisher (or its origin node).
const keyframeInterval = 500 * time.Millisecond

// keyframeLimiter passes a source's keyframe requests on (ask) at most once
// per keyframeInterval: one at once, and of those that come within the
// interval after it, one at its end, which answers them all (the keyframe
// reaches every subscriber that asked before it). Every subscriber's PLI
// and FIR, every resume and source switch of a down track, and every
// relay's "sub" and "pli" ask; before, each went on to the publisher, and
// one subscriber sending PLIs in a loop (a broken decoder, a hostile
// client) made the publisher send a keyframe for each, raising the track's
// rate for all its subscribers.
type keyframeLimiter struct {
	ask func()

	mu      sync.Mutex
	last    time.Time // when ask was last called
	pending bool      // a request waits for the interval's end
}

// request asks for a keyframe.
func (k *keyframeLimiter) request() {
	k.mu.Lock()
	if k.pending {
		k.mu.Unlock()
		return // the request already waiting answers this one too
	}
	wait := keyframeInterval - time.Since(k.last)
	if k.last.IsZero() || wait <= 0 {
		k.last = time.Now()
		k.mu.Unlock()
		k.ask()
		return
	}
	k.pending = true
	k.mu.Unlock()
	time.AfterFunc(wait, func() {
		k.mu.Lock()
		k.pending, k.last = false, time.Now()
		k.mu.Unlock()
		k.ask()
	})
}
