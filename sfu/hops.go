package sfu

import (
	"context"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xrealm/xrealm/volumetric"
)

// Hop ages: for every point-cloud packet a node forwards, how long after
// its capture (the time in its volumetric header, the publisher's clock)
// it arrived at the node, from a local publisher or over a relay link, and
// how long after capture the node had handed it to every down track and
// relay. On one clock (tests, the bench) they split a subscriber's
// latency into hops: publisher → node, origin node → this node, and the
// node's own forwarding; what is left is the way to the subscriber and
// the subscriber itself.

// Quantiles is a distribution of durations in milliseconds.
type Quantiles struct {
	N   int64   `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// HopStats are a node's packet ages since the last call of Node.HopStats.
type HopStats struct {
	InLocal Quantiles `json:"in_local"` // capture → arrival from a local publisher
	InRelay Quantiles `json:"in_relay"` // capture → arrival over a relay link
	Out     Quantiles `json:"out"`      // capture → handed to every down track and relay
	Fanout  Quantiles `json:"fanout"`   // arrival → handed to every down track and relay
}

type hopHists struct {
	mu                            sync.Mutex
	inLocal, inRelay, out, fanout *hdrhistogram.Histogram
}

func newHopHists() *hopHists {
	h := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 2) } // µs
	return &hopHists{inLocal: h(), inRelay: h(), out: h(), fanout: h()}
}

func (h *hopHists) record(relayed bool, capture, arrived, done time.Time) {
	if h == nil {
		return
	}
	in := h.inLocal
	if relayed {
		in = h.inRelay
	}
	h.mu.Lock()
	_ = in.RecordValue(max(1, arrived.Sub(capture).Microseconds()))
	_ = h.out.RecordValue(max(1, done.Sub(capture).Microseconds()))
	_ = h.fanout.RecordValue(max(1, done.Sub(arrived).Microseconds()))
	h.mu.Unlock()
}

func quantiles(h *hdrhistogram.Histogram) Quantiles {
	ms := func(v int64) float64 { return float64(v) / 1e3 }
	return Quantiles{N: h.TotalCount(), P50: ms(h.ValueAtQuantile(50)), P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())}
}

// take returns the distributions and starts new ones.
func (h *hopHists) take() HopStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := HopStats{InLocal: quantiles(h.inLocal), InRelay: quantiles(h.inRelay), Out: quantiles(h.out), Fanout: quantiles(h.fanout)}
	h.inLocal.Reset()
	h.inRelay.Reset()
	h.out.Reset()
	h.fanout.Reset()
	return s
}

// captureTime is the capture time in a point-cloud payload.
func captureTime(payload []byte) (time.Time, bool) {
	h, _, err := volumetric.ParseHeader(payload)
	if err != nil || h.CaptureUs == 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(int64(h.CaptureUs)), true
}

// hopsFor returns the histograms a source of track t records its packet
// ages in: none for a description published on a data channel, whose
// capture times are the client's clock (a browser's), on its first node
// and on every node it is relayed to.
func (n *Node) hopsFor(t TrackInfo) *hopHists {
	if t.DataChannel {
		return nil
	}
	return n.hops
}

// HopStats returns the node's packet ages since the last call.
func (n *Node) HopStats() HopStats { return n.hops.take() }

// LagProbe measures CPU starvation as a process's goroutines see it: a
// goroutine sleeps for a fixed interval and records how late it wakes. On
// an idle machine the lag is tens of microseconds; when the process waits
// for a CPU (other processes, the VM's steal) it grows, and every packet
// it sends or receives waits as long.
type LagProbe struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// StartLagProbe probes every interval until ctx ends.
func StartLagProbe(ctx context.Context, every time.Duration) *LagProbe {
	p := &LagProbe{h: hdrhistogram.New(1, 60_000_000, 2)}
	go func() {
		t := time.NewTimer(every)
		defer t.Stop()
		want := time.Now().Add(every)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				now := time.Now()
				p.mu.Lock()
				_ = p.h.RecordValue(max(1, now.Sub(want).Microseconds()))
				p.mu.Unlock()
				want = time.Now().Add(every)
				t.Reset(every)
			}
		}
	}()
	return p
}

// Take returns the lag since the last call and starts over.
func (p *LagProbe) Take() Quantiles {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := quantiles(p.h)
	p.h.Reset()
	return q
}
