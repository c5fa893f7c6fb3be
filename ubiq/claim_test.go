package ubiq

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Peers A and B are members of one room on one node. A's count-out is
// written, but its answer is lost (a timeout after the store applied it),
// so the retrier applies it again. A count-out removes its own claim id,
// and a repeat removes nothing; the test fails if the repeat also takes
// B's place, which with no claim left frees the room's join code while B
// is still in the room.
func TestRetriedCountOutAppliedOnce(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, node := ts.s.store, ts.s.node

	claimA := newClaimID()
	rec, _, err := st.claimRoom(ctx, newUUID(), "", "retried count-out", claimA, true)
	if err != nil {
		t.Fatal(err)
	}
	room := rec.UUID
	b := dialPeer(t, ts.tcp)
	if ri := b.join(JoinArgs{JoinCode: rec.JoinCode}); ri.UUID != room {
		t.Fatalf("B joined %s by code %s, want room %s", ri.UUID, rec.JoinCode, room)
	}
	r, _, err := st.getRoom(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Joined[node]; len(got) != 2 || got[0] != claimA {
		t.Fatalf("claims of node %s in room %s: %v, want A's (%s) and B's", node, room, got, claimA)
	}
	claimB := r.Joined[node][1]

	// A leaves: the write lands, then the retry runs it again.
	for try := range 2 {
		if err := st.unclaimRoom(ctx, room, rec.Gen, node, claimA); err != nil {
			t.Fatalf("count-out %d of A: %v", try+1, err)
		}
	}
	r, _, err = st.getRoom(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Joined[node]; !slices.Equal(got, []string{claimB}) {
		t.Fatalf("after A's count-out and its retry, claims of node %s: %v, want only B's %s", node, got, claimB)
	}
	if r.JoinCode != rec.JoinCode {
		t.Fatalf("room %s has join code %q while B is a member, want %q", room, r.JoinCode, rec.JoinCode)
	}
	if got, err := st.roomByCode(ctx, rec.JoinCode); err != nil || got != room {
		t.Fatalf("join code %s names room %q (err %v), want %s", rec.JoinCode, got, err, room)
	}
	// The code still leads to B's room.
	c := dialPeer(t, ts.tcp)
	if ri := c.join(JoinArgs{JoinCode: rec.JoinCode}); ri.UUID != room {
		t.Fatalf("C joined %s by code %s, want room %s", ri.UUID, rec.JoinCode, room)
	}

	// B leaves, which counts it out, then its count-out runs twice more
	// (retries). B's count-out is its connection's: one made behind the
	// back of a member still there would be put back by its room (as
	// after a sweep of its node, see TestSweptNodeKeepsItsMembersClaims).
	b.c.Close()
	eventually(t, "B counted out as it left", func() bool {
		r, _, err := st.getRoom(ctx, room)
		return err == nil && !slices.Contains(r.Joined[node], claimB)
	})
	for try := range 2 {
		if err := st.unclaimRoom(ctx, room, rec.Gen, node, claimB); err != nil {
			t.Fatalf("count-out %d of B: %v", try+1, err)
		}
	}
	r, _, err = st.getRoom(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Joined[node]; len(got) != 1 || got[0] == claimB {
		t.Fatalf("after B's count-outs, claims of node %s: %v, want only C's", node, got)
	}
	if r.JoinCode != rec.JoinCode {
		t.Fatalf("room %s has join code %q while C is a member, want %q", room, r.JoinCode, rec.JoinCode)
	}
}

// answerLostKV applies every Create and Update of a room record and then
// reports an error, as when the store's answer times out after it applied
// the write.
type answerLostKV struct {
	jetstream.KeyValue
}

var errAnswerLost = errors.New("answer lost (test)")

func isInfoKey(key string) bool { return strings.HasPrefix(key, "r.") && strings.HasSuffix(key, ".i") }

func (kv answerLostKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if _, err := kv.KeyValue.Create(ctx, key, value, opts...); err != nil || !isInfoKey(key) {
		return 0, err
	}
	return 0, errAnswerLost
}

func (kv answerLostKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if _, err := kv.KeyValue.Update(ctx, key, value, last); err != nil || !isInfoKey(key) {
		return 0, err
	}
	return 0, errAnswerLost
}

// A new room's claim is written with its fresh join code, but the answer
// is lost. claimRoom keeps the code's key, as the record may name the
// code: freed, it could go to another room, and a joiner by code would
// reach neither. The key stays until the room no longer holds the code:
// the claim's count-out takes it.
func TestClaimWithLostAnswerKeepsCode(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, node := ts.s.store, ts.s.node
	lossy := *st
	lossy.kv = answerLostKV{st.kv}

	room, claim := newUUID(), newClaimID()
	_, _, claimErr := lossy.claimRoom(ctx, room, "", "lost answer", claim, true)
	if !errors.Is(claimErr, errAnswerLost) {
		t.Fatalf("claim with a lost answer: err %v, want %v", claimErr, errAnswerLost)
	}
	r, _, err := st.getRoom(ctx, room)
	if err != nil {
		t.Fatalf("the claim's write landed, but room %s: %v", room, err)
	}
	if got, err := st.roomByCode(ctx, r.JoinCode); err != nil || got != room {
		t.Fatalf("room %s holds join code %s, which names room %q (err %v)", room, r.JoinCode, got, err)
	}
	// What the server does with the error: a retried free of the code,
	// which leaves a code the room holds ...
	var cn *codeNotFreedError
	if !errors.As(claimErr, &cn) {
		t.Fatalf("err %v: no join code handed to the retrier", claimErr)
	}
	if err := st.freeCodeOf(ctx, cn); err != nil {
		t.Fatal(err)
	}
	if got, err := st.roomByCode(ctx, r.JoinCode); err != nil || got != room {
		t.Fatalf("after the retried free, join code %s names room %q (err %v), want %s", r.JoinCode, got, err, room)
	}
	// ... and the claim's count-out, which takes the code with it.
	if err := st.unclaimRoom(ctx, room, "", node, claim); err != nil {
		t.Fatal(err)
	}
	if got, err := st.roomByCode(ctx, r.JoinCode); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after the count-out, join code %s names room %q (err %v), want none", r.JoinCode, got, err)
	}

	// A claim whose write did not land: the retried free frees the code.
	room = newUUID()
	_, _, err = lossy.claimRoom(ctx, room, "", "lost answer", newClaimID(), true)
	cn = nil
	if !errors.As(err, &cn) {
		t.Fatalf("err %v: no join code handed to the retrier", err)
	}
	if err := st.kv.Purge(ctx, infoKey(room)); err != nil { // as if the write had not landed
		t.Fatal(err)
	}
	if err := st.freeCodeOf(ctx, cn); err != nil {
		t.Fatal(err)
	}
	if _, err := st.kv.Get(ctx, codeKey(cn.code)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("join code %s of a claim that did not land: key still there (err %v)", cn.code, err)
	}
}
