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
	"math"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/interceptor/pkg/gcc"
	"github.com/pion/rtcp"
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

// WriteRTCP implements cc.BandwidthEstimator.
func (w *WideGCC) WriteRTCP(pkts []rtcp.Packet, attr interceptor.Attributes) error {
	if err := w.inner.WriteRTCP(pkts, attr); err != nil {
		return err
	}
	now := time.Now()
	for _, p := range pkts {
		if fb, ok := p.(*rtcp.TransportLayerCC); ok {
			recv, lost := CountTWCC(fb)
			w.loss.Update(now, recv, lost)
		}
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
	return s
}

// Close implements cc.BandwidthEstimator.
func (w *WideGCC) Close() error { return w.inner.Close() }

// CountTWCC counts the packets a transport-wide feedback reports as
// received and as not received.
func CountTWCC(fb *rtcp.TransportLayerCC) (recv, lost int) {
	left := int(fb.PacketStatusCount)
	add := func(sym uint16) {
		if left <= 0 {
			return
		}
		left--
		if sym == rtcp.TypeTCCPacketNotReceived {
			lost++
		} else {
			recv++
		}
	}
	for _, c := range fb.PacketChunks {
		switch c := c.(type) {
		case *rtcp.RunLengthChunk:
			for i := 0; i < int(c.RunLength); i++ {
				add(c.PacketStatusSymbol)
			}
		case *rtcp.StatusVectorChunk:
			for _, s := range c.SymbolList {
				add(s)
			}
		}
	}
	return recv, lost
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
