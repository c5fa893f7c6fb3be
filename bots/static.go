package bots

import (
	"math"
	"math/rand/v2"
	"time"
)

// Static stands still at one point, looking one way: the cheapest user,
// for pure broker load.
type Static struct{ pose Pose }

// NewStatic places a static user at a random point of area, facing a
// random direction.
func NewStatic(area Area, rng *rand.Rand) *Static {
	a := rng.Float64() * 2 * math.Pi
	return &Static{pose: Pose{Pos: area.randomPoint(rng), Rot: Quat{Y: math.Sin(a / 2), W: math.Cos(a / 2)}}}
}

// Step returns the same pose every time.
func (s *Static) Step(time.Duration, []Peer) Pose { return s.pose }
