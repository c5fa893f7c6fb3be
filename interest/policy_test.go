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
