package volumetric

import (
	"math/bits"
	"slices"
	"sync"
	"time"
)

// FrameStats summarises frame delivery: descriptions completed or given up,
// and the latency from capture to the last fragment of completed ones.
type FrameStats struct {
	Complete uint64 `json:"complete"`
	Expired  uint64 `json:"expired"`
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
type FrameTracker struct {
	deadline time.Duration
	lat      *LatencyWindow

	mu        sync.Mutex
	pending   map[fragKey]*tracked
	done      map[fragKey]time.Time
	complete  uint64
	expired   uint64
	lastSweep time.Time
}

type tracked struct {
	have  int
	seen  []uint64 // bit per fragment
	first time.Time
}

// NewFrameTracker gives each description deadline from its first fragment
// to complete, and keeps latency quantiles over the last window
// completions.
func NewFrameTracker(deadline time.Duration, window int) *FrameTracker {
	return &FrameTracker{deadline: deadline, lat: NewLatencyWindow(window), pending: map[fragKey]*tracked{}, done: map[fragKey]time.Time{}}
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
		p = &tracked{seen: make([]uint64, (int(h.Count)+63)/64), first: now}
		t.pending[k] = p
	}
	w, b := int(h.Fragment)/64, uint64(1)<<(h.Fragment%64)
	if w >= len(p.seen) || p.seen[w]&b != 0 {
		return Header{}, 0, false
	}
	p.seen[w] |= b
	p.have++
	if p.have < int(h.Count) {
		return Header{}, 0, false
	}
	// Complete only if every bit in range is set (a count that changed
	// between fragments never completes and expires instead).
	ones := 0
	for _, x := range p.seen {
		ones += bits.OnesCount64(x)
	}
	if ones != int(h.Count) {
		return Header{}, 0, false
	}
	delete(t.pending, k)
	t.done[k] = now
	t.complete++
	lat := now.Sub(time.UnixMicro(int64(h.CaptureUs)))
	t.lat.Add(lat)
	return h, lat, true
}

// sweep expires overdue descriptions; t.mu must be held.
func (t *FrameTracker) sweep(now time.Time) {
	t.lastSweep = now
	for k, p := range t.pending {
		if now.Sub(p.first) > t.deadline {
			delete(t.pending, k)
			t.done[k] = now
			t.expired++
		}
	}
	for k, at := range t.done {
		if now.Sub(at) > 2*t.deadline {
			delete(t.done, k)
		}
	}
}

// Stats expires what is overdue at now and returns the counters and
// latency quantiles.
func (t *FrameTracker) Stats(now time.Time) FrameStats {
	t.mu.Lock()
	t.sweep(now)
	s := FrameStats{Complete: t.complete, Expired: t.expired}
	t.mu.Unlock()
	q, sum, n := t.lat.Quantiles(0.5, 0.9, 0.99)
	s.P50, s.P90, s.P99, s.Sum, s.N = q[0], q[1], q[2], sum, n
	return s
}
