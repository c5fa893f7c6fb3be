package allocator

import (
	"fmt"
	"testing"
	"time"
)

// TestProber: the probing state machine, step by step (times in seconds
// after the first step; the default timing: a first probe 2 s after a
// pause, a quiet estimate for 2 s, a window of 30 s, waits doubled from 2
// s up to 30 s).
func TestProber(t *testing.T) {
	type step struct {
		at      float64
		in      ProbeInput
		want    ProbeEvent
		probing string
	}
	paused := func(est float64) ProbeInput { return ProbeInput{Estimate: est, Paused: "v"} }
	probing := func(est float64, fits, congested bool) ProbeInput {
		return ProbeInput{Estimate: est, Fits: fits, Congested: congested}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"nothing paused, no probe", []step{
			{0, ProbeInput{Estimate: 1000}, ProbeNone, ""},
			{10, ProbeInput{Estimate: 1000}, ProbeNone, ""},
		}},
		{"a probe after the wait is kept once the estimate covers it", []step{
			{0, paused(1000), ProbeNone, ""},
			{1.9, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{2.5, probing(1050, false, false), ProbeNone, "v"},
			{9, probing(1500, true, false), ProbeKept, ""},
		}},
		{"a kept floor paused again within 10 s fails, and the wait doubles", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{3, probing(1500, true, false), ProbeKept, ""},
			{4, ProbeInput{Estimate: 1500}, ProbeNone, ""},
			{5, paused(1200), ProbeFailed, ""}, // wait 4
			{8.9, paused(1200), ProbeNone, ""},
			{9, paused(1200), ProbeStarted, "v"},
			{10, probing(1500, true, false), ProbeKept, ""},
			{11, paused(1200), ProbeFailed, ""}, // wait 8
			{18.9, paused(1200), ProbeNone, ""},
			{19, paused(1200), ProbeStarted, "v"},
		}},
		{"a kept floor paused again while another stays paused fails", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{3, probing(1500, true, false), ProbeKept, ""},
			{4, ProbeInput{Estimate: 1500, Paused: "w"}, ProbeNone, ""},
			{5, ProbeInput{Estimate: 1500, Paused: "w"}, ProbeStarted, "w"},
			{5.5, probing(1400, false, true), ProbeFailed, ""}, // wait 4
			{6, paused(1200), ProbeFailed, ""},                 // wait 8
			{13.9, paused(1200), ProbeNone, ""},
			{14, paused(1200), ProbeStarted, "v"},
		}},
		{"a pause 10 s after a kept probe is no failure", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{3, probing(1500, true, false), ProbeKept, ""},
			{4, ProbeInput{Estimate: 1500}, ProbeNone, ""},
			{13, paused(1500), ProbeNone, ""},
			{14.9, paused(1500), ProbeNone, ""},
			{15, paused(1500), ProbeStarted, "v"},
		}},
		{"a congested probe fails, and the next waits twice as long", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{2.5, probing(1000, false, true), ProbeFailed, ""},
			{6.4, paused(1000), ProbeNone, ""},
			{6.5, paused(1000), ProbeStarted, "v"},
			{7, probing(1000, false, true), ProbeFailed, ""},
			{14.9, paused(1000), ProbeNone, ""},
			{15, paused(1000), ProbeStarted, "v"},
		}},
		{"a probe whose estimate falls fails", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{2.5, probing(900, false, false), ProbeNone, "v"},
			{3, probing(700, false, false), ProbeFailed, ""},
		}},
		{"a probe fails at the end of its window", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{31.9, probing(1000, false, false), ProbeNone, "v"},
			{32, probing(1000, false, false), ProbeFailed, ""},
		}},
		{"no probe until the estimate has not fallen for 2 s", []step{
			{0, paused(1000), ProbeNone, ""},
			{1, paused(950), ProbeNone, ""}, // not a fall
			{1.5, paused(800), ProbeNone, ""},
			{3.4, paused(800), ProbeNone, ""},
			{3.5, paused(800), ProbeStarted, "v"},
		}},
		{"no probe while the path is congested", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, ProbeInput{Estimate: 1000, Paused: "v", Congested: true}, ProbeNone, ""},
			{2.1, paused(1000), ProbeStarted, "v"},
		}},
		{"the wait is capped at 30 s", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{2, probing(1000, false, true), ProbeFailed, ""}, // wait 4
			{6, paused(1000), ProbeStarted, "v"},
			{6, probing(1000, false, true), ProbeFailed, ""}, // 8
			{14, paused(1000), ProbeStarted, "v"},
			{14, probing(1000, false, true), ProbeFailed, ""}, // 16
			{30, paused(1000), ProbeStarted, "v"},
			{30, probing(1000, false, true), ProbeFailed, ""}, // 30, not 32
			{59.9, paused(1000), ProbeNone, ""},
			{60, paused(1000), ProbeStarted, "v"},
		}},
		{"a pause after nothing was paused for 30 s waits the first wait again", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{2, probing(1000, false, true), ProbeFailed, ""}, // wait 4
			{3, ProbeInput{Estimate: 1000}, ProbeNone, ""},
			{33, ProbeInput{Estimate: 1000}, ProbeNone, ""},
			{40, paused(1000), ProbeNone, ""},
			{41.9, paused(1000), ProbeNone, ""},
			{42, paused(1000), ProbeStarted, "v"},
		}},
		{"a pause after nothing was paused for less than 30 s keeps the wait", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{2, probing(1000, false, true), ProbeFailed, ""}, // wait 4
			{3, ProbeInput{Estimate: 1000}, ProbeNone, ""},
			{20, ProbeInput{Estimate: 1000}, ProbeNone, ""},
			{32.9, ProbeInput{Estimate: 1000}, ProbeNone, ""},
			{33, paused(1000), ProbeNone, ""},
			{36.9, paused(1000), ProbeNone, ""},
			{37, paused(1000), ProbeStarted, "v"},
		}},
		{"the share as the limit holds the probe and keeps the wait", []step{
			{0, paused(1000), ProbeNone, ""},
			{2, paused(1000), ProbeStarted, "v"},
			{2, probing(1000, false, true), ProbeFailed, ""}, // wait 4
			{3, ProbeInput{Estimate: 1000, Paused: "v", Congested: true}, ProbeNone, ""},
			{6, ProbeInput{Estimate: 1000, Paused: "v", Congested: true}, ProbeNone, ""},
			{6.1, paused(1000), ProbeStarted, "v"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewProber(ProbeConfig{})
			t0 := time.Unix(1000, 0)
			for i, s := range tc.steps {
				now := t0.Add(time.Duration(s.at * float64(time.Second)))
				if got := p.Step(now, s.in); got != s.want || p.Probing() != s.probing {
					t.Fatalf("step %d (at %v s, %+v): %v probing %q, want %v probing %q", i, s.at, s.in, got, p.Probing(), s.want, s.probing)
				}
			}
		})
	}
}

