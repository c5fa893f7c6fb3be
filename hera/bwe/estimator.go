// Package bwe is a WebRTC send-side bandwidth estimator driven by the Hera
// rule (package hera). It implements pion/interceptor's
// cc.BandwidthEstimator, so a peer connection can use it instead of GCC: it
// records the send time of every RTP packet carrying a transport-wide
// sequence number and turns transport-wide feedback (parsed here from
// pion/rtcp's TransportLayerCC) into delay samples for a hera.Flow, whose
// window becomes a target bitrate.
//
// Mapping: one RTP packet is one segment. Each received packet gives the
// sample minRTT + (oneway − min oneway), where oneway is arrival time minus
// send time on unsynchronised clocks (the offset cancels) and minRTT is the
// smallest time from sending a packet to receiving its feedback. The target
// bitrate is cwnd · mean packet size / (minRTT + queueing delay).
//
// Application-limited: a sender that sends less than half of what the
// estimate allows over the last second, or the last 100 or 200 ms (an SFU
// forwarding only audio), sees no queue whatever the estimate, and the
// rule would grow the window without bound. On becoming so limited the
// target goes back to its value when the span that found it began. While
// the sender is limited, a sample whose rule update would take the window
// above the larger of the window and the one that carries AppLimitedGain ×
// the rate sent and delivered (the smallest over those spans) is
// withheld from the rule (a sample that lowers the window, or keeps it under
// that cap, is used), acknowledgements add nothing to slow start past that
// cap, the mean packet size is held at its value from before the sender
// became limited, and the target rises no higher than the larger of itself
// and AppLimitedGain × that rate (a queue that drains would
// otherwise raise the held window's rate). Growth resumes once the sender
// sends at least half of what the estimate allows over each span: a probe (sfu/allocator.Prober) finds a
// recovered path, not a drifting estimate.
package bwe

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/xrealm/xrealm/hera"
)

// TransportCCURI identifies the transport-wide sequence number extension.
const TransportCCURI = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"

// Options configure an Estimator.
type Options struct {
	Params         hera.Params
	InitialBitrate int // bit/s
	MinBitrate     int
	MaxBitrate     int
	// LossThreshold is the fraction of packets reported lost in one
	// feedback that counts as a loss event (at most one per RTT).
	LossThreshold float64
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// AppLimitedGain is the multiple of the rate delivered over the last
// window (appWindow) above which the estimate does not grow while the
// sender is application-limited; the sender is so limited while it sends
// less than 1/AppLimitedGain of what the estimate allows.
const AppLimitedGain = 2

// appWindow is the span over which the sent, allowed and delivered bytes
// are counted, in appBuckets buckets of appBucket. appSpans are the spans,
// shortest first, over any of which a sender that sent less than
// 1/AppLimitedGain of what the target allowed is application-limited: the
// recent ones find a sender limited sooner, the last appWindow one that
// sends in bursts.
const (
	appWindow  = time.Second
	appBuckets = 100
	appBucket  = appWindow / appBuckets
)

var appSpans = [...]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, appWindow}

// sendBucket counts one appBucket of the sending history.
type sendBucket struct {
	sent, allowed, delivered float64 // bytes
	size                     float64 // the mean packet size when the bucket opened
	target                   int     // the target when the bucket opened
}

// DefaultOptions returns the tuned Hera rule and 300 kbit/s to 50 Mbit/s.
func DefaultOptions() Options {
	p := hera.DefaultParams()
	p.MinCwnd = 2
	// No delivered-BDP floor: the estimator feeds one synthetic ACK per
	// packet in per-feedback batches, so a round's ACK count measures the
	// feedback interval rather than the delivery rate (with the floor the
	// 1.5 Mbit/s test link kept a 225 ms queue). Without the floor the
	// 3 ms buckets of the TCP rule leave a 1.5 Mbit/s link 40% idle, so the
	// estimator keeps the 5 ms buckets it was tuned with (15 ms target).
	p.FloorGainEighths = 0
	p.BucketWidth = 5 * time.Millisecond
	// The estimator keeps the rule it was tuned and tested with before
	// the TCP rule's round-3 changes (docs/hera.md items 14-15): a backlog
	// of 2, buckets of B only (BucketPackets needs the floor's delivered
	// BDP) and a gate of one sample's RTT.
	p.Backlog, p.BucketPackets, p.GateRTTs, p.PacingMaxRTTs = 2, 0, 0, 0
	return Options{Params: p, InitialBitrate: 1_000_000, MinBitrate: 100_000, MaxBitrate: 50_000_000, LossThreshold: 0.1}
}

