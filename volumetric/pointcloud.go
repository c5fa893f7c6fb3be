package volumetric

import (
	"math"
	"math/rand/v2"
)

// Point is one coloured point. Positions are metres.
type Point struct {
	X, Y, Z float32
	R, G, B uint8
}

// Cloud is one frame of a point cloud.
type Cloud []Point

// part is one ellipsoid of the synthetic figure, in its rest pose.
type part struct {
	cx, cy, cz float64 // centre
	rx, ry, rz float64 // radii
	swing      float64 // swing amplitude (radians) around the pivot
	pivotY     float64 // height of the swing pivot (hip or shoulder)
	phase      float64 // phase offset of the swing
	weight     float64 // share of points
	r, g, b    uint8
}

// figure is a human-sized (about 1.8 m) figure made of ellipsoids.
var figure = []part{
	{cx: 0, cy: 1.65, cz: 0, rx: 0.10, ry: 0.12, rz: 0.11, weight: 0.08, r: 224, g: 172, b: 105},                                               // head
	{cx: 0, cy: 1.25, cz: 0, rx: 0.20, ry: 0.30, rz: 0.12, weight: 0.30, r: 40, g: 90, b: 200},                                                 // torso
	{cx: -0.28, cy: 1.15, cz: 0, rx: 0.06, ry: 0.30, rz: 0.06, swing: 0.5, pivotY: 1.45, phase: math.Pi, weight: 0.09, r: 224, g: 172, b: 105}, // left arm
	{cx: 0.28, cy: 1.15, cz: 0, rx: 0.06, ry: 0.30, rz: 0.06, swing: 0.5, pivotY: 1.45, weight: 0.09, r: 224, g: 172, b: 105},                  // right arm
	{cx: -0.11, cy: 0.47, cz: 0, rx: 0.08, ry: 0.45, rz: 0.08, swing: 0.45, pivotY: 0.92, weight: 0.22, r: 50, g: 50, b: 60},                   // left leg
	{cx: 0.11, cy: 0.47, cz: 0, rx: 0.08, ry: 0.45, rz: 0.08, swing: 0.45, pivotY: 0.92, phase: math.Pi, weight: 0.22, r: 50, g: 50, b: 60},    // right leg
}

// Source generates the frames of a synthetic moving figure. It is
// deterministic: the same seed, size and frame number give the same cloud.
type Source struct {
	points int
	fps    float64
	// surface holds, per point, its part and its position on the unit
	// sphere; frames animate these.
	surface []surfacePoint
}

type surfacePoint struct {
	part       int
	ux, uy, uz float64
}

// NewSource returns a source of n points per frame at fps frames per second
// (the paper's figure is about 100k points at 30 fps).
func NewSource(seed uint64, n int, fps float64) *Source {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var total float64
	for _, p := range figure {
		total += p.weight
	}
	s := &Source{points: n, fps: fps, surface: make([]surfacePoint, n)}
	for i := range s.surface {
		// choose a part by weight
		x := rng.Float64() * total
		k := 0
		for ; k < len(figure)-1; k++ {
			if x < figure[k].weight {
				break
			}
			x -= figure[k].weight
		}
		// uniform direction on the sphere
		z := 2*rng.Float64() - 1
		a := 2 * math.Pi * rng.Float64()
		r := math.Sqrt(1 - z*z)
		s.surface[i] = surfacePoint{part: k, ux: r * math.Cos(a), uy: r * math.Sin(a), uz: z}
	}
	return s
}

// Len is the number of points per frame.
func (s *Source) Len() int { return s.points }

// Frame returns frame number n: the figure walks in place and turns slowly.
func (s *Source) Frame(n uint32) Cloud {
	t := float64(n) / s.fps
	walk := math.Sin(2 * math.Pi * 1.0 * t) // one stride per second
	turn := 0.3 * t
	ct, st := math.Cos(turn), math.Sin(turn)
	out := make(Cloud, len(s.surface))
	for i, sp := range s.surface {
		p := figure[sp.part]
		x := p.cx + p.rx*sp.ux
		y := p.cy + p.ry*sp.uy
		z := p.cz + p.rz*sp.uz
		if p.swing != 0 {
			ang := p.swing * math.Sin(2*math.Pi*t+p.phase)
			dy, dz := y-p.pivotY, z
			y = p.pivotY + dy*math.Cos(ang) - dz*math.Sin(ang)
			z = dy*math.Sin(ang) + dz*math.Cos(ang)
		}
		y += 0.02 * math.Abs(walk) // bob
		x, z = ct*x+st*z, -st*x+ct*z
		out[i] = Point{X: float32(x), Y: float32(y), Z: float32(z), R: p.r, G: p.g, B: p.b}
	}
	return out
}
