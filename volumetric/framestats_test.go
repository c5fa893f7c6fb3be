package volumetric

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestFrameTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	capture := uint64(t0.UnixMicro())
	header := func(h Header) []byte {
		p := make([]byte, HeaderSize)
		h.Marshal(p)
		return p
	}
	frags := func(frame uint32) [][]byte {
		p, err := Packetize(Header{Client: 1, Frame: frame, CaptureUs: capture}, make([]byte, 2500), 1000)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name         string
		feed         func(tr *FrameTracker)
		complete     uint64
		expired      uint64
		wantP50, p99 time.Duration
	}{
		{"in order", func(tr *FrameTracker) {
			for i, f := range frags(1) {
				tr.Observe(t0.Add(time.Duration(10*(i+1))*time.Millisecond), f)
			}
		}, 1, 0, 30 * time.Millisecond, 30 * time.Millisecond},
		{"reordered with duplicate", func(tr *FrameTracker) {
			f := frags(2)
			tr.Observe(t0.Add(5*time.Millisecond), f[2])
			tr.Observe(t0.Add(6*time.Millisecond), f[2])
			tr.Observe(t0.Add(7*time.Millisecond), f[0])
			tr.Observe(t0.Add(8*time.Millisecond), f[1])
		}, 1, 0, 8 * time.Millisecond, 8 * time.Millisecond},
		{"missing fragment expires", func(tr *FrameTracker) {
			f := frags(3)
			tr.Observe(t0, f[0])
			tr.Observe(t0, f[1])
		}, 0, 1, 0, 0},
		{"not a fragment", func(tr *FrameTracker) { tr.Observe(t0, []byte{9, 9}) }, 0, 0, 0, 0},
		// FuzzFrameTracker: fragment 12336 of 12592, then fragment 0 of 2
		// of the same description completed it as the two of 2.
		{"count changed between fragments", func(tr *FrameTracker) {
			tr.Observe(t0, header(Header{Client: 1, Frame: 3, Fragment: 12336, Count: 12592, CaptureUs: capture}))
			tr.Observe(t0, header(Header{Client: 1, Frame: 3, Fragment: 0, Count: 2, CaptureUs: capture}))
		}, 0, 1, 0, 0},
		{"fragment of another count ignored", func(tr *FrameTracker) {
			f := frags(4)
			tr.Observe(t0.Add(1*time.Millisecond), f[0])
			tr.Observe(t0.Add(2*time.Millisecond), header(Header{Client: 1, Frame: 4, Fragment: 1, Count: 2, CaptureUs: capture}))
			tr.Observe(t0.Add(3*time.Millisecond), f[1])
			tr.Observe(t0.Add(4*time.Millisecond), f[2])
		}, 1, 0, 4 * time.Millisecond, 4 * time.Millisecond},
		// A sender's capture time of 0 (or of another clock) completes
		// descriptions without a latency: six of them overflowed the sum.
		{"capture time not on this clock", func(tr *FrameTracker) {
			for frame, capUs := range []uint64{0, 0, 0, 0, 0, 0, capture + 10e6} {
				tr.Observe(t0, header(Header{Client: 2, Frame: uint32(frame), Fragment: 0, Count: 1, CaptureUs: capUs}))
			}
			tr.Observe(t0.Add(time.Millisecond), header(Header{Client: 2, Frame: 9, Fragment: 0, Count: 1, CaptureUs: capture}))
		}, 8, 0, time.Millisecond, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewFrameTracker(100*time.Millisecond, 16)
			tc.feed(tr)
			s := tr.Stats(t0.Add(time.Second))
			if s.Sum < 0 {
				t.Fatalf("latency sum %v", s.Sum)
			}
			if s.Complete != tc.complete || s.Expired != tc.expired || s.P50 != tc.wantP50 || s.P99 != tc.p99 {
				t.Fatalf("stats %+v, want complete %d expired %d p50 %v p99 %v", s, tc.complete, tc.expired, tc.wantP50, tc.p99)
			}
		})
	}
}

func TestLatencyWindowQuantiles(t *testing.T) {
	w := NewLatencyWindow(100)
	for i := 200; i >= 1; i-- { // only the last 100 added (100..1 ms) are kept
		w.Add(time.Duration(i) * time.Millisecond)
	}
	q, sum, n := w.Quantiles(0.5, 0.9, 0.99, 1)
	want := []time.Duration{50 * time.Millisecond, 90 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond}
	for i := range want {
		if q[i] != want[i] {
			t.Errorf("quantile %d = %v, want %v", i, q[i], want[i])
		}
	}
	if n != 200 || sum != 20100*time.Millisecond {
		t.Errorf("n %d sum %v", n, sum)
	}
	if (FrameStats{}).CompletionRatio() != 1 || (FrameStats{Complete: 3, Expired: 1}).CompletionRatio() != 0.75 {
		t.Error("completion ratio")
	}
}

// checkBounds fails if tr holds more than its bounds allow or if its
// bookkeeping (bitmap words, eviction order) disagrees with what it holds.
func checkBounds(t *testing.T, tr *FrameTracker) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	words := 0
	for _, p := range tr.pending {
		words += len(p.seen)
	}
	switch {
	case len(tr.pending) > MaxTrackedPending:
		t.Fatalf("%d descriptions pending, bound %d", len(tr.pending), MaxTrackedPending)
	case words*8 > MaxTrackedPendingBytes:
		t.Fatalf("%d bytes of bitmaps pending, bound %d", words*8, MaxTrackedPendingBytes)
	case words != tr.words:
		t.Fatalf("%d bitmap words pending, %d counted", words, tr.words)
	case tr.order.Len() != len(tr.pending):
		t.Fatalf("%d pending in the eviction order, %d in the map", tr.order.Len(), len(tr.pending))
	case len(tr.done) > MaxTrackedDone:
		t.Fatalf("%d finished descriptions remembered, bound %d", len(tr.done), MaxTrackedDone)
	case tr.doneOrder.Len() != len(tr.done):
		t.Fatalf("%d finished in the eviction order, %d in the map", tr.doneOrder.Len(), len(tr.done))
	}
}