// NewFactory returns a factory for cc.NewInterceptor.
func NewFactory(opts Options) cc.BandwidthEstimatorFactory {
	return func() (cc.BandwidthEstimator, error) { return New(opts) }
}

type sent struct {
	at   time.Time
	size int
	ok   bool // sent and not yet reported received
	// lost: a feedback has reported the packet lost, and counted it; a
	// later report of it lost (a duplicated feedback) counts nothing.
	lost bool
}

// Estimator implements cc.BandwidthEstimator with the Hera rule.
type Estimator struct {
	opts  Options
	start time.Time

	mu        sync.Mutex
	flow      *hera.Flow
	sent      [1 << 16]sent
	target    int
	avgSize   float64
	minRTT    time.Duration // send → feedback, windowless minimum
	minOneWay time.Duration
	haveOW    bool
	queue     time.Duration // latest sample's queueing delay
	lastAckUs uint64        // the flow's clock at its last sample
	lossUntil time.Time
	lossRate  float64
	onChange  func(int)
	// The sending history of the last appWindow (application-limited
	// sending): ring[at%appBuckets] is the current bucket.
	ring       [appBuckets]sendBucket
	at         int64     // index of the current bucket since start
	integrated time.Time // allowed bytes are counted up to here
	appLimited bool
	delivered  float64 // bit/s sent and delivered (updateAppLimitedLocked), at the last feedback
	withheld   uint64  // samples withheld from the rule while limited
	// malformed counts the feedback refused by ParseFeedback, and
	// lastMalformed says why the last one was.
	malformed     uint64
	lastMalformed string
	// refExt is the last feedback's reference time (64 ms units) with its
	// 24-bit wraps undone (haveRef: one has been seen).
	refExt  int64
	haveRef bool
}

var _ cc.BandwidthEstimator = (*Estimator)(nil)

// New returns an Estimator.
func New(opts Options) (*Estimator, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MinBitrate <= 0 || opts.MaxBitrate < opts.MinBitrate || opts.InitialBitrate < opts.MinBitrate || opts.InitialBitrate > opts.MaxBitrate {
		return nil, fmt.Errorf("bwe: bitrates min %d, initial %d, max %d are inconsistent", opts.MinBitrate, opts.InitialBitrate, opts.MaxBitrate)
	}
	f, err := hera.NewFlow(opts.Params)
	if err != nil {
		return nil, err
	}
	e := &Estimator{opts: opts, start: opts.Now(), flow: f, target: opts.InitialBitrate, avgSize: 1200}
	e.integrated = e.start
	e.ring[0].size, e.ring[0].target = e.avgSize, e.target
	return e, nil
}

// AddStream wraps the stream's writer to record send times of packets that
// carry a transport-wide sequence number.
func (e *Estimator) AddStream(info *interceptor.StreamInfo, w interceptor.RTPWriter) interceptor.RTPWriter {
	var id uint8
	for _, ext := range info.RTPHeaderExtensions {
		if ext.URI == TransportCCURI {
			id = uint8(ext.ID)
		}
	}
	return interceptor.RTPWriterFunc(func(h *rtp.Header, payload []byte, a interceptor.Attributes) (int, error) {
		if id != 0 {
			if b := h.GetExtension(id); len(b) >= 2 {
				var ext rtp.TransportCCExtension
				if err := ext.Unmarshal(b); err == nil {
					e.OnSent(ext.TransportSequence, h.MarshalSize()+len(payload))
				}
			}
		}
		return w.Write(h, payload, a)
	})
}

