package interest

import (
	"crypto/sha1"
	"fmt"
	"math"
)

// Vec3 is a position in metres. Areas of interest use the X-Z plane (Y up).
type Vec3 struct{ X, Y, Z float64 }

// Cell is a hexagonal cell in axial coordinates.
type Cell struct{ Q, R int }

// Grid maps positions to flat-topped hexagonal cells on the X-Z plane.
// Size is the distance from a cell's centre to its corners, in metres.
type Grid struct{ Size float64 }

// maxAxial bounds a cell's axial coordinates: steps between cells within
// it do not overflow an int, and floats up to it are exact integers.
const maxAxial = 1 << 52

// CellOf returns the cell that contains p. A position more than maxAxial
// cells from the origin (absurd, but any finite number comes off the wire)
// is in a cell on that bound, not in one that an int conversion out of range
// makes up (amd64 makes every such number the same, near the origin's in
// steps).
func (g Grid) CellOf(p Vec3) Cell {
	q := (2.0 / 3.0 * p.X) / g.Size
	r := (-1.0/3.0*p.X + math.Sqrt(3)/3.0*p.Z) / g.Size
	return roundAxial(clampAxial(q), clampAxial(r))
}

func clampAxial(v float64) float64 { return max(-maxAxial, min(v, maxAxial)) }

// Centre returns the centre of cell c.
func (g Grid) Centre(c Cell) Vec3 {
	return Vec3{
		X: g.Size * 1.5 * float64(c.Q),
		Z: g.Size * math.Sqrt(3) * (float64(c.R) + float64(c.Q)/2),
	}
}

// roundAxial rounds fractional axial coordinates to the nearest cell, via
// cube coordinates (x+y+z = 0).
func roundAxial(q, r float64) Cell {
	x, z := q, r
	y := -x - z
	rx, ry, rz := math.Round(x), math.Round(y), math.Round(z)
	dx, dy, dz := math.Abs(rx-x), math.Abs(ry-y), math.Abs(rz-z)
	switch {
	case dx > dy && dx > dz:
		rx = -ry - rz
	case dy > dz:
		// ry = -rx - rz; not needed for axial
	default:
		rz = -rx - ry
	}
	return Cell{Q: int(rx), R: int(rz)}
}

// Distance returns the number of steps between two cells.
func Distance(a, b Cell) int {
	dq, dr := a.Q-b.Q, a.R-b.R
	return (abs(dq) + abs(dr) + abs(dq+dr)) / 2
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Ring returns every cell within radius steps of c (a filled hexagon of
// 3r(r+1)+1 cells), with c first.
func Ring(c Cell, radius int) []Cell {
	out := make([]Cell, 0, 3*radius*(radius+1)+1)
	out = append(out, c)
	for dq := -radius; dq <= radius; dq++ {
		lo, hi := max(-radius, -dq-radius), min(radius, -dq+radius)
		for dr := lo; dr <= hi; dr++ {
			if dq == 0 && dr == 0 {
				continue
			}
			out = append(out, Cell{Q: c.Q + dq, R: c.R + dr})
		}
	}
	return out
}

// CellRoomID returns the RFC 4122 version 5 UUID of cell c in the namespace
// shard: the same cell always maps to the same room, on every node.
func CellRoomID(shard [16]byte, c Cell) [16]byte {
	h := sha1.New()
	h.Write(shard[:])
	fmt.Fprintf(h, "hex:%d:%d", c.Q, c.R)
	var id [16]byte
	copy(id[:], h.Sum(nil))
	id[6] = id[6]&0x0f | 0x50 // version 5
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	return id
}

// FormatUUID writes a UUID in its canonical text form.
func FormatUUID(id [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
}
