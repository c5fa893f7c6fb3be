package sfu

import (
	"slices"
	"strings"
	"testing"

	"github.com/pion/webrtc/v4"
)

// TestPlanSlots: which track each of a subscriber's slots is to carry for
// the tracks an allocation forwards. A Go client's RTP video slots carry
// video and point clouds alike. It fails if a point cloud that took the
// slot of a video paused for budget keeps it when the video fits again:
// the video, wanted and counted as forwarded, would never come back.
func TestPlanSlots(t *testing.T) {
	track := func(client, id string) TrackInfo {
		t := TrackInfo{Session: "s", Client: client, Track: id, Kind: "video", Mime: webrtc.MimeTypeVP8}
		switch {
		case id == "mic":
			t.Kind, t.Mime = "audio", webrtc.MimeTypeOpus
		case t.Description() >= 0:
			t.Mime = MimeTypePointCloud
		}
		return t
	}
	// wanted as reconcile ranks them (the layers mode)
	wanted := func(client, id string, interest float64) wantedTrack {
		w := wantedTrack{info: track(client, id), interest: interest}
		if d := w.info.Description(); d == 0 {
			w.rank = 1
		} else if d > 0 {
			w.rank = 2
		}
		return w
	}
	type slotSpec struct {
		kind     webrtc.RTPCodecType
		dc, noPC bool
		holds    string // "client/track", "" none
	}
	video := func(holds string) slotSpec { return slotSpec{kind: webrtc.RTPCodecTypeVideo, holds: holds} }
	tests := []struct {
		name  string
		slots []slotSpec
		want  []wantedTrack
		plan  []string // per slot, "" none
	}{
		{"a paused camera takes its slot back from an upgrade",
			[]slotSpec{video("alice/pc1"), video("alice/pc0")},
			[]wantedTrack{wanted("alice", "cam", 1), wanted("alice", "pc0", 1), wanted("alice", "pc1", 1)},
			[]string{"alice/cam", "alice/pc0"}},
		{"a free slot before an eviction",
			[]slotSpec{video("alice/pc1"), video("")},
			[]wantedTrack{wanted("alice", "cam", 1), wanted("alice", "pc1", 1)},
			[]string{"alice/pc1", "alice/cam"}},
		{"a camera takes the least interesting point cloud's slot",
			[]slotSpec{video("bob/pc0"), video("carol/pc0")},
			[]wantedTrack{wanted("alice", "cam", 0.1), wanted("bob", "pc0", 0.2), wanted("carol", "pc0", 0.9)},
			[]string{"alice/cam", "carol/pc0"}},
		{"a floor takes an upgrade's slot",
			[]slotSpec{video("alice/pc1")},
			[]wantedTrack{wanted("alice", "pc1", 1), wanted("bob", "pc0", 0.1)},
			[]string{"bob/pc0"}},
		{"no eviction within a rank",
			[]slotSpec{video("alice/cam")},
			[]wantedTrack{wanted("alice", "cam", 0.1), wanted("bob", "cam", 1)},
			[]string{"alice/cam"}},
		{"a track no longer wanted frees its slot",
			[]slotSpec{video("alice/pc0"), video("bob/cam")},
			[]wantedTrack{wanted("alice", "cam", 1)},
			[]string{"alice/cam", ""}},
		{"a browser's video slot takes no point cloud",
			[]slotSpec{{kind: webrtc.RTPCodecTypeVideo, noPC: true}},
			[]wantedTrack{wanted("alice", "pc0", 1)},
			[]string{""}},
		{"each kind to its slots",
			[]slotSpec{{kind: webrtc.RTPCodecTypeAudio}, {kind: webrtc.RTPCodecTypeVideo, dc: true}, video("")},
			[]wantedTrack{wanted("alice", "pc0", 1), wanted("alice", "mic", 1), wanted("alice", "cam", 1)},
			[]string{"alice/mic", "alice/pc0", "alice/cam"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slots := make([]*slot, len(tt.slots))
			for i, sp := range tt.slots {
				slots[i] = &slot{kind: sp.kind, dc: sp.dc, noPC: sp.noPC}
				if sp.holds != "" {
					client, id, _ := strings.Cut(sp.holds, "/")
					slots[i].src = &source{info: track(client, id)}
				}
			}
			want := map[string]wantedTrack{}
			for _, w := range tt.want {
				want[w.info.Key()] = w
			}
			got := make([]string, len(slots))
			for i, ti := range planSlots(slots, want) {
				if ti != nil {
					got[i] = ti.Client + "/" + ti.Track
				}
			}
			if !slices.Equal(got, tt.plan) {
				t.Errorf("plan %q, want %q", got, tt.plan)
			}
		})
	}
}