// TestAllocateProbe: a probe forwards its floor above the budget, without
// taking anything from the others; once forwarded, the floor stays with
// no headroom when the budget covers it, and a probe that fits is said to.
func TestAllocateProbe(t *testing.T) {
	room := []Demand{audio("a", 1, 40), video("v-near", 0.9, 300), video("v-far", 0.5, 200), mdc("pc", 0.5, 1000)}
	for _, mode := range []Mode{Layers, TrackSelection} {
		a := New(mode)
		dec, used := a.Allocate(200, room)
		id, r := a.CheapestPaused(room, dec)
		if id != "v-far" || r != 200 {
			t.Fatalf("%v: cheapest paused %q (%v), want v-far (200); decision %v used %v", mode, id, r, dec, used)
		}
		dec2, used2, fits := a.AllocateProbe(200, room, id)
		if fits || dec2[id] == 0 || used2 != used+r {
			t.Fatalf("%v: probe of %s: fits %v, decision %v, used %v; want it forwarded above the budget, used %v + its floor", mode, id, fits, dec2, used2, used)
		}
		for k, v := range dec {
			if dec2[k] != v {
				t.Errorf("%v: the probe changed %s from %v to %v", mode, k, v, dec2[k])
			}
		}
		// the budget now covers it exactly: it stays without headroom,
		// but the probe is kept only with ResumeMargin to spare (else the
		// next dip pauses it again)
		need := used2
		dec3, _, fits := a.AllocateProbe(need, room, id)
		if fits || dec3[id] == 0 {
			t.Errorf("%v: at a budget of %v the probed %s fits %v, decision %v; want it forwarded, not yet kept", mode, need, id, fits, dec3)
		}
		if _, _, fits := a.AllocateProbe(need, room, "gone"); !fits {
			t.Errorf("%v: a probe of a demand that left does not fit", mode)
		}
	}
}

