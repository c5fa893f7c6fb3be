package volumetric

import (
	"container/list"
	"slices"
	"sync"
	"time"
)

// FrameStats summarises frame delivery: descriptions completed or given up,
// and the latency from capture to the last fragment of completed ones.
type FrameStats struct {
	Complete uint64 `json:"complete"`
	Expired  uint64 `json:"expired"`
	// Evicted counts the descriptions among Expired that a FrameTracker
	// gave up before their deadline because too many were pending (see
	// MaxTrackedPending).
	Evicted uint64 `json:"evicted,omitempty"`
	// Latency quantiles over the last LatencyWindow samples, and the sum
	// and count of all samples.
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	Sum time.Duration `json:"sum"`
	N   uint64        `json:"n"`
}

// CompletionRatio is Complete / (Complete + Expired), or 1 when nothing
// was seen.
func (s FrameStats) CompletionRatio() float64 {
	if s.Complete+s.Expired == 0 {
		return 1
	}
	return float64(s.Complete) / float64(s.Complete+s.Expired)
}

// LatencyWindow keeps the last samples of a latency and answers quantiles
// over them. It is safe for concurrent use.
type LatencyWindow struct {
	mu   sync.Mutex
	ring []time.Duration
	next int
	full bool
	sum  time.Duration
	n    uint64
}

// MaxLatency is the longest capture-to-completion latency a FrameTracker
// keeps in its quantiles and sum (Observe returns any).
const MaxLatency = time.Minute

// NewLatencyWindow keeps the last size samples (at least 1).
func NewLatencyWindow(size int) *LatencyWindow {
	return &LatencyWindow{ring: make([]time.Duration, max(size, 1))}
}

// Add records one sample.
func (w *LatencyWindow) Add(d time.Duration) {
	w.mu.Lock()
	w.ring[w.next] = d
	w.next++
	if w.next == len(w.ring) {
		w.next, w.full = 0, true
	}
	w.sum += d
	w.n++
	w.mu.Unlock()
}

// Quantiles returns the q-quantiles (0 < q ≤ 1, nearest rank) of the
// samples held, the sum and the count of every sample added; zeros when
// there is none.
func (w *LatencyWindow) Quantiles(qs ...float64) ([]time.Duration, time.Duration, uint64) {
	w.mu.Lock()
	k := w.next
	if w.full {
		k = len(w.ring)
	}
	s := slices.Clone(w.ring[:k])
	sum, n := w.sum, w.n
	w.mu.Unlock()
	out := make([]time.Duration, len(qs))
	if len(s) == 0 {
		return out, sum, n
	}
	slices.Sort(s)
	for i, q := range qs {
		out[i] = s[Rank(q, len(s))]
	}
	return out, sum, n
}

// Rank is the index of the nearest-rank q-quantile in a sorted slice of n
// elements (n > 0).
func Rank(q float64, n int) int {
	r := int(q*float64(n)+0.999999) - 1
	return min(max(r, 0), n-1)
}

// FrameTracker follows point-cloud descriptions through their fragment
// headers only, without keeping their data: it counts descriptions that
// complete and that are not complete within a deadline, and the latency
// from the header's capture time to the last fragment. A node uses it on
// every point-cloud source; it is safe for concurrent use.
//
// What it holds is bounded whatever the sender does. An incomplete
// description costs a bitmap of one bit per announced fragment (a single
// 22-byte header announcing 65535 fragments asks for 8 KiB), so at most
// MaxTrackedPending descriptions with at most MaxTrackedPendingBytes of
// bitmaps in all are pending at once; a new description beyond either
// bound evicts the oldest pending ones, which count as expired (and as
// evicted, see FrameStats). Finished descriptions are remembered, so that
// late fragments are not taken for new ones, for twice the deadline and at
// most MaxTrackedDone of them, the oldest forgotten first.
type FrameTracker struct {
	deadline time.Duration
	lat      *LatencyWindow

	mu      sync.Mutex
	pending map[fragKey]*tracked
	order   list.List // of *tracked, oldest first
	words   int       // bitmap words held by pending
	// done maps a finished description to its element in doneOrder (a
	// finishedAt), oldest first.
	done      map[fragKey]*list.Element
	doneOrder list.List
	complete  uint64
	expired   uint64
	evicted   uint64
	lastSweep time.Time
}

// Bounds of a FrameTracker. Normal streams stay far below them: a node's
// tracker follows one track, and a receiving bot's follows every track it
// receives, each one description of some 30 frames a second that
// completes within tens of milliseconds, or is given up at the deadline
// (500 ms by default). 64 tracks whose every frame stays incomplete until
// the deadline hold about 1,000 pending descriptions and, at 30 frames a
// second, remember about 2,000 finished ones (twice the deadline). A
// 100,000-point frame, even unencoded (15 bytes a point), is some 1,300
// fragments of 1,200 bytes: a 168-byte bitmap, against the 256 KiB for
// all pending descriptions together (2 million fragments, about 2.4 GB of
// announced data). At the bounds a tracker holds about 2.5 MiB, whatever
// a sender does.
const (
	// MaxTrackedPending is the most incomplete descriptions a
	// FrameTracker follows at once.
	MaxTrackedPending = 4096
	// MaxTrackedPendingBytes bounds the fragment bitmaps of the incomplete
	// descriptions a FrameTracker follows, together.
	MaxTrackedPendingBytes = 256 << 10
	// MaxTrackedDone is the most finished descriptions a FrameTracker
	// remembers.
	MaxTrackedDone = 8192
)

