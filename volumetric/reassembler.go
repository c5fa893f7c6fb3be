package volumetric

import (
	"time"
)

// Description is one reassembled, still encoded, description of a frame.
type Description struct {
	Client      uint32
	Frame       uint32
	Description uint8
	CaptureUs   uint64
	Data        []byte
	// First and Done are when the first and the last fragment arrived.
	First, Done time.Time
}

// ReassemblerStats counts what a reassembler did.
type ReassemblerStats struct {
	Complete   uint64 // descriptions completed
	Expired    uint64 // incomplete descriptions dropped at their deadline
	Late       uint64 // fragments of descriptions already completed or expired
	Duplicates uint64 // fragments received twice
}

type fragKey struct {
	client uint32
	frame  uint32
	desc   uint8
}

type pending struct {
	h     Header
	frags [][]byte
	have  int
	held  int // bytes counted against the Reassembler's maxBytes
	first time.Time
}

// Reassembler rebuilds encoded descriptions from fragments, in any order,
// and drops a description that is not complete within its deadline. It is
// not safe for concurrent use; time is passed in so that tests and replays
// do not depend on the wall clock.
type Reassembler struct {
	deadline time.Duration
	pending  map[fragKey]*pending
	// done remembers recently finished keys so that late fragments are
	// counted rather than starting a new, never-completing entry.
	done  map[fragKey]time.Time
	stats ReassemblerStats
	// held is what pending holds, counted as MaxPendingBytes says; at most
	// maxBytes (MaxPendingBytes; tests lower it).
	held, maxBytes int
}

// NewReassembler returns a reassembler that gives each description deadline
// from its first fragment to complete.
func NewReassembler(deadline time.Duration) *Reassembler {
	return &Reassembler{deadline: deadline, pending: map[fragKey]*pending{}, done: map[fragKey]time.Time{}, maxBytes: MaxPendingBytes}
}

// Push adds one RTP payload received at now. It returns the description it
// completes, if any.
func (r *Reassembler) Push(now time.Time, payload []byte) (*Description, error) {
	h, data, err := ParseHeader(payload)
	if err != nil {
		return nil, err
	}
	k := fragKey{h.Client, h.Frame, h.Description}
	if _, ok := r.done[k]; ok {
		r.stats.Late++
		return nil, nil
	}
	p := r.pending[k]
	if p == nil {
		slots := int(h.Count) * fragSlotBytes
		for len(r.pending) > 0 && (len(r.pending) >= MaxPending || r.held+slots > r.maxBytes) {
			r.dropOldest(now, nil)
		}
		p = &pending{h: h, frags: make([][]byte, h.Count), held: slots, first: now}
		r.pending[k] = p
		r.held += slots
	}
	if int(h.Count) != len(p.frags) {
		return nil, nil // inconsistent count: ignore this fragment
	}
	if p.frags[h.Fragment] != nil {
		r.stats.Duplicates++
		return nil, nil
	}
	for r.held+len(data) > r.maxBytes && len(r.pending) > 1 {
		r.dropOldest(now, p)
	}
	if r.held+len(data) > r.maxBytes { // p alone is larger than the bound
		r.drop(k, now)
		return nil, nil
	}
	r.held += len(data)
	p.held += len(data)
	// Never nil, even without data: nil marks a fragment not yet received.
	p.frags[h.Fragment] = append(make([]byte, 0, len(data)), data...)
	p.have++
	if p.have < len(p.frags) {
		return nil, nil
	}
	delete(r.pending, k)
	r.held -= p.held
	r.done[k] = now
	r.stats.Complete++
	n := 0
	for _, f := range p.frags {
		n += len(f)
	}
	buf := make([]byte, 0, n)
	for _, f := range p.frags {
		buf = append(buf, f...)
	}
	return &Description{Client: h.Client, Frame: h.Frame, Description: h.Description, CaptureUs: h.CaptureUs, Data: buf, First: p.first, Done: now}, nil
}

// MaxPending bounds the descriptions a Reassembler completes at once: a
// sender (or a corrupted stream) that starts descriptions it never
// finishes makes the oldest drop, not memory grow until their deadlines.
const MaxPending = 32

// MaxPendingBytes bounds what a Reassembler holds for its incomplete
// descriptions together: their fragments' data, and fragSlotBytes for each
// fragment a first header announced (a 22-byte header announcing 65535
// asks for 1.5 MiB of slots). Beyond it the oldest drop, as beyond
// MaxPending, and a description larger than the bound on its own drops.
// MaxPending descriptions of 65535 fragments of 1,200 bytes, which
// MaxPending alone allowed, are 2.4 GB.
const MaxPendingBytes = 64 << 20

// fragSlotBytes is what a Reassembler counts for each announced fragment:
// the slice header that holds it.
const fragSlotBytes = 24

// dropOldest drops the incomplete description that started first, other
// than keep.
func (r *Reassembler) dropOldest(now time.Time, keep *pending) {
	var oldest fragKey
	var first *pending
	for k, p := range r.pending {
		if p != keep && (first == nil || p.first.Before(first.first)) {
			oldest, first = k, p
		}
	}
	if first != nil {
		r.drop(oldest, now)
	}
}

// drop gives up the incomplete description k at now.
func (r *Reassembler) drop(k fragKey, now time.Time) {
	r.held -= r.pending[k].held
	delete(r.pending, k)
	r.done[k] = now
	r.stats.Expired++
}

// Expire drops the incomplete descriptions whose deadline passed at now and
// forgets finished ones older than twice the deadline. It returns how many
// were dropped.
func (r *Reassembler) Expire(now time.Time) int {
	dropped := 0
	for k, p := range r.pending {
		if now.Sub(p.first) > r.deadline {
			r.drop(k, now)
			dropped++
		}
	}
	for k, t := range r.done {
		if now.Sub(t) > 2*r.deadline {
			delete(r.done, k)
		}
	}
	return dropped
}

// Pending is the number of incomplete descriptions held.
func (r *Reassembler) Pending() int { return len(r.pending) }

// Stats returns the counters.
func (r *Reassembler) Stats() ReassemblerStats { return r.stats }

// Merger collects the decoded descriptions of each frame of each client
// and merges them when all wanted descriptions arrived or when the frame is
// given up.
type Merger struct {
	frames map[[2]uint32]*[Descriptions]Cloud
}

// NewMerger returns an empty merger.
func NewMerger() *Merger { return &Merger{frames: map[[2]uint32]*[Descriptions]Cloud{}} }

// Add stores a decoded description. It returns the merged cloud when every
// description in want is present.
func (m *Merger) Add(client, frame uint32, desc uint8, c Cloud, want [Descriptions]bool) (Cloud, bool) {
	if int(desc) >= Descriptions {
		return nil, false
	}
	k := [2]uint32{client, frame}
	f := m.frames[k]
	if f == nil {
		f = new([Descriptions]Cloud)
		m.frames[k] = f
	}
	f[desc] = c
	for d := 0; d < Descriptions; d++ {
		if want[d] && f[d] == nil {
			return nil, false
		}
	}
	delete(m.frames, k)
	return Merge(f[:]...), true
}

// Flush merges and removes whatever arrived of a frame, for a frame whose
// deadline passed with some descriptions missing.
func (m *Merger) Flush(client, frame uint32) Cloud {
	k := [2]uint32{client, frame}
	f := m.frames[k]
	if f == nil {
		return nil
	}
	delete(m.frames, k)
	return Merge(f[:]...)
}
