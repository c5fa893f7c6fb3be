package sfu

import (
	"testing"
	"time"

	"github.com/pion/interceptor/pkg/twcc"
	"github.com/pion/rtcp"
)

// TestQueueProbe feeds the probe real TWCC feedback (pion's recorder, as a
// receiver builds it) for packets whose one-way delay is a fixed path delay
// plus a known queueing delay, on a receiver clock with an arbitrary
// offset, and checks the delays it counts, and the packets reported
// received and lost.
func TestQueueProbe(t *testing.T) {
	for _, tc := range []struct {
		name     string
		queue    func(i int) time.Duration // queueing delay of packet i
		n        int
		lost     func(i int) bool
		p50, p95 time.Duration // expected, ±2 ms
	}{
		{"no queue", func(int) time.Duration { return 0 }, 200, nil, 0, 0},
		{"bursts: a ramp every 20 packets", func(i int) time.Duration { return time.Duration(i%20) * 3 * time.Millisecond }, 400, nil, 30 * time.Millisecond, 57 * time.Millisecond},
		{"losses skip packets", func(i int) time.Duration { return time.Duration(i%10) * time.Millisecond }, 300, func(i int) bool { return i%7 == 3 }, 5 * time.Millisecond, 9 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &queueProbe{start: time.Now()}
			rec := twcc.NewRecorder(1)
			const offsetUS = 5_000_000 // the receiver's clock
			path := 20 * time.Millisecond
			sent := q.start
			for i := range tc.n {
				seq := uint16(65000 + i) // wraps
				sent = sent.Add(2 * time.Millisecond)
				q.onSent(seq, sent)
				if tc.lost != nil && tc.lost(i) {
					continue
				}
				arr := sent.Sub(q.start) + path + tc.queue(i)
				rec.Record(7, seq, offsetUS+arr.Microseconds())
				if i%50 == 49 {
					for _, p := range rec.BuildFeedbackPacket() {
						if fb, ok := p.(*rtcp.TransportLayerCC); ok {
							q.onFeedback(fb)
						}
					}
				}
			}
			h := q.take()
			got := 0
			for i := range tc.n {
				if tc.lost == nil || !tc.lost(i) {
					got++
				}
			}
			if h.count() != got {
				t.Fatalf("%d samples, want %d", h.count(), got)
			}
			near := func(a, b time.Duration) bool { return a-b <= 2*time.Millisecond && b-a <= 2*time.Millisecond }
			if p := h.quantile(0.5); !near(p, tc.p50) {
				t.Errorf("p50 %v, want %v", p, tc.p50)
			}
			if p := h.quantile(0.95); !near(p, tc.p95) {
				t.Errorf("p95 %v, want %v", p, tc.p95)
			}
			if h2 := q.take(); h2.count() != 0 {
				t.Errorf("take did not reset: %d", h2.count())
			}
			// the feedback's losses, which end a probe (peer.reconcile)
			if recv, lost := q.takeLoss(); recv != uint64(got) || lost != uint64(tc.n-got) {
				t.Errorf("takeLoss: %d received, %d lost; want %d, %d", recv, lost, got, tc.n-got)
			}
			if recv, lost := q.takeLoss(); recv+lost != 0 {
				t.Errorf("takeLoss did not reset: %d, %d", recv, lost)
			}
		})
	}
}

func TestDelayHistQuantile(t *testing.T) {
	var h delayHist
	if h.quantile(0.95) != -1 {
		t.Fatal("empty histogram has a quantile")
	}
	for i := range 100 {
		h.add(time.Duration(i) * time.Millisecond)
	}
	h.add(-time.Millisecond) // clamped to the first bin
	h.add(time.Hour)         // and the last
	if q := h.quantile(0.5); q != 50*time.Millisecond {
		t.Errorf("p50 %v", q)
	}
	if q := h.quantile(1); q != histBins*histBin {
		t.Errorf("max %v", q)
	}
}
