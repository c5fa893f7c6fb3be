// Package hera implements the Hera delay-based rate control algorithm as a
// pure, deterministic state machine.
//
// Hera keeps a short FIFO backlog of RTT samples and a histogram of the
// backlog's mean. Each update looks up which histogram bucket the current mean
// falls in and moves the congestion window toward the middle of the histogram:
// up when the delay is below the middle bucket, down when it is at or above it,
// scaled by the fraction α of the histogram mass at or below the current bucket.
//
// This package is the single specification of the algorithm. The eBPF TCP
// congestion control in package cc (cc/bpf/hera_core.h) and the WebRTC
// bandwidth estimator in hera/bwe follow it step for step; the test vectors
// in testdata/vectors.json are checked against both. All arithmetic is integer
// arithmetic on microseconds and segments so that the C and Go versions agree
// exactly.
//
// Two variants exist. [Paper] is the published rule (absolute-RTT buckets, no
// slow start, additive steps of Δmax, no loss response). [Tuned] buckets the
// queueing delay (mean RTT minus the windowed minimum RTT) so that it tracks a
// target delay independent of the path's base RTT, starts with slow start,
// decreases in proportion to the window, keeps the window at or above the
// recently delivered bandwidth-delay product and reacts to loss. See
// docs/hera.md.
package hera

import (
	"fmt"
	"time"
)

// Limits of the fixed-size state. The eBPF version uses the same bounds
// (HERA_MAX_BACKLOG and HERA_MAX_BUCKETS) so that loops have constant bounds.
const (
	MaxBacklog = 32
	MaxBuckets = 32
)

// Upper bounds of parameters that enter the window step's 64-bit products
// (cum·k·(Δmax·2^DecreaseShift + cwnd), with cum at most the histogram
// cap and k at most MaxBuckets/2): within them no product overflows, in Go
// or in the eBPF core, which has no wider integers. Larger values would
// wrap and turn a large decrease into a small one.
const (
	MaxDeltaMax      = 1 << 16
	MaxHistCap       = 1 << 20
	MaxDecreaseShift = 16
)

// Variant selects the update rule.
type Variant uint32

const (
	// Paper is the rule as published: buckets over the absolute mean RTT.
	Paper Variant = 0
	// Tuned buckets the queueing delay, uses slow start, proportional
	// decrease and a loss response.
	Tuned Variant = 1
)

func (v Variant) String() string {
	switch v {
	case Paper:
		return "hera-paper"
	case Tuned:
		return "hera"
	default:
		return fmt.Sprintf("Variant(%d)", uint32(v))
	}
}

