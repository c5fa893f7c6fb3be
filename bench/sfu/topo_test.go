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

func TestParseQdiscSent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want qdiscCount
		ok   bool
	}{
		{"qdisc htb 1: dev xrs1-c root refcnt 3 r2q 10 default 0x10 direct_packets_stat 0 direct_qlen 1000\n Sent 8513689 bytes 9490 pkt (dropped 12369, overlimits 6259 requeues 0) \n backlog 14201b 23p requeues 0\nqdisc pfifo 10: dev xrs1-c parent 1:10 limit 54p\n Sent 1 bytes 1 pkt (dropped 1, overlimits 0 requeues 0)\n",
			qdiscCount{bytes: 8513689, pkts: 9490, drops: 12369, backlog: 14201}, true},
		{" Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)", qdiscCount{}, true},
		{"", qdiscCount{}, false},
		{"Sent x bytes", qdiscCount{}, false},
	} {
		got, ok := parseQdiscSent(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseQdiscSent(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLinkStats(t *testing.T) {
	before := map[string]qdiscCount{"s1>c": {bytes: 1000, pkts: 10, drops: 0}}
	after := map[string]qdiscCount{"s1>c": {bytes: 1000 + 2_500_000, pkts: 10 + 90, drops: 10}, "c>s1": {bytes: 500}}
	got := linkStats(before, after, map[string]uint64{"s1>c": 25_000}, 2e6, 10*time.Second)
	if len(got) != 2 || got[1].From != "s1" || got[1].To != "c" || got[1].Mbps != 2 || got[1].Drops != 10 || got[1].DropPct != 10 || got[1].MaxBacklogMs != 100 {
		t.Fatalf("linkStats = %+v", got)
	}
	if b := busiest(got); b.From != "s1" {
		t.Fatalf("busiest = %+v", b)
	}
}
