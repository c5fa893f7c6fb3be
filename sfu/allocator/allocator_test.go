package allocator

import (
	"math"
	"slices"
	"testing"
)

func mdc(id string, interest, total float64) Demand {
	return Demand{ID: id, Interest: interest, Rates: []float64{0.15 * total, 0.25 * total, 0.60 * total}}
}

func withCost(d Demand, c float64) Demand {
	d.Cost = c
	return d
}

func TestLayers(t *testing.T) {
	tests := []struct {
		name    string
		budget  float64
		demands []Demand
		want    Decision
	}{
		{"all fit", 400, []Demand{mdc("a", 1, 100), mdc("b", 0.5, 100)}, Decision{"a": 0b111, "b": 0b111}},
		{"nothing fits", 10, []Demand{mdc("a", 1, 100)}, Decision{}},
		{"base only", 30, []Demand{mdc("a", 1, 100), mdc("b", 0.5, 100)}, Decision{"a": 0b001, "b": 0b001}},
		{"base for the most interesting", 20, []Demand{mdc("far", 0.1, 100), mdc("near", 0.9, 100)}, Decision{"near": 0b001}},
		// 30 base + 70 left: near gets {0,2} (+60), far keeps base.
		{"upgrade nearest", 100, []Demand{mdc("far", 0.1, 100), mdc("near", 0.9, 100)}, Decision{"near": 0b101, "far": 0b001}},
		// 30 base + 30 left: near gets {0,1} (+25).
		{"smaller upgrade", 60, []Demand{mdc("far", 0.1, 100), mdc("near", 0.9, 100)}, Decision{"near": 0b011, "far": 0b001}},
		// 30 base + 95 left: near full (+85), far +... only 10 left: no.
		{"full for near", 125, []Demand{mdc("far", 0.1, 100), mdc("near", 0.9, 100)}, Decision{"near": 0b111, "far": 0b001}},
		// cost: a publisher the shared path already carries much of is
		// upgraded after an almost equally interesting one
		{"cost turns a near tie", 125, []Demand{withCost(mdc("a", 0.50, 100), 2), withCost(mdc("b", 0.48, 100), 0.5)}, Decision{"a": 0b001, "b": 0b111}},
		{"cost does not turn a clear preference", 125, []Demand{withCost(mdc("near", 0.9, 100), 1), withCost(mdc("far", 0.1, 100), 0)}, Decision{"near": 0b111, "far": 0b001}},
		{"cost keeps the base for the most interesting", 20, []Demand{withCost(mdc("far", 0.1, 100), 0), withCost(mdc("near", 0.9, 100), 5)}, Decision{"near": 0b001}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, used := New(Layers).Allocate(tt.budget, tt.demands)
			if used > tt.budget {
				t.Errorf("used %v over budget %v", used, tt.budget)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for id, s := range tt.want {
				if got[id] != s {
					t.Errorf("%s: got %v, want %v", id, got[id], s)
				}
			}
		})
	}
}

func TestTrackSelection(t *testing.T) {
	tracks := []Demand{
		{ID: "a", Interest: 0.9, Rates: []float64{50}},
		{ID: "b", Interest: 0.5, Rates: []float64{50}},
		{ID: "c", Interest: 0.1, Rates: []float64{20}},
	}
	tests := []struct {
		budget float64
		want   []string
	}{
		{200, []string{"a", "b", "c"}},
		{100, []string{"a", "b"}},
		{70, []string{"a", "c"}}, // b does not fit, the smaller c does
		{10, nil},
	}
	for _, tt := range tests {
		got, _ := New(TrackSelection).Allocate(tt.budget, tracks)
		if len(got) != len(tt.want) {
			t.Fatalf("budget %v: got %v, want %v", tt.budget, got, tt.want)
		}
		for _, id := range tt.want {
			if got[id] == 0 {
				t.Errorf("budget %v: %s not forwarded (%v)", tt.budget, id, got)
			}
		}
	}
}

