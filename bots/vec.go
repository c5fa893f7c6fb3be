package bots

import "math"

// Vec3 is a position or velocity in metres (ARENA: y is up).
type Vec3 struct{ X, Y, Z float64 }

// Add returns v+w.
func (v Vec3) Add(w Vec3) Vec3 { return Vec3{v.X + w.X, v.Y + w.Y, v.Z + w.Z} }

// Sub returns v-w.
func (v Vec3) Sub(w Vec3) Vec3 { return Vec3{v.X - w.X, v.Y - w.Y, v.Z - w.Z} }

// Scale returns v*k.
func (v Vec3) Scale(k float64) Vec3 { return Vec3{v.X * k, v.Y * k, v.Z * k} }

// Len returns the length of v.
func (v Vec3) Len() float64 { return math.Sqrt(v.X*v.X + v.Y*v.Y + v.Z*v.Z) }

// finite reports whether every coordinate of v is a finite number.
func (v Vec3) finite() bool {
	for _, c := range [...]float64{v.X, v.Y, v.Z} {
		if math.IsNaN(c) || math.IsInf(c, 0) {
			return false
		}
	}
	return true
}

// Limit returns v shortened to at most max.
func (v Vec3) Limit(max float64) Vec3 {
	if l := v.Len(); l > max && l > 0 {
		return v.Scale(max / l)
	}
	return v
}

// Quat is a rotation quaternion.
type Quat struct{ X, Y, Z, W float64 }

// NoRotation is the rotation that does nothing.
var NoRotation = Quat{W: 1}

// yaw returns the rotation about the vertical axis that makes a camera
// (looking along -z) look along the horizontal direction of v.
func yaw(v Vec3) Quat {
	if v.X == 0 && v.Z == 0 {
		return NoRotation
	}
	a := math.Atan2(-v.X, -v.Z)
	return Quat{Y: math.Sin(a / 2), W: math.Cos(a / 2)}
}

// Pose is where a user is and where it looks.
type Pose struct {
	Pos Vec3
	Rot Quat
}

// Area is an axis-aligned box in the horizontal plane that bots keep to,
// at a fixed eye height.
type Area struct {
	MinX, MaxX, MinZ, MaxZ float64
	Height                 float64
}

// DefaultArea is a 20 m by 20 m floor around the origin at eye height.
func DefaultArea() Area { return Area{MinX: -10, MaxX: 10, MinZ: -10, MaxZ: 10, Height: 1.6} }

// Contains reports whether p lies inside the area (height ignored).
func (a Area) Contains(p Vec3) bool {
	return p.X >= a.MinX && p.X <= a.MaxX && p.Z >= a.MinZ && p.Z <= a.MaxZ
}

// clamp returns p moved into the area.
func (a Area) clamp(p Vec3) Vec3 {
	p.X = math.Min(math.Max(p.X, a.MinX), a.MaxX)
	p.Z = math.Min(math.Max(p.Z, a.MinZ), a.MaxZ)
	return p
}
