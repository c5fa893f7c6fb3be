package interest

import (
	"sync/atomic"
	"time"
)

// KNNConfig configures k-nearest-neighbour interest.
type KNNConfig struct {
	K int // set size (default 20)
	// Hysteresis keeps a peer in an observer's set until it has been
	// outside the k nearest for this long (default 500ms), so that peers
	// near the boundary do not flicker in and out.
	Hysteresis time.Duration
}

// Change tells an observer which peers entered and left its set.
type Change struct {
	Observer string
	Entered  []string
	Left     []string
	// First: this is the observer's first set (it had no position at the
	// previous Recompute, so it had none). Entered is the whole set, and
	// a caller that gave the observer everyone until now (see Add) takes
	// away the peers not in it. A first set is reported even when empty.
	First bool
}

// KNN keeps, for each peer of one room, the set of peers it is interested
// in: its k nearest on the X-Z plane, recomputed by Recompute. Sets are
// asymmetric: P may be in Q's set without Q being in P's.
//
// A peer may be present without a position (Add): it has no set of its
// own (callers let it receive everyone, see Positioned), and it ranks after
// every positioned peer, as if infinitely far: it fills the places that
// positioned peers leave free in the sets of observers with fewer than k
// positioned peers around, and gives its place up when nearer peers come.
//
// Set, Add, Remove and Recompute must be called from one goroutine at a
// time; Interested, Positioned and Members may be called from any goroutine
// at any time and see the sets of the last Recompute.
type KNN struct {
	cfg   KNNConfig
	slots []knnPeer        // by slot; a removed peer's slot is reused after the next Recompute
	index map[string]int32 // id -> slot, removed peers included until the next Recompute
	free  []int32          // slots to reuse
	dead  []int32          // slots removed since the last Recompute
	live  int
	snap  atomic.Pointer[map[string]map[string]struct{}]
	nb    neighbours
	pts   []Vec3  // positions of the live positioned peers, in tree order's input
	slot  []int32 // slot of each entry of pts
	loose []int32 // slots of the live peers without a position, in slot order
	// stamp[s] == gen: slot s is among the current observer's k nearest;
	// has[s] == gen: slot s is in the current observer's set.
	stamp, has []uint32
	gen        uint32
}

// knnPeer is one peer's position and set. Members are slots, not ids, so
// that a recompute hashes no strings for observers whose set is unchanged.
type knnPeer struct {
	id     string
	pos    Vec3
	live   bool
	placed bool // pos is known: Set, not only Add
	set    []knnMember
}

type knnMember struct {
	slot  int32
	since time.Time // when it left the k nearest; zero while inside
}

// NewKNN returns an empty KNN.
func NewKNN(cfg KNNConfig) *KNN {
	if cfg.K <= 0 {
		cfg.K = 20
	}
	if cfg.Hysteresis < 0 {
		cfg.Hysteresis = 0
	} else if cfg.Hysteresis == 0 {
		cfg.Hysteresis = 500 * time.Millisecond
	}
	k := &KNN{cfg: cfg, index: map[string]int32{}}
	empty := map[string]map[string]struct{}{}
	k.snap.Store(&empty)
	return k
}

// Len returns the number of peers, with or without a position.
func (k *KNN) Len() int { return k.live }

// Set adds peer id at p, or moves it there (a peer added without a
// position gets one).
func (k *KNN) Set(id string, p Vec3) {
	pe := k.peer(id)
	pe.pos, pe.placed = p, true
}

// Add adds peer id without a position, if it is not there: it has no set
// until Set gives it a position, and it ranks after every positioned peer
// in the sets of the others (see KNN). A peer removed since the last
// Recompute comes back without a position, and without its set.
func (k *KNN) Add(id string) {
	if s, ok := k.index[id]; ok && k.slots[s].live {
		return
	}
	k.peer(id).placed = false
}

// peer returns the live peer id, added (without a position) if need be.
func (k *KNN) peer(id string) *knnPeer {
	if s, ok := k.index[id]; ok {
		pe := &k.slots[s]
		if !pe.live { // removed and back before a recompute: it never left
			pe.live = true
			k.live++
		}
		return pe
	}
	var s int32
	if n := len(k.free); n > 0 {
		s, k.free = k.free[n-1], k.free[:n-1]
		k.slots[s] = knnPeer{id: id, live: true, set: k.slots[s].set[:0]}
	} else {
		s = int32(len(k.slots))
		k.slots = append(k.slots, knnPeer{id: id, live: true})
	}
	k.index[id] = s
	k.live++
	return &k.slots[s]
}

// Remove removes a peer. It leaves every set at the next Recompute, without
// hysteresis: it is gone.
func (k *KNN) Remove(id string) {
	s, ok := k.index[id]
	if !ok || !k.slots[s].live {
		return
	}
	k.slots[s].live = false
	k.live--
	k.dead = append(k.dead, s)
}

