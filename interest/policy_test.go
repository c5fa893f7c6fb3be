package interest

import (
	"sync"
	"testing"
	"time"
)

func TestPolicies(t *testing.T) {
	t0 := time.Unix(0, 0)
	tests := []struct {
		name string
		p    Policy
	}{
		{"knn", NewKNNPolicy(KNNConfig{K: 1, Hysteresis: -1})},
		{"grid", NewGridPolicy(Grid{Size: 10}, 1)},
	}
	for _, tt := range tests {
		p := tt.p
		if !p.Interested("a", "b") {
			t.Errorf("%s: an observer without a position must receive everyone", tt.name)
		}
		p.Set("a", Vec3{}, t0)
		p.Set("b", Vec3{X: 5}, t0)
		p.Set("far", Vec3{X: 500}, t0)
		p.Tick(t0)
		if !p.Interested("a", "b") || p.Interested("a", "far") {
			t.Errorf("%s: near/far wrong", tt.name)
		}
		p.Remove("b")
		p.Tick(t0.Add(time.Second))
		if p.Interested("a", "b") {
			t.Errorf("%s: removed peer still received", tt.name)
		}
		// Peers not updated for StaleAfter are forgotten.
		p.Set("a", Vec3{}, t0)
		p.Tick(t0.Add(StaleAfter + 2*time.Second))
		if !p.Interested("far", "a") {
			// far is stale: it has no position any more, so it receives all
			t.Errorf("%s: stale observer still filtered", tt.name)
		}
	}
}

func TestPolicyConcurrentUse(t *testing.T) {
	p := NewKNNPolicy(KNNConfig{K: 3})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := string(rune('a' + (i+w)%10))
				p.Set(id, Vec3{X: float64(i % 50)}, time.Now())
				p.Interested(id, "b")
			}
		}(w)
	}
	for i := 0; i < 50; i++ {
		p.Tick(time.Now())
	}
	close(stop)
	wg.Wait()
}

// TestPolicyPeersWithoutPosition: a peer with no position receives
// everyone, and as a sender ranks after every positioned peer: with kNN it
// is received while the observer has fewer than k positioned peers, with a
// grid not by positioned observers.
func TestPolicyPeersWithoutPosition(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(x float64) *Vec3 { return &Vec3{X: x} }
	knn := func(k int) func() Policy {
		return func() Policy { return NewKNNPolicy(KNNConfig{K: k, Hysteresis: -1}) }
	}
	grid := func() Policy { return NewGridPolicy(Grid{Size: 10}, 1) }
	type pair struct {
		observer, sender string
		want             bool
	}
	tests := []struct {
		name   string
		policy func() Policy
		pos    map[string]*Vec3 // nil: the peer never sent a position
		want   []pair
	}{
		{"knn, only a positioned", knn(5), map[string]*Vec3{"a": at(0), "b": nil},
			[]pair{{"a", "b", true}, {"b", "a", true}}},
		{"knn, nobody positioned", knn(5), map[string]*Vec3{"a": nil, "b": nil},
			[]pair{{"a", "b", true}, {"b", "a", true}}},
		{"knn, set with places free", knn(3), map[string]*Vec3{"a": at(0), "c": at(400), "b": nil, "d": nil},
			[]pair{{"a", "b", true}, {"a", "d", true}, {"a", "c", true}, {"c", "b", true}, {"b", "c", true}, {"d", "a", true}}},
		{"knn, full set", knn(1), map[string]*Vec3{"a": at(0), "c": at(1), "far": at(500), "b": nil},
			[]pair{{"a", "b", false}, {"a", "c", true}, {"a", "far", false}, {"b", "a", true}, {"b", "far", true}}},
		{"grid, only a positioned", grid, map[string]*Vec3{"a": at(0), "b": nil},
			[]pair{{"a", "b", false}, {"b", "a", true}}},
		{"grid, nobody positioned", grid, map[string]*Vec3{"a": nil, "b": nil},
			[]pair{{"a", "b", true}, {"b", "a", true}}},
		{"grid, near and far", grid, map[string]*Vec3{"a": at(0), "c": at(5), "far": at(500), "b": nil},
			[]pair{{"a", "b", false}, {"a", "c", true}, {"a", "far", false}, {"b", "a", true}, {"b", "far", true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy()
			for id, v := range tt.pos {
				if v != nil {
					p.Set(id, *v, t0)
				}
			}
			p.Tick(t0)
			for _, w := range tt.want {
				if got := p.Interested(w.observer, w.sender); got != w.want {
					t.Errorf("Interested(%s, %s) = %v, want %v", w.observer, w.sender, got, w.want)
				}
			}
		})
	}
}

// TestPolicyForgottenSenderRanksLast: a sender forgotten after StaleAfter
// has no position any more, and is treated as one that never had one.
func TestPolicyForgottenSenderRanksLast(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, tt := range []struct {
		name string
		p    Policy
		want bool
	}{
		{"knn", NewKNNPolicy(KNNConfig{K: 5, Hysteresis: -1}), true},
		{"grid", NewGridPolicy(Grid{Size: 10}, 1), false},
	} {
		tt.p.Set("a", Vec3{}, t0)
		tt.p.Set("b", Vec3{X: 1}, t0)
		tt.p.Tick(t0)
		if !tt.p.Interested("a", "b") {
			t.Fatalf("%s: a does not receive its neighbour b", tt.name)
		}
		later := t0.Add(StaleAfter + time.Second)
		tt.p.Set("a", Vec3{}, later)
		tt.p.Tick(later)
		if got := tt.p.Interested("a", "b"); got != tt.want {
			t.Errorf("%s: a receives b, forgotten: %v, want %v", tt.name, got, tt.want)
		}
		if !tt.p.Interested("b", "a") {
			t.Errorf("%s: forgotten b must receive everyone", tt.name)
		}
	}
}
