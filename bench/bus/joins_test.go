package benchbus

import (
	"testing"
	"time"
)

// The join times' p99 is the nearest-rank percentile: the ceil(0.99 n)-th
// smallest. With 100 or 200 bots it was the (0.99 n + 1)-th: the slowest
// join of 100, not the 99th.
func TestJoinStats(t *testing.T) {
	joins := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[n-1-i] = time.Duration(i+1) * time.Millisecond // unsorted
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		mean float64
		p99  float64
	}{
		{1, 1, 1},
		{2, 1.5, 2},
		{100, 50.5, 99},
		{120, 60.5, 119},
		{200, 100.5, 198},
	} {
		mean, p99 := joinStats(joins(tc.n))
		if mean != tc.mean || p99 != tc.p99 {
			t.Errorf("%d joins of 1..%d ms: mean %v ms, p99 %v ms; want %v, %v", tc.n, tc.n, mean, p99, tc.mean, tc.p99)
		}
	}
	if mean, p99 := joinStats(nil); mean != 0 || p99 != 0 {
		t.Errorf("no joins: mean %v, p99 %v; want 0, 0", mean, p99)
	}
}
