package bots

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// kickedTransport joins a bot at once, and its connection ends 50 ms
// later, as when another run's bot with the same client id takes it
// over, again and again. It records when each join came.
type kickedTransport struct {
	mu    sync.Mutex
	joins []time.Time
}

func (t *kickedTransport) Join(context.Context, Identity, Receiver, bool) (Link, error) {
	t.mu.Lock()
	t.joins = append(t.joins, time.Now())
	t.mu.Unlock()
	l := &endLink{err: errors.New("taken over"), done: make(chan struct{})}
	time.AfterFunc(50*time.Millisecond, func() { l.Close() })
	return l, nil
}

// A connection that ends soon after each join does not reset the wait
// before the next: the joins back off (0.5, 1, 2, 4 s, jittered down to
// half) as if they failed, so that two runs that share client ids do not
// take each other's over every 0.25-0.5 s for as long as they run. It
// fails if each join that succeeds resets the wait.
func TestRejoinBacksOffWhenConnectionsDoNotLast(t *testing.T) {
	tr := &kickedTransport{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := StartFleet(ctx, FleetConfig{Transport: tr, Users: 1, Behaviour: Spec{Name: "static"}, Reconnect: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	f.Close()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	// The first join and at most three more in 4 s (waits of at least
	// 0.25, 0.5 and 1 s, then 2 s), against eight or more without backoff.
	if n := len(tr.joins); n < 3 || n > 5 {
		t.Fatalf("%d joins in 4 s of connections that last 50 ms, want 3-5 (backing off); at %v", n, tr.joins)
	}
	for i := 2; i < len(tr.joins); i++ {
		if gap, prev := tr.joins[i].Sub(tr.joins[i-1]), tr.joins[i-1].Sub(tr.joins[i-2]); gap < prev/2 {
			t.Errorf("join %d came %s after the one before, which came %s after its own: the wait was reset", i, gap, prev)
		}
	}
	if lost, rejoined := f.Lost(); lost < int64(len(tr.joins)-1) || rejoined != int64(len(tr.joins)-1) {
		t.Errorf("Lost() = %d, %d with %d joins", lost, rejoined, len(tr.joins))
	}
}
