package ubiq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSweptNodeKeepsItsMembersClaims: another node takes this one for
// dead (it was cut off from the bus) and sweeps it: it deletes the keys
// the node listed, then counts all of the node's members out of their
// rooms, which frees the join code of a room left without claims. A
// member whose Join was under way (its member key written after the
// sweep deleted the node's keys, the room's record even removed
// meanwhile), or that joined after the sweep listed the keys, is present
// all the same: its room puts its claim back, and keeps its join code,
// which a joiner by code reaches; when the members leave, the room goes.
// The test fails if the room loses its code while it has a member (a
// joiner by code is told that no such room exists, and the code can go to
// another room). A member whose key the sweep deleted is disconnected, and
// its claim is not put back.
func TestSweptNodeKeepsItsMembersClaims(t *testing.T) {
	tests := []struct {
		name string
		// when: "under way" (the sweep runs between the index entry of
		// the member's key and the key), "listed" (between the deletion
		// of the keys and the count-out, the member joins), "before" (the
		// member joined before the sweep)
		when string
		// removed: the sweeper removes the room, empty as it sees it,
		// before the member's key lands
		removed bool
		kept    bool // the member's claim is kept
	}{
		{name: "join under way", when: "under way", kept: true},
		{name: "join under way, room removed meanwhile", when: "under way", removed: true, kept: true},
		{name: "joined after the sweep listed the keys", when: "listed", kept: true},
		{name: "member swept", when: "before", kept: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			node, id := ts.s.node, newUUID()
			sweeper := &store{kv: ts.s.kv, node: "sweeper"}
			var later []func(context.Context) error // the count-outs, when held back
			sweep := func(holdCountOut bool) {
				_, err := sweeper.sweepNode(ctx, node, func(ctx context.Context, what, room string, inOrder bool, do func(context.Context) error) {
					if holdCountOut && what == "count a dead node out" {
						later = append(later, do)
						return
					}
					if err := do(ctx); err != nil {
						t.Errorf("sweep: %s in room %s: %v", what, room, err)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			code := func() string {
				t.Helper()
				r, _, err := ts.s.store.getRoom(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				return r.JoinCode
			}

			q := dialPeer(t, ts.tcp)
			var want string // the room's join code before the sweep
			switch tc.when {
			case "under way":
				var swept atomic.Bool
				removed, wantc := make(chan struct{}), make(chan string, 1)
				var once sync.Once
				done := func() { once.Do(func() { close(removed) }) }
				t.Cleanup(done)
				hook := func(key string) {
					if r := roomOf(ts, id); r != nil && key == presenceKey(id, r.self) && swept.Load() {
						// Written again after the sweep: held until the
						// sweeper has looked at the room.
						<-removed
					}
					if key != memberKey(id, q.uuid) || !swept.CompareAndSwap(false, true) {
						return
					}
					wantc <- code()
					sweep(false)
					if tc.removed {
						if ok, err := sweeper.removeIfEmpty(ctx, id, func() bool { return false }); err != nil || !ok {
							t.Errorf("the sweeper's removal of room %s: removed %v, err %v; want it removed", id, ok, err)
						}
					}
					done()
				}
				ts.s.store.afterIndex.Store(&hook)
				t.Cleanup(func() { ts.s.store.afterIndex.Store(nil) })
				q.join(JoinArgs{UUID: id})
				want = <-wantc
			case "listed":
				// Another member of this node, whose key the sweep lists.
				if _, _, err := ts.s.store.claimRoom(ctx, id, "", "", newClaimID(), false); err != nil {
					t.Fatal(err)
				}
				if _, err := ts.s.store.putMember(ctx, id, &memberRecord{UUID: newUUID()}); err != nil {
					t.Fatal(err)
				}
				sweep(true)
				if want = q.join(JoinArgs{UUID: id}).JoinCode; want != code() {
					t.Fatalf("q was told join code %s, the room has %s", want, code())
				}
				for _, do := range later {
					if err := do(ctx); err != nil {
						t.Fatal(err)
					}
				}
			case "before":
				q.join(JoinArgs{UUID: id})
				sweep(false)
				select {
				case <-q.c.Done():
				case <-ctx.Done():
					t.Fatal("a member whose key was swept is still connected")
				}
			}

			if !tc.kept {
				eventually(t, "the room without members removed", func() bool {
					_, _, err := ts.s.store.getRoom(ctx, id)
					return errors.Is(err, jetstream.ErrKeyNotFound)
				})
				return
			}
			var r *roomRecord
			eventually(t, "q's claim, and the room's join code, kept", func() bool {
				var err error
				r, _, err = ts.s.store.getRoom(ctx, id)
				return err == nil && r.JoinCode != "" && len(r.Joined[node]) == 1
			})
			if r.JoinCode != want {
				t.Fatalf("room %s has join code %s, want the one it had, %s", id, r.JoinCode, want)
			}
			z := dialPeer(t, ts.tcp)
			if got := z.join(JoinArgs{JoinCode: want}).UUID; got != id {
				t.Fatalf("a join by code %s reached room %s, want %s", want, got, id)
			}
			q.c.Close()
			z.c.Close()
			eventually(t, "the room removed once its members left", func() bool {
				_, _, err := ts.s.store.getRoom(ctx, id)
				return errors.Is(err, jetstream.ErrKeyNotFound)
			})
		})
	}
}

// roomOf returns the room id active on ts (nil if none).
func roomOf(ts *testServer, id string) *room {
	ts.s.mu.Lock()
	defer ts.s.mu.Unlock()
	return ts.s.rooms[id]
}

// heldPurgeKV holds every purge of a join code key until release is
// closed, after telling purging.
type heldPurgeKV struct {
	jetstream.KeyValue
	purging chan<- struct{}
	release <-chan struct{}
}

func (kv heldPurgeKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if len(key) > 2 && key[:2] == "c." {
		kv.purging <- struct{}{}
		<-kv.release
	}
	return kv.KeyValue.Purge(ctx, key, opts...)
}

// TestSweptClaimTakesBackItsCode: the sweep's count-out frees the join
// code after it wrote the room's record without it; a room that puts its
// member's claim back in between takes the code back (writes its key
// again), and the count-out's freeing, conditional on the key's revision,
// leaves it alone. The test fails if the put-back finds the code still
// taken and gives the room another: its members, told the first, would
// share a code that no longer leads to their room.
func TestSweptClaimTakesBackItsCode(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, id := ts.s.node, newUUID()
	q := dialPeer(t, ts.tcp)
	want := q.join(JoinArgs{UUID: id}).JoinCode
	purging, release := make(chan struct{}, 1), make(chan struct{})
	sweeper := &store{kv: heldPurgeKV{KeyValue: ts.s.kv, purging: purging, release: release}, node: "sweeper"}
	countedOut := make(chan error, 1)
	go func() { countedOut <- sweeper.unclaimRoom(ctx, id, "", node, "") }()
	select {
	case <-purging: // the record is written without the claim; the code is not freed yet
	case <-ctx.Done():
		t.Fatal("the count-out did not free the code")
	}
	eventually(t, "q's claim put back", func() bool {
		r, _, err := ts.s.store.getRoom(ctx, id)
		return err == nil && len(r.Joined[node]) == 1
	})
	close(release)
	if err := <-countedOut; err != nil {
		t.Fatal(err)
	}
	checkRoomCode(ctx, t, ts, id, want)
}

// checkRoomCode fails the test unless room id's record has join code code,
// the one its members were told, and the code's key leads to the room.
func checkRoomCode(ctx context.Context, t *testing.T, ts *testServer, id, code string) {
	t.Helper()
	rec, _, err := ts.s.store.getRoom(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.JoinCode != code {
		t.Fatalf("room %s has join code %q, want the one its member was told, %s", id, rec.JoinCode, code)
	}
	if got, err := ts.s.store.roomByCode(ctx, code); err != nil || got != id {
		t.Fatalf("join code %s names room %q (err %v), want %s", code, got, err, id)
	}
}
