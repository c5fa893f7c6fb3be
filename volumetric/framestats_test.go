package volumetric

import (
	"testing"
	"time"
)

func TestFrameTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	capture := uint64(t0.UnixMicro())
	frags := func(frame uint32) [][]byte {
		p, err := Packetize(Header{Client: 1, Frame: frame, CaptureUs: capture}, make([]byte, 2500), 1000)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name         string
		feed         func(tr *FrameTracker)
		complete     uint64
		expired      uint64
		wantP50, p99 time.Duration
	}{
		{"in order", func(tr *FrameTracker) {
			for i, f := range frags(1) {
				tr.Observe(t0.Add(time.Duration(10*(i+1))*time.Millisecond), f)
			}
		}, 1, 0, 30 * time.Millisecond, 30 * time.Millisecond},
		{"reordered with duplicate", func(tr *FrameTracker) {
			f := frags(2)
			tr.Observe(t0.Add(5*time.Millisecond), f[2])
			tr.Observe(t0.Add(6*time.Millisecond), f[2])
			tr.Observe(t0.Add(7*time.Millisecond), f[0])
			tr.Observe(t0.Add(8*time.Millisecond), f[1])
		}, 1, 0, 8 * time.Millisecond, 8 * time.Millisecond},
		{"missing fragment expires", func(tr *FrameTracker) {
			f := frags(3)
			tr.Observe(t0, f[0])
			tr.Observe(t0, f[1])
		}, 0, 1, 0, 0},
		{"not a fragment", func(tr *FrameTracker) { tr.Observe(t0, []byte{9, 9}) }, 0, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewFrameTracker(100*time.Millisecond, 16)
			tc.feed(tr)
			s := tr.Stats(t0.Add(time.Second))
			if s.Complete != tc.complete || s.Expired != tc.expired || s.P50 != tc.wantP50 || s.P99 != tc.p99 {
				t.Fatalf("stats %+v, want complete %d expired %d p50 %v p99 %v", s, tc.complete, tc.expired, tc.wantP50, tc.p99)
			}
		})
	}
}

func TestLatencyWindowQuantiles(t *testing.T) {
	w := NewLatencyWindow(100)
	for i := 200; i >= 1; i-- { // only the last 100 added (100..1 ms) are kept
		w.Add(time.Duration(i) * time.Millisecond)
	}
	q, sum, n := w.Quantiles(0.5, 0.9, 0.99, 1)
	want := []time.Duration{50 * time.Millisecond, 90 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond}
	for i := range want {
		if q[i] != want[i] {
			t.Errorf("quantile %d = %v, want %v", i, q[i], want[i])
		}
	}
	if n != 200 || sum != 20100*time.Millisecond {
		t.Errorf("n %d sum %v", n, sum)
	}
	if (FrameStats{}).CompletionRatio() != 1 || (FrameStats{Complete: 3, Expired: 1}).CompletionRatio() != 0.75 {
		t.Error("completion ratio")
	}
}
