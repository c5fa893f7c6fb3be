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
// boid where it was. It fails if one such pose makes the boid's position
// NaN for good: it would send "NaN" in every pose after (JSON no client
// reads) and never move again.
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

// A bot's peer table stays bounded whatever ids the scene's other clients
// send from: a flood of distinct (spoofed) ids grew it by an entry each
// until the next snapshot, every step of the bot. A peer it knows keeps
// its place, and peers that went quiet make room for new ones.
func TestPeerTableBounded(t *testing.T) {
	tbl := &peerTable{self: "me", m: map[string]*peerState{}}
	now := int64(time.Hour)
	tbl.update([]byte("known"), Vec3{1, 2, 3}, now)
	for i := range 3 * maxPeers {
		tbl.update(fmt.Appendf(nil, "spoof%d", i), Vec3{}, now)
	}
	if n := len(tbl.m); n > maxPeers {
		t.Fatalf("%d peers kept after %d ids, want at most %d", n, 3*maxPeers+1, maxPeers)
	}
	tbl.update([]byte("known"), Vec3{2, 2, 3}, now+int64(time.Second))
	if p := tbl.m["known"]; p == nil || p.pos != (Vec3{2, 2, 3}) {
		t.Fatalf("known peer %+v, want it at its new position", p)
	}
	// Once the others went quiet, a new peer finds room.
	later := now + int64(peerTTL) + int64(2*time.Second)
	tbl.update([]byte("new"), Vec3{4, 5, 6}, later)
	if tbl.m["new"] == nil {
		t.Fatal("a new peer found no room after the others went quiet")
	}
}
