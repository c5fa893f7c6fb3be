package interest

import (
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"
)

// fuzzPositions reads peers' positions from fuzz input: 16 bytes each, X
// and Z as float64 bits. Positions come off the wire (an ARENA pose's JSON,
// a Ubiq peer property), whose parsers take any finite number, so
// non-finite ones are skipped.
func fuzzPositions(b []byte) []Vec3 {
	var ps []Vec3
	for ; len(b) >= 16; b = b[16:] {
		x := math.Float64frombits(binary.LittleEndian.Uint64(b))
		z := math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
		if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(z) || math.IsInf(z, 0) {
			continue
		}
		ps = append(ps, Vec3{X: x, Z: z})
	}
	return ps
}

func fuzzSeed(ps ...Vec3) []byte {
	var b []byte
	for _, p := range ps {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.X))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Z))
	}
	return b
}

// FuzzKNN: every observer's set holds min(k, peers-1) peers, and none
// outside it is nearer than one inside it, whatever the positions (far
// apart ones too, whose squared distances overflow).
func FuzzKNN(f *testing.F) {
	f.Add(uint8(3), fuzzSeed(Vec3{}, Vec3{X: 1}, Vec3{X: 2, Z: 5}, Vec3{Z: -3}))
	f.Add(uint8(20), fuzzSeed(Vec3{}, Vec3{X: 1e200}, Vec3{X: -1e200, Z: 1e200}))
	f.Add(uint8(1), fuzzSeed(Vec3{}, Vec3{}, Vec3{}))
	f.Add(uint8(2), fuzzSeed(Vec3{X: math.MaxFloat64}, Vec3{X: -math.MaxFloat64}, Vec3{Z: 1}, Vec3{Z: 1e160}))
	f.Fuzz(func(t *testing.T, k uint8, b []byte) {
		ps := fuzzPositions(b)
		if len(ps) > 64 {
			ps = ps[:64]
		}
		kk := int(k%24) + 1
		knn := NewKNN(KNNConfig{K: kk, Hysteresis: -1})
		id := func(i int) string { return "p" + strconv.Itoa(i) }
		for i, p := range ps {
			knn.Set(id(i), p)
		}
		knn.Recompute(time.Unix(1000, 0))
		dist := func(a, b Vec3) float64 {
			dx, dz := a.X-b.X, a.Z-b.Z
			return dx*dx + dz*dz
		}
		for i, p := range ps {
			members := knn.Members(id(i))
			if want := min(kk, len(ps)-1); len(members) != want {
				t.Fatalf("k=%d, %d peers at %v: observer %d at %v has %d in its set, want %d", kk, len(ps), ps, i, p, len(members), want)
			}
			far := -1.0 // the farthest member
			for j, q := range ps {
				if j != i && knn.Interested(id(i), id(j)) {
					far = max(far, dist(p, q))
				}
			}
			for j, q := range ps {
				if j != i && !knn.Interested(id(i), id(j)) && dist(p, q) < far {
					t.Fatalf("k=%d, positions %v: observer %d at %v leaves out %d at %v (distance² %g) but has one at distance² %g", kk, ps, i, p, j, q, dist(p, q), far)
				}
			}
		}
	})
}

// FuzzGrid: two cells are zero steps apart only if they are one cell;
// steps are symmetric; and two positions in cells within the radius are
// no farther apart than the radius's cells reach. A position far out of
// any scene must not land in a cell near the origin.
func FuzzGrid(f *testing.F) {
	f.Add(20.0, uint8(1), fuzzSeed(Vec3{}, Vec3{X: 25}))
	f.Add(20.0, uint8(1), fuzzSeed(Vec3{}, Vec3{X: 1e300}))
	f.Add(1e-300, uint8(2), fuzzSeed(Vec3{X: 1}, Vec3{X: -1, Z: 3}))
	f.Add(0.5, uint8(0), fuzzSeed(Vec3{X: -math.MaxFloat64}, Vec3{X: math.MaxFloat64}))
	f.Fuzz(func(t *testing.T, size float64, radius uint8, b []byte) {
		if !(size > 0) || math.IsInf(size, 0) {
			return // the server's settings default a cell size that is not positive
		}
		ps := fuzzPositions(b)
		if len(ps) > 16 {
			ps = ps[:16]
		}
		g, r := Grid{Size: size}, int(radius%8)
		pol := NewGridPolicy(g, r)
		for i, p := range ps {
			pol.Set(strconv.Itoa(i), p, time.Time{})
		}
		pol.Tick(time.Unix(1000, 0))
		for i, p := range ps {
			a := g.CellOf(p)
			for j, q := range ps {
				c := g.CellOf(q)
				d := Distance(a, c)
				if d < 0 || d != Distance(c, a) || (d == 0) != (a == c) {
					t.Fatalf("size %g: cells %v (of %v) and %v (of %v) are %d and %d steps apart", size, a, p, c, q, d, Distance(c, a))
				}
				in := pol.Interested(strconv.Itoa(i), strconv.Itoa(j))
				if in != (d <= r) || in != pol.Interested(strconv.Itoa(j), strconv.Itoa(i)) {
					t.Fatalf("size %g radius %d: %v and %v, %d steps apart: Interested %v, reverse %v", size, r, p, q, d, in, pol.Interested(strconv.Itoa(j), strconv.Itoa(i)))
				}
				// Within the range where cells are exact (see CellOf), a cell
				// reaches one size from its centre, and a step is √3 sizes.
				lim := float64(maxAxial) / 4 * size
				if !in || math.Abs(p.X) > lim || math.Abs(p.Z) > lim || math.Abs(q.X) > lim || math.Abs(q.Z) > lim {
					continue
				}
				if reach := (float64(r)*math.Sqrt(3) + 2) * size * (1 + 1e-9); math.Hypot(p.X-q.X, p.Z-q.Z) > reach {
					t.Fatalf("size %g radius %d: %v and %v are %g apart, beyond the %g the radius reaches, yet interested", size, r, p, q, math.Hypot(p.X-q.X, p.Z-q.Z), reach)
				}
			}
		}
	})
}
