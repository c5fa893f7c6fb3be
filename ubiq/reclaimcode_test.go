package ubiq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var errUnreachable = errors.New("store unreachable (test)")

// TestPutBackRetryKeepsItsCode: a room puts its member's claim back (a
// sweep of its node counted it out, and the room gave up its join code),
// taking its code back, and the write of its record fails: it may have
// landed, so the code goes to the retrier, which frees it only if the
// record does not name it. The room tries again with the same code and
// takes it back; the retrier runs between that and the retry's record
// write, and frees the code (its key names the room, the record does not
// name it yet). The test checks that the room ends with the code its
// member was told and that the code leads to the room: the retry writes
// the code's key again once its record write has landed.
func TestPutBackRetryKeepsItsCode(t *testing.T) {
	ts, hook, raw := startHookedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, id := ts.s.node, newUUID()
	q := dialPeer(t, ts.tcp)
	code := q.join(JoinArgs{UUID: id}).JoinCode
	r := roomOf(ts, id)
	claim := heldClaimOf(t, r)

	// The retrier's rounds run when the test runs one.
	ts.s.retry.roundMu.Lock()
	var unlock sync.Once
	defer unlock.Do(ts.s.retry.roundMu.Unlock)
	var writes atomic.Int32
	held, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	setHook(hook, func(ctx context.Context, w kvWrite) (uint64, error) {
		if w.key != infoKey(id) || w.op != "update" && w.op != "create" {
			return w.write(ctx)
		}
		switch writes.Add(1) {
		case 1:
			return 0, errUnreachable
		case 2: // the retry, which has taken the code back
			close(held)
			<-release
		}
		return w.write(ctx)
	})
	sweeper := &store{kv: raw, node: "sweeper"}
	if err := sweeper.unclaimRoom(ctx, id, "", node, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the room did not try its put-back again")
	}
	ts.s.retry.round(ctx)
	close(release)
	unlock.Do(ts.s.retry.roundMu.Unlock)

	eventually(t, "q's claim put back, and the retrier idle", func() bool {
		rec, _, err := ts.s.store.getRoom(ctx, id)
		return err == nil && len(rec.Joined[node]) == 1 && rec.Joined[node][0] == claim && ts.s.retry.pending() == 0
	})
	checkRoomCode(ctx, t, ts, id, code)
}