// TestFairness: among equally interesting tracks that do not all fit, the
// ones left out take turns, also when one fits exactly: a turn keeps the
// total forwarded, so it needs no headroom (ResumeMargin).
func TestFairness(t *testing.T) {
	for _, tc := range []struct {
		budget float64
		each   int // rounds of 30 each track is forwarded
	}{{20, 20}, {10, 10}, {25, 20}} {
		a := New(TrackSelection)
		tracks := []Demand{{ID: "x", Interest: 1, Rates: []float64{10}}, {ID: "y", Interest: 1, Rates: []float64{10}}, {ID: "z", Interest: 1, Rates: []float64{10}}}
		count := map[string]int{}
		for i := 0; i < 30; i++ {
			d, _ := a.Allocate(tc.budget, tracks)
			for id := range d {
				count[id]++
			}
		}
		for _, id := range []string{"x", "y", "z"} {
			if count[id] != tc.each {
				t.Errorf("budget %v: %s forwarded %d of 30 rounds, want %d (%v)", tc.budget, id, count[id], tc.each, count)
			}
		}
	}
}

func TestInterest(t *testing.T) {
	pose := Pose{Position: Vec3{0, 0, 0}, Forward: Vec3{0, 0, -1}, FOV: math.Pi / 2}
	ahead := Interest(pose, Vec3{0, 0, -2})
	behind := Interest(pose, Vec3{0, 0, 2})
	farAhead := Interest(pose, Vec3{0, 0, -10})
	if !(ahead > behind && ahead > farAhead) {
		t.Fatalf("ahead %v behind %v far %v", ahead, behind, farAhead)
	}
	if math.Abs(ahead-1.0/3) > 1e-9 {
		t.Errorf("ahead at 2 m = %v, want 1/3", ahead)
	}
	if _, err := ParseMode("bogus"); err == nil {
		t.Error("ParseMode(bogus) succeeded")
	}
}

// TestLeast: Least is the budget with which Allocate forwards exactly the
// most interesting publisher's cheapest choice.
func TestLeast(t *testing.T) {
	near := Demand{ID: "near", Interest: 0.9, Rates: []float64{150, 250, 600}}
	far := Demand{ID: "far", Interest: 0.1, Rates: []float64{100, 200, 500}}
	unannounced := Demand{ID: "quiet", Interest: 1, Rates: []float64{0, 0, 0}}
	tests := []struct {
		name    string
		mode    Mode
		demands []Demand
		least   float64
		want    Decision
	}{
		{"layers: the nearest's base", Layers, []Demand{far, near}, 150, Decision{"near": Combos[0]}},
		{"layers: past a publisher with nothing announced", Layers, []Demand{unannounced, far, near}, 150, Decision{"quiet": Combos[0], "near": Combos[0]}},
		{"tracks: the nearest whole", TrackSelection, []Demand{far, near}, 1000, Decision{"near": 0b111}},
		{"nothing to forward", Layers, []Demand{unannounced}, 0, nil},
		{"no demands", Layers, nil, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.mode)
			least := a.Least(tc.demands)
			if least != tc.least {
				t.Fatalf("Least = %v, want %v", least, tc.least)
			}
			if least == 0 {
				return
			}
			dec, used := a.AllocateLeast(tc.demands)
			if used != least {
				t.Errorf("AllocateLeast uses %v, want %v", used, least)
			}
			for id, set := range dec {
				if set != tc.want[id] {
					t.Errorf("AllocateLeast forwards %v of %s, want %v", set, id, tc.want[id])
				}
			}
			for id, set := range tc.want {
				if dec[id] != set {
					t.Errorf("AllocateLeast forwards %v of %s, want %v", dec[id], id, set)
				}
			}
		})
	}
}

func audio(id string, interest, rate float64) Demand {
	return Demand{ID: id, Kind: Audio, Interest: interest, Rates: []float64{rate}}
}

func video(id string, interest, rate float64) Demand {
	return Demand{ID: id, Kind: Video, Interest: interest, Rates: []float64{rate}}
}

