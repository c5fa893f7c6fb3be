package fanout

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// Load follows whether a node's writers keep up, so that they batch more
// only while they do not. Writers that share a Load (Options.Load) report how
// late each of them woke after its linger interval; while that lateness is
// small the linger stays at Options.Linger, and as it grows the linger rises
// towards MaxLinger. A write costs a system call: when the process cannot
// get the CPU time it needs (its own load, or other processes on the same
// cores), fewer and larger writes leave more of it for the work that has to
// be done, instead of letting every queue wait longer. While the writers
// keep up, a connection keeps the shorter linger and its lower latency.
type Load struct {
	sum, n   atomic.Int64  // lateness reported in the current sample window
	late     atomic.Uint64 // math.Float64bits of the smoothed lateness, seconds
	pressure atomic.Uint64 // math.Float64bits of the current pressure
	done     chan struct{}
}

// Parameters of the load rule.
const (
	// MaxLinger is the linger under full pressure (unless Options.Linger
	// is longer).
	MaxLinger = 40 * time.Millisecond
	// LateLow is the mean lateness of the writers' wake-ups up to which
	// there is no pressure; LateHigh the one at which the pressure is full.
	// In between it rises linearly.
	LateLow  = 1 * time.Millisecond
	LateHigh = 5 * time.Millisecond
	// SampleEvery is how often a Load updates the pressure.
	SampleEvery = 100 * time.Millisecond
	// smoothing is the weight of a new sample in the smoothed lateness (a
	// time constant of about 0.4 s at SampleEvery).
	smoothing = 0.25
)

// NewLoad starts following the writers' lateness until ctx ends.
func NewLoad(ctx context.Context) *Load {
	l := &Load{done: make(chan struct{})}
	go l.run(ctx)
	return l
}

// observe records that a writer woke late after its linger interval.
func (l *Load) observe(late time.Duration) {
	if l == nil {
		return
	}
	l.sum.Add(int64(max(late, 0)))
	l.n.Add(1)
}

// Pressure is how far the linger is raised from Options.Linger towards
// MaxLinger: 0 while the writers keep up, 1 when they are far behind. A nil
// Load has none.
func (l *Load) Pressure() float64 {
	if l == nil {
		return 0
	}
	return math.Float64frombits(l.pressure.Load())
}

// Lateness is the writers' smoothed mean wake-up lateness.
func (l *Load) Lateness() time.Duration {
	if l == nil {
		return 0
	}
	return time.Duration(math.Float64frombits(l.late.Load()) * float64(time.Second))
}

// Linger is the linger interval under the current pressure for a
// connection configured with base; a connection with no linger (base 0)
// gets none.
func (l *Load) Linger(base time.Duration) time.Duration {
	p := l.Pressure()
	if p == 0 || base <= 0 || base >= MaxLinger {
		return base
	}
	return base + time.Duration(p*float64(MaxLinger-base))
}

// Done is closed when the Load has stopped.
func (l *Load) Done() <-chan struct{} { return l.done }

// pressureFor maps a smoothed lateness to a pressure.
func pressureFor(late time.Duration) float64 {
	f := float64(late-LateLow) / float64(LateHigh-LateLow)
	return min(max(f, 0), 1)
}

func (l *Load) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.sample()
	}
}

// sample closes a sample window: a window in which no writer lingered
// counts as no lateness.
func (l *Load) sample() {
	n := l.n.Swap(0)
	sum := l.sum.Swap(0)
	mean := 0.0
	if n > 0 {
		mean = float64(sum) / float64(n) / float64(time.Second)
	}
	smoothed := math.Float64frombits(l.late.Load())
	smoothed += smoothing * (mean - smoothed)
	l.late.Store(math.Float64bits(smoothed))
	l.pressure.Store(math.Float64bits(pressureFor(time.Duration(smoothed * float64(time.Second)))))
}
