// Package allocator turns a subscriber's bandwidth estimate into a
// forwarding decision: which publishers' tracks to forward (track
// selection) or which combination of a point cloud's multiple descriptions
// (MDC layers), prioritised by the subscriber's interest in each publisher.
//
// Audio and video tracks are demands too, with one rate each: the budget
// goes to audio first, then to the floors (a video, a point cloud's
// cheapest choice) by interest, then to point-cloud upgrades. A floor that
// does not fit is paused; one paused comes back only with headroom
// (ResumeMargin), so that a budget near the sum of the floors does not
// flap.
//
// It is pure computation with no I/O: the SFU calls Allocate whenever the
// estimate or the set of tracks changes and gates its down tracks by the
// result, which never renegotiates.
package allocator

import (
	"fmt"
	"math"
	"sort"
)

// Mode selects how the budget is spent.
type Mode int

const (
	// TrackSelection forwards the subset of tracks that fits the budget,
	// by interest and then by fairness (tracks left out longest first).
	TrackSelection Mode = iota
	// Layers forwards, per publisher, the combination of descriptions that
	// fits: the base description {0} for as many publishers as possible,
	// then upgrades ({0,1}, {0,2}, {0,1,2}) to the most interesting ones.
	Layers
)

func (m Mode) String() string {
	switch m {
	case TrackSelection:
		return "track-selection"
	case Layers:
		return "layers"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "track-selection" or "layers".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "track-selection", "tracks":
		return TrackSelection, nil
	case "layers", "mdc":
		return Layers, nil
	}
	return 0, fmt.Errorf("allocator: unknown mode %q (want track-selection or layers)", s)
}

// Set is a set of description (layer) indices as a bit mask; bit i is
// description i.
type Set uint8

// Has reports whether d is in s.
func (s Set) Has(d int) bool { return s&(1<<d) != 0 }

func (s Set) String() string {
	out := "{"
	for d := 0; d < 8; d++ {
		if s.Has(d) {
			if len(out) > 1 {
				out += ","
			}
			out += fmt.Sprint(d)
		}
	}
	return out + "}"
}

// Combos are the description combinations of the Layers mode in order of
// preference: {15%}, {15,25}, {15,60}, {15,25,60}.
var Combos = []Set{0b001, 0b011, 0b101, 0b111}

// Kind is what a demand forwards; it orders demands before their interest.
type Kind uint8

const (
	// PointCloud (the zero value) is a point-cloud publisher: its
	// descriptions are its Rates.
	PointCloud Kind = iota
	// Video is one video track (one rate). Its floor competes with the
	// point clouds' by interest, and goes first among equal interests.
	Video
	// Audio is one audio track (one rate): audio goes before everything
	// else, speakers (Active) first.
	Audio
)

