// Package bwe provides the SFU's send-side bandwidth estimators.
//
// Estimators are pluggable: anything that implements pion/interceptor's
// cc.BandwidthEstimator can be used through a cc.BandwidthEstimatorFactory
// (sfu.Config.Estimator). The default is WideGCC, Google Congestion Control
// from pion/interceptor with its range widened for 10-300 Mbit/s
// volumetric flows; the Hera estimator (package hera) implements the same
// interface and slots in the same way.
//
// # Widening GCC without touching its internals
//
// pion's gcc.SendSideBWE takes the minimum of a delay-based and a
// loss-based estimate. The delay-based range follows the exported options
// SendSideBWEMinBitrate/MaxBitrate, but the loss-based controller is built
// with a fixed 100 kbit/s-100 Mbit/s range in unexported fields, so the
// combined estimate can never pass 100 Mbit/s. WideGCC does not reach into
// those fields. It composes instead:
//
//   - it runs an unmodified gcc.SendSideBWE with the wide delay range and
//     a no-op pacer (the SFU forwards at the publishers' pace), and reads
//     the delay-based estimate from its exported GetStats
//     ("delayTargetBitrate"), which the loss controller does not cap;
//   - it computes loss itself from the same transport-wide feedback
//     (TWCC packet status chunks) and runs its own loss-based controller,
//     the GCC rule of draft-ietf-rmcat-gcc-02 section 6 (increase 5% when
//     loss < 2%, decrease by half the loss when loss > 10%), with a
//     configurable range;
//   - its target is the minimum of the two, as in GCC.
package bwe

import (
	"errors"
	"math"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/interceptor/pkg/gcc"
	"github.com/pion/rtcp"

	herabwe "github.com/xrealm/xrealm/hera/bwe"
)

// Config is the range of WideGCC. Zero values take the defaults below.
type Config struct {
	Min, Max, Initial int // bit/s
}

// Defaults for volumetric flows.
const (
	DefaultMin     = 100_000
	DefaultMax     = 300_000_000
	DefaultInitial = 10_000_000
)

func (c Config) withDefaults() Config {
	if c.Min <= 0 {
		c.Min = DefaultMin
	}
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	if c.Initial <= 0 {
		c.Initial = DefaultInitial
	}
	c.Initial = min(max(c.Initial, c.Min), c.Max)
	return c
}

// NewFactory returns a factory of WideGCC estimators.
func NewFactory(cfg Config) cc.BandwidthEstimatorFactory {
	return func() (cc.BandwidthEstimator, error) { return NewWideGCC(cfg) }
}

// WideGCC is GCC with a configurable range above 100 Mbit/s; see the
// package documentation.
type WideGCC struct {
	cfg   Config
	inner *gcc.SendSideBWE
	loss  *LossController

	mu       sync.Mutex
	last     int
	onChange func(int)
	// malformed counts the feedback left out (see WriteRTCP), and
	// lastMalformed says why the last one was.
	malformed     uint64
	lastMalformed string
}

// malformedFeedback counts one feedback left out for err.
func (w *WideGCC) malformedFeedback(err error) {
	w.mu.Lock()
	w.malformed++
	w.lastMalformed = err.Error()
	w.mu.Unlock()
}

// NewWideGCC returns an estimator with cfg's range.
func NewWideGCC(cfg Config) (*WideGCC, error) {
	cfg = cfg.withDefaults()
	inner, err := gcc.NewSendSideBWE(
		gcc.SendSideBWEMinBitrate(cfg.Min),
		gcc.SendSideBWEMaxBitrate(cfg.Max),
		gcc.SendSideBWEInitialBitrate(cfg.Initial),
		gcc.SendSideBWEPacer(gcc.NewNoOpPacer()),
	)
	if err != nil {
		return nil, err
	}
	return &WideGCC{cfg: cfg, inner: inner, loss: NewLossController(cfg.Min, cfg.Max, cfg.Initial), last: cfg.Initial}, nil
}

// AddStream implements cc.BandwidthEstimator.
func (w *WideGCC) AddStream(info *interceptor.StreamInfo, wr interceptor.RTPWriter) interceptor.RTPWriter {
	return w.inner.AddStream(info, wr)
}

// WriteRTCP implements cc.BandwidthEstimator. A transport-wide feedback
// that CountTWCC refuses (the reserved status symbol) reaches neither
// estimate, and a batch in which pion's GCC refuses a feedback (deltas that
// disagree with the statuses) updates no loss counts; both are counted in
// GetStats ("wideMalformedFeedback", "wideLastMalformedFeedback") and not
// returned. The cc interceptor would pass an error on to the RTCP reader,
// and a reader that stops at an error (the SFU's reader of a subscriber's
// RTCP does) would never handle that peer's NACKs and PLIs again.
func (w *WideGCC) WriteRTCP(pkts []rtcp.Packet, attr interceptor.Attributes) error {
	now := time.Now()
	type count struct{ recv, lost int }
	var counts []count
	var kept []rtcp.Packet // non-nil once a feedback is left out
	for i, p := range pkts {
		if fb, ok := p.(*rtcp.TransportLayerCC); ok {
			recv, lost, err := CountTWCC(fb)
			if err != nil {
				w.malformedFeedback(err)
				if kept == nil {
					kept = append(make([]rtcp.Packet, 0, len(pkts)), pkts[:i]...)
				}
				continue
			}
			counts = append(counts, count{recv, lost})
		}
		if kept != nil {
			kept = append(kept, p)
		}
	}
	if kept != nil {
		pkts = kept
	}
	if err := w.inner.WriteRTCP(pkts, attr); err != nil {
		if errors.Is(err, gcc.ErrSendSideBWEClosed) {
			return err
		}
		w.malformedFeedback(err)
		counts = nil
	}
	for _, c := range counts {
		w.loss.Update(now, c.recv, c.lost)
	}
	t := w.GetTargetBitrate()
	w.mu.Lock()
	changed := t != w.last
	w.last = t
	f := w.onChange
	w.mu.Unlock()
	if changed && f != nil {
		f(t)
	}
	return nil
}