// Params are the algorithm's parameters. Windows are in segments.
type Params struct {
	Variant Variant
	// BucketWidth is B, the width of one histogram bucket. In the Paper
	// variant it applies to the absolute RTT, in the Tuned variant to the
	// queueing delay. At most MaxValidRTT: every valid sample falls in
	// the first bucket of a wider one, and the eBPF version holds the
	// width in 32 bits of microseconds.
	BucketWidth time.Duration
	// Backlog is N, the number of RTT samples averaged.
	Backlog int
	// Buckets is X, the number of histogram buckets. The window grows while
	// the mean falls in a bucket below X/2.
	Buckets int
	// DeltaMax is Δmax, the step unit in segments.
	DeltaMax uint32
	// HistCap is the histogram total at which every bucket is halved.
	HistCap uint32
	// MinCwnd and MaxCwnd bound the window after each update.
	MinCwnd, MaxCwnd uint32
	// InitCwnd is the window before the first update.
	InitCwnd uint32
	// DecreaseShift (Tuned only): the decrease unit is Δmax +
	// cwnd/2^DecreaseShift segments instead of Δmax, so that decreases have
	// a part proportional to the window while increases stay additive
	// (AIMD, which converges to a fair share). 0 keeps the unit Δmax.
	DecreaseShift uint32
	// LossBetaPermille (Tuned only): on loss the window is multiplied by
	// LossBetaPermille/1000. 0 disables the loss response.
	LossBetaPermille uint32
	// Pacing asks the kernel to pace the flow (eBPF congestion control
	// only; the Go state machine ignores it): the kernel's internal TCP
	// pacing then spreads each window over the RTT at 1.2·cwnd/srtt (2× in
	// slow start) instead of sending it in bursts of up to 64 KB, which on a
	// 100 Mbit/s link add up to 5 ms of queueing on their own.
	Pacing bool
	// MinRTTWindow (Tuned only) is how long a minimum RTT sample stays
	// valid; when it expires, the minimum over the samples seen since the
	// previous expiry replaces it.
	MinRTTWindow time.Duration
	// FloorGainEighths (Tuned only) keeps the window, outside slow start,
	// at or above FloorGainEighths/8 of the largest delivered-BDP sample of
	// the last BDPWindow: each round (one rule update to the next) gives
	// the sample (segments acknowledged in the round)·minRTT/(round
	// length), the window that carries the rate the link just delivered
	// with no queue. On links whose capacity comes in bursts after gaps,
	// the queueing delay a gap causes would otherwise cut the window below
	// what the next burst can carry. With the gain at 8 the floor never
	// adds queue on a steady link: a window at the floor delivers at most
	// the rate it was measured at. 0 disables the floor.
	FloorGainEighths uint32
	// BDPWindow (Tuned only) is how long a delivered-BDP sample stays the
	// floor's maximum; when it expires, the largest sample seen since the
	// previous expiry replaces it.
	BDPWindow time.Duration
	// BucketPackets (Tuned only, with the floor): a bucket is at least this
	// many packet times at the flow's delivered rate wide, but at most
	// BucketPacketsMaxWidths·B: max(B, min(BucketPackets·minRTT/maxBDP,
	// 6·B)). On a slow path, or for a flow with a small share, a target of
	// a few milliseconds is less than one or two packets, which the link's
	// delivery granularity alone exceeds. 0 keeps B.
	BucketPackets uint32
	// GateRTTs (Tuned only): the next rule update is at most GateRTTs
	// minimum RTTs after this one, however long the sample that opened
	// the gate. 0 waits for the sample's length.
	GateRTTs uint32
	// PacingMaxRTTs (eBPF congestion control only, with Pacing): the
	// pacing rate divides the window by min(srtt, PacingMaxRTTs·minRTT)
	// rather than by srtt alone. 0 uses srtt.
	PacingMaxRTTs uint32
	// OutageRTTs and OutageBoostPercent (Tuned only): when the sample that
	// opens the gate shows an outage, a delay above the minimum RTT of at
	// least OutageRTTs minimum RTTs, the window is multiplied by
	// OutageBoostPercent/100 once (again only after a sample below that
	// bound). Links that stop delivering for hundreds of milliseconds
	// (mmWave blockage) deliver the backlog faster when they resume; the
	// boost sends into that catch-up instead of waiting for additive
	// growth, and the rule cuts the window back once a queue forms. 0
	// disables it, the default: an experiment (docs/hera.md item 19); in
	// simulation it raised one flow's throughput on humanmotion but made
	// six flows there much less fair.
	OutageRTTs         uint32
	OutageBoostPercent uint32
}

// PaperParams returns the published defaults: B = 15 ms, N = 10, X = 6,
// Δmax = 10, histogram cap 10000, window within [20, 8000], no slow start.
func PaperParams() Params {
	return Params{
		Variant:     Paper,
		BucketWidth: 15 * time.Millisecond,
		Backlog:     10,
		Buckets:     6,
		DeltaMax:    10,
		HistCap:     10000,
		MinCwnd:     20,
		MaxCwnd:     8000,
		InitCwnd:    10,
	}
}