// TestStarvedSubscriber: a budget below the floors of what a subscriber is
// given (its audio and video tracks, its point clouds' cheapest choices)
// forwards audio first, speakers first, then the floors by interest, video
// before a point cloud of the same interest, and pauses what does not
// fit: what it forwards never exceeds the budget.
func TestStarvedSubscriber(t *testing.T) {
	speaking := audio("a-far", 0.1, 40)
	speaking.Active = true
	// floors: audio 40 each, video 300, point clouds 150 (Layers) or 1000
	// (TrackSelection, the whole publisher)
	room := []Demand{
		audio("a-near", 0.9, 40), audio("a-far", 0.1, 40),
		video("v-near", 0.9, 300), video("v-mid", 0.5, 300), video("v-far", 0.1, 300),
		mdc("pc-near", 0.9, 1000), mdc("pc-mid", 0.5, 1000), mdc("pc-far", 0.1, 1000),
	}
	tests := []struct {
		name    string
		mode    Mode
		budget  float64
		demands []Demand
		want    Decision
	}{
		{"below one audio track", Layers, 30, room, Decision{}},
		{"audio only", Layers, 100, room, Decision{"a-near": 1, "a-far": 1}},
		{"the speaker's audio first", Layers, 50, []Demand{audio("a-near", 0.9, 40), speaking}, Decision{"a-far": 1}},
		{"audio before the nearest video", Layers, 400, room, Decision{"a-near": 1, "a-far": 1, "v-near": 1}},
		// v-near (380 with the audio) does not fit; pc-near's base does
		{"a smaller floor fits after", Layers, 340, room, Decision{"a-near": 1, "a-far": 1, "pc-near": Combos[0]}},
		// 80 audio + 300 v-near + 150 pc-near; v-mid does not fit, pc-mid does
		{"the nearest video and point cloud", Layers, 700, room,
			Decision{"a-near": 1, "a-far": 1, "v-near": 1, "pc-near": Combos[0], "pc-mid": Combos[0]}},
		// 80 + 300 + 150 + 300 + 150 = 980; pc-far's 150 does not fit, nor does v-far
		{"far floors paused", Layers, 1050, room,
			Decision{"a-near": 1, "a-far": 1, "v-near": 1, "pc-near": Combos[0], "v-mid": 1, "pc-mid": Combos[0]}},
		// every floor (1430) fits; the rest goes to the nearest's upgrade
		{"floors, then upgrades", Layers, 1700, room,
			Decision{"a-near": 1, "a-far": 1, "v-near": 1, "v-mid": 1, "v-far": 1, "pc-near": Combos[1], "pc-mid": Combos[0], "pc-far": Combos[0]}},
		{"a near point cloud before a far video", TrackSelection, 1100, []Demand{video("v-far", 0.1, 300), mdc("pc-near", 0.9, 1000)},
			Decision{"pc-near": 0b111}},
		{"a video before a point cloud of the same interest", TrackSelection, 1500, []Demand{mdc("pc", 0.5, 1000), video("v", 0.5, 600)},
			Decision{"v": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, used := New(tc.mode).Allocate(tc.budget, tc.demands)
			if used > tc.budget {
				t.Errorf("forwards %v, over the budget %v", used, tc.budget)
			}
			for id, set := range got {
				if set != tc.want[id] {
					t.Errorf("%s: %v, want %v", id, set, tc.want[id])
				}
			}
			for id, set := range tc.want {
				if got[id] != set {
					t.Errorf("%s: %v, want %v", id, got[id], set)
				}
			}
		})
	}
}

// TestPauseResume: as a subscriber's budget falls below its floors, the
// least important are paused; as it grows again, a paused floor comes back
// only once what would then be forwarded fits with ResumeMargin to spare,
// so a budget that wavers around the floors' sum does not flap. A turn
// among equally interesting point clouds needs no headroom.
func TestPauseResume(t *testing.T) {
	demands := []Demand{audio("mic", 1, 50), video("near", 0.9, 500), video("far", 0.2, 500)}
	a := New(Layers)
	for i, st := range []struct {
		budget float64
		want   []string
	}{
		{1100, []string{"far", "mic", "near"}}, // 1050 fit
		{1000, []string{"mic", "near"}},        // far paused
		{1060, []string{"mic", "near"}},        // 1050 would fit, without headroom
		{1200, []string{"mic", "near"}},        // needs 1050 × 1.2 = 1260
		{1000, []string{"mic", "near"}},
		{1260, []string{"far", "mic", "near"}}, // resumed
		{1100, []string{"far", "mic", "near"}}, // kept while it fits
		{500, []string{"mic"}},                 // near paused too
		{600, []string{"mic"}},                 // needs 550 × 1.2 = 660
		{660, []string{"mic", "near"}},
		{40, nil}, // below the audio: nothing (the SFU then forces AllocateLeast)
		{55, nil}, // mic needs 60
		{60, []string{"mic"}},
	} {
		dec, used := a.Allocate(st.budget, demands)
		var got []string
		for id := range dec {
			got = append(got, id)
		}
		slices.Sort(got)
		if !slices.Equal(got, st.want) {
			t.Errorf("step %d, budget %v: forwards %v, want %v", i, st.budget, got, st.want)
		}
		if used > st.budget {
			t.Errorf("step %d: forwards %v, over the budget %v", i, used, st.budget)
		}
	}
}
