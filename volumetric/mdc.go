package volumetric

import (
	"fmt"
	"math/rand/v2"
)

// Descriptions is the number of multiple descriptions per frame.
const Descriptions = 3

// DefaultShares are the paper's description sizes: 15%, 25% and 60% of the
// points.
var DefaultShares = [Descriptions]float64{0.15, 0.25, 0.60}

// Splitter assigns points to descriptions by uniform random sampling. The
// assignment is a fixed permutation of point indices, so that every
// description is a uniform sample of the whole figure and the descriptions
// are disjoint and together hold every point.
type Splitter struct {
	perm   []int
	bounds [Descriptions + 1]int
}

// NewSplitter returns a splitter for clouds of n points (at least
// Descriptions) with the given shares, which must be positive and add up to
// 1. Every description holds at least one point.
func NewSplitter(seed uint64, n int, shares [Descriptions]float64) (*Splitter, error) {
	var sum float64
	for i, s := range shares {
		if !(s > 0) { // NaN too
			return nil, fmt.Errorf("volumetric: share %d is %v, want > 0", i, s)
		}
		sum += s
	}
	if sum < 0.999 || sum > 1.001 {
		return nil, fmt.Errorf("volumetric: shares %v add up to %v, want 1", shares, sum)
	}
	if n < Descriptions {
		return nil, fmt.Errorf("volumetric: %d points, want at least %d", n, Descriptions)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d))
	sp := &Splitter{perm: rng.Perm(n)}
	// Every description gets at least one point, and the first ones leave
	// at least one to each of the rest: rounding would give a small share
	// of a small cloud none (15 % of 3 points), and shares that add up to
	// a little over 1 would put a bound past n.
	acc := 0.0
	for i := 0; i < Descriptions-1; i++ {
		acc += shares[i]
		b := int(acc*float64(n) + 0.5)
		sp.bounds[i+1] = min(max(b, sp.bounds[i]+1), n-(Descriptions-1-i))
	}
	sp.bounds[Descriptions] = n
	return sp, nil
}

// Split returns the descriptions of c, which must have the splitter's size.
func (sp *Splitter) Split(c Cloud) ([Descriptions]Cloud, error) {
	var out [Descriptions]Cloud
	if len(c) != len(sp.perm) {
		return out, fmt.Errorf("volumetric: cloud has %d points, splitter wants %d", len(c), len(sp.perm))
	}
	for d := 0; d < Descriptions; d++ {
		idx := sp.perm[sp.bounds[d]:sp.bounds[d+1]]
		part := make(Cloud, len(idx))
		for i, j := range idx {
			part[i] = c[j]
		}
		out[d] = part
	}
	return out, nil
}

// Merge joins the descriptions that arrived (nil ones are missing) into one
// cloud. Any subset is a valid, coarser cloud.
func Merge(parts ...Cloud) Cloud {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make(Cloud, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
