package allocator

import "testing"

// TestCarried: a demand the allocation forwarded but the caller could not
// carry out (no slot free for it) is paused: the next allocation brings it
// back only with headroom (ResumeMargin), CheapestPaused names it, and its
// rate is not in what Carried returns. It fails if such a demand counts as
// forwarded: it is then never probed, and its rate stays spent.
func TestCarried(t *testing.T) {
	demands := func() []Demand {
		return []Demand{
			{ID: "cam", Kind: Video, Interest: 1, Rates: []float64{400}},
			mdc("pc", 0.5, 100), // 15, 25, 60
		}
	}
	tests := []struct {
		name     string
		carried  Decision // of the first allocation's {cam, pc: all}
		wantUsed float64
		paused   string  // CheapestPaused of what was carried
		next     float64 // the next allocation's budget
		wantNext Decision
	}{
		// 450 fits cam and pc's base (415) but not with 20 % of headroom
		// (498): carried, cam keeps its place; not carried, it is paused
		{"all carried", Decision{"cam": 1, "pc": 0b111}, 500, "", 450, Decision{"cam": 1, "pc": 0b011}},
		{"cam had no slot", Decision{"pc": 0b111}, 100, "cam", 450, Decision{"pc": 0b111}},
		{"an upgrade had no slot", Decision{"cam": 1, "pc": 0b101}, 475, "", 450, Decision{"cam": 1, "pc": 0b011}},
		{"cam had no slot, room to resume", Decision{"pc": 0b111}, 100, "cam", 600, Decision{"cam": 1, "pc": 0b111}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Layers)
			ds := demands()
			dec, used := a.Allocate(1000, ds)
			if dec["cam"] != 1 || dec["pc"] != 0b111 || used != 500 {
				t.Fatalf("first allocation %v (%v bit/s), want cam and all of pc (500)", dec, used)
			}
			if got := a.Carried(ds, dec, tt.carried); got != tt.wantUsed {
				t.Errorf("Carried returned %v bit/s, want %v", got, tt.wantUsed)
			}
			// what was carried is what the prober is told was forwarded
			got := Decision{}
			for id, s := range dec {
				if c := s & tt.carried[id]; c != 0 {
					got[id] = c
				}
			}
			if id, _ := a.CheapestPaused(ds, got); id != tt.paused {
				t.Errorf("CheapestPaused %q, want %q", id, tt.paused)
			}
			next, _ := a.Allocate(tt.next, ds)
			if len(next) != len(tt.wantNext) {
				t.Fatalf("next allocation at %v: %v, want %v", tt.next, next, tt.wantNext)
			}
			for id, s := range tt.wantNext {
				if next[id] != s {
					t.Errorf("next allocation at %v: %v, want %v", tt.next, next, tt.wantNext)
				}
			}
		})
	}
}