// DefaultParams returns xrealm's tuned defaults ("hera"): queueing-delay
// buckets of 2.5 ms with X = 6, so the window grows while the mean queueing
// delay is under 7.5 ms, widened to 10 packet times at the flow's delivered
// rate (at most 6·B) so that slow paths and small shares are not held to
// less than a packet or two; a floor at 9/8 of the delivered BDP of the
// last 4 s that keeps the link busy when delay noise would cut the window
// below it; a backlog of N = 1 (the round's smallest sample already
// filters outages); an update gate of at most 2 minimum RTTs, so that an
// outage's sample does not freeze the window for as long again; and a
// histogram cap of 64, so that after an outage the histogram forgets the
// high-delay buckets within tens of RTTs instead of thousands (α, and so
// the increase, stays tiny while old high buckets dominate). See
// docs/hera.md.
func DefaultParams() Params {
	return Params{
		Variant:          Tuned,
		BucketWidth:      2500 * time.Microsecond,
		Backlog:          1,
		Buckets:          6,
		DeltaMax:         10,
		HistCap:          64,
		MinCwnd:          4,
		MaxCwnd:          20000,
		InitCwnd:         10,
		DecreaseShift:    3,
		LossBetaPermille: 700,
		MinRTTWindow:     10 * time.Second,
		Pacing:           true,
		FloorGainEighths: 9,
		BDPWindow:        4 * time.Second,
		BucketPackets:    10,
		GateRTTs:         2,
		PacingMaxRTTs:    2,
	}
}

// ForVariant returns the default parameters for the named variant
// ("hera" or "hera-paper").
func ForVariant(name string) (Params, error) {
	switch name {
	case "hera":
		return DefaultParams(), nil
	case "hera-paper":
		return PaperParams(), nil
	}
	return Params{}, fmt.Errorf("hera: unknown variant %q (want hera or hera-paper)", name)
}

// Validate reports whether the parameters are usable.
func (p Params) Validate() error {
	switch {
	case p.Variant != Paper && p.Variant != Tuned:
		return fmt.Errorf("hera: unknown variant %d", p.Variant)
	case p.BucketWidth < time.Microsecond:
		return fmt.Errorf("hera: bucket width %v is below 1µs", p.BucketWidth)
	case p.Backlog < 1 || p.Backlog > MaxBacklog:
		return fmt.Errorf("hera: backlog %d outside [1, %d]", p.Backlog, MaxBacklog)
	case p.Buckets < 2 || p.Buckets > MaxBuckets:
		return fmt.Errorf("hera: bucket count %d outside [2, %d]", p.Buckets, MaxBuckets)
	case p.BucketWidth > MaxValidRTT:
		return fmt.Errorf("hera: bucket width %v is above %v, the longest valid RTT sample", p.BucketWidth, MaxValidRTT)
	case p.DeltaMax < 1 || p.DeltaMax > MaxDeltaMax:
		return fmt.Errorf("hera: Δmax %d outside [1, %d] segments", p.DeltaMax, MaxDeltaMax)
	case p.HistCap < 2 || p.HistCap > MaxHistCap:
		return fmt.Errorf("hera: histogram cap %d outside [2, %d]", p.HistCap, MaxHistCap)
	case p.MinCwnd < 1 || p.MaxCwnd < p.MinCwnd:
		return fmt.Errorf("hera: window bounds [%d, %d] are invalid", p.MinCwnd, p.MaxCwnd)
	case p.InitCwnd < 1:
		return fmt.Errorf("hera: initial window must be at least 1, got %d", p.InitCwnd)
	case p.DecreaseShift > MaxDecreaseShift:
		return fmt.Errorf("hera: decrease shift %d above %d", p.DecreaseShift, MaxDecreaseShift)
	case p.LossBetaPermille > 1000:
		return fmt.Errorf("hera: loss beta %d‰ above 1000", p.LossBetaPermille)
	case p.FloorGainEighths > 64:
		return fmt.Errorf("hera: floor gain %d/8 above 64/8", p.FloorGainEighths)
	case p.OutageBoostPercent > 1000:
		return fmt.Errorf("hera: outage boost %d%% above 1000%%", p.OutageBoostPercent)
	case p.FloorGainEighths > 0 && p.BDPWindow < time.Microsecond:
		return fmt.Errorf("hera: BDP window %v is below 1µs", p.BDPWindow)
	case p.Variant == Tuned && p.MinRTTWindow < time.Microsecond:
		return fmt.Errorf("hera: minimum-RTT window %v is below 1µs", p.MinRTTWindow)
	}
	return nil
}

