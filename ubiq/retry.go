package ubiq

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// A departure writes to the key-value store: a member key's deletion, a
// count-out of the room's record (the last takes the join code with it)
// and, when the room goes idle on this node, its presence key's deletion.
// If one of those writes fails (the store unreachable, a stream without a
// leader), the key or count it meant to remove would hold the room, and its
// join code, for as long as this node lives. So the write is handed to the
// server's retrier, which tries it again in the background until it
// succeeds, then removes the room if it is empty. So are the writes of a
// dead node's sweep (store.sweepNode), and the purge of a removed room's
// blobs.

// Bounds of the retrier.
const (
	retryFirst = 100 * time.Millisecond // pause after the first failed round
	retryMax   = 5 * time.Second        // longest pause between rounds
	// maxRetries bounds the writes waiting: past it a failed write is
	// logged and dropped (the room then keeps its code until this node
	// stops and another node sweeps its keys).
	maxRetries = 1 << 16
)

// retryJob is one failed write.
type retryJob struct {
	what  string // for the logs: "delete member key", "count out", ...
	room  string // "" for writes that belong to no room
	do    func(ctx context.Context) error
	tries int
	// timeout bounds one try (0: requestTimeout).
	timeout time.Duration
}

// retrier retries failed departure writes, in order within a room.
type retrier struct {
	s    *Server
	mu   sync.Mutex
	jobs []*retryJob
	wake chan struct{}
	// roundMu keeps rounds apart: a write is never tried twice at once.
	roundMu sync.Mutex
}

func newRetrier(s *Server) *retrier {
	return &retrier{s: s, wake: make(chan struct{}, 1)}
}

// try does a write of room ("" = none) now, and hands it to the retrier if
// it fails. With inOrder, if writes of that room are waiting for a retry
// already, it is queued behind them instead, untried: a count-out (which
// may free the join code) never goes before a member key's deletion that
// waits.
func (r *retrier) try(ctx context.Context, what, room string, inOrder bool, do func(ctx context.Context) error) {
	if inOrder && room != "" && r.waiting(room) {
		r.add(what, room, nil, do)
		return
	}
	if err := do(ctx); err != nil {
		r.add(what, room, err, do)
	}
}

// add queues a write that failed once with err (nil: not tried, queued
// behind the room's writes waiting).
func (r *retrier) add(what, room string, err error, do func(ctx context.Context) error) {
	r.addJob(&retryJob{what: what, room: room, do: do}, err)
}

