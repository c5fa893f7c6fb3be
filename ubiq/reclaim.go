package ubiq

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// A node that another takes for dead (cut off from the bus for longer than
// NodeTimeout) has its keys swept and all of its claims counted out of its
// rooms' records (store.sweepNode); with the last claim, a room gives up
// its join code. The node may be alive all the same, and some of its
// members present: one whose Join was under way (its claim written before
// the sweep, its member key after the sweep deleted the node's keys), or
// done after the sweep listed them. So a room holds the claims of its
// local members (heldClaim) and puts back those its record lost
// (writeClaims): a room keeps a join code while it has a member.
//
// A claim is held from the join that made it (after claimRoom) until its
// connection counts itself out (releaseClaim, then unclaimRoom). It is put
// back only once its connection is attached as a member (its member key
// was seen here) and while the connection is not closing: a member whose
// key the sweep deleted is disconnected (membershipLost), and joins again.

// heldClaim is a local connection's claim on a room (roomRecord.Joined).
type heldClaim struct {
	c *conn
	// gen is the generation of the room's record that holds it; "" after
	// a put-back that failed, which may have landed all the same (its
	// answer lost), in a new generation: until a put-back succeeds, the
	// claim may be in any (its id is unique, so a count-out from any
	// generation takes only it).
	gen string
	// rev is the revision of the record write that made it (or put it
	// back): a record older than that does not show it yet.
	rev      uint64
	attached bool // c is attached as a member
}

// holdClaim records claim, which c made on the room's record of
// generation gen, written at revision rev. Connection only, before its
// member key is written.
func (r *room) holdClaim(c *conn, claim, gen string, rev uint64) {
	r.claimMu.Lock()
	r.claims[claim] = &heldClaim{c: c, gen: gen, rev: rev}
	r.claimMu.Unlock()
}

// releaseClaim stops holding claim, before its connection counts itself
// out, and returns the generation of the room's record that holds it (""
// if any may: see heldClaim; ok false: not held). It waits for a put-back
// under way (writeClaims), so that none puts the claim back after the
// count-out.
func (r *room) releaseClaim(claim string) (gen string, ok bool) {
	r.claimWrite.Lock()
	defer r.claimWrite.Unlock()
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	h := r.claims[claim]
	if h == nil {
		return "", false
	}
	delete(r.claims, claim)
	return h.gen, true
}

// claimAttached marks claim as its connection's, attached as a member, and
// checks it against the room's record. Room goroutine.
func (r *room) claimAttached(claim string) {
	r.claimMu.Lock()
	if h := r.claims[claim]; h != nil {
		h.attached = true
	}
	r.claimMu.Unlock()
	r.checkClaims()
}

// checkClaims has the claims of attached members put back (writeClaims)
// if the room's record, as last seen, lost any: a record that shows a
// claim's write, and does not show the claim, or that is gone or of
// another generation. Room goroutine.
func (r *room) checkClaims() {
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	var have map[string]bool // the record's claims of this node, once needed
	for id, h := range r.claims {
		if !h.attached || h.c.closing() || h.rev > r.recRev {
			continue
		}
		lost := r.recGone || r.rec == nil || r.rec.Gen != h.gen
		if !lost {
			if have == nil {
				mine := r.rec.Joined[r.s.node]
				have = make(map[string]bool, len(mine))
				for _, c := range mine {
					have[c] = true
				}
			}
			lost = !have[id]
		}
		if lost {
			r.claimFrom, r.claimCode = r.rec, r.lastCode
			r.reclaim.kick()
			return
		}
	}
}

// writeClaims puts back the claims of the room's attached members that
// its record lost (checkClaims): with a join code again, the one its
// members were told if it is free, and the record itself if it is gone.
func (r *room) writeClaims(ctx context.Context, w *roomWriter) error {
	r.claimWrite.Lock()
	defer r.claimWrite.Unlock()
	r.claimMu.Lock()
	var ids []string
	for id, h := range r.claims {
		if h.attached && !h.c.closing() {
			ids = append(ids, id)
		}
	}
	last, code := r.claimFrom, r.claimCode
	r.claimMu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	rec, rev, wrote, err := r.s.store.reclaimRoom(ctx, r.id, ids, last, code)
	r.s.freeCodeLater(err) // a code reserved for the write, which failed
	gen := ""
	if err == nil {
		// The record that holds them, as written or as read (all were
		// in place: an earlier put-back whose answer was lost wrote
		// them, maybe in a new generation).
		gen = rec.Gen
	}
	r.claimMu.Lock()
	for _, id := range ids {
		if h := r.claims[id]; h != nil {
			h.gen = gen
			if err == nil {
				h.rev = rev
			}
		}
	}
	r.claimMu.Unlock()
	if err != nil {
		return fmt.Errorf("put back the claims of %d members here: %w", len(ids), err)
	}
	if !wrote {
		return nil // none was lost
	}
	w.warn("Ubiq room record lost the claims of members here (another node took this one for dead and counted them out): put back",
		"room", r.id, "claims", len(ids), "joincode", rec.JoinCode)
	return nil
}

// reclaimRoom puts claims, this node's, back into room uuid's record
// where they are missing, and returns the record that holds them, its
// revision, and whether it wrote it (false: none was missing). A room
// that gave up its join code takes one again, code first (the one its
// members were told) if it is free. A room whose record is gone is
// created again from last (the record its members know; nil: a new
// room's), under a new generation: its members are in it.
func (s *store) reclaimRoom(ctx context.Context, uuid string, claims []string, last *roomRecord, code string) (*roomRecord, uint64, bool, error) {
	for {
		r, rev, err := s.getRoom(ctx, uuid)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			r = &roomRecord{UUID: uuid, Name: uuid, Props: s.newProps()}
			if last != nil {
				r.Name, r.Publish, r.Props = last.Name, last.Publish, last.Props.clone()
			}
			r.Gen = newUUID()
		} else if err != nil {
			return nil, 0, false, err
		}
		if r.Joined == nil {
			r.Joined = map[string][]string{}
		}
		mine := r.Joined[s.node]
		for _, id := range claims {
			if !slices.Contains(mine, id) {
				mine = append(mine, id)
			}
		}
		if len(mine) == len(r.Joined[s.node]) {
			return r, rev, false, nil
		}
		r.Joined[s.node] = mine
		wrev, err := s.putClaimed(ctx, r, rev, code)
		if err == nil {
			return r, wrev, true, nil
		}
		if !errors.Is(err, errClaimConflict) {
			return nil, 0, false, err
		}
		if ctx.Err() != nil {
			return nil, 0, false, ctx.Err()
		}
	}
}
