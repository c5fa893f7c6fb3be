package interest

// kdTree is a static 2-d tree over the X-Z positions of peers, rebuilt at
// each recompute. Nodes are stored in an implicit layout: the median of each
// range is its root, split on X at even depths and on Z at odd ones. Points
// are copied into tree order so that a search reads memory in sequence.
type kdTree struct {
	nodes []kdNode
}

type kdNode struct {
	x, z float64
	id   int32 // index of the peer
}

func (n *kdNode) axis(a int) float64 {
	if a == 0 {
		return n.x
	}
	return n.z
}

func buildKD(pts []Vec3) *kdTree {
	t := &kdTree{nodes: make([]kdNode, len(pts))}
	for i, p := range pts {
		t.nodes[i] = kdNode{x: p.X, z: p.Z, id: int32(i)}
	}
	t.build(0, len(pts), 0)
	return t
}

func (t *kdTree) build(lo, hi, depth int) {
	if hi-lo <= 1 {
		return
	}
	mid := (lo + hi) / 2
	t.selectNth(lo, hi, mid, depth&1)
	t.build(lo, mid, depth+1)
	t.build(mid+1, hi, depth+1)
}

// selectNth partially sorts nodes[lo:hi] so that nodes[n] holds the element
// of rank n on axis a (quickselect with a middle pivot).
func (t *kdTree) selectNth(lo, hi, n, a int) {
	ns := t.nodes
	for hi-lo > 1 {
		p := ns[(lo+hi)/2].axis(a)
		i, j := lo, hi-1
		for i <= j {
			for ns[i].axis(a) < p {
				i++
			}
			for ns[j].axis(a) > p {
				j--
			}
			if i <= j {
				ns[i], ns[j] = ns[j], ns[i]
				i++
				j--
			}
		}
		switch {
		case n <= j:
			hi = j + 1
		case n >= i:
			lo = i
		default:
			return
		}
	}
}

// neighbours is a bounded max-heap of the k nearest found so far.
type neighbours struct {
	k    int
	idx  []int32
	dist []float64
}

func (h *neighbours) reset(k int) {
	h.k, h.idx, h.dist = k, h.idx[:0], h.dist[:0]
}

// full reports whether a peer at squared distance d or farther cannot
// enter: there are k already, all nearer. While there are fewer, any may,
// even one so far that d overflowed to +Inf.
func (h *neighbours) full(d float64) bool {
	return len(h.idx) == h.k && d >= h.dist[0]
}

func (h *neighbours) push(i int32, d float64) {
	if len(h.idx) < h.k {
		h.idx = append(h.idx, i)
		h.dist = append(h.dist, d)
		for c := len(h.idx) - 1; c > 0; {
			p := (c - 1) / 2
			if h.dist[p] >= h.dist[c] {
				break
			}
			h.swap(p, c)
			c = p
		}
		return
	}
	if d >= h.dist[0] {
		return
	}
	h.idx[0], h.dist[0] = i, d
	for p := 0; ; {
		l, r, big := 2*p+1, 2*p+2, p
		if l < h.k && h.dist[l] > h.dist[big] {
			big = l
		}
		if r < h.k && h.dist[r] > h.dist[big] {
			big = r
		}
		if big == p {
			return
		}
		h.swap(p, big)
		p = big
	}
}

func (h *neighbours) swap(a, b int) {
	h.idx[a], h.idx[b] = h.idx[b], h.idx[a]
	h.dist[a], h.dist[b] = h.dist[b], h.dist[a]
}

// nearest fills h with the peers nearest to q on the X-Z plane, excluding
// peer self.
func (t *kdTree) nearest(q Vec3, self int32, h *neighbours) {
	t.search(q.X, q.Z, self, 0, len(t.nodes), 0, h)
}

func (t *kdTree) search(qx, qz float64, self int32, lo, hi, depth int, h *neighbours) {
	for lo < hi {
		mid := (lo + hi) / 2
		n := &t.nodes[mid]
		dx, dz := qx-n.x, qz-n.z
		if n.id != self {
			h.push(n.id, dx*dx+dz*dz)
		}
		diff := dx
		if depth&1 == 1 {
			diff = dz
		}
		nlo, nhi, flo, fhi := lo, mid, mid+1, hi
		if diff > 0 {
			nlo, nhi, flo, fhi = mid+1, hi, lo, mid
		}
		t.search(qx, qz, self, nlo, nhi, depth+1, h)
		if h.full(diff * diff) {
			return
		}
		lo, hi, depth = flo, fhi, depth+1 // the far side, iteratively
	}
}
