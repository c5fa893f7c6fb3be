package allocator

import (
	"math"
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
// ones left out take turns.
func TestFairness(t *testing.T) {
	a := New(TrackSelection)
	tracks := []Demand{{ID: "x", Interest: 1, Rates: []float64{10}}, {ID: "y", Interest: 1, Rates: []float64{10}}, {ID: "z", Interest: 1, Rates: []float64{10}}}
	count := map[string]int{}
	for i := 0; i < 30; i++ {
		d, _ := a.Allocate(20, tracks)
		for id := range d {
			count[id]++
		}
	}
	for _, id := range []string{"x", "y", "z"} {
		if count[id] != 20 {
			t.Errorf("%s forwarded %d of 30 rounds, want 20 (%v)", id, count[id], count)
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
			dec, used := a.Allocate(least, tc.demands)
			if used != least {
				t.Errorf("Allocate(Least) uses %v, want %v", used, least)
			}
			for id, set := range dec {
				if set != tc.want[id] {
					t.Errorf("Allocate(Least) forwards %v of %s, want %v", set, id, tc.want[id])
				}
			}
			for id, set := range tc.want {
				if dec[id] != set {
					t.Errorf("Allocate(Least) forwards %v of %s, want %v", dec[id], id, set)
				}
			}
		})
	}
}
