package interest

import (
	"sync"
	"sync/atomic"
	"time"
)

// Policy decides, from peers' positions, whose updates each observer
// receives. Set and Interested may be called from any goroutine; Tick must
// be called from one goroutine, at the policy's recompute rate.
//
// A peer has no position until Set and a Tick (or again once forgotten).
// Such a peer has no area of interest, and counts as farther away than
// every positioned peer:
//   - as an observer it receives everyone;
//   - as a sender it ranks after every positioned peer. With kNN, an
//     observer with fewer than k positioned peers in its set (a room small
//     enough for everyone to fit) receives it; one whose set is full does
//     not. A policy knows only the peers Set, so every sender without a
//     position fills such a set, however many there are (KNN.Add counts
//     them against k). With a grid it is in no cell, so within no
//     observer's radius: no observer with a position receives it.
type Policy interface {
	// Set records the position of peer id.
	Set(id string, p Vec3, now time.Time)
	// Remove forgets a peer at once.
	Remove(id string)
	// Tick recomputes the interest sets. Peers not Set for StaleAfter are
	// removed.
	Tick(now time.Time)
	// Interested reports whether observer receives sender's updates. An
	// observer with no position yet receives everyone's; a sender with no
	// position is received as described on Policy.
	Interested(observer, sender string) bool
}

// StaleAfter is how long a peer stays without a position update before a
// policy forgets it (peers on other nodes leave no other trace).
const StaleAfter = 10 * time.Second

// positions collects position updates between ticks.
type positions struct {
	mu      sync.Mutex
	pending map[string]Vec3
	removed map[string]bool
	seen    map[string]time.Time // tick goroutine only
}

func (ps *positions) set(id string, p Vec3) {
	ps.mu.Lock()
	if ps.pending == nil {
		ps.pending = map[string]Vec3{}
	}
	ps.pending[id] = p
	delete(ps.removed, id)
	ps.mu.Unlock()
}

func (ps *positions) remove(id string) {
	ps.mu.Lock()
	if ps.removed == nil {
		ps.removed = map[string]bool{}
	}
	ps.removed[id] = true
	delete(ps.pending, id)
	ps.mu.Unlock()
}

// take returns what changed since the last call, and the ids gone stale.
func (ps *positions) take(now time.Time) (moved map[string]Vec3, gone []string) {
	ps.mu.Lock()
	moved, removed := ps.pending, ps.removed
	ps.pending, ps.removed = nil, nil
	ps.mu.Unlock()
	if ps.seen == nil {
		ps.seen = map[string]time.Time{}
	}
	for id := range moved {
		ps.seen[id] = now
	}
	for id := range removed {
		delete(ps.seen, id)
		gone = append(gone, id)
	}
	for id, t := range ps.seen {
		if now.Sub(t) > StaleAfter {
			delete(ps.seen, id)
			gone = append(gone, id)
		}
	}
	return moved, gone
}

// knnPolicy is a Policy of k-nearest-neighbour sets.
type knnPolicy struct {
	ps  positions
	knn *KNN
}

// NewKNNPolicy returns a Policy in which an observer receives the updates
// of its k nearest peers (with hysteresis, see KNNConfig), and those of
// peers without a position while it has fewer than k.
func NewKNNPolicy(cfg KNNConfig) Policy { return &knnPolicy{knn: NewKNN(cfg)} }

func (p *knnPolicy) Set(id string, v Vec3, _ time.Time) { p.ps.set(id, v) }
func (p *knnPolicy) Remove(id string)                   { p.ps.remove(id) }

func (p *knnPolicy) Tick(now time.Time) {
	moved, gone := p.ps.take(now)
	for id, v := range moved {
		p.knn.Set(id, v)
	}
	for _, id := range gone {
		p.knn.Remove(id)
	}
	p.knn.Recompute(now)
}

func (p *knnPolicy) Interested(observer, sender string) bool {
	snap := *p.knn.snap.Load()
	set, ok := snap[observer]
	if !ok {
		return true // not positioned yet: no set, receives everyone
	}
	if _, in := set[sender]; in || observer == sender {
		return true
	}
	// A sender without a position ranks last: it fits while the set has
	// places free, that is while fewer than k peers have positions. A full
	// set (the usual case in a large scene: this runs per delivery) needs
	// no second lookup.
	if len(set) >= p.knn.cfg.K {
		return false
	}
	_, placed := snap[sender]
	return !placed
}

// gridPolicy is a Policy of hex-grid areas of interest.
type gridPolicy struct {
	ps     positions
	grid   Grid
	radius int
	cells  map[string]Cell // tick goroutine only
	snap   atomic.Pointer[map[string]Cell]
}

// NewGridPolicy returns a Policy in which an observer receives the updates
// of the peers in its own cell and the cells within radius steps of it.
func NewGridPolicy(g Grid, radius int) Policy {
	p := &gridPolicy{grid: g, radius: radius, cells: map[string]Cell{}}
	empty := map[string]Cell{}
	p.snap.Store(&empty)
	return p
}

func (p *gridPolicy) Set(id string, v Vec3, _ time.Time) { p.ps.set(id, v) }
func (p *gridPolicy) Remove(id string)                   { p.ps.remove(id) }

func (p *gridPolicy) Tick(now time.Time) {
	moved, gone := p.ps.take(now)
	if len(moved) == 0 && len(gone) == 0 {
		return
	}
	next := make(map[string]Cell, len(p.cells))
	for id, c := range p.cells {
		next[id] = c
	}
	for id, v := range moved {
		next[id] = p.grid.CellOf(v)
	}
	for _, id := range gone {
		delete(next, id)
	}
	p.cells = next
	p.snap.Store(&next)
}

func (p *gridPolicy) Interested(observer, sender string) bool {
	cells := *p.snap.Load()
	oc, ok := cells[observer]
	if !ok {
		return true
	}
	sc, ok := cells[sender]
	if !ok {
		// A sender with no position is in no cell, so within no radius
		// (see Policy); including it would also show a new sender to the
		// whole scene until the next Tick places it.
		return false
	}
	return Distance(oc, sc) <= p.radius
}