// BucketPacketsMaxWidths caps the bucket width that Params.BucketPackets
// can give at this many times Params.BucketWidth.
const BucketPacketsMaxWidths = 6

// MaxValidRTT is the largest RTT sample accepted; larger values are taken
// to be corrupt (for example a wrapped timestamp) and ignored.
const MaxValidRTT = 60 * time.Second

// Flow is the per-flow state. The zero value is not usable; call NewFlow.
// A Flow is not safe for concurrent use.
type Flow struct {
	p        Params
	bucketUs uint64
	winUs    uint64
	bdpWinUs uint64

	backlog [MaxBacklog]uint32 // RTT samples in µs, a ring
	head    int                // next slot to write, < Backlog
	n       int                // samples held
	sum     uint64             // sum of held samples
	hist    [MaxBuckets]uint32

	cwnd      uint32
	slowStart bool
	min       minFilter
	path      *Path
	nextAt    uint64 // µs; the rule runs on the first valid sample at or after this time
	roundMin  uint32 // Tuned: smallest valid sample since the last update, 0 = none
	lastMean  uint32
	lastBkt   int
	inOutage  bool // Tuned: the outage boost was applied and no short sample has been seen since

	// Delivered-BDP floor (Tuned): segments acknowledged since the round
	// started at roundStart, valid once rounds > 0.
	roundStart uint64
	roundAcked uint32
	rounds     uint32
	bdp        maxFilter

	// State before the last OnLoss, restored by OnUndo (Tuned); undoCwnd
	// 0 = nothing to undo.
	undoCwnd, undoBDP, undoCand uint32
}

// maxFilter is minFilter's mirror image for the delivered-BDP samples
// (segments): a sample stays the maximum for one to two windows.
type maxFilter struct {
	max, cand uint32
	stamp     uint64
}

func (m *maxFilter) update(nowUs uint64, v uint32, winUs uint64) {
	nowUs = max(nowUs, m.stamp) // see minFilter.update
	if v > m.cand {
		m.cand = v
	}
	switch {
	case v >= m.max:
		m.max, m.stamp = v, nowUs
	case nowUs-m.stamp > winUs:
		m.max, m.stamp, m.cand = m.cand, nowUs, v
	}
}

// minFilter is a windowed minimum of RTT samples (µs): when min has not
// been refreshed for the window, it is replaced by cand, the minimum of the
// samples since the previous replacement, and cand restarts from the
// current sample; a sample thus stays the minimum for one to two windows. Taking the current sample instead
// would, under a standing queue, ratchet the base RTT (and with it the
// delay target) upward every window.
type minFilter struct {
	min, cand uint32 // 0 = none
	stamp     uint64 // when min was last set; never steps back
}

// update takes sample r at nowUs. A time before stamp is taken as stamp:
// the window has not expired, and a new minimum keeps the window's newest
// time. Unsigned nowUs-stamp would read such a time as a window long
// expired, and two late samples would replace the minimum by themselves.
// The C core gets times out of order when a flow read its clock before
// another flow of its path updated the path's filter.
func (m *minFilter) update(nowUs uint64, r uint32, winUs uint64) {
	nowUs = max(nowUs, m.stamp)
	if m.cand == 0 || r < m.cand {
		m.cand = r
	}
	switch {
	case m.min == 0 || r <= m.min:
		m.min, m.stamp = r, nowUs
	case nowUs-m.stamp > winUs:
		m.min, m.stamp, m.cand = m.cand, nowUs, r
	}
}