// TestProbeKeptWithMargin: a probed floor is kept (fits) only once the
// floors forwarded with it fit in budget ÷ (1+ResumeMargin), the headroom
// a paused floor needs to resume: kept with less, one dip of the estimate
// paused it again, and the next probe 2 s later was kept again (a
// browser's tile blinked).
func TestProbeKeptWithMargin(t *testing.T) {
	room := []Demand{audio("a", 1, 40), video("v", 0.9, 200)}
	tests := []struct {
		budget          float64
		fits, forwarded bool
	}{
		{100, false, true}, // above the budget: the probe forwards it
		{240, false, true}, // covered exactly: no headroom
		{287, false, true}, // just under 240 × 1.2
		{288, true, true},  // 240 × 1.2
		{1000, true, true},
	}
	for _, mode := range []Mode{Layers, TrackSelection} {
		for _, tc := range tests {
			a := New(mode)
			if dec, _ := a.Allocate(100, room); dec["v"] != 0 {
				t.Fatalf("%v: v forwarded at 100: %v", mode, dec)
			}
			dec, _, fits := a.AllocateProbe(100, room, "v") // the probe starts
			dec, _, fits = a.AllocateProbe(tc.budget, room, "v")
			if fits != tc.fits || (dec["v"] != 0) != tc.forwarded {
				t.Errorf("%v at %v: fits %v, decision %v; want fits %v, v forwarded %v", mode, tc.budget, fits, dec, tc.fits, tc.forwarded)
			}
		}
	}
}

// TestPausedAudioFirst: with two microphones and a video at a budget that
// fits one microphone, the video is neither placed after the microphone
// that does not fit (it is cheaper) nor probed while that microphone is
// paused: the probe forwards the microphone.
func TestPausedAudioFirst(t *testing.T) {
	room := []Demand{audio("mic-1", 0.9, 40), audio("mic-2", 0.5, 40), video("v", 1, 30)}
	tests := []struct {
		name   string
		probe  string
		want   Decision
		fits   bool
		paused string // CheapestPaused of the plain allocation
	}{
		{"no probe", "", Decision{"mic-1": 1}, true, "mic-2"},
		{"probe of the paused microphone", "mic-2", Decision{"mic-1": 1, "mic-2": 1}, false, "mic-2"},
		{"no video probe while a microphone is paused", "v", Decision{"mic-1": 1}, false, "mic-2"},
	}
	for _, mode := range []Mode{Layers, TrackSelection} {
		for _, tc := range tests {
			a := New(mode)
			dec, used := a.Allocate(75, room)
			if fmt.Sprint(dec) != fmt.Sprint(Decision{"mic-1": 1}) || used != 40 {
				t.Fatalf("%v: allocation at 75: %v (%v), want only mic-1", mode, dec, used)
			}
			if id, _ := a.CheapestPaused(room, dec); id != tc.paused {
				t.Errorf("%v: cheapest paused %q, want %q", mode, id, tc.paused)
			}
			dec, _, fits := a.AllocateProbe(75, room, tc.probe)
			if fmt.Sprint(dec) != fmt.Sprint(tc.want) || fits != tc.fits {
				t.Errorf("%v, %s: decision %v fits %v, want %v fits %v", mode, tc.name, dec, fits, tc.want, tc.fits)
			}
		}
	}
}
