package ubiq

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSweepKeepsARewrittenKeysIndex: a node that another took for dead
// writes its presence key again (announceAgain) while the other sweeps
// it. However the writes interleave, a key the node holds afterwards has
// its index entry, so that a sweep finds it if the node then dies. The
// test fails if the sweep deletes the index entry after the key whatever
// happened in between: a rewrite that lands there loses its entry, and if
// the node then dies its key stays (the room stays active there for the
// others, which relay its frames to a dead node and never remove it).
func TestSweepKeepsARewrittenKeysIndex(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newStore := func(node string) *store {
		return &store{kv: ts.s.kv, node: node, afterPut: new(atomic.Pointer[func(string) error]), afterIndex: new(atomic.Pointer[func(string)])}
	}
	present := func(key string) bool {
		_, err := ts.s.kv.Get(ctx, key)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	tests := []struct {
		name string
		// step: the sweeper's step before which the dead node writes
		// its key again ("" for none)
		step string
	}{
		{"no rewrite", ""},
		{"rewrite after the sweep read the key", "read"},
		{"rewrite after the sweep deleted the key", "deleted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dead, sweeper := newStore("dead"+newUUID()[:8]), newStore("sweeper")
			key := presenceKey(newUUID(), dead.node+"-1")
			if _, err := dead.putOwned(ctx, key, []byte(dead.node)); err != nil {
				t.Fatal(err)
			}
			sweeper.sweepStep = func(step, k string) {
				if step == tc.step && k == key {
					if _, err := dead.putOwned(ctx, key, []byte(dead.node)); err != nil {
						t.Error(err)
					}
				}
			}
			if err := sweeper.sweepKey(ctx, dead.node, key); err != nil {
				t.Fatal(err)
			}
			k, idx := present(key), present(ownedKey(dead.node, key))
			if tc.step == "" && (k || idx) {
				t.Fatalf("after the sweep: key %v, index entry %v, want neither", k, idx)
			}
			if k && !idx {
				t.Fatal("the key written again has no index entry: if its node dies, nobody deletes it")
			}
		})
	}

	// The dead node's index entry is written before the sweep reads it,
	// its key after the sweep ends: the writer puts the entry back.
	t.Run("rewrite around the whole sweep", func(t *testing.T) {
		dead, sweeper := newStore("dead"+newUUID()[:8]), newStore("sweeper")
		key := presenceKey(newUUID(), dead.node+"-1")
		if _, err := dead.kv.Put(ctx, ownedKey(dead.node, key), nil); err != nil {
			t.Fatal(err)
		}
		if err := sweeper.sweepKey(ctx, dead.node, key); err != nil {
			t.Fatal(err)
		}
		if _, err := dead.kv.Put(ctx, key, []byte(dead.node)); err != nil {
			t.Fatal(err)
		}
		if err := dead.keepIndexed(ctx, key); err != nil {
			t.Fatal(err)
		}
		if !present(ownedKey(dead.node, key)) {
			t.Fatal("the key written again has no index entry: if its node dies, nobody deletes it")
		}
	})
}
