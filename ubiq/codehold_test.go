package ubiq

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestPutBackHoldsItsCodeAfterAFreeing: two nodes put their claims back
// into a room that gave up its join code, both taking back the code
// their members were told. The first reads the record; a member's write
// changes it; the second reads it, takes the code back and is held before
// its record write; the first takes the code back after it, finds the
// record changed, and frees the code (the record does not name it yet);
// another room takes the code. The second's record write then lands
// naming the code. The test checks that the room ends with a join code
// that leads to it (the second, finding the code another room's, takes
// a new one and writes the record again), with both claims, and that the
// other room keeps the code it took.
func TestPutBackHoldsItsCodeAfterAFreeing(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := ts.s.kv
	id, other, code := newUUID(), newUUID(), newJoinCode()
	if err := ts.s.store.observeRoom(ctx, id); err != nil { // a record without claims or code
		t.Fatal(err)
	}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	hold := func(ctx context.Context, held chan<- struct{}, release <-chan struct{}) error {
		close(held)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// The first writer is held at its taking back of the code, and at
	// its second record write; once it frees the code, another room
	// takes it.
	firstAtCode, firstGo := make(chan struct{}), make(chan struct{})
	firstAgain, firstAgainGo := make(chan struct{}), make(chan struct{})
	var firstCode, firstInfo atomic.Int32
	firstHook := new(atomic.Pointer[kvHook])
	setHook(firstHook, func(ctx context.Context, w kvWrite) (uint64, error) {
		switch {
		case w.key == codeKey(code) && w.op != "purge" && firstCode.Add(1) == 1:
			if err := hold(ctx, firstAtCode, firstGo); err != nil {
				return 0, err
			}
		case w.key == codeKey(code) && w.op == "purge":
			rev, err := w.write(ctx)
			if err == nil {
				if _, err := raw.Create(ctx, codeKey(code), []byte(other)); err != nil {
					t.Errorf("another room takes join code %s: %v", code, err)
				}
			}
			return rev, err
		case w.key == infoKey(id) && firstInfo.Add(1) == 2:
			if err := hold(ctx, firstAgain, firstAgainGo); err != nil {
				return 0, err
			}
		}
		return w.write(ctx)
	})
	first := &store{kv: hookedKV{KeyValue: raw, hook: firstHook}, node: "node-a"}

	// The second writer is held at its first record write.
	secondAtInfo, secondGo := make(chan struct{}), make(chan struct{})
	var secondInfo atomic.Int32
	secondHook := new(atomic.Pointer[kvHook])
	setHook(secondHook, func(ctx context.Context, w kvWrite) (uint64, error) {
		if w.key == infoKey(id) && w.op == "update" && secondInfo.Add(1) == 1 {
			if err := hold(ctx, secondAtInfo, secondGo); err != nil {
				return 0, err
			}
		}
		return w.write(ctx)
	})
	second := &store{kv: hookedKV{KeyValue: raw, hook: secondHook}, node: "node-b"}

	claims := map[*store]string{first: newClaimID(), second: newClaimID()}
	done := map[*store]chan error{first: make(chan error, 1), second: make(chan error, 1)}
	put := func(st *store) {
		go func() {
			_, _, _, err := st.reclaimRoom(ctx, id, []string{claims[st]}, nil, code)
			done[st] <- err
		}()
	}
	defer func() { // a failed test lets the writers end
		for _, ch := range []chan struct{}{firstGo, firstAgainGo, secondGo} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}()

	put(first)
	wait(firstAtCode, "the first writer's taking back of the code")
	// A member's write changes the record.
	rec, rev, err := ts.s.store.getRoom(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rec.Name = "renamed"
	b, _ := json.Marshal(rec)
	if _, err := raw.Update(ctx, infoKey(id), b, rev); err != nil {
		t.Fatal(err)
	}
	put(second)
	wait(secondAtInfo, "the second writer's record write")
	close(firstGo)
	wait(firstAgain, "the first writer's second record write")
	close(secondGo)
	if err := <-done[second]; err != nil {
		t.Fatalf("second writer put back its claim: %v", err)
	}
	close(firstAgainGo)
	if err := <-done[first]; err != nil {
		t.Fatalf("first writer put back its claim: %v", err)
	}

	rec, _, err = ts.s.store.getRoom(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for st, c := range claims {
		if !slices.Contains(rec.Joined[st.node], c) {
			t.Errorf("record's claims %v: %s's %s missing", rec.Joined, st.node, c)
		}
	}
	if rec.JoinCode == "" {
		t.Fatalf("room %s has no join code", id)
	}
	owner := func(code string) string {
		e, err := raw.Get(ctx, codeKey(code))
		if err != nil {
			return err.Error()
		}
		return string(e.Value())
	}
	if got := owner(rec.JoinCode); got != id {
		t.Errorf("room %s's join code %s names %q, want the room", id, rec.JoinCode, got)
	}
	if got := owner(code); got != other {
		t.Errorf("join code %s names %q, want room %s, which took it", code, got, other)
	}
}
