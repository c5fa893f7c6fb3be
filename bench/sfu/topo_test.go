package benchsfu

import (
	"testing"
	"time"
)

func TestPathDelayAndAddresses(t *testing.T) {
	ms := time.Millisecond
	topo := Topology{Links: []Link{{A: "c", B: "s1", Delay: 10 * ms}, {A: "c", B: "s2", Delay: 10 * ms}, {A: "c", B: "s3", Delay: 15 * ms},
		{A: "c", B: "s4", Delay: 15 * ms}, {A: "s3", B: "s1", Delay: 5 * ms}, {A: "s4", B: "s2", Delay: 5 * ms}}}
	tests := []struct {
		a, b string
		want time.Duration
	}{
		{"s1", "s1", 0}, {"s1", "c", 10 * ms}, {"c", "s3", 15 * ms}, {"s1", "s3", 5 * ms}, {"s3", "s1", 5 * ms},
		{"s1", "s2", 20 * ms}, {"s3", "s4", 30 * ms}, {"s1", "s4", 25 * ms},
	}
	for _, tc := range tests {
		if got := topo.PathDelay(tc.a, tc.b); got != tc.want {
			t.Errorf("PathDelay(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	if a, b := linkNet("s3", "s1"); a != "10.77.113.2" || b != "10.77.113.1" {
		t.Errorf("linkNet(s3, s1) = %s, %s", a, b)
	}
	if a, b := linkNet("c", "s2"); a != "10.77.2.1" || b != "10.77.2.2" {
		t.Errorf("linkNet(c, s2) = %s, %s", a, b)
	}
	if got := topo.DelayRoutes("s1"); got != "10.77.0.1/32=10ms,10.77.2.2/32=20ms,10.77.3.2/32=5ms,10.77.4.2/32=25ms" {
		t.Errorf("DelayRoutes(s1) = %s", got)
	}
}