// Path is state shared by the flows of one network path (in the kernel, one
// destination address): the path's windowed minimum RTT. A flow that starts
// while others keep a queue standing would otherwise take base RTT + that
// queue as its own base, aim at a delay target above everyone else's, and
// take far more than its share. The zero value is ready to use. A Path is
// not safe for concurrent use; the eBPF version tolerates racy updates.
type Path struct {
	min minFilter
}

// MinRTT is the path's windowed minimum RTT (0 before the first sample).
func (p *Path) MinRTT() time.Duration { return time.Duration(p.min.min) * time.Microsecond }

// NewFlowOnPath is NewFlow for a flow that shares path with other flows.
// The Paper variant ignores path.
func NewFlowOnPath(p Params, path *Path) (*Flow, error) {
	f, err := NewFlow(p)
	if err == nil && p.Variant == Tuned {
		f.path = path
	}
	return f, err
}

// NewFlow returns the state of a new flow.
func NewFlow(p Params) (*Flow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	f := &Flow{
		p:         p,
		bucketUs:  uint64(p.BucketWidth / time.Microsecond),
		winUs:     uint64(p.MinRTTWindow / time.Microsecond),
		bdpWinUs:  uint64(p.BDPWindow / time.Microsecond),
		cwnd:      p.InitCwnd,
		slowStart: p.Variant == Tuned,
		lastBkt:   -1,
	}
	return f, nil
}

// Cwnd is the current congestion window in segments.
func (f *Flow) Cwnd() uint32 { return f.cwnd }

// InSlowStart reports whether the flow is still in slow start.
func (f *Flow) InSlowStart() bool { return f.slowStart }

// MinRTT is the base RTT the flow measures queueing delay from: its own
// windowed minimum or, if lower, its path's (0 before the first valid
// sample).
func (f *Flow) MinRTT() time.Duration { return time.Duration(f.base()) * time.Microsecond }

func (f *Flow) base() uint32 {
	b := f.min.min
	if f.path != nil && f.path.min.min != 0 && f.path.min.min < b {
		b = f.path.min.min
	}
	return b
}

// Histogram returns a copy of the histogram's X buckets.
func (f *Flow) Histogram() []uint32 {
	return append([]uint32(nil), f.hist[:f.p.Buckets]...)
}

// LastBucket is the bucket of the most recent update, -1 before the first.
func (f *Flow) LastBucket() int { return f.lastBkt }

// Params returns the flow's parameters.
func (f *Flow) Params() Params { return f.p }

