package bots

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Behaviour moves one bot. Step advances it by dt and returns its new pose;
// it is called from one goroutine only, the bot's sender.
type Behaviour interface {
	Step(dt time.Duration, peers []Peer) Pose
}

// PeerWatcher is implemented by behaviours that react to other bots. Only
// for them does a bot decode the positions in the poses it receives and
// pass the peers it sees to Step; others get nil.
type PeerWatcher interface {
	WantsPeers() bool
}

// Peer is another user as a bot last saw it.
type Peer struct {
	ID  string
	Pos Vec3
	Vel Vec3 // estimated from its last two poses
}

// Spec names a behaviour and its parameters. The zero values of the
// numbers mean the defaults noted on each field.
type Spec struct {
	Name  string  // static, randomwalk, boids or replay
	Area  Area    // where bots stay; zero = DefaultArea
	Speed float64 // randomwalk speed and boids' top speed, m/s; 0 = 3
	View  float64 // boids: how far a bot sees others, m; 0 = 6
	Trace *Trace  // replay: the trace to play (required)
}

// Behaviours lists the names Spec accepts.
var Behaviours = []string{"static", "randomwalk", "boids", "replay"}

// New returns bot i's behaviour. rng seeds its random choices (start
// position, targets, replay phase).
func (s Spec) New(i int, rng *rand.Rand) (Behaviour, error) {
	area := s.Area
	if area == (Area{}) {
		area = DefaultArea()
	}
	speed := s.Speed
	if speed == 0 {
		speed = 3
	}
	switch s.Name {
	case "static", "":
		return NewStatic(area, rng), nil
	case "randomwalk":
		return NewRandomWalk(area, speed, rng), nil
	case "boids":
		view := s.View
		if view == 0 {
			view = 6
		}
		return NewBoid(area, BoidParams{MaxSpeed: speed, View: view}, rng), nil
	case "replay":
		if s.Trace == nil || len(s.Trace.Samples) == 0 {
			return nil, fmt.Errorf("behaviour replay: no trace given")
		}
		return NewReplay(s.Trace, rng.Float64()*s.Trace.Duration().Seconds()), nil
	}
	return nil, fmt.Errorf("unknown behaviour %q (want one of %v)", s.Name, Behaviours)
}

// randomPoint returns a uniformly random point of the area at eye height.
func (a Area) randomPoint(rng *rand.Rand) Vec3 {
	return Vec3{
		X: a.MinX + rng.Float64()*(a.MaxX-a.MinX),
		Y: a.Height,
		Z: a.MinZ + rng.Float64()*(a.MaxZ-a.MinZ),
	}
}