// Recompute recomputes every set from the current positions and returns
// the changes, one per observer whose set changed. An observer's first set
// is reported as all Entered, with First set; a removed observer gets no
// Change, nor does a peer without a position (it has no set).
func (k *KNN) Recompute(now time.Time) []Change {
	var changes []Change
	next := make(map[string]map[string]struct{}, k.live)
	old := *k.snap.Load()
	k.pts, k.slot, k.loose = k.pts[:0], k.slot[:0], k.loose[:0]
	for s := range k.slots {
		pe := &k.slots[s]
		switch {
		case !pe.live:
		case pe.placed:
			k.pts = append(k.pts, pe.pos)
			k.slot = append(k.slot, int32(s))
		default:
			k.loose = append(k.loose, int32(s))
			pe.set = pe.set[:0] // back without a position (Add): no set
		}
	}
	var tree *kdTree
	if len(k.pts) > 1 {
		tree = buildKD(k.pts)
	}
	if len(k.stamp) < len(k.slots) {
		k.stamp = append(k.stamp, make([]uint32, len(k.slots)-len(k.stamp))...)
		k.has = append(k.has, make([]uint32, len(k.slots)-len(k.has))...)
	}
	for i, s := range k.slot {
		pe := &k.slots[s]
		k.gen++
		if k.gen == 0 { // wrapped: old marks could match again
			clear(k.stamp)
			clear(k.has)
			k.gen = 1
		}
		for _, m := range pe.set {
			k.has[m.slot] = k.gen
		}
		var ch Change
		free := k.cfg.K
		if tree != nil {
			k.nb.reset(k.cfg.K)
			tree.nearest(k.pts[i], int32(i), &k.nb)
			for _, j := range k.nb.idx {
				t := k.slot[j]
				k.stamp[t] = k.gen
				if k.has[t] != k.gen {
					pe.set = append(pe.set, knnMember{slot: t})
					ch.Entered = append(ch.Entered, k.slots[t].id)
				}
			}
			free -= len(k.nb.idx)
		}
		if free > 0 && len(k.loose) > 0 {
			// Peers without a position take the free places, those in
			// the set already first, so that none is swapped for another.
			for _, t := range k.loose {
				if free > 0 && k.has[t] == k.gen {
					k.stamp[t] = k.gen
					free--
				}
			}
			for _, t := range k.loose {
				if free == 0 {
					break
				}
				if k.has[t] != k.gen {
					k.stamp[t] = k.gen
					free--
					pe.set = append(pe.set, knnMember{slot: t})
					ch.Entered = append(ch.Entered, k.slots[t].id)
				}
			}
		}
		kept := pe.set[:0]
		for _, m := range pe.set {
			t := m.slot
			switch {
			case !k.slots[t].live:
				ch.Left = append(ch.Left, k.slots[t].id)
				continue
			case k.stamp[t] == k.gen:
				m.since = time.Time{}
			case m.since.IsZero() && k.cfg.Hysteresis > 0:
				m.since = now
			case m.since.IsZero() || now.Sub(m.since) >= k.cfg.Hysteresis:
				ch.Left = append(ch.Left, k.slots[t].id)
				continue
			}
			kept = append(kept, m)
		}
		pe.set = kept
		prev, had := old[pe.id]
		if had && len(ch.Entered) == 0 && len(ch.Left) == 0 {
			next[pe.id] = prev // unchanged: share the old snapshot
			continue
		}
		set := make(map[string]struct{}, len(pe.set))
		for _, m := range pe.set {
			set[k.slots[m.slot].id] = struct{}{}
		}
		next[pe.id] = set
		ch.Observer, ch.First = pe.id, !had
		changes = append(changes, ch)
	}
	// Every set has now let go of the removed peers: their slots are free.
	for _, s := range k.dead {
		// (A peer removed, set again and removed again is listed twice.)
		pe := &k.slots[s]
		if j, ok := k.index[pe.id]; !pe.live && ok && j == s {
			delete(k.index, pe.id)
			*pe = knnPeer{set: pe.set[:0]}
			k.free = append(k.free, s)
		}
	}
	k.dead = k.dead[:0]
	k.snap.Store(&next)
	return changes
}

// Interested reports whether sender is in observer's set. It is false for
// an observer without a set: one without a position at the last Recompute
// (see Positioned).
func (k *KNN) Interested(observer, sender string) bool {
	_, ok := (*k.snap.Load())[observer][sender]
	return ok
}

// Positioned reports whether id had a position at the last Recompute, and
// so a set. A peer without one has no set: a caller lets it receive
// everyone, as Policy does.
func (k *KNN) Positioned(id string) bool {
	_, ok := (*k.snap.Load())[id]
	return ok
}

// Members returns observer's current set.
func (k *KNN) Members(observer string) []string {
	set := (*k.snap.Load())[observer]
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	return out
}