// OnAck processes one acknowledgement at time nowUs (µs, monotonic) that
// acknowledged acked segments and carried an RTT sample of rttUs
// microseconds. rttUs <= 0 means "no sample" (the kernel passes -1), and
// samples above MaxValidRTT are ignored as corrupt; an ACK without a valid
// sample still counts toward slow start. It returns the new window.
//
// The Hera rule runs at most once per RTT: on the first valid sample at or
// after the time of the previous update plus that update's sample. The
// Paper variant pushes that sample into the backlog; Tuned pushes the
// smallest valid sample seen since the previous update.
func (f *Flow) OnAck(nowUs uint64, rttUs int64, acked uint32) uint32 {
	valid := rttUs > 0 && rttUs <= int64(MaxValidRTT/time.Microsecond)
	if valid && f.p.Variant == Tuned {
		r := uint32(rttUs)
		f.min.update(nowUs, r, f.winUs)
		if f.path != nil {
			f.path.min.update(nowUs, r, f.winUs)
		}
	}
	minRTT := f.base()
	if f.p.Variant == Tuned {
		f.roundAcked = satAdd(f.roundAcked, acked)
	}
	if f.slowStart {
		f.cwnd = clamp(satAdd(f.cwnd, acked), f.p.MinCwnd, f.p.MaxCwnd)
		// Leave slow start once a sample shows half the target queueing delay.
		half := f.bucketUs * uint64(f.p.Buckets/2) / 2
		if valid && uint64(rttUs)-uint64(minRTT) >= half {
			f.slowStart = false
		}
	}
	if valid && f.p.Variant == Tuned && (f.roundMin == 0 || uint32(rttUs) < f.roundMin) {
		f.roundMin = uint32(rttUs)
	}
	if !valid || nowUs < f.nextAt {
		return f.cwnd
	}
	r := uint32(rttUs)
	f.nextAt = nowUs + uint64(r)
	if f.p.Variant == Tuned && f.p.GateRTTs > 0 && minRTT > 0 {
		f.nextAt = nowUs + min(uint64(r), uint64(f.p.GateRTTs)*uint64(minRTT))
	}
	if f.p.Variant == Tuned {
		// The smallest sample of the round: a link outage delays every
		// packet in flight, and the round's minimum filters that out better
		// than whichever sample happens to open the gate.
		r, f.roundMin = f.roundMin, 0
		if f.p.FloorGainEighths > 0 {
			f.sampleBDP(nowUs, minRTT)
		}
	}
	boost := false
	if f.p.Variant == Tuned && f.p.OutageRTTs > 0 && f.p.OutageBoostPercent > 0 && minRTT > 0 {
		// rttUs, not the round's minimum: the round's earlier samples
		// precede the outage.
		long := uint64(rttUs)-uint64(minRTT) >= uint64(f.p.OutageRTTs)*uint64(minRTT)
		boost = long && !f.inOutage
		f.inOutage = long
	}
	f.push(r)
	mean := uint32(f.sum / uint64(f.n))
	f.lastMean = mean
	v := uint64(mean)
	if f.p.Variant == Tuned {
		if mean > minRTT {
			v = uint64(mean - minRTT)
		} else {
			v = 0
		}
	}
	x := f.p.Buckets
	b := x - 1
	bw := f.bucketUs
	if f.p.Variant == Tuned && f.p.BucketPackets > 0 && f.bdp.max > 0 {
		bw = max(bw, min(uint64(f.p.BucketPackets)*uint64(minRTT)/uint64(f.bdp.max), BucketPacketsMaxWidths*bw))
	}
	if q := v / bw; q < uint64(x-1) {
		b = int(q)
	}
	f.lastBkt = b
	f.hist[b]++
	var total, cum uint64
	for i := 0; i < x; i++ {
		total += uint64(f.hist[i])
		if i <= b {
			cum += uint64(f.hist[i])
		}
	}
	if !f.slowStart {
		half, prev := x/2, f.cwnd
		if b < half {
			step := cum * uint64(half-b) * uint64(f.p.DeltaMax) / total
			f.cwnd = satAdd(f.cwnd, uint32(min(step, 1<<31)))
		} else {
			// Tuned: unit = Δmax + cwnd/2^DecreaseShift, multiplied out so
			// that small windows keep their proportional part.
			num, den := uint64(f.p.DeltaMax), total
			if f.p.Variant == Tuned && f.p.DecreaseShift > 0 {
				num = uint64(f.p.DeltaMax)<<f.p.DecreaseShift + uint64(f.cwnd)
				den = total << f.p.DecreaseShift
			}
			step := cum * uint64(b-half+1) * num / den
			if step >= uint64(f.cwnd) {
				f.cwnd = 0
			} else {
				f.cwnd -= uint32(step)
			}
		}
		if f.p.Variant == Tuned && f.p.FloorGainEighths > 0 {
			f.cwnd = f.applyFloor(prev, b < half)
		}
		f.cwnd = clamp(f.cwnd, f.p.MinCwnd, f.p.MaxCwnd)
	}
	if boost && !f.slowStart {
		f.cwnd = clamp(uint32(min(uint64(f.cwnd)*uint64(f.p.OutageBoostPercent)/100, 1<<31)), f.p.MinCwnd, f.p.MaxCwnd)
	}
	if total >= uint64(f.p.HistCap) {
		for i := 0; i < x; i++ {
			f.hist[i] >>= 1
		}
	}
	return f.cwnd
}