// OnSent records that the packet with transport-wide sequence number seq
// and size bytes was sent now. AddStream calls it; it is exported for
// transports that do not go through an interceptor. A size below 0 counts
// as 0, and an empty packet does not move the average packet size (which
// turns windows into rates: at 0 they would be 0/0).
func (e *Estimator) OnSent(seq uint16, size int) {
	size = max(size, 0)
	now := e.opts.Now()
	e.mu.Lock()
	e.advanceLocked(now)
	e.sent[seq] = sent{at: now, size: size, ok: true}
	e.ring[e.at%appBuckets].sent += float64(size)
	if !e.appLimited && size > 0 {
		e.avgSize += (float64(size) - e.avgSize) / 16
	}
	e.mu.Unlock()
}

// WriteRTCP processes RTCP from the remote side; transport-wide feedback
// updates the estimate, everything else is ignored. A feedback that
// ParseFeedback refuses (a reserved status symbol, chunks or deltas that
// disagree with the status count) is skipped and counted in GetStats
// ("malformedFeedback", "lastMalformedFeedback"), not returned: the cc
// interceptor would pass the error to the RTCP reader, and a reader that
// stops at an error would never read the peer's RTCP again.
func (e *Estimator) WriteRTCP(pkts []rtcp.Packet, _ interceptor.Attributes) error {
	for _, p := range pkts {
		fb, ok := p.(*rtcp.TransportLayerCC)
		if !ok {
			continue
		}
		reps, err := ParseFeedback(fb)
		if err != nil {
			e.mu.Lock()
			e.malformed++
			e.lastMalformed = err.Error()
			e.mu.Unlock()
			continue
		}
		e.onFeedback(fb.ReferenceTime, reps)
	}
	return nil
}

// refBits is the width of a TWCC feedback's reference time, in 64 ms units:
// it wraps every 2^24·64 ms, about 12.4 days of the receiver's clock, whose
// origin is the receiver's (libwebrtc's is not the call's start).
const refBits = 24

// unwrapRefLocked returns how far to move the arrival times of a feedback
// whose reference time is ref: the reference time is taken as the value
// nearest the previous feedback's that has ref's low 24 bits, so that
// arrival times keep increasing across a wrap, and a feedback from before
// the wrap that arrives after one from after it is not read as 12 days of
// queueing delay.
func (e *Estimator) unwrapRefLocked(ref uint32) time.Duration {
	const span = 1 << refBits
	low := int64(ref & (span - 1))
	if !e.haveRef {
		e.refExt, e.haveRef = low, true
	} else {
		d := (low - e.refExt) & (span - 1) // forward distance, mod 2^24
		if d >= span/2 {
			d -= span // nearer backwards
		}
		e.refExt += d
	}
	return time.Duration(e.refExt-int64(ref)) * 64 * time.Millisecond
}

// advanceLocked brings the sending history to now: it counts the bytes
// the target allowed since the last call and opens the buckets up to now.
func (e *Estimator) advanceLocked(now time.Time) {
	if now.After(e.integrated) {
		e.ring[e.at%appBuckets].allowed += float64(e.target) / 8 * now.Sub(e.integrated).Seconds()
		e.integrated = now
	}
	idx := int64(now.Sub(e.start) / appBucket)
	for n := 0; e.at < idx && n < appBuckets; n++ {
		e.at++
		e.ring[e.at%appBuckets] = sendBucket{size: e.avgSize, target: e.target}
	}
	e.at = max(e.at, idx)
}

