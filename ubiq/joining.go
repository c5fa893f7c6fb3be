package ubiq

import (
	"fmt"
	"time"
)

// A Join writes the peer's member key, then has its room attach the
// connection once the room's watch shows that key (cmdAttachMember): the
// room then sends SetRoom. The key may never show: a sweep of this node
// (another node took it for dead) deleted it first, or the room's watch of
// the store is down. The joiner is then disconnected, as a member whose key
// goes is (room.membershipLost), and its connection's cleanup counts its
// claim out (conn.leave): a Join always gets an answer. A Ubiq client takes
// Rejected to mean that it stays in the room it was in, which the peer has
// left by then.
//
// A deletion is told apart from a watch that has not caught up by its
// revision: the room records, for each Join under way, the deletions of
// its member key that it sees (watchJoin, joinKeyGone), from before the
// key is written, so that a deletion it sees before the Join hands it the
// connection counts too. A room that shows neither within the server's
// attachWait ends the wait all the same (attachOverdue).

// joinWatch records the deletions of a member key that Joins under way
// write: gone is the revision of the last one the room saw, refs the
// number of those Joins.
type joinWatch struct {
	refs int
	gone uint64
}

// pendingMember is a member attachment waiting for the member key that
// its connection wrote at rev as peer uuid as (key token tok), having
// made claim.
type pendingMember struct {
	rev   uint64
	as    string
	tok   string
	claim string
	// timer ends the wait after the server's attachWait (attachOverdue).
	timer *time.Timer
}

// watchJoin has the room record the deletions of the member key of peer
// as, which c's Join is about to write: before the write, so that none
// after it goes unseen. cmdAttachMember takes it over; a Join that fails
// before that calls unwatchJoin. Connection only.
func (r *room) watchJoin(as string) {
	tok := keyToken(as)
	r.joinMu.Lock()
	defer r.joinMu.Unlock()
	w := r.joins[tok]
	if w == nil {
		w = &joinWatch{}
		r.joins[tok] = w
	}
	w.refs++
}

// unwatchJoin ends a watchJoin of the member key of key token tok.
func (r *room) unwatchJoin(tok string) {
	r.joinMu.Lock()
	defer r.joinMu.Unlock()
	if w := r.joins[tok]; w != nil {
		if w.refs--; w.refs <= 0 {
			delete(r.joins, tok)
		}
	}
}

// joinKeyGone records the deletion, at revision rev, of the member key of
// key token tok for the Joins under way that write it, and ends the wait
// of those it follows. Room goroutine.
func (r *room) joinKeyGone(tok string, rev uint64) {
	r.joinMu.Lock()
	w := r.joins[tok]
	if w != nil {
		w.gone = max(w.gone, rev)
	}
	r.joinMu.Unlock()
	if w == nil {
		return
	}
	for c, p := range r.pending {
		if p.tok == tok {
			r.settle(c, p)
		}
	}
}

// keyGoneAfter reports whether the room saw the member key of key token
// tok deleted after revision rev, while a Join wrote it.
func (r *room) keyGoneAfter(tok string, rev uint64) bool {
	r.joinMu.Lock()
	defer r.joinMu.Unlock()
	w := r.joins[tok]
	return w != nil && w.gone > rev
}

// cmdAttachMember makes c a local member once its member key, written as
// peer as at rev (or later), has been seen, then sends it SetRoom and the
// peers it should know; c holds claim on the room (holdClaim), and called
// watchJoin before the write. A joiner whose key the room sees deleted
// after rev first, or does not see within the server's attachWait, is
// disconnected instead (joinLost).
func (r *room) cmdAttachMember(c *conn, as string, rev uint64, claim string) {
	r.cmds <- func() {
		r.dropPending(c)
		p := &pendingMember{rev: rev, as: as, tok: keyToken(as), claim: claim}
		r.pending[c] = p
		if r.settle(c, p) {
			return
		}
		p.timer = time.AfterFunc(r.s.attachWait, func() { r.post(func() { r.attachOverdue(c, p) }) })
	}
}

// settle ends the wait p of c if its outcome is known: c is attached once
// its member record, as written at p.rev or later, has been seen, and
// disconnected once its key was seen deleted after p.rev. It reports
// whether the wait ended. Room goroutine.
func (r *room) settle(c *conn, p *pendingMember) bool {
	if m := r.members[p.tok]; m != nil && m.rev >= p.rev {
		r.dropPending(c)
		r.attachMember(c, p.as, p.claim)
		return true
	}
	if r.keyGoneAfter(p.tok, p.rev) {
		r.joinLost(c, p, "its member key in room "+r.id+" was removed before the room took it in (another node took this one for dead)")
		return true
	}
	return false
}

// attachPending ends the waits whose outcome is known (settle).
func (r *room) attachPending() {
	for c, p := range r.pending {
		r.settle(c, p)
	}
}

// attachOverdue ends the wait p of c, if it still waits, once the room has
// not seen its member key within the server's attachWait. Room goroutine.
func (r *room) attachOverdue(c *conn, p *pendingMember) {
	if r.pending[c] != p {
		return // attached or ended meanwhile
	}
	r.joinLost(c, p, fmt.Sprintf("room %s did not see its member key within %v of its Join (its watch of the store is down or behind)", r.id, r.s.attachWait))
}

// joinLost ends the wait p of c, whose member key the room will not see,
// and disconnects c: its connection's cleanup counts its claim out. A
// connection that is closing, or has joined another room meanwhile, is
// left alone: its departure from this room follows. Room goroutine.
func (r *room) joinLost(c *conn, p *pendingMember, why string) {
	r.dropPending(c)
	if c.relayRoom.Load() != r || c.closing() {
		return
	}
	r.s.log.Warn("Ubiq peer disconnected: its Join could not be completed", "peer", p.as, "room", r.id, "reason", why)
	c.close(why)
}

// dropPending ends c's wait for its member key, if it has one. Room
// goroutine.
func (r *room) dropPending(c *conn) {
	p := r.pending[c]
	if p == nil {
		return
	}
	delete(r.pending, c)
	if p.timer != nil {
		p.timer.Stop()
	}
	r.unwatchJoin(p.tok)
}

// post runs f on the room goroutine, from another goroutine (a timer's),
// unless the room has stopped.
func (r *room) post(f func()) {
	select {
	case r.cmds <- f:
	case <-r.gone:
	}
}