// OnLoss processes entry into loss recovery (fast retransmit or timeout).
// The Paper variant ignores loss; Tuned leaves slow start and multiplies the
// window by LossBetaPermille/1000.
func (f *Flow) OnLoss() uint32 {
	if f.p.Variant != Tuned {
		return f.cwnd
	}
	f.slowStart = false
	f.undoCwnd, f.undoBDP, f.undoCand = f.cwnd, f.bdp.max, f.bdp.cand
	if f.p.LossBetaPermille > 0 {
		f.cwnd = clamp(uint32(uint64(f.cwnd)*uint64(f.p.LossBetaPermille)/1000), f.p.MinCwnd, f.p.MaxCwnd)
	}
	// A loss says the link did not carry what the floor remembers.
	f.bdp.max = min(f.bdp.max, f.cwnd)
	f.bdp.cand = min(f.bdp.cand, f.cwnd)
	return f.cwnd
}

// OnUndo processes the kernel's finding that the last loss was spurious
// (the TCP stack calls undo_cwnd when timestamps, DSACKs or F-RTO show
// that the retransmitted segments had not been lost, typically after a
// retransmission timeout caused by a link outage that only delayed them).
// Tuned restores the window and the delivered-BDP maximum that the last
// OnLoss reduced (the larger of the current and the saved value each); the
// Paper variant, which ignores loss, does nothing. It returns the window.
func (f *Flow) OnUndo() uint32 {
	if f.p.Variant != Tuned || f.undoCwnd == 0 {
		return f.cwnd
	}
	f.cwnd = max(f.cwnd, clamp(f.undoCwnd, f.p.MinCwnd, f.p.MaxCwnd))
	f.bdp.max = max(f.bdp.max, f.undoBDP)
	f.bdp.cand = max(f.bdp.cand, f.undoCand)
	f.undoCwnd, f.undoBDP, f.undoCand = 0, 0, 0
	return f.cwnd
}

// applyFloor keeps the window after a step from prev at or above the
// delivered-BDP floor. A decrease may still go below the floor by
// prev/2^(DecreaseShift+1), so that flows sharing a queue keep converging
// (the proportional part of every decrease is what equalises them; a floor
// that held each flow at its own past rate would freeze the shares).
func (f *Flow) applyFloor(prev uint32, increased bool) uint32 {
	floor := uint64(f.bdp.max) * uint64(f.p.FloorGainEighths) / 8
	if !increased && f.p.DecreaseShift > 0 {
		floor = min(floor, uint64(prev-prev>>(f.p.DecreaseShift+1)))
	}
	if uint64(f.cwnd) < floor {
		return uint32(min(floor, 1<<31))
	}
	return f.cwnd
}

// sampleBDP closes the current round at nowUs: the segments it acknowledged
// times minRTT over its length is the window that would carry the rate
// just delivered with no queue.
func (f *Flow) sampleBDP(nowUs uint64, minRTT uint32) {
	if f.rounds > 0 && nowUs > f.roundStart {
		bdp := uint64(f.roundAcked) * uint64(minRTT) / (nowUs - f.roundStart)
		f.bdp.update(nowUs, uint32(min(bdp, 1<<31)), f.bdpWinUs)
	}
	f.roundStart, f.roundAcked = nowUs, 0
	f.rounds = 1
}

func (f *Flow) push(r uint32) {
	// The ring has exactly Backlog slots; head is the oldest sample once full.
	if f.n == f.p.Backlog {
		f.sum -= uint64(f.backlog[f.head])
	} else {
		f.n++
	}
	f.backlog[f.head] = r
	f.sum += uint64(r)
	f.head = (f.head + 1) % f.p.Backlog
}

func satAdd(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint32(0)
}

func clamp(v, lo, hi uint32) uint32 {
	return max(lo, min(v, hi))
}
