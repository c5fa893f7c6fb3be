package sfu

import (
	"testing"
	"time"
)

// A source is budgeted at its smoothed rate, from its second window with
// packets on (the first holds part of a window's): one window in which the
// publisher stalled (a tenth of its rate came) or a keyframe doubled it
// moves the budget by a quarter of the difference, not all of it; a rate
// that stays moves it all the way; idle windows leave it.
func TestSourceBudgetRate(t *testing.T) {
	s := newSource(TrackInfo{Session: "s", Client: "c", Track: "cam", Kind: "video", Mime: "video/VP8"}, func() {})
	at := time.Unix(1000, 0)
	window := func(bits uint64) {
		s.bytes.Add(bits / 8)
		at = at.Add(100 * time.Millisecond)
		s.measure(at)
	}
	s.measure(at)
	window(10_000) // the first packets, late in the window
	if b := s.budget.Load(); b != 0 {
		t.Fatalf("budget %d after the first window with packets (a part of one), want 0 (not measured yet)", b)
	}
	for range 10 {
		window(50_000) // 500 kbit/s
	}
	if b := s.budget.Load(); b != 500_000 {
		t.Fatalf("budget %d after steady 500 kbit/s, want 500000", b)
	}
	window(5_000) // a stalled window: 50 kbit/s
	if b, r := s.budget.Load(), s.rate.Load(); r != 50_000 || b < 350_000 {
		t.Fatalf("after a stalled window (rate %d), budget %d, want it near 500 kbit/s (at least 350000)", r, b)
	}
	for range 20 {
		window(50_000)
	}
	window(100_000) // a keyframe: 1 Mbit/s
	if b := s.budget.Load(); b > 650_000 {
		t.Fatalf("after a keyframe's window, budget %d, want it near 500 kbit/s (at most 650000)", b)
	}
	for range 30 {
		window(200_000) // the publisher went up to 2 Mbit/s
	}
	if b := s.budget.Load(); b < 1_950_000 {
		t.Fatalf("after 3 s at 2 Mbit/s, budget %d, want about 2000000", b)
	}
	for range 5 {
		window(0) // idle (paused at the publisher, or no subscriber)
	}
	if b := s.budget.Load(); b < 1_950_000 {
		t.Fatalf("after idle windows, budget %d, want the last rate kept (about 2000000)", b)
	}
}

// A relayed source starts from the rate its origin announced: its first
// window here (a part of one) leaves that, and the next ones move it.
func TestRelayedSourceBudgetStartsAtOriginRate(t *testing.T) {
	s := newSource(TrackInfo{Session: "s", Client: "c", Track: "cam", Kind: "video", Mime: "video/VP8", Node: "far", Rate: 500_000}, func() {})
	if b := s.budget.Load(); b != 500_000 {
		t.Fatalf("budget %d before any packet, want the origin's 500000", b)
	}
	at := time.Unix(1000, 0)
	s.measure(at)
	s.bytes.Add(1_000 / 8) // the relay's first packets, at the window's end
	at = at.Add(100 * time.Millisecond)
	s.measure(at)
	if b := s.budget.Load(); b != 500_000 {
		t.Fatalf("budget %d after the first, partial window, want the origin's 500000", b)
	}
}
