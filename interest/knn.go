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
	ids   []string
	index map[string]int32
	pos   []Vec3
	state map[string]map[string]time.Time // observer -> member -> outside-since (zero while inside)
	snap  atomic.Pointer[map[string]map[string]struct{}]
	nb    neighbours
	stamp []uint32 // stamp[j] == gen: peer j is among the current observer's k nearest
	gen   uint32
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
	k := &KNN{cfg: cfg, index: map[string]int32{}, state: map[string]map[string]time.Time{}}
	empty := map[string]map[string]struct{}{}
	k.snap.Store(&empty)
	return k
}

// Len returns the number of peers.
func (k *KNN) Len() int { return len(k.ids) }

// Set adds peer id at p, or moves it there.
func (k *KNN) Set(id string, p Vec3) {
	if i, ok := k.index[id]; ok {
		k.pos[i] = p
		return
	}
	k.index[id] = int32(len(k.ids))
	k.ids = append(k.ids, id)
	k.pos = append(k.pos, p)
}

// Remove removes a peer. It leaves every set at the next Recompute, without
// hysteresis: it is gone.
func (k *KNN) Remove(id string) {
	i, ok := k.index[id]
	if !ok {
		return
	}
	last := int32(len(k.ids) - 1)
	if i != last {
		k.ids[i], k.pos[i] = k.ids[last], k.pos[last]
		k.index[k.ids[i]] = i
	}
	k.ids, k.pos = k.ids[:last], k.pos[:last]
	delete(k.index, id)
}

// Recompute recomputes every set from the current positions and returns
// the changes, one per observer whose set changed. An observer's first set
// is reported as all Entered; a removed observer gets no Change.
func (k *KNN) Recompute(now time.Time) []Change {
	var changes []Change
	next := make(map[string]map[string]struct{}, len(k.ids))
	old := *k.snap.Load()
	var tree *kdTree
	if len(k.ids) > 1 {
		tree = buildKD(k.pos)
	}
	if cap(k.stamp) < len(k.ids) {
		k.stamp = make([]uint32, len(k.ids), 2*len(k.ids))
		k.gen = 0
	}
	k.stamp = k.stamp[:len(k.ids)]
	// Observers that were removed lose their state.
	for obs := range k.state {
		if _, ok := k.index[obs]; !ok {
			delete(k.state, obs)
		}
	}
	for i, obs := range k.ids {
		st := k.state[obs]
		if st == nil {
			st = map[string]time.Time{}
			k.state[obs] = st
		}
		var ch Change
		k.gen++
		if tree != nil {
			k.nb.reset(k.cfg.K)
			tree.nearest(k.pos[i], int32(i), &k.nb)
			for _, j := range k.nb.idx {
				k.stamp[j] = k.gen
				id := k.ids[j]
				if since, member := st[id]; !member {
					ch.Entered = append(ch.Entered, id)
					st[id] = time.Time{}
				} else if !since.IsZero() {
					st[id] = time.Time{}
				}
			}
		}
		for id, since := range st {
			j, exists := k.index[id]
			if exists && k.stamp[j] == k.gen {
				continue
			}
			switch {
			case !exists:
				delete(st, id)
				ch.Left = append(ch.Left, id)
			case since.IsZero():
				st[id] = now
			case now.Sub(since) >= k.cfg.Hysteresis:
				delete(st, id)
				ch.Left = append(ch.Left, id)
			}
		}
		if len(ch.Entered) == 0 && len(ch.Left) == 0 {
			if prev, ok := old[obs]; ok {
				next[obs] = prev // unchanged: share the old snapshot
				continue
			}
		}
		set := make(map[string]struct{}, len(st))
		for id := range st {
			set[id] = struct{}{}
		}
		next[obs] = set
		if len(ch.Entered) > 0 || len(ch.Left) > 0 {
			ch.Observer = obs
			changes = append(changes, ch)
		}
	}
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