// addJob queues j, which failed once with err (nil: not tried).
func (r *retrier) addJob(j *retryJob, err error) {
	what, room := j.what, j.room
	r.mu.Lock()
	if len(r.jobs) >= maxRetries {
		r.mu.Unlock()
		r.s.log.Error("Ubiq room write failed and too many are waiting to be retried: dropped; the room keeps its join code until this node stops",
			"write", what, "room", room, "err", err, "waiting", maxRetries)
		return
	}
	if err != nil {
		j.tries = 1
	}
	r.jobs = append(r.jobs, j)
	r.mu.Unlock()
	r.s.m.retryPending.Inc()
	if err == nil {
		r.s.log.Info("Ubiq room write queued behind the room's writes waiting for a retry", "write", what, "room", room)
	} else {
		r.s.log.Warn("Ubiq room write failed: retrying it in the background until the store takes it", "write", what, "room", room, "err", err)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pending returns the number of writes waiting.
func (r *retrier) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// final tries the waiting writes once more, at shutdown, unless the bus
// connection is closed for good, and logs those left undone.
func (r *retrier) final(ctx context.Context) {
	if r.pending() == 0 {
		return
	}
	if !r.s.cfg.NC.IsClosed() {
		r.roundMu.Lock()
		r.round(ctx)
		r.roundMu.Unlock()
	}
	if n := r.pending(); n > 0 {
		r.s.log.Warn("Ubiq room writes left undone at shutdown: their rooms keep their join codes until another node sweeps this one's keys", "writes", n)
	}
}

// run retries the waiting writes until ctx is done: a round tries each
// once, in the order they failed, skipping the rest of a room's after one
// of its writes fails again; rounds are spaced out from retryFirst to
// retryMax while writes keep failing.
func (r *retrier) run(ctx context.Context) {
	pause := retryFirst
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		r.mu.Lock()
		n := len(r.jobs)
		r.mu.Unlock()
		if n == 0 {
			pause = retryFirst
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue // the first retry waits retryFirst
		} else {
			t.Reset(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		r.roundMu.Lock()
		ok := r.round(ctx)
		r.roundMu.Unlock()
		if ok {
			pause = retryFirst
		} else {
			pause = min(2*pause, retryMax)
		}
	}
}

// round tries every waiting write once and reports whether all succeeded.
func (r *retrier) round(ctx context.Context) bool {
	r.mu.Lock()
	jobs := slices.Clone(r.jobs) // r.jobs is compacted in place below
	r.mu.Unlock()
	failed := map[string]bool{}
	done := map[*retryJob]bool{}
	for _, j := range jobs {
		if ctx.Err() != nil {
			return false
		}
		if failed[j.room] {
			continue
		}
		timeout := j.timeout
		if timeout == 0 {
			timeout = requestTimeout
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := j.do(actx)
		cancel()
		if err != nil {
			j.tries++
			failed[j.room] = true
			continue
		}
		done[j] = true
		r.s.m.retryPending.Dec()
		r.s.log.Info("Ubiq room write retried and done", "write", j.what, "room", j.room, "tries", j.tries)
	}
	r.mu.Lock()
	keep := r.jobs[:0]
	for _, j := range r.jobs {
		if !done[j] {
			keep = append(keep, j)
		}
	}
	clear(r.jobs[len(keep):])
	r.jobs = keep
	r.mu.Unlock()
	// The rooms whose writes are all done may be empty now.
	for room := range rooms(jobs) {
		if room != "" && !failed[room] && !r.waiting(room) && !r.s.active(room) {
			actx, cancel := context.WithTimeout(ctx, requestTimeout)
			r.s.removeEmptyLogged(actx, room)
			cancel()
		}
	}
	return len(failed) == 0
}

// waiting reports whether a write for room is waiting.
func (r *retrier) waiting(room string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		if j.room == room {
			return true
		}
	}
	return false
}

func rooms(jobs []*retryJob) map[string]bool {
	m := map[string]bool{}
	for _, j := range jobs {
		m[j.room] = true
	}
	return m
}

// freeCodeLater hands the join code of a *codeNotFreedError in err to the
// retrier, and reports whether err was one (alone, or joined to others).
func (s *Server) freeCodeLater(err error) bool {
	var cn *codeNotFreedError
	if !errors.As(err, &cn) {
		return false
	}
	st := s.store
	s.retry.add("free join code", cn.room, err, func(ctx context.Context) error { return st.freeCodeOf(ctx, cn) })
	return true
}

// removeEmpty removes room if it is empty (store.removeIfEmpty), handing a
// join code it could not free, and blobs it could not purge, to the
// retrier.
func (s *Server) removeEmpty(ctx context.Context, room string) (bool, error) {
	ok, err := s.store.removeIfEmpty(ctx, room, func() bool { return s.active(room) })
	if !ok {
		return ok, err
	}
	code := s.freeCodeLater(err)
	var bp *blobsNotPurgedError
	if errors.As(err, &bp) {
		st := s.store
		s.retry.add("purge blobs", room, err, func(ctx context.Context) error { return st.purgeBlobs(ctx, room) })
	}
	if code || bp != nil {
		err = nil // both are all that can fail once the room is removed
	}
	return ok, err
}

// removeEmptyLogged removes room if it is empty (removeEmpty) and logs
// the outcome: what every background removal does after its writes.
func (s *Server) removeEmptyLogged(ctx context.Context, room string) {
	if ok, err := s.removeEmpty(ctx, room); err != nil {
		s.log.Info("removing an empty room failed", "room", room, "err", err)
	} else if ok {
		s.log.Debug("removed empty room", "room", room)
	}
}

// tryWrite does a write of room ("" = none) now or hands it to the
// retrier (retrier.try, in order with inOrder); a join code that the write
// could not free is freed apart (freeCodeLater). It is the retryFunc of
// the store's writes (store.sweepNode).
func (s *Server) tryWrite(ctx context.Context, what, room string, inOrder bool, do func(ctx context.Context) error) {
	s.retry.try(ctx, what, room, inOrder, func(ctx context.Context) error {
		if err := do(ctx); !s.freeCodeLater(err) {
			return err
		}
		return nil // done, but for the code's key
	})
}
