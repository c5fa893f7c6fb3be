package allocator

import (
	"math"
	"sort"
	"time"
)

// SharedLink budgets a group of subscribers that reach the SFU over one
// path (the SFU groups them by remote address) and so share its
// bottleneck. Each subscriber's own estimator sees only its own flow; n
// such flows on one drop-tail queue each probe and back off on their own,
// and their sum overshoots the path (the bench's direct links: 16
// subscribers, 20-30 % queue drops). SharedLink is one controller for the
// group's sum, driven by what the SFU observes of the whole group each
// interval: the rate sent, the share of packets the receivers asked for
// again (loss on the path: NACKs answered from the SFU's own buffer) and
// the queueing delay (receiver-report round-trip time above its floor,
// and the tail of the per-packet delays from transport-wide feedback).
//
// The rule is AIMD with a memory of where congestion began: on congestion
// (loss above LossHigh or delay above DelayHigh) the budget falls to
// Backoff × the rate sent, at most once per Hold so that the queue can
// drain and the signals catch up; while the path is clear (loss below
// LossLow, delay below DelayLow) it grows by Increase per interval, and
// by a tenth of that within 10 % of the rate where congestion last began,
// which it probes slowly. A group that never congests is never limited:
// the budget is +Inf until the first congestion, and afterwards it is
// kept within Headroom of the rate sent so that it stays meaningful.
type SharedLink struct {
	budget  float64 // bit/s; +Inf: not limited
	ceiling float64 // the rate sent when congestion last began; 0 = never
	lastCut time.Time
}

// LinkSample is what the SFU observed of a group over one interval.
type LinkSample struct {
	// Sent is the bit rate sent to the group's subscribers.
	Sent float64
	// Loss is the share of forwarded packets that were lost on the path.
	Loss float64
	// QueueDelay is the group's queueing delay; negative when unknown.
	QueueDelay time.Duration
	// TailDelay is the tail (95th percentile) of the queueing delay
	// the group's packets met, from transport-wide feedback; negative
	// when unknown. It sees the waits behind bursts (a frame copied to
	// every subscriber behind the path) that a mean or a sparse sample
	// of round-trip times misses, and which make a subscriber's p99
	// latency.
	TailDelay time.Duration
}

// SharedLink constants. The delay thresholds bound the standing queue:
// on a drop-tail link fed by many streams the queueing delay's p99 is
// several times its mean (about 4.6× at 90 % load for packets of one size),
// so a mean held under 15 ms keeps the p99 near 70 ms; with 40 ms the
// bench's direct links ran at 93-97 % with p99 110-150 ms (run E).
const (
	LossHigh  = 0.02
	LossLow   = 0.005
	DelayHigh = 15 * time.Millisecond
	DelayLow  = 6 * time.Millisecond
	// TailHigh and TailLow bound LinkSample.TailDelay: a p95 queueing
	// delay of 40 ms leaves room for the path's own delay (the bench's
	// sites 3-4: 40-55 ms) under a p99 of 100 ms; at 30/15 ms run F's
	// trial held p99 at 49-53 ms but gave up points it did not need to.
	TailHigh = 40 * time.Millisecond
	TailLow  = 20 * time.Millisecond
	Backoff  = 0.85
	Increase = 0.04
	Hold     = time.Second
	// MinShared is the least budget per group, bit/s.
	MinShared = 50_000
	// Headroom bounds the budget of a clear group to twice the rate sent
	// plus this many bit/s.
	Headroom = 1_000_000
)

// NewSharedLink returns an unlimited group.
func NewSharedLink() *SharedLink { return &SharedLink{budget: math.Inf(1)} }

// Budget is the group's budget in bit/s (+Inf: not limited).
func (l *SharedLink) Budget() float64 { return l.budget }

// Update feeds one interval's sample observed at now and returns the
// budget.
func (l *SharedLink) Update(now time.Time, s LinkSample) float64 {
	congested := s.Loss > LossHigh || s.QueueDelay > DelayHigh || s.TailDelay > TailHigh
	clear := s.Loss < LossLow && s.QueueDelay < DelayLow && s.TailDelay < TailLow
	switch {
	case congested:
		if now.Sub(l.lastCut) < Hold {
			break
		}
		l.lastCut = now
		l.ceiling = s.Sent
		l.budget = max(MinShared, Backoff*math.Min(l.budget, s.Sent))
	case clear && !math.IsInf(l.budget, 1):
		step := Increase
		if l.budget > 0.9*l.ceiling {
			step /= 10
			l.ceiling *= 1 + step // probe past it, slowly
		}
		l.budget = math.Min(l.budget*(1+step)+MinShared/10, 2*s.Sent+Headroom)
	}
	return l.budget
}

// Split shares total among subscribers with the given demands (bit/s they
// would take unconstrained) by water-filling: nobody gets more than its
// demand, and what one does not need is shared equally among the others.
// A +Inf total gives +Inf to everyone.
func Split(total float64, demands []float64) []float64 {
	out := make([]float64, len(demands))
	if math.IsInf(total, 1) {
		for i := range out {
			out[i] = math.Inf(1)
		}
		return out
	}
	idx := make([]int, len(demands))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return demands[idx[a]] < demands[idx[b]] })
	left := total
	for k, i := range idx {
		share := left / float64(len(idx)-k)
		out[i] = math.Min(demands[i], share)
		left -= out[i]
	}
	// what nobody needed goes to everyone equally, so that a demand that
	// grows before the next split still finds room
	if len(out) > 0 && left > 0 {
		for i := range out {
			out[i] += left / float64(len(out))
		}
	}
	return out
}
