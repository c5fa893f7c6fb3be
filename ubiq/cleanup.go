package ubiq

import (
	"context"
	"slices"
	"sync"
)

// When the last local holder of a room lets go of it, the room may be
// empty everywhere, and its state is then deleted (Server.removeEmpty): a
// record read, key listings (each a JetStream consumer) and deletions. A
// peer can let go of 64 rooms with one SetObserved, and do it again with
// the next frame; the room goroutines it stops delete their presence keys
// meanwhile. So that a peer cannot pile up goroutines and consumers that
// way:
//
//   - cleanups are coalesced by room: at most one runs for a room at a
//     time, and at most one more waits for it (asked again while one
//     runs, because the room may have emptied since it began);
//   - a node runs at most maxCleanupWorkers cleanups at once, on as many
//     goroutines, which leave when the queue is empty;
//   - the queue is served round-robin by the connection that asked (one
//     cleanup of each connection with cleanups waiting in turn), so a
//     connection's cleanups wait for one of each other connection's at a
//     time, not for all of them: a peer that churns rooms does not hold
//     up another's;
//   - a connection has at most maxConnCleanups rooms let go of that are
//     still stopping or being cleaned up: past that, its requests wait
//     for the oldest, which holds back that peer alone (conn.letGo). Below
//     it, nothing waits: an honest peer's room switches take no store
//     round trip of the cleanup.
const (
	maxCleanupWorkers = 4
	maxConnCleanups   = maxObserved
)

// cleanups is a node's queue of room cleanups.
type cleanups struct {
	s *Server
	// before, if set, runs before each cleanup: tests use it to stand
	// for a slow store.
	before func(room string)

	mu    sync.Mutex
	rooms map[string]*roomCleanup // queued or running
	// queues holds the rooms queued, by who asked (a *conn, or nil for
	// the node itself), and turn the askers with rooms queued, in the
	// order they are served (round-robin).
	queues  map[any][]string
	turn    []any
	workers int
}

// roomCleanup is the state of one room's cleanups.
type roomCleanup struct {
	running bool
	// next is closed when the cleanup asked for since the running one
	// began (or queued, if none runs) is done; nil: none asked for.
	next chan struct{}
	by   any // who asked for next
}

func newCleanups(s *Server) *cleanups {
	return &cleanups{s: s, rooms: map[string]*roomCleanup{}, queues: map[any][]string{}}
}

// ask queues a cleanup of room id for by (a *conn, or nil for the node),
// unless one is queued already, and returns a channel closed when a
// cleanup that began after this call is done.
func (q *cleanups) ask(id string, by any) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	rc := q.rooms[id]
	if rc == nil {
		rc = &roomCleanup{}
		q.rooms[id] = rc
	}
	if rc.next == nil {
		rc.next, rc.by = make(chan struct{}), by
		if !rc.running {
			q.push(id, by)
		}
	}
	if q.workers < maxCleanupWorkers && len(q.turn) > 0 {
		q.workers++
		q.s.wg.Add(1)
		go q.work()
	}
	return rc.next
}

// push queues room id for by. q.mu is held.
func (q *cleanups) push(id string, by any) {
	if len(q.queues[by]) == 0 {
		q.turn = append(q.turn, by)
	}
	q.queues[by] = append(q.queues[by], id)
}

// pop takes the next room to clean up: the first of the asker whose turn
// it is. q.mu is held, and a room is queued.
func (q *cleanups) pop() string {
	by := q.turn[0]
	q.turn[0] = nil
	q.turn = q.turn[1:]
	rooms := q.queues[by]
	id := rooms[0]
	rooms[0] = ""
	if rooms = rooms[1:]; len(rooms) > 0 {
		q.queues[by] = rooms
		q.turn = append(q.turn, by) // its next one after the others'
	} else {
		delete(q.queues, by)
	}
	return id
}

// work runs queued cleanups until the queue is empty.
func (q *cleanups) work() {
	defer q.s.wg.Done()
	for {
		q.mu.Lock()
		if len(q.turn) == 0 {
			q.workers--
			q.turn = nil // let go of the backing array
			q.mu.Unlock()
			return
		}
		id := q.pop()
		rc := q.rooms[id]
		done := rc.next
		rc.next, rc.by, rc.running = nil, nil, true
		q.mu.Unlock()

		q.run(id)
		close(done)

		q.mu.Lock()
		rc.running = false
		if rc.next != nil {
			q.push(id, rc.by) // asked for again meanwhile
		} else {
			delete(q.rooms, id)
		}
		q.mu.Unlock()
	}
}

// run removes room id if it is empty.
func (q *cleanups) run(id string) {
	if q.before != nil {
		q.before(id)
	}
	s := q.s
	// A room this node holds again has a local member or observer: not
	// empty. (The last local holder to release it asks again.)
	if s.active(id) {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	// Asked again just before the deletion: a local observer holds the
	// room through this node's presence key, which the store does not
	// count (it may be an old activation's, on its way out).
	s.removeEmptyLogged(ctx, id)
}

// idle reports whether no cleanup is queued or running.
func (q *cleanups) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.rooms) == 0
}

// letGo releases the connection's hold on rooms (their member or
// observer attachments already detached) and asks for the cleanups of
// those it stops, without waiting for either: the room goroutines let go
// of their subscription, watch and presence key meanwhile. A connection
// has at most maxConnCleanups rooms let go of still stopping or being
// cleaned up: at that bound, letGo first waits for the oldest (or for the
// server to stop). So below the bound a request does not wait for the
// store, and a connection that lets go of rooms faster than the store
// cleans them up waits at the pace the store does.
func (c *conn) letGo(rooms ...*room) {
	for _, r := range rooms {
		c.atBound()
		gone := c.s.release(r)
		if gone == nil {
			continue // still held here: not empty
		}
		c.track(gone, c.s.removeIfEmpty(r.id, c))
	}
}

// letting is a room that a connection let go of: gone is closed when its
// goroutine stopped, done when its cleanup is (either nil: nothing to wait
// for).
type letting struct{ gone, done <-chan struct{} }

func (l letting) over() bool { return isDone(l.gone) && isDone(l.done) }

// wait waits for l to be over, or for the server to stop (false).
func (l letting) wait(ctx context.Context) bool {
	for _, ch := range []<-chan struct{}{l.gone, l.done} {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// atBound waits, while the connection has maxConnCleanups rooms let go of
// under way, for the oldest.
func (c *conn) atBound() {
	c.cleaning = slices.DeleteFunc(c.cleaning, letting.over)
	for len(c.cleaning) >= maxConnCleanups {
		if !c.cleaning[0].wait(c.s.ctx) {
			c.cleaning = nil
			return
		}
		c.cleaning = slices.DeleteFunc(c.cleaning, letting.over)
	}
}

// track counts a room let go of (gone) or a cleanup asked for (done)
// against the connection's bound; nil channels are nothing to wait for.
func (c *conn) track(gone, done <-chan struct{}) {
	if gone != nil || done != nil {
		c.cleaning = append(c.cleaning, letting{gone, done})
	}
}

// stopped waits for the rooms the connection let go of to stop (not for
// their cleanups): at the connection's end, so that a peer that connects
// again and again does not leave room goroutines stopping without bound.
func (c *conn) stopped() {
	for _, l := range c.cleaning {
		if !(letting{gone: l.gone}).wait(c.s.ctx) {
			break
		}
	}
	c.cleaning = nil
}

func isDone(c <-chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}
