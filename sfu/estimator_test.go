package sfu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	herabwe "github.com/xrealm/xrealm/hera/bwe"
	"github.com/xrealm/xrealm/sfu/bwe"
	"github.com/xrealm/xrealm/volumetric"
)

func (n *Node) peerOf(session, client string) *peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.peers[session+"/"+client]
}

// TestEstimatorPerClient: each client picks the estimator the node uses
// towards it in its offer; an unknown name is refused.
func TestEstimatorPerClient(t *testing.T) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		client, estimator string
		check             func(any) bool
		err               string
	}{
		{"h", "hera", func(e any) bool { _, ok := e.(*herabwe.Estimator); return ok }, ""},
		{"g", "gcc", func(e any) bool { _, ok := e.(*bwe.WideGCC); return ok }, ""},
		{"d", "", func(e any) bool { _, ok := e.(*bwe.WideGCC); return ok }, ""},
		{"x", "bogus", nil, `estimator "bogus" unknown`},
	}
	for _, tc := range tests {
		t.Run(tc.client+"-"+tc.estimator, func(t *testing.T) {
			cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, tc.client), Session: "e", Client: tc.client, Site: "a",
				ICEAddresses: loopback, VideoSlots: 1, Estimator: tc.estimator})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Dial with estimator %q: err %v, want %q", tc.estimator, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			p := c.nodes[0].peerOf("e", tc.client)
			if p == nil {
				t.Fatal("no peer on the node")
			}
			waitFor(t, "the estimator", func() bool { return p.est.Load() != nil })
			if e := p.est.Load().BandwidthEstimator; !tc.check(e) {
				t.Fatalf("estimator %T for %q", e, tc.estimator)
			}
		})
	}
}

// TestFrameReportMetrics: a client's frame report appears on the node's
// metrics.
func TestFrameReportMetrics(t *testing.T) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "r"), Session: "m", Client: "r", Site: "a", ICEAddresses: loopback, VideoSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rep := FrameReportOf(volumetric.FrameStats{Complete: 9, Expired: 1, P50: 20 * time.Millisecond, P90: 40 * time.Millisecond, P99: 80 * time.Millisecond, Sum: 300 * time.Millisecond, N: 9})
	if err := cl.ReportFrames(ctx, rep); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{n: c.nodes[0]})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ratio, p99 float64 = -1, -1
	ignored := map[string]bool{}
	for _, f := range fams {
		switch f.GetName() {
		case "xrealm_sfu_subscriber_nacks_ignored_total":
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						ignored[l.GetValue()] = true
					}
				}
			}
		case "xrealm_sfu_subscriber_frame_completion_ratio":
			ratio = f.GetMetric()[0].GetGauge().GetValue()
		case "xrealm_sfu_subscriber_frame_latency_seconds":
			for _, q := range f.GetMetric()[0].GetSummary().GetQuantile() {
				if q.GetQuantile() == 0.99 {
					p99 = q.GetValue()
				}
			}
		}
	}
	if ratio != 0.9 || p99 != 0.08 {
		t.Fatalf("completion ratio %v, p99 %v s; want 0.9 and 0.08", ratio, p99)
	}
	if !ignored["paused"] || !ignored["stale"] {
		t.Errorf("xrealm_sfu_subscriber_nacks_ignored_total reasons %v, want paused and stale", ignored)
	}
}
