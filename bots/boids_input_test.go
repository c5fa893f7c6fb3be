package bots

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Poses of other clients in the scene that are not finite (a position of
// NaN or Infinity, which the quick scan read as numbers), or that jump
// across the range of a float64 (a velocity estimate of ±Inf), leave a
// boid where it was. Before, one such pose made the boid's position NaN
// for good: it sent "NaN" in every pose after (JSON no client reads) and
// never moved again.
func TestBoidsIgnoreNonFinitePeers(t *testing.T) {
	pose := func(x, z string) []byte {
		return []byte(fmt.Sprintf(`{"object_id":"x","action":"update","data":{"object_type":"camera","position":{"x":%s,"y":1.6,"z":%s}}}`, x, z))
	}
	for _, tc := range []struct {
		name  string
		poses [][]byte // one sender's, 100 ms apart
	}{
		{"NaN", [][]byte{pose("1", "1"), pose("NaN", "1")}},
		{"NaN first", [][]byte{pose("NaN", "NaN")}},
		{"Infinity", [][]byte{pose("1", "1"), pose("+Inf", "-Inf")}},
		{"a jump across the float range", [][]byte{pose("-1.7e308", "0"), pose("1.7e308", "0"), pose("0.5", "0.5")}},
		{"huge but finite, then near", [][]byte{pose("1e300", "1e300"), pose("0.5", "0.5")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := &peerTable{self: "me", m: map[string]*peerState{}}
			now := time.Now().UnixNano()
			for _, p := range tc.poses {
				if _, pos, ok := posePositionOf(p); ok {
					tbl.update([]byte("x"), pos, now)
				}
				now += int64(100 * time.Millisecond)
			}
			area := DefaultArea()
			b := NewBoid(area, BoidParams{}, rand.New(rand.NewPCG(1, 2)))
			b.pos = Vec3{X: 0, Y: area.Height, Z: 0}
			for step := range 50 {
				peers := tbl.snapshot(nil, now)
				p := b.Step(100*time.Millisecond, peers)
				for _, v := range []float64{p.Pos.X, p.Pos.Y, p.Pos.Z, p.Rot.X, p.Rot.Y, p.Rot.Z, p.Rot.W} {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatalf("step %d: pose %+v is not finite (peers %+v)", step, p, peers)
					}
				}
				if !area.Contains(p.Pos) {
					t.Fatalf("step %d: pose %+v left the area", step, p)
				}
			}
		})
	}
}
