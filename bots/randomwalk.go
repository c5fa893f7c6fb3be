package bots

import (
	"math/rand/v2"
	"time"
)

// RandomWalk walks at a constant speed to random points of an area, one
// after the other, facing where it goes.
type RandomWalk struct {
	area   Area
	speed  float64
	rng    *rand.Rand
	pos    Vec3
	target Vec3
	rot    Quat
}

// NewRandomWalk starts a walker at a random point of area, walking at
// speed metres per second.
func NewRandomWalk(area Area, speed float64, rng *rand.Rand) *RandomWalk {
	w := &RandomWalk{area: area, speed: speed, rng: rng, pos: area.randomPoint(rng), rot: NoRotation}
	w.target = area.randomPoint(rng)
	return w
}

// Step walks speed*dt metres along the path, turning to a new target
// whenever one is reached within the step.
func (w *RandomWalk) Step(dt time.Duration, _ []Peer) Pose {
	left := w.speed * dt.Seconds()
	for i := 0; left > 0 && i < 100; i++ {
		d := w.target.Sub(w.pos)
		dist := d.Len()
		if dist <= left {
			w.pos = w.target
			left -= dist
			w.target = w.area.randomPoint(w.rng)
			continue
		}
		w.pos = w.pos.Add(d.Scale(left / dist))
		w.rot = yaw(d)
		left = 0
	}
	return Pose{Pos: w.pos, Rot: w.rot}
}
