package benchsfu

import (
	"bytes"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/volumetric"
)

func TestSummarise(t *testing.T) {
	clip := &bots.Clip{Points: 1000, DescSizes: [3]int{150, 250, 600}}
	lat := func(us ...int64) *bots.VolumetricStats {
		h := bots.NewHistogram()
		for _, v := range us {
			_ = h.RecordValue(v)
		}
		return &bots.VolumetricStats{Latency: h.Export()}
	}
	type D = [volumetric.Descriptions]uint64
	tests := []struct {
		name     string
		scenario int
		results  []BotResult
		check    func(r Result) bool
	}{
		{"scenario 1: one of two publishers received", 1, []BotResult{
			{ID: 1, Publish: []int{0}, Stats: bots.VolumetricStats{Sent: 10, Descs: map[uint32]D{2: {10}}, Packets: 9, Expected: 10, Latency: lat(10000).Latency}},
			{ID: 2, Publish: []int{0}, Stats: bots.VolumetricStats{Sent: 10, Descs: map[uint32]D{1: {2}}, Packets: 1, Expected: 10, Latency: lat(30000).Latency}},
		}, func(r Result) bool {
			return r.PublishersPct == 50 && r.FramesPct == 60 && r.LossPct == 50 && r.P99ms >= 29 && r.P99ms <= 31
		}},
		{"scenario 2: points of full senders", 2, []BotResult{
			{ID: 1, Publish: []int{0, 1, 2}, Stats: bots.VolumetricStats{Sent: 10}},
			{ID: 5, Stats: bots.VolumetricStats{Descs: map[uint32]D{1: {10, 10, 0}}}},
		}, func(r Result) bool { return r.PointsPct == 40 && r.PublishersPct == 0 }},
	}
	for _, tc := range tests {
		r := Result{Scenario: tc.scenario}
		summarise(&r, clip, tc.results)
		if !tc.check(r) {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
	var b bytes.Buffer
	Tables(&b, []Result{{Setup: "central", Scenario: 1, Users: 8, PublishersPct: 50}, {Setup: "4sfu", Scenario: 1, Users: 8, PublishersPct: 100}})
	if !strings.Contains(b.String(), "| 8 | 50.0") || !strings.Contains(b.String(), "| central | 4sfu |") {
		t.Errorf("table:\n%s", b.String())
	}
}
