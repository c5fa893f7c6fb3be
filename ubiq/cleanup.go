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
//   - a connection waits for the rooms it lets go of to stop before it
//     goes on, and has at most maxConnCleanups cleanups of its own under
//     way: past that its requests wait for the oldest, which holds back
//     that peer alone (conn.letGo).
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

	mu      sync.Mutex
	rooms   map[string]*roomCleanup // queued or running
	queue   []string
	workers int
}

// roomCleanup is the state of one room's cleanups.
type roomCleanup struct {
	running bool
	// next is closed when the cleanup asked for since the running one
	// began (or queued, if none runs) is done; nil: none asked for.
	next chan struct{}
}

func newCleanups(s *Server) *cleanups {
	return &cleanups{s: s, rooms: map[string]*roomCleanup{}}
}

// ask queues a cleanup of room id unless one is queued already, and
// returns a channel closed when a cleanup that began after this call is
// done.
func (q *cleanups) ask(id string) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	rc := q.rooms[id]
	if rc == nil {
		rc = &roomCleanup{}
		q.rooms[id] = rc
	}
	if rc.next == nil {
		rc.next = make(chan struct{})
		if !rc.running {
			q.queue = append(q.queue, id)
		}
	}
	if q.workers < maxCleanupWorkers && len(q.queue) > 0 {
		q.workers++
		q.s.wg.Add(1)
		go q.work()
	}
	return rc.next
}

// work runs queued cleanups until the queue is empty.
func (q *cleanups) work() {
	defer q.s.wg.Done()
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.workers--
			q.queue = nil // let go of the backing array
			q.mu.Unlock()
			return
		}
		id := q.queue[0]
		q.queue[0] = ""
		q.queue = q.queue[1:]
		rc := q.rooms[id]
		done := rc.next
		rc.next, rc.running = nil, true
		q.mu.Unlock()

		q.run(id)
		close(done)

		q.mu.Lock()
		rc.running = false
		if rc.next != nil {
			q.queue = append(q.queue, id) // asked for again meanwhile
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
	if ok, err := s.removeEmpty(ctx, id); err != nil {
		s.log.Info("removing an empty room failed", "room", id, "err", err)
	} else if ok {
		s.log.Debug("removed empty room", "room", id)
	}
}

// idle reports whether no cleanup is queued or running.
func (q *cleanups) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.rooms) == 0
}

// letGo releases the connection's hold on rooms (their member or
// observer attachments already detached), waits for those that stop to
// let go of their subscription, watch and presence key, then asks for
// their cleanups. A connection has at most maxConnCleanups of those under
// way: past it, letGo first waits for the oldest (or for the server to
// stop). So one connection stops at most one request's rooms at a time,
// and waits for the cleanups it asks for at the pace the store does them.
func (c *conn) letGo(rooms ...*room) {
	s := c.s
	var stopped []<-chan struct{}
	for _, r := range rooms {
		if gone := s.release(r); gone != nil {
			stopped = append(stopped, gone)
		}
	}
	for _, gone := range stopped {
		select {
		case <-gone:
		case <-s.ctx.Done():
		}
	}
	for _, r := range rooms {
		c.cleaning = slices.DeleteFunc(c.cleaning, isDone)
		for len(c.cleaning) >= maxConnCleanups {
			select {
			case <-c.cleaning[0]:
			case <-s.ctx.Done():
				c.cleaning = nil
			}
			c.cleaning = slices.DeleteFunc(c.cleaning, isDone)
		}
		if done := s.removeIfEmpty(r.id); done != nil {
			c.cleaning = append(c.cleaning, done)
		}
	}
}
func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
