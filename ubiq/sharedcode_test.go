package ubiq

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestPutBacksShareTheirCode: two nodes put their members' claims back
// into one room's record at once (a third swept both, counting them out,
// and the room gave up its join code), each taking back the code their
// members were told (takeBackCode): the first reserves the code, the
// second writes its key again, and both write the record. One write wins;
// the other finds the record changed. The test checks, whichever wrote
// the code's key last, that the record holds both claims and names the
// code taken back, and that the code leads to the room.
func TestPutBacksShareTheirCode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first int // the writer whose record write is let through first: 0 reserved the code, 1 took it back after
	}{
		{name: "the first to reserve the code writes first", first: 0},
		{name: "the last to take the code back writes first", first: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id, code := newUUID(), newJoinCode()
			if err := ts.s.store.observeRoom(ctx, id); err != nil { // a record without claims or code
				t.Fatal(err)
			}
			type writer struct {
				st      *store
				claim   string
				held    chan struct{} // its first record write waits
				release chan struct{}
				done    chan error
			}
			var ws [2]*writer
			for i := range ws {
				w := &writer{claim: newClaimID(), held: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
				hook := new(atomic.Pointer[kvHook])
				var once atomic.Bool
				setHook(hook, func(ctx context.Context, wr kvWrite) (uint64, error) {
					if wr.op == "update" && wr.key == infoKey(id) && once.CompareAndSwap(false, true) {
						close(w.held)
						select {
						case <-w.release:
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					}
					return wr.write(ctx)
				})
				w.st = &store{kv: hookedKV{KeyValue: ts.s.kv, hook: hook}, node: "node-" + string(rune('a'+i))}
				ws[i] = w
			}
			start := func(w *writer) {
				go func() {
					_, _, _, err := w.st.reclaimRoom(ctx, id, []string{w.claim}, nil, code)
					w.done <- err
				}()
				select {
				case <-w.held:
				case <-ctx.Done():
					t.Fatalf("%s did not write the room's record", w.st.node)
				}
			}
			start(ws[0]) // reserves the code (its key created)
			start(ws[1]) // takes it back (its key written again)
			for _, i := range []int{tc.first, 1 - tc.first} {
				close(ws[i].release)
				if err := <-ws[i].done; err != nil {
					t.Fatalf("%s put back its claim: %v", ws[i].st.node, err)
				}
			}

			rec, _, err := ts.s.store.getRoom(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				if !slices.Contains(rec.Joined[w.st.node], w.claim) {
					t.Errorf("record's claims %v: %s's %s missing", rec.Joined, w.st.node, w.claim)
				}
			}
			if rec.JoinCode != code {
				t.Fatalf("room %s has join code %q, want the one taken back, %s", id, rec.JoinCode, code)
			}
			if got, err := ts.s.store.roomByCode(ctx, code); err != nil || got != id {
				t.Fatalf("join code %s names room %q (err %v), want %s", code, got, err, id)
			}
		})
	}
}
