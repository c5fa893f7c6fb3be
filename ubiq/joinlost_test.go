package ubiq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestJoinAnsweredWhenItsKeyIsNotSeen: a Join whose member key landed
// always gets an answer, though its room never sees the key: the key was
// swept (another node took this one for dead) before the room attached
// the joiner, or the room's watch of the store is down. The joiner is
// disconnected, as a member whose key is swept is, and its claim on the
// room is counted out; the room's other member stays. The test fails if
// the joiner waits for good: no SetRoom, no Rejected, no disconnect, and
// its claim holding the room's join code.
func TestJoinAnsweredWhenItsKeyIsNotSeen(t *testing.T) {
	// sweep returns a hook (putOwned's afterPut) that deletes q's member
	// key in room id once written, as another node's sweep of this one
	// does, then calls then.
	sweep := func(t *testing.T, ctx context.Context, ts *testServer, id string, q *peer, then func(key string)) func(string) error {
		sweeper := &store{kv: ts.s.kv, node: "sweeper"}
		return func(key string) error {
			if key != memberKey(id, q.uuid) {
				return nil
			}
			if err := sweeper.sweepKey(ctx, ts.s.node, key); err != nil {
				t.Error(err)
				return nil
			}
			then(key)
			return nil
		}
	}
	// holdWatch ends room id's watch of its keys and holds its new watch
	// until release is called.
	holdWatch := func(t *testing.T, ctx context.Context, ts *testServer, id string) (release func()) {
		entered, hold := make(chan struct{}, 1), make(chan struct{})
		ts.s.beforeRewatch = func(string) { entered <- struct{}{}; <-hold }
		var once sync.Once
		release = func() { once.Do(func() { close(hold) }) }
		t.Cleanup(release) // before the server's shutdown
		r := roomOf(ts, id)
		r.do(func() { r.watcher.Stop() })
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the room did not watch again after its watch ended")
		}
		return release
	}
	tests := []struct {
		name string
		// wait is the server's attachWait: an hour where the room is to
		// see the key's deletion.
		wait time.Duration
		// before runs before q joins room id; it returns the hook for
		// q's member key (putOwned's afterPut), if any.
		before func(t *testing.T, ctx context.Context, ts *testServer, id string, q *peer) func(key string) error
	}{
		{
			name: "key swept, seen by the room before the Join hands it the joiner",
			wait: time.Hour,
			before: func(t *testing.T, ctx context.Context, ts *testServer, id string, q *peer) func(string) error {
				return sweep(t, ctx, ts, id, q, func(key string) {
					h, err := ts.s.kv.History(ctx, key)
					if err != nil || len(h) == 0 || h[len(h)-1].Operation() == jetstream.KeyValuePut {
						t.Errorf("member key %s after the sweep: history %v, %v; want its deletion last", key, h, err)
						return
					}
					gone, r := h[len(h)-1].Revision(), roomOf(ts, id)
					eventually(t, "the room to see the member key's deletion", func() bool {
						var seen bool
						r.do(func() { seen = r.rev >= gone })
						return seen
					})
				})
			},
		},
		{
			name: "key swept while the room's watch was down",
			wait: time.Hour,
			before: func(t *testing.T, ctx context.Context, ts *testServer, id string, q *peer) func(string) error {
				release := holdWatch(t, ctx, ts, id)
				// The new watch shows the deletion, before or after the
				// Join hands the room the joiner.
				return sweep(t, ctx, ts, id, q, func(string) { release() })
			},
		},
		{
			name: "the room's watch down",
			wait: 500 * time.Millisecond,
			before: func(t *testing.T, ctx context.Context, ts *testServer, id string, q *peer) func(string) error {
				holdWatch(t, ctx, ts, id)
				return nil
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A peer silent for PeerTimeout is disconnected: not during the test.
			ts := startServer(t, nil, func(c *Config) { c.PeerTimeout = time.Hour })
			ts.s.attachWait = tc.wait
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id := newUUID()
			p, q := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
			p.join(JoinArgs{UUID: id})
			if hook := tc.before(t, ctx, ts, id, q); hook != nil {
				ts.s.store.afterPut.Store(&hook)
				t.Cleanup(func() { ts.s.store.afterPut.Store(nil) })
			}
			q.request("Join", JoinArgs{UUID: id, Peer: q.info(nil, nil)})
			select {
			case <-q.c.Done():
			case m := <-q.in:
				t.Fatalf("q got %s %s, want to be disconnected", m.typ, m.args)
			case <-ctx.Done():
				t.Fatal("a joiner whose member key its room never saw got no answer")
			}
			for len(q.in) > 0 {
				if m := <-q.in; m.typ != "" {
					t.Fatalf("q got %s %s, want to be disconnected", m.typ, m.args)
				}
			}
			node := ts.s.node
			eventually(t, "q's claim counted out, p's kept", func() bool {
				r, _, err := ts.s.store.getRoom(ctx, id)
				return err == nil && len(r.Joined[node]) == 1
			})
			if _, err := ts.s.kv.Get(ctx, memberKey(id, q.uuid)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("q's member key: %v, want it deleted", err)
			}
			p.barrier() // p stays
		})
	}
}