// window sums the last n buckets of the sending history (fewer since the
// start) and returns them with the span they cover up to now and the
// oldest of them.
func (e *Estimator) window(now time.Time, n int64) (sum sendBucket, span time.Duration, oldest sendBucket) {
	first := max(e.at-n+1, 0)
	for i := first; i <= e.at; i++ {
		b := e.ring[i%appBuckets]
		sum.sent += b.sent
		sum.allowed += b.allowed
		sum.delivered += b.delivered
	}
	return sum, now.Sub(e.start.Add(time.Duration(first) * appBucket)), e.ring[first%appBuckets]
}

// updateAppLimitedLocked decides whether the sender is application-limited
// and returns the rate it sent and the path delivered (bit/s). It is
// limited when it sent less than 1/AppLimitedGain of what the target
// allowed over any of appSpans: the last appWindow (or since the start if
// that is shorter, once at least the longest of the others), or one of the
// recent spans. A sender whose video pauses on a narrow link is found
// limited within about 100 ms, before the queue its video left drains (the
// window's rate, cwnd over an RTT that falls as the queue drains, rose
// tenfold within 150 ms of the pause, and the last second's count alone
// took up to a second to see the pause). With two recent spans, a sender
// near the threshold (audio alone under the minimum target) stays limited
// when one of them counts a few packets more.
//
// On becoming limited, the mean packet size and the target go back to
// their values at the start of the longest span that found it: the audio
// packets sent since the pause would otherwise have shrunk the size, and a
// draining queue raised the target, in the meantime. The rate is the
// smallest sent or delivered over the spans: a draining queue delivers the
// video sent before the pause.
func (e *Estimator) updateAppLimitedLocked(now time.Time) (rate float64) {
	if now.Sub(e.start) < appSpans[len(appSpans)-2] {
		return 0
	}
	limited := false
	var ref sendBucket
	rate = math.Inf(1)
	for _, d := range appSpans {
		sum, span, oldest := e.window(now, int64(d/appBucket))
		if sum.sent*AppLimitedGain < sum.allowed {
			limited, ref = true, oldest
		}
		rate = min(rate, sum.sent*8/span.Seconds(), sum.delivered*8/span.Seconds())
	}
	if limited && !e.appLimited {
		e.avgSize = ref.size
		e.target = min(e.target, max(ref.target, e.opts.MinBitrate))
	}
	e.appLimited = limited
	return rate
}

// appCapLocked is the window above which a rule update may not take the
// flow while the sender is application-limited: the larger of the current
// window and the one whose bitrate is AppLimitedGain × delivered (the rate
// sent and delivered, updateAppLimitedLocked). 0 means no cap.
func (e *Estimator) appCapLocked(delivered float64) uint32 {
	if !e.appLimited || e.minRTT == 0 {
		return 0
	}
	rtt := (e.minRTT + e.queue).Seconds()
	w := AppLimitedGain * delivered * rtt / (e.avgSize * 8)
	return max(e.flow.Cwnd(), uint32(min(w, 1<<31)))
}

// ackLocked feeds one sample to the flow, within the application-limited
// cap (0: none). A sample whose update would take the window above the
// cap counts nothing toward slow start; if its update still would, it is
// withheld. The trial runs on a copy of the flow, which has no shared
// Path to update.
func (e *Estimator) ackLocked(at uint64, sample time.Duration, limit uint32) {
	rtt := int64(sample / time.Microsecond)
	if limit > 0 {
		acked := uint32(1)
		trial := *e.flow
		if trial.OnAck(at, rtt, 1) > limit {
			acked, trial = 0, *e.flow
			if trial.OnAck(at, rtt, 0) > limit {
				e.withheld++
				return
			}
		}
		e.flow.OnAck(at, rtt, acked)
		return
	}
	e.flow.OnAck(at, rtt, 1)
}

