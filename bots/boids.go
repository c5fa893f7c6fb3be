package bots

import (
	"math"
	"math/rand/v2"
	"time"
)

// BoidParams tune Reynolds flocking. Zero values mean the defaults noted.
type BoidParams struct {
	MaxSpeed   float64 // m/s; 0 = 3
	MinSpeed   float64 // m/s; 0 = MaxSpeed/4
	MaxAccel   float64 // m/s²; 0 = 4*MaxSpeed
	View       float64 // neighbours farther than this are ignored, m; 0 = 6
	Separation float64 // distance kept from others, m; 0 = 1.5
	Margin     float64 // distance from the area's edge where a boid turns back, m; 0 = 2

	WSeparation, WAlignment, WCohesion float64 // weights; 0 = 3, 1, 0.5
}

func (p BoidParams) withDefaults() BoidParams {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&p.MaxSpeed, 3)
	def(&p.MinSpeed, p.MaxSpeed/4)
	def(&p.MaxAccel, 4*p.MaxSpeed)
	def(&p.View, 6)
	def(&p.Separation, 1.5)
	def(&p.Margin, 2)
	def(&p.WSeparation, 3)
	def(&p.WAlignment, 1)
	def(&p.WCohesion, 0.5)
	return p
}

// Boid flocks with the peers it sees (Reynolds 1987): it steers away from
// those closer than the separation distance, towards their mean heading,
// and towards their centre, and turns back before the area's edge. It
// never leaves the area.
type Boid struct {
	p    BoidParams
	area Area
	pos  Vec3
	vel  Vec3
}

// NewBoid starts a boid at a random point of area with a random heading.
func NewBoid(area Area, p BoidParams, rng *rand.Rand) *Boid {
	p = p.withDefaults()
	a := rng.Float64() * 2 * math.Pi
	v := (p.MinSpeed + p.MaxSpeed) / 2
	return &Boid{p: p, area: area, pos: area.randomPoint(rng), vel: Vec3{X: v * math.Sin(a), Z: v * math.Cos(a)}}
}

// WantsPeers reports true: boids need to see the others.
func (b *Boid) WantsPeers() bool { return true }

// Pos returns the boid's position.
func (b *Boid) Pos() Vec3 { return b.pos }

// Step applies the three rules and the edge rule for dt.
func (b *Boid) Step(dt time.Duration, peers []Peer) Pose {
	s := dt.Seconds()
	if s <= 0 {
		return Pose{Pos: b.pos, Rot: yaw(b.vel)}
	}
	var sep, align, centre Vec3
	n := 0
	for _, q := range peers {
		d := b.pos.Sub(q.Pos)
		d.Y = 0
		dist := d.Len()
		if dist > b.p.View {
			continue
		}
		n++
		align = align.Add(q.Vel)
		centre = centre.Add(q.Pos)
		if dist < b.p.Separation {
			if dist < 1e-6 {
				d, dist = Vec3{X: 1}, 1e-6 // on top of each other: any way out
			}
			// Stronger the closer: from 0 at the separation distance to
			// very large when touching.
			sep = sep.Add(d.Scale((b.p.Separation - dist) / (dist * dist)))
		}
	}
	var acc Vec3
	if n > 0 {
		k := 1 / float64(n)
		acc = acc.Add(sep.Scale(b.p.WSeparation * b.p.MaxSpeed))
		acc = acc.Add(align.Scale(k).Sub(b.vel).Scale(b.p.WAlignment))
		acc = acc.Add(centre.Scale(k).Sub(b.pos).Scale(b.p.WCohesion))
	}
	acc = acc.Add(b.edge().Scale(b.p.MaxAccel))
	acc.Y = 0
	acc = acc.Limit(b.p.MaxAccel)
	b.vel = b.vel.Add(acc.Scale(s)).Limit(b.p.MaxSpeed)
	if l := b.vel.Len(); l < b.p.MinSpeed {
		if l == 0 {
			b.vel = Vec3{X: b.p.MinSpeed}
		} else {
			b.vel = b.vel.Scale(b.p.MinSpeed / l)
		}
	}
	b.pos = b.pos.Add(b.vel.Scale(s))
	b.pos.Y = b.area.Height
	// The edge rule turns a boid back in time at normal speeds; this keeps
	// it inside whatever happens, bouncing off the wall.
	if !b.area.Contains(b.pos) {
		c := b.area.clamp(b.pos)
		if c.X != b.pos.X {
			b.vel.X = -b.vel.X
		}
		if c.Z != b.pos.Z {
			b.vel.Z = -b.vel.Z
		}
		b.pos = c
	}
	return Pose{Pos: b.pos, Rot: yaw(b.vel)}
}

// edge returns a unit-ish push back towards the inside for a boid within
// the margin of an edge, growing as it gets closer.
func (b *Boid) edge() Vec3 {
	var v Vec3
	m := b.p.Margin
	if d := b.pos.X - b.area.MinX; d < m {
		v.X += (m - d) / m
	}
	if d := b.area.MaxX - b.pos.X; d < m {
		v.X -= (m - d) / m
	}
	if d := b.pos.Z - b.area.MinZ; d < m {
		v.Z += (m - d) / m
	}
	if d := b.area.MaxZ - b.pos.Z; d < m {
		v.Z -= (m - d) / m
	}
	return v
}
