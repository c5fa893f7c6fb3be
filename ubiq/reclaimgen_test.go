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

// TestPutBackWithLostAnswerCountsOut: a room whose record was removed
// while it had a member creates the record again, under a new generation,
// with the member's claim; the store applies the write, but its answer is
// lost. The member's count-out, when it leaves, takes the claim out of
// the new generation all the same, whether the put-back's retry found the
// claim in place before the member left or the member left first, and the
// room goes: the test checks that the claim is not left in the new
// generation by a count-out that looks for it in the old one only.
func TestPutBackWithLostAnswerCountsOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		// leaveFirst: the member leaves before the put-back is retried
		leaveFirst bool
	}{
		{name: "retried, then the member leaves"},
		{name: "the member leaves before the retry", leaveFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, hook, raw := startHookedServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id := newUUID()
			q := dialPeer(t, ts.tcp)
			q.join(JoinArgs{UUID: id})
			r := roomOf(ts, id)
			heldClaimOf(t, r)

			var lost atomic.Bool
			left := make(chan struct{}) // q's member key deleted as it leaves
			var once sync.Once
			memberIndex := ownedKey(ts.s.node, memberKey(id, q.uuid))
			setHook(hook, func(ctx context.Context, w kvWrite) (uint64, error) {
				rev, err := w.write(ctx)
				switch {
				case w.op == "delete" && w.key == memberIndex:
					once.Do(func() { close(left) })
				case err == nil && w.op == "create" && w.key == infoKey(id) && lost.CompareAndSwap(false, true):
					if tc.leaveFirst {
						// The put-back waits here, holding its
						// claims: q's count-out waits for it.
						q.c.Close()
						select {
						case <-left:
						case <-ctx.Done():
							t.Error("q's member key was not deleted as it left")
						}
					}
					return 0, errAnswerLost
				}
				return rev, err
			})
			// Removed as by another node that took the room for empty.
			if err := raw.Delete(ctx, infoKey(id)); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the record created again, with q's claim", lost.Load)
			if !tc.leaveFirst {
				eventually(t, "the put-back retried", func() bool {
					r.reclaim.mu.Lock()
					defer r.reclaim.mu.Unlock()
					return !r.reclaim.running
				})
				q.c.Close()
			}
			eventually(t, "the room removed once its member left", func() bool {
				_, _, err := ts.s.store.getRoom(ctx, id)
				return errors.Is(err, jetstream.ErrKeyNotFound)
			})
		})
	}
}