const maxTrackedWords = MaxTrackedPendingBytes / 8

type tracked struct {
	key   fragKey
	count uint16 // fragments, as the first fragment announced
	have  int
	seen  []uint64 // bit per fragment
	first time.Time
	elem  *list.Element // in FrameTracker.order
}

type finishedAt struct {
	key fragKey
	at  int64 // unix ns
}

// NewFrameTracker gives each description deadline from its first fragment
// to complete, and keeps latency quantiles over the last window
// completions.
func NewFrameTracker(deadline time.Duration, window int) *FrameTracker {
	return &FrameTracker{deadline: deadline, lat: NewLatencyWindow(window), pending: map[fragKey]*tracked{}, done: map[fragKey]*list.Element{}}
}

// Observe accounts one RTP payload received at now. Payloads that are not
// fragments are ignored; duplicates (retransmissions) count once. When the
// payload completes a description, Observe returns its header and latency
// (capture to now) and true.
func (t *FrameTracker) Observe(now time.Time, payload []byte) (Header, time.Duration, bool) {
	h, _, err := ParseHeader(payload)
	if err != nil {
		return Header{}, 0, false
	}
	k := fragKey{h.Client, h.Frame, h.Description}
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.lastSweep) > t.deadline/4 {
		t.sweep(now)
	}
	if _, ok := t.done[k]; ok {
		return Header{}, 0, false
	}
	p := t.pending[k]
	if p == nil {
		n := (int(h.Count) + 63) / 64
		for len(t.pending) >= MaxTrackedPending || t.words+n > maxTrackedWords {
			t.evictOldest(now)
		}
		p = &tracked{key: k, count: h.Count, seen: make([]uint64, n), first: now}
		p.elem = t.order.PushBack(p)
		t.pending[k] = p
		t.words += n
	}
	// A fragment whose count differs from the first one's is ignored, as
	// the Reassembler ignores it: the description completes when the
	// fragments of its first count have all arrived. (Counting the bits
	// set, which fragments of another count had set too, took fragments
	// 0 and 12336 for the two of "fragment 0 of 2".)
	if h.Count != p.count {
		return Header{}, 0, false
	}
	w, b := int(h.Fragment)/64, uint64(1)<<(h.Fragment%64)
	if p.seen[w]&b != 0 {
		return Header{}, 0, false
	}
	p.seen[w] |= b
	p.have++
	if p.have < int(p.count) {
		return Header{}, 0, false
	}
	t.finish(p, now)
	t.complete++
	// A capture time in the future or more than MaxLatency back is on
	// another clock, or none (the sender's field): the description counts
	// as complete, but its latency would only corrupt the quantiles and
	// overflow the sum.
	lat := now.Sub(time.UnixMicro(int64(h.CaptureUs)))
	if lat >= 0 && lat <= MaxLatency {
		t.lat.Add(lat)
	}
	return h, lat, true
}

// finish moves p from pending to done at now; t.mu must be held.
func (t *FrameTracker) finish(p *tracked, now time.Time) {
	delete(t.pending, p.key)
	t.order.Remove(p.elem)
	t.words -= len(p.seen)
	if len(t.done) >= MaxTrackedDone {
		oldest := t.doneOrder.Front()
		delete(t.done, oldest.Value.(finishedAt).key)
		t.doneOrder.Remove(oldest)
	}
	t.done[p.key] = t.doneOrder.PushBack(finishedAt{p.key, now.UnixNano()})
}

// evictOldest gives up the pending description that started first (the
// first observed, as callers may pass slightly unordered times); t.mu must
// be held and something must be pending.
func (t *FrameTracker) evictOldest(now time.Time) {
	t.finish(t.order.Front().Value.(*tracked), now)
	t.expired++
	t.evicted++
}

// sweep expires overdue descriptions; t.mu must be held.
func (t *FrameTracker) sweep(now time.Time) {
	t.lastSweep = now
	for _, p := range t.pending {
		if now.Sub(p.first) > t.deadline {
			t.finish(p, now)
			t.expired++
		}
	}
	for k, e := range t.done {
		if now.Sub(time.Unix(0, e.Value.(finishedAt).at)) > 2*t.deadline {
			delete(t.done, k)
			t.doneOrder.Remove(e)
		}
	}
}

// Pending is the number of incomplete descriptions followed.
func (t *FrameTracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// Stats expires what is overdue at now and returns the counters and
// latency quantiles.
func (t *FrameTracker) Stats(now time.Time) FrameStats {
	t.mu.Lock()
	t.sweep(now)
	s := FrameStats{Complete: t.complete, Expired: t.expired, Evicted: t.evicted}
	t.mu.Unlock()
	q, sum, n := t.lat.Quantiles(0.5, 0.9, 0.99)
	s.P50, s.P90, s.P99, s.Sum, s.N = q[0], q[1], q[2], sum, n
	return s
}
