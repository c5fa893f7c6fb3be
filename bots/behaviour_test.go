package bots

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestBoidsStayInBoundsAndKeepSeparation(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		area  Area
		speed float64
	}{
		{"few in a big area", 10, DefaultArea(), 3},
		{"crowd", 40, DefaultArea(), 3},
		{"small room", 12, Area{MinX: 0, MaxX: 8, MinZ: 0, MaxZ: 8, Height: 1.6}, 2},
		{"fast", 20, DefaultArea(), 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			p := BoidParams{MaxSpeed: tc.speed}
			boids := make([]*Boid, tc.n)
			for i := range boids {
				boids[i] = NewBoid(tc.area, p, rng)
			}
			sep := p.withDefaults().Separation
			dt := 100 * time.Millisecond
			const steps = 1200 // two simulated minutes at 10 Hz
			minDist := math.Inf(1)
			var closeSteps, pairSteps int
			for s := 0; s < steps; s++ {
				// Every boid sees the others as they were at the last step,
				// as bots see each other's last pose.
				peersOf := func(i int) []Peer {
					var ps []Peer
					for j, o := range boids {
						if j != i {
							ps = append(ps, Peer{Pos: o.pos, Vel: o.vel})
						}
					}
					return ps
				}
				all := make([][]Peer, len(boids))
				for i := range boids {
					all[i] = peersOf(i)
				}
				for i, b := range boids {
					pose := b.Step(dt, all[i])
					if !tc.area.Contains(pose.Pos) {
						t.Fatalf("step %d: boid %d at %+v left the area %+v", s, i, pose.Pos, tc.area)
					}
					if v := b.vel.Len(); v > tc.speed+1e-9 {
						t.Fatalf("step %d: boid %d at %.2f m/s, over the top speed %.2f", s, i, v, tc.speed)
					}
				}
				if s < 50 {
					continue // let the random start sort itself out
				}
				for i := range boids {
					for j := i + 1; j < len(boids); j++ {
						d := boids[i].pos.Sub(boids[j].pos).Len()
						minDist = math.Min(minDist, d)
						pairSteps++
						if d < sep/2 {
							closeSteps++
						}
					}
				}
			}
			// Separation is a steering rule, not a hard constraint: brief
			// close passes happen, but rarely, and never a collision.
			if frac := float64(closeSteps) / float64(pairSteps); frac > 0.01 {
				t.Errorf("pairs closer than half the separation distance %.2f m in %.2f%% of pair-steps, want under 1%%", sep/2, 100*frac)
			}
			if minDist < 0.1 {
				t.Errorf("closest approach %.3f m, want at least 0.1 m", minDist)
			}
			t.Logf("closest approach %.2f m; %.3f%% of pair-steps under %.2f m", minDist, 100*float64(closeSteps)/float64(pairSteps), sep/2)
		})
	}
}

func TestRandomWalkSpeedHolds(t *testing.T) {
	for _, tc := range []struct {
		speed float64
		dt    time.Duration
	}{{3, 100 * time.Millisecond}, {3, 33 * time.Millisecond}, {1.4, time.Second}, {3, 500 * time.Millisecond}} {
		w := NewRandomWalk(DefaultArea(), tc.speed, rand.New(rand.NewPCG(3, 4)))
		prev := w.pos
		var straight, total int
		for i := 0; i < 2000; i++ {
			target := w.target
			p := w.Step(tc.dt, nil).Pos
			if !DefaultArea().Contains(p) {
				t.Fatalf("speed %g dt %s: left the area at %+v", tc.speed, tc.dt, p)
			}
			d := p.Sub(prev).Len()
			want := tc.speed * tc.dt.Seconds()
			if d > want+1e-9 {
				t.Fatalf("speed %g dt %s: moved %.4f m in one step, more than %.4f", tc.speed, tc.dt, d, want)
			}
			// Within one leg the displacement is the path: exactly speed*dt.
			if w.target == target {
				straight++
				if math.Abs(d-want) > 1e-9 {
					t.Fatalf("speed %g dt %s: moved %.6f m along a straight leg, want %.6f", tc.speed, tc.dt, d, want)
				}
			}
			total++
			prev = p
		}
		if straight < total/2 {
			t.Errorf("speed %g dt %s: only %d of %d steps on a straight leg", tc.speed, tc.dt, straight, total)
		}
	}
}

func TestStaticStaysPut(t *testing.T) {
	s := NewStatic(DefaultArea(), rand.New(rand.NewPCG(5, 6)))
	a := s.Step(time.Second, nil)
	for i := 0; i < 10; i++ {
		if b := s.Step(time.Second, nil); b != a {
			t.Fatalf("static moved from %+v to %+v", a, b)
		}
	}
}

func TestReplay(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader("# a trace\n0 0 1.6 0 0 0 0 1\n\n1 2 1.6 0 0 0 0 1\n2 2 1.6 4 0 0 0 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Duration() != 2*time.Second {
		t.Fatalf("duration %s, want 2s", tr.Duration())
	}
	r := NewReplay(tr, 0)
	for _, want := range []Vec3{{1, 1.6, 0}, {2, 1.6, 0}, {2, 1.6, 2}, {0, 1.6, 0}} {
		got := r.Step(500*time.Millisecond, nil).Pos
		if got.Sub(want).Len() > 1e-9 {
			t.Fatalf("replay at %.1f s: %+v, want %+v", r.now, got, want)
		}
	}
	var sb strings.Builder
	if _, err := tr.WriteTo(&sb); err != nil {
		t.Fatal(err)
	}
	back, err := ReadTrace(strings.NewReader(sb.String()))
	if err != nil || len(back.Samples) != 3 {
		t.Fatalf("round trip: %v, %d samples", err, len(back.Samples))
	}
}

func TestReadTraceErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "# nothing\n", "no samples"},
		{"short line", "0 1 2 3\n", "line 1: 4 fields"},
		{"not a number", "0 1 2 x 0 0 0 1\n", `line 1: field 4 "x"`},
		{"time goes back", "1 0 0 0 0 0 0 1\n0.5 0 0 0 0 0 0 1\n", "line 2: time 0.5 does not increase"},
	} {
		_, err := ReadTrace(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestSpecNew(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, name := range []string{"static", "randomwalk", "boids"} {
		if _, err := (Spec{Name: name}).New(0, rng); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := (Spec{Name: "replay"}).New(0, rng); err == nil {
		t.Error("replay without a trace: no error")
	}
	if _, err := (Spec{Name: "teleport"}).New(0, rng); err == nil || !strings.Contains(err.Error(), "teleport") {
		t.Errorf("unknown behaviour: error %v", err)
	}
}