// A hostile sender's stream of headers keeps a FrameTracker within its
// bounds, the descriptions it pushes out count as evicted, and a normal
// frame sent afterwards still completes.
func TestFrameTrackerBoundsHostileStreams(t *testing.T) {
	header := func(h Header) []byte {
		p := make([]byte, HeaderSize)
		h.Marshal(p)
		return p
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name    string
		n       int
		packet  func(i int) []byte
		pending int    // pending at the end
		evicted uint64 // evicted at the end
	}{
		// a 22-byte header announcing 65535 fragments asks for an 8 KiB
		// bitmap: the byte bound keeps 32 of them
		{"largest fragment counts", 10_000, func(i int) []byte {
			return header(Header{Client: 9, Frame: uint32(i), Count: 65535})
		}, MaxTrackedPendingBytes / 8192, 10_000 - MaxTrackedPendingBytes/8192},
		{"small descriptions never finished", 3 * MaxTrackedPending, func(i int) []byte {
			return header(Header{Client: 9, Frame: uint32(i), Count: 2})
		}, MaxTrackedPending, 2 * MaxTrackedPending},
		{"every description and client new", 3 * MaxTrackedPending, func(i int) []byte {
			return header(Header{Client: uint32(i), Frame: 7, Description: uint8(i), Fragment: 1, Count: 3})
		}, MaxTrackedPending, 2 * MaxTrackedPending},
		{"descriptions complete at once", 4 * MaxTrackedDone, func(i int) []byte {
			return header(Header{Client: 9, Frame: uint32(i), Count: 1})
		}, 0, 0},
		{"random headers", 50_000, func(int) []byte {
			return header(Header{Client: rng.Uint32N(4), Frame: rng.Uint32(), Description: uint8(rng.UintN(3)),
				Count: uint16(rng.UintN(65535)) + 1})
		}, -1, 0},
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewFrameTracker(time.Hour, 16) // nothing expires: only the bounds free memory
			for i := range tc.n {
				tr.Observe(t0.Add(time.Duration(i)*time.Microsecond), tc.packet(i))
				if i%997 == 0 {
					checkBounds(t, tr)
				}
			}
			checkBounds(t, tr)
			s := tr.Stats(t0)
			if tc.pending >= 0 && (tr.Pending() != tc.pending || s.Evicted != tc.evicted) {
				t.Fatalf("%d pending, %d evicted; want %d and %d", tr.Pending(), s.Evicted, tc.pending, tc.evicted)
			}
			if s.Expired != s.Evicted {
				t.Fatalf("%d expired, %d evicted: before the deadline every drop is an eviction", s.Expired, s.Evicted)
			}
			// a normal frame: three descriptions of several fragments,
			// interleaved, complete
			var frags [][][]byte
			for d := range Descriptions {
				f, err := Packetize(Header{Client: 1, Frame: 1, Description: uint8(d), CaptureUs: uint64(t0.UnixMicro())}, make([]byte, 5000*(d+1)), 1200)
				if err != nil {
					t.Fatal(err)
				}
				frags = append(frags, f)
			}
			done := 0
			for i := 0; i < len(frags[Descriptions-1]); i++ {
				for d := range Descriptions {
					if i < len(frags[d]) {
						if _, _, ok := tr.Observe(t0.Add(time.Second), frags[d][i]); ok {
							done++
						}
					}
				}
			}
			if done != Descriptions {
				t.Fatalf("%d of the %d descriptions of a normal frame completed", done, Descriptions)
			}
		})
	}
}

// 63 tracks (21 clients × 3 descriptions) of 30 frames a second, each
// description of 2 to 140 fragments, with every fifth description missing
// a fragment until its deadline: nothing is evicted.
func TestFrameTrackerNormalStreamsNotEvicted(t *testing.T) {
	const deadline = 500 * time.Millisecond
	tr := NewFrameTracker(deadline, 1024)
	t0 := time.Unix(1000, 0)
	complete, incomplete := 0, 0
	for frame := range 90 { // 3 s
		at := t0.Add(time.Duration(frame) * time.Second / 30)
		for client := range 21 {
			for d := range Descriptions {
				size := 2000 + 80_000*d + 1000*client // 2 to 140 fragments
				frags, err := Packetize(Header{Client: uint32(client), Frame: uint32(frame), Description: uint8(d), CaptureUs: uint64(at.UnixMicro())}, make([]byte, size), 1200)
				if err != nil {
					t.Fatal(err)
				}
				lossy := (frame+client+d)%5 == 0
				for i, f := range frags {
					if lossy && i == len(frags)/2 {
						continue
					}
					tr.Observe(at.Add(time.Duration(i)*10*time.Microsecond), f)
				}
				if lossy {
					incomplete++
				} else {
					complete++
				}
			}
		}
		checkBounds(t, tr)
	}
	s := tr.Stats(t0.Add(10 * time.Second))
	if s.Evicted != 0 || s.Complete != uint64(complete) || s.Expired != uint64(incomplete) {
		t.Fatalf("stats %+v; want %d complete, %d expired, none evicted", s, complete, incomplete)
	}
}
