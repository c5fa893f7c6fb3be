package allocator

import "sort"

// SlotHold is how much more interesting a track must be than one that holds a
// slot to take that slot: slots do not flap between publishers who stand
// about as far away.
const SlotHold = 1.25

// Candidate is an audio or video track that a subscriber could receive in
// one of its slots of the track's kind.
type Candidate struct {
	Key      string
	Interest float64 // Interest of the publisher for the subscriber
	Held     bool    // it has a slot now
	Active   bool    // its publisher is speaking: before every track that is not
}

// Nearest returns the keys of the n candidates to forward: active ones
// first, then those of the highest interest, where a held track counts
// SlotHold times its interest.
// Ties go to the lower key, so the choice is the same on every call.
// What limits them here is the subscriber's number of slots; the budget
// limits them in Allocate (Demand.Kind), which pauses those that do not fit.
func Nearest(cands []Candidate, n int) map[string]bool {
	score := func(c Candidate) float64 {
		if c.Held {
			return c.Interest * SlotHold
		}
		return c.Interest
	}
	c := append([]Candidate(nil), cands...)
	sort.Slice(c, func(i, j int) bool {
		if c[i].Active != c[j].Active {
			return c[i].Active
		}
		if si, sj := score(c[i]), score(c[j]); si != sj {
			return si > sj
		}
		return c[i].Key < c[j].Key
	})
	out := make(map[string]bool, min(n, len(c)))
	for _, x := range c[:min(max(n, 0), len(c))] {
		out[x.Key] = true
	}
	return out
}