func (w *WideGCC) delayTarget() int {
	if v, ok := w.inner.GetStats()["delayTargetBitrate"].(int); ok && v > 0 {
		return v
	}
	return w.inner.GetTargetBitrate()
}

// GetTargetBitrate implements cc.BandwidthEstimator: the minimum of the
// delay-based and the loss-based estimate.
func (w *WideGCC) GetTargetBitrate() int {
	return min(w.delayTarget(), w.loss.Target())
}

// OnTargetBitrateChange implements cc.BandwidthEstimator.
func (w *WideGCC) OnTargetBitrateChange(f func(int)) {
	w.mu.Lock()
	w.onChange = f
	w.mu.Unlock()
}

// GetStats implements cc.BandwidthEstimator.
func (w *WideGCC) GetStats() map[string]any {
	s := w.inner.GetStats()
	s["wideLossTargetBitrate"] = w.loss.Target()
	s["wideAverageLoss"] = w.loss.AverageLoss()
	s["targetBitrate"] = w.GetTargetBitrate()
	w.mu.Lock()
	s["wideMalformedFeedback"] = w.malformed
	s["wideLastMalformedFeedback"] = w.lastMalformed
	w.mu.Unlock()
	return s
}

// Close implements cc.BandwidthEstimator.
func (w *WideGCC) Close() error { return w.inner.Close() }

// ErrReservedSymbol reports a transport-wide feedback that gives a packet
// the reserved packet status symbol 3 (binary 11); it is Hera's
// (hera/bwe.ErrReservedSymbol), whose parser reads the statuses for both.
var ErrReservedSymbol = herabwe.ErrReservedSymbol

// CountTWCC counts the packets a transport-wide feedback reports as
// received and as not received, reading no more statuses than its status
// count (the rest is padding). A feedback that gives one of those packets
// the reserved status symbol 3 is refused with an error wrapping
// ErrReservedSymbol that names the chunk, and counts nothing.
func CountTWCC(fb *rtcp.TransportLayerCC) (recv, lost int, err error) {
	err = herabwe.WalkStatuses(fb, func(_, symbol uint16) {
		if symbol == rtcp.TypeTCCPacketNotReceived {
			lost++
		} else {
			recv++
		}
	})
	if err != nil {
		return 0, 0, err
	}
	return recv, lost, nil
}

// LossController is GCC's loss-based controller (draft-ietf-rmcat-gcc-02
// section 6) with a caller-chosen range. It is safe for concurrent use.
type LossController struct {
	mu                     sync.Mutex
	min, max, rate         int
	avg                    float64
	lastUpdate             time.Time
	lastIncrease, lastDecr time.Time
}

// Controller constants from the draft, as pion uses them.
const (
	increaseLoss = 0.02
	decreaseLoss = 0.10
	increaseStep = 1.05
	holdTime     = 200 * time.Millisecond
)

// NewLossController returns a controller starting at initial bit/s.
func NewLossController(minRate, maxRate, initial int) *LossController {
	return &LossController{min: minRate, max: maxRate, rate: initial}
}

// Update feeds one feedback report's counts observed at now.
func (l *LossController) Update(now time.Time, recv, lost int) {
	if recv+lost == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ratio := float64(lost) / float64(recv+lost)
	if l.lastUpdate.IsZero() {
		l.avg = ratio
	} else {
		l.avg = ratio + math.Exp(-float64(now.Sub(l.lastUpdate).Milliseconds())/200.0)*(l.avg-ratio)
	}
	l.lastUpdate = now
	hi, lo := math.Max(l.avg, ratio), math.Min(l.avg, ratio)
	switch {
	case hi < increaseLoss && now.Sub(l.lastIncrease) > holdTime:
		l.lastIncrease = now
		l.rate = min(max(int(float64(l.rate)*increaseStep), l.min), l.max)
	case lo > decreaseLoss && now.Sub(l.lastDecr) > holdTime:
		l.lastDecr = now
		l.rate = min(max(int(float64(l.rate)*(1-0.5*lo)), l.min), l.max)
	}
}

// Target is the loss-based estimate in bit/s.
func (l *LossController) Target() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// AverageLoss is the smoothed loss ratio.
func (l *LossController) AverageLoss() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.avg
}
