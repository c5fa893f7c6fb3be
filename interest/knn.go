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
}

// KNN keeps, for each peer of one room, the set of peers it is interested
// in: its k nearest on the X-Z plane, recomputed by Recompute. Sets are asymmetric: P may be
// in Q's set without Q being in P's.
//
// Set, Remove and Recompute must be called from one goroutine at a time;
// Interested and Members may be called from any goroutine at any time and
// see the sets of the last Recompute.
type KNN struct {
	cfg   KNNConfig
	slots []knnPeer        // by slot; a removed peer's slot is reused after the next Recompute
	index map[string]int32 // id -> slot, removed peers included until the next Recompute
	free  []int32          // slots to reuse
	dead  []int32          // slots removed since the last Recompute
	live  int
	snap  atomic.Pointer[map[string]map[string]struct{}]
	nb    neighbours
	pts   []Vec3  // positions of the live peers, in tree order's input
	slot  []int32 // slot of each entry of pts
	// stamp[s] == gen: slot s is among the current observer's k nearest;
	// has[s] == gen: slot s is in the current observer's set.
	stamp, has []uint32
	gen        uint32
}

// knnPeer is one peer's position and set. Members are slots, not ids, so
// that a recompute hashes no strings for observers whose set is unchanged.
type knnPeer struct {
	id   string
	pos  Vec3
	live bool
	set  []knnMember
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

// Len returns the number of peers.
func (k *KNN) Len() int { return k.live }

// Set adds peer id at p, or moves it there.
func (k *KNN) Set(id string, p Vec3) {
	if s, ok := k.index[id]; ok {
		pe := &k.slots[s]
		pe.pos = p
		if !pe.live { // removed and back before a recompute: it never left
			pe.live = true
			k.live++
		}
		return
	}
	var s int32
	if n := len(k.free); n > 0 {
		s, k.free = k.free[n-1], k.free[:n-1]
		k.slots[s] = knnPeer{id: id, pos: p, live: true, set: k.slots[s].set[:0]}
	} else {
		s = int32(len(k.slots))
		k.slots = append(k.slots, knnPeer{id: id, pos: p, live: true})
	}
	k.index[id] = s
	k.live++
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
// is reported as all Entered; a removed observer gets no Change.
func (k *KNN) Recompute(now time.Time) []Change {
	var changes []Change
	next := make(map[string]map[string]struct{}, k.live)
	old := *k.snap.Load()
	k.pts, k.slot = k.pts[:0], k.slot[:0]
	for s := range k.slots {
		if k.slots[s].live {
			k.pts = append(k.pts, k.slots[s].pos)
			k.slot = append(k.slot, int32(s))
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
		if len(ch.Entered) == 0 && len(ch.Left) == 0 {
			if prev, ok := old[pe.id]; ok {
				next[pe.id] = prev // unchanged: share the old snapshot
				continue
			}
		}
		set := make(map[string]struct{}, len(pe.set))
		for _, m := range pe.set {
			set[k.slots[m.slot].id] = struct{}{}
		}
		next[pe.id] = set
		if len(ch.Entered) > 0 || len(ch.Left) > 0 {
			ch.Observer = pe.id
			changes = append(changes, ch)
		}
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

// Interested reports whether sender is in observer's set.
func (k *KNN) Interested(observer, sender string) bool {
	_, ok := (*k.snap.Load())[observer][sender]
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
