package ubiq

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestKeyWrittenAfterASweepKeepsItsIndex: a sweep of this node (another
// took it for dead) that runs whole between the write of a key's index
// entry and the write of the key (a Join's member key, a room
// activation's presence key) deletes the entry, and finds no key to put
// it back for. The writer puts it back (putOwned), so that a later sweep
// finds the key. Without the entry, if the node then died, a Join's member
// key so written would stay in the room for good (a ghost the others keep
// seeing).
func TestKeyWrittenAfterASweepKeepsItsIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(room, peer string) string // the key's prefix
	}{
		{"member key", func(room, peer string) string { return memberKey(room, peer) }},
		{"presence key", func(room, peer string) string { return "r." + room + ".n." }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id := newUUID()
			p := dialPeer(t, ts.tcp)
			want := tc.key(id, p.uuid)
			sweeper := &store{kv: ts.s.kv, node: "sweeper", afterPut: new(atomic.Pointer[func(string) error]), afterIndex: new(atomic.Pointer[func(string)])}
			var swept atomic.Value // the key swept
			sweep := func(key string) {
				if !strings.HasPrefix(key, want) || swept.Load() != nil {
					return
				}
				swept.Store(key)
				if err := sweeper.sweepKey(ctx, ts.s.node, key); err != nil {
					t.Error(err)
				}
			}
			ts.s.store.afterIndex.Store(&sweep)
			p.join(JoinArgs{UUID: id})
			ts.s.store.afterIndex.Store(nil)
			key, _ := swept.Load().(string)
			if key == "" {
				t.Fatalf("no key with prefix %s written", want)
			}
			if _, err := ts.s.kv.Get(ctx, key); err != nil {
				t.Fatalf("key %s: %v, want it written", key, err)
			}
			_, err := ts.s.kv.Get(ctx, ownedKey(ts.s.node, key))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("key %s has no index entry after a sweep that ended before it landed: if its node dies, nobody deletes it", key)
			} else if err != nil {
				t.Fatal(err)
			}
		})
	}
}