func (k Kind) String() string {
	switch k {
	case PointCloud:
		return "point-cloud"
	case Video:
		return "video"
	case Audio:
		return "audio"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ResumeMargin is the headroom a paused floor needs to come back: the
// floors forwarded with it must fit in the budget ÷ (1+ResumeMargin). A
// floor that takes a turn (the floors' total stays within the last
// allocation's) needs none.
const ResumeMargin = 0.2

// Demand is one publisher as seen by one subscriber.
type Demand struct {
	// ID names the publisher (or, in TrackSelection, the track; for audio
	// and video, the track).
	ID string
	// Kind orders demands before Interest: audio first; among equal
	// interests video before point clouds.
	Kind Kind
	// Active (a speaking microphone) goes before the others of its kind.
	Active bool
	// Interest ranks publishers: higher is forwarded first. See Interest.
	Interest float64
	// Rates are the bitrates (bit/s) of the descriptions; TrackSelection
	// uses the sum of all of them as the track's rate.
	Rates []float64
	// Cost (>= 0, 0 = none) discounts the publisher in the Layers mode's
	// upgrades, which go by Interest/(1+Cost): the SFU sets it for
	// subscribers that share a path to the publisher's load on that path
	// (what the others behind it already take of this publisher, relative
	// to the mean over publishers), so that their upgrades spread over the
	// publishers instead of all taking the same one, whose frame would
	// then cross the path as one burst of copies.
	Cost float64
}

func (d Demand) rate(s Set) float64 {
	var r float64
	for i, x := range d.Rates {
		if s.Has(i) {
			r += x
		}
	}
	return r
}

// Decision maps publisher IDs to what to forward; a missing or empty set
// means nothing.
type Decision map[string]Set

// Allocator keeps the state of one subscriber between calls: fairness and
// which floors are paused. It is not safe for concurrent use.
type Allocator struct {
	Mode Mode
	// starved is, per ID, the number of consecutive allocations that left
	// it out (positive) or forwarded it (negative); ties in interest go to
	// the highest value for point clouds, so equally interesting ones take
	// turns, and to the lowest for audio and video, which keep their place.
	// A demand left out by the last allocation is paused (ResumeMargin).
	starved map[string]int
	// floors is the rate of the floors the last allocation forwarded
	// within its budget (a probe's is not one of them).
	floors float64
	// forced is the demand the last allocation forwarded above its budget
	// (AllocateProbe); "" none.
	forced string
}

// New returns an allocator in the given mode.
func New(m Mode) *Allocator { return &Allocator{Mode: m, starved: map[string]int{}} }

// Allocate spends budget (bit/s) on demands and returns the decision and the
// bitrate it uses. Floors are forwarded in Allocate's order while they fit;
// a demand the last allocation left out needs ResumeMargin of headroom
// unless it takes a turn.
func (a *Allocator) Allocate(budget float64, demands []Demand) (Decision, float64) {
	return a.allocate(budget, demands, true)
}

// AllocateLeast forwards the cheapest choice of the first demand in
// Allocate's order that has one (Least), paused or not: the least flow that
// keeps the feedback of a subscriber's estimator coming when its budget
// fits nothing.
func (a *Allocator) AllocateLeast(demands []Demand) (Decision, float64) {
	return a.allocate(a.Least(demands), demands, false)
}

func (a *Allocator) allocate(budget float64, demands []Demand, hysteresis bool) (Decision, float64) {
	return a.allocateForcing(budget, demands, hysteresis, "")
}

// allocateForcing is allocate that then forwards the cheapest choice of
// demand force if nothing of it was (a probe), setting a.forced to it.
func (a *Allocator) allocateForcing(budget float64, demands []Demand, hysteresis bool, force string) (Decision, float64) {
	a.forced = ""
	order := a.order(demands)
	dec := Decision{}
	used := 0.0
	// fits reports whether a floor of rate r fits after used: a paused one
	// with headroom, or in place of what the last allocation forwarded
	fits := func(d Demand, r float64) bool {
		if used+r > budget {
			return false
		}
		if !hysteresis || a.starved[d.ID] <= 0 || used+r <= a.floors {
			return true
		}
		return (used+r)*(1+ResumeMargin) <= budget
	}
	// Pass 1: the floors (the cheapest choice: audio, video, the base
	// description or, in TrackSelection, the whole publisher) for as many
	// as fit, in order. Once an audio does not fit, no video or point
	// cloud is placed, so that no video cheaper than a paused microphone
	// goes in its place.
	audioOut := false
	for _, d := range order {
		if audioOut && d.Kind != Audio {
			break
		}
		s, r := a.cheapest(d)
		if s == 0 {
			continue
		}
		if fits(d, r) {
			dec[d.ID] = s
			used += r
		} else if d.Kind == Audio {
			audioOut = true
		}
	}
	a.floors = used
	switch a.Mode {
	case Layers:
		// Pass 2: by interest per cost, the best combination that fits.
		up := order
		if hasCost(order) {
			up = make([]Demand, len(order))
			copy(up, order)
			sort.SliceStable(up, func(i, j int) bool {
				return up[i].Interest/(1+up[i].Cost) > up[j].Interest/(1+up[j].Cost)
			})
		}
		for _, d := range up {
			cur, ok := dec[d.ID]
			if !ok {
				continue
			}
			for k := len(Combos) - 1; k > 0; k-- {
				c := Combos[k]
				if int(bitsLen(c)) > len(d.Rates) || c == cur {
					continue
				}
				extra := d.rate(c) - d.rate(cur)
				if extra > 0 && used+extra <= budget {
					dec[d.ID] = c
					used += extra
					break
				}
			}
		}
	}
	if force != "" {
		for _, d := range demands {
			if d.ID != force || dec[d.ID] != 0 || (d.Kind != Audio && audioOut) {
				continue
			}
			if s, r := a.cheapest(d); s != 0 {
				dec[d.ID] = s
				used += r
				a.forced = d.ID
			}
		}
	}
	for _, d := range demands {
		switch s := a.starved[d.ID]; {
		case dec[d.ID] == 0 && s < 0, dec[d.ID] != 0 && s > 0:
			a.starved[d.ID] = 0
		}
		if dec[d.ID] == 0 {
			a.starved[d.ID]++
		} else {
			a.starved[d.ID]--
		}
	}
	for id := range a.starved {
		found := false
		for _, d := range demands {
			if d.ID == id {
				found = true
				break
			}
		}
		if !found {
			delete(a.starved, id)
		}
	}
	return dec, used
}

// order returns demands in the order their floors are forwarded: audio
// first, speakers before the others; then the most interesting, video
// before point clouds among equal interests; ties among point clouds go
// to the one left out longest (they take turns), among audio and video to
// the one forwarded longest (it keeps its place), then by ID.
func (a *Allocator) order(demands []Demand) []Demand {
	order := make([]Demand, len(demands))
	copy(order, demands)
	sort.SliceStable(order, func(i, j int) bool {
		di, dj := order[i], order[j]
		if ai, aj := di.Kind == Audio, dj.Kind == Audio; ai != aj {
			return ai
		}
		if di.Active != dj.Active {
			return di.Active
		}
		if di.Interest != dj.Interest {
			return di.Interest > dj.Interest
		}
		if di.Kind != dj.Kind {
			return di.Kind > dj.Kind // video before point clouds
		}
		if si, sj := a.starved[di.ID], a.starved[dj.ID]; si != sj {
			if di.Kind == PointCloud {
				return si > sj
			}
			return si < sj
		}
		return di.ID < dj.ID
	})
	return order
}

// Least is the smallest budget with which AllocateLeast forwards something:
// the rate of the cheapest choice (the base description in Layers, the
// whole publisher in TrackSelection; an audio or video track) of the first
// demand in Allocate's order that has one; 0 when no demand has anything
// to forward.
func (a *Allocator) Least(demands []Demand) float64 {
	for _, d := range a.order(demands) {
		if _, r := a.cheapest(d); r > 0 {
			return r
		}
	}
	return 0
}

// cheapest is d's cheapest choice and its rate: the base description in
// Layers (an audio or video track's one rate), the whole publisher in
// TrackSelection; 0 and 0 when d has no rates.
func (a *Allocator) cheapest(d Demand) (Set, float64) {
	if len(d.Rates) == 0 {
		return 0, 0
	}
	s := Set(1<<len(d.Rates) - 1)
	if a.Mode == Layers {
		s = Combos[0]
	}
	return s, d.rate(s)
}

func hasCost(ds []Demand) bool {
	for _, d := range ds {
		if d.Cost > 0 {
			return true
		}
	}
	return false
}

func bitsLen(s Set) int {
	n := 0
	for s != 0 {
		n++
		s >>= 1
	}
	return n
}

// Vec3 is a position or direction in scene coordinates (metres).
type Vec3 [3]float64

func (a Vec3) sub(b Vec3) Vec3    { return Vec3{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }
func (a Vec3) dot(b Vec3) float64 { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }
func (a Vec3) norm() float64      { return math.Sqrt(a.dot(a)) }

// Pose is a subscriber's camera: where it is, where it looks, and its
// horizontal field of view in radians.
type Pose struct {
	Position Vec3
	Forward  Vec3
	FOV      float64
}

// Interest scores a publisher at pos for a viewer at pose: 1/(1+distance),
// times 1 if the publisher is inside the field of view and 0.25 if not, so
// that a visible publisher ranks above an invisible one at the same
// distance, and a near invisible one can still outrank a far visible one.
func Interest(pose Pose, pos Vec3) float64 {
	d := pos.sub(pose.Position)
	dist := d.norm()
	score := 1 / (1 + dist)
	if pose.FOV <= 0 || dist == 0 {
		return score
	}
	f := pose.Forward.norm()
	if f == 0 {
		return score
	}
	cos := d.dot(pose.Forward) / (dist * f)
	if cos >= math.Cos(pose.FOV/2) {
		return score
	}
	return 0.25 * score
}

// Carried records what of dec, the last allocation's decision on demands,
// the caller could carry out (carried; a subscriber may have no slot free
// for a track) and returns the bitrate of what it carried. A demand dec
// forwards and carried none of is paused as if the allocation had left it
// out: it comes back with headroom (ResumeMargin), CheapestPaused can
// return it (so a probe can bring it back), and its floor no longer counts
// in what the next allocation may take in its place. Counted as
// forwarded, it would never be probed, and its rate would stay spent.
func (a *Allocator) Carried(demands []Demand, dec, carried Decision) float64 {
	used := 0.0
	for _, d := range demands {
		got := dec[d.ID] & carried[d.ID]
		used += d.rate(got)
		if dec[d.ID] == 0 || got != 0 {
			continue
		}
		if d.ID == a.forced {
			a.forced = "" // forwarded above the budget: not in floors
		} else {
			_, r := a.cheapest(d)
			a.floors = max(a.floors-r, 0)
		}
		a.starved[d.ID] = 1
	}
	return used
}
