package allocator

import (
	"math"
	"testing"
	"time"
)

func TestSplit(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		total   float64
		demands []float64
		want    []float64
	}{
		{"unlimited", inf, []float64{1, 2}, []float64{inf, inf}},
		{"equal when all want more", 300, []float64{500, 1000, 200}, []float64{100, 100, 100}},
		{"small demand leaves room", 300, []float64{50, 1000, 1000}, []float64{50, 125, 125}},
		{"everyone satisfied, rest shared", 300, []float64{50, 50, 50}, []float64{100, 100, 100}},
		{"nobody", 300, nil, []float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Split(tt.total, tt.demands)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			sum := 0.0
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 && got[i] != tt.want[i] {
					t.Errorf("share %d = %v, want %v (all %v)", i, got[i], tt.want[i], got)
				}
				sum += got[i]
			}
			if !math.IsInf(tt.total, 1) && len(got) > 0 && sum > tt.total+1e-6 {
				t.Errorf("shares sum to %v > %v", sum, tt.total)
			}
		})
	}
}

func repeat[T any](n int, v T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestSharedLink(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tick := 500 * time.Millisecond
	type step struct {
		s    LinkSample
		want func(b float64) bool
		what string
	}
	clear := LinkSample{Sent: 1e6, QueueDelay: -1}
	tests := []struct {
		name  string
		steps []step
	}{
		{"never congested: unlimited", []step{
			{clear, func(b float64) bool { return math.IsInf(b, 1) }, "+Inf"},
			{LinkSample{Sent: 1e6, Loss: 0.01, QueueDelay: 10 * time.Millisecond}, func(b float64) bool { return math.IsInf(b, 1) }, "+Inf (between thresholds)"},
		}},
		{"loss cuts to 85 % of the rate sent", []step{
			{LinkSample{Sent: 2e6, Loss: 0.05}, func(b float64) bool { return b == 0.85*2e6 }, "1.7e6"},
		}},
		{"delay cuts, once per hold", []step{
			{LinkSample{Sent: 2e6, QueueDelay: 80 * time.Millisecond}, func(b float64) bool { return b == 1.7e6 }, "1.7e6"},
			{LinkSample{Sent: 1.9e6, QueueDelay: 80 * time.Millisecond}, func(b float64) bool { return b == 1.7e6 }, "held at 1.7e6"},
			{LinkSample{Sent: 1.7e6, QueueDelay: 80 * time.Millisecond}, func(b float64) bool { return b == 0.85*1.7e6 }, "1.445e6"},
		}},
		{"clear path grows, slowly near the ceiling", []step{
			{LinkSample{Sent: 1e6, Loss: 0.1}, func(b float64) bool { return b == 0.85e6 }, "0.85e6"},
			{LinkSample{Sent: 0.85e6}, func(b float64) bool { return b > 0.88e6 && b < 0.9e6 }, "+4 %"},
			{LinkSample{Sent: 0.88e6}, func(b float64) bool { return b > 0.9e6 && b < 0.93e6 }, "+4 %"},
			{LinkSample{Sent: 0.9e6}, func(b float64) bool { return b > 0.92e6 && b < 0.94e6 }, "+0.4 % (within 10 % of the ceiling)"},
		}},
		{"budget stays near the rate sent", append([]step{
			{LinkSample{Sent: 1e6, Loss: 0.1}, func(b float64) bool { return b == 0.85e6 }, "0.85e6"}},
			repeat(40, step{LinkSample{Sent: 1e5}, func(b float64) bool { return b <= 2*1e5+Headroom }, "≤ 2×sent + headroom"})...)},
		{"tail delay cuts; between its thresholds it holds", []step{
			{LinkSample{Sent: 2e6, QueueDelay: -1, TailDelay: 60 * time.Millisecond}, func(b float64) bool { return b == 1.7e6 }, "1.7e6"},
			{LinkSample{Sent: 1.7e6, QueueDelay: -1, TailDelay: 20 * time.Millisecond}, func(b float64) bool { return b == 1.7e6 }, "held at 1.7e6"},
			{LinkSample{Sent: 1.7e6, QueueDelay: -1, TailDelay: 5 * time.Millisecond}, func(b float64) bool { return b > 1.7e6 }, "grows"},
		}},
		{"unknown tail delay does not hold growth", []step{
			{LinkSample{Sent: 1e6, Loss: 0.1, TailDelay: -1}, func(b float64) bool { return b == 0.85e6 }, "0.85e6"},
			{LinkSample{Sent: 0.85e6, TailDelay: -1}, func(b float64) bool { return b > 0.88e6 }, "+4 %"},
		}},
		{"floor", []step{
			{LinkSample{Sent: 1000, Loss: 0.5}, func(b float64) bool { return b == MinShared }, "MinShared"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewSharedLink()
			now := t0
			for i, st := range tt.steps {
				if got := l.Update(now, st.s); !st.want(got) {
					t.Errorf("step %d: budget %v, want %s", i, got, st.what)
				}
				now = now.Add(tick)
			}
		})
	}
}