func (e *Estimator) onFeedback(ref uint32, reps []PacketReport) {
	now := e.opts.Now()
	e.mu.Lock()
	if shift := e.unwrapRefLocked(ref); shift != 0 {
		for i := range reps {
			reps[i].Arrival += shift
		}
	}
	old := e.target
	e.advanceLocked(now)
	lost, known := 0, 0
	var newest time.Time
	for _, r := range reps {
		s := e.sent[r.Seq]
		if !s.ok || !r.Received && s.lost {
			continue
		}
		known++
		if !r.Received {
			e.sent[r.Seq].lost = true
			lost++
			continue
		}
		if s.at.After(newest) {
			newest = s.at
		}
		e.ring[e.at%appBuckets].delivered += float64(s.size)
	}
	e.delivered = e.updateAppLimitedLocked(now)
	limit := e.appCapLocked(e.delivered)
	if !newest.IsZero() {
		if rtt := now.Sub(newest); e.minRTT == 0 || rtt < e.minRTT {
			e.minRTT = max(rtt, time.Microsecond)
		}
	}
	for _, r := range reps {
		s := e.sent[r.Seq]
		if !s.ok || !r.Received {
			continue
		}
		e.sent[r.Seq].ok = false
		ow := r.Arrival - s.at.Sub(e.start)
		if !e.haveOW || ow < e.minOneWay {
			e.minOneWay, e.haveOW = ow, true
		}
		e.queue = ow - e.minOneWay
		sample := e.minRTT + e.queue
		// The flow's clock is when this sample's ACK would have come back;
		// it steps back when minRTT falls or feedback reports packets out
		// of order, and hera.Flow needs it monotonic (its windowed minimum
		// took a step back for an expiry and replaced the base RTT early).
		at := max(e.lastAckUs, uint64(s.at.Sub(e.start)/time.Microsecond)+uint64(sample/time.Microsecond))
		e.lastAckUs = at
		e.ackLocked(at, sample, limit)
	}
	if known > 0 {
		e.lossRate = float64(lost) / float64(known)
		if e.lossRate > e.opts.LossThreshold && now.After(e.lossUntil) {
			e.flow.OnLoss()
			e.lossUntil = now.Add(e.minRTT + e.queue)
		}
	}
	e.target = e.bitrateLocked()
	cb, nt := e.onChange, e.target
	e.mu.Unlock()
	if cb != nil && nt != old {
		cb(nt)
	}
}

func (e *Estimator) bitrateLocked() int {
	if e.minRTT == 0 {
		return e.target
	}
	rtt := (e.minRTT + e.queue).Seconds()
	r := int(float64(e.flow.Cwnd()) * e.avgSize * 8 / rtt)
	if e.appLimited {
		// the window holds, but a queue that drains (the RTT falls)
		// would still raise its rate: on a loopback path, to the maximum
		r = min(r, max(e.target, int(AppLimitedGain*e.delivered)))
	}
	return min(max(r, e.opts.MinBitrate), e.opts.MaxBitrate)
}

// GetTargetBitrate returns the target bitrate in bit/s.
func (e *Estimator) GetTargetBitrate() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.target
}

// OnTargetBitrateChange sets a function called when the target changes.
func (e *Estimator) OnTargetBitrateChange(f func(bitrate int)) {
	e.mu.Lock()
	e.onChange = f
	e.mu.Unlock()
}

// GetStats returns the estimator's state for diagnostics.
func (e *Estimator) GetStats() map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	return map[string]any{
		"estimator":     "hera",
		"variant":       e.opts.Params.Variant.String(),
		"targetBitrate": e.target,
		"cwnd":          e.flow.Cwnd(),
		"slowStart":     e.flow.InSlowStart(),
		"minRTT":        e.minRTT,
		"queueDelay":    e.queue,
		"lossRate":      e.lossRate,
		// the sender sent under half what the estimate allowed over
		// the last second, 200 or 100 ms: the estimate holds
		"appLimited":      e.appLimited,
		"withheldSamples": e.withheld,
		// feedback refused by ParseFeedback and skipped
		"malformedFeedback":     e.malformed,
		"lastMalformedFeedback": e.lastMalformed,
	}
}

// Close releases nothing; it exists for the interface.
func (e *Estimator) Close() error { return nil }
