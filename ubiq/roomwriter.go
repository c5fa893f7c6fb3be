package ubiq

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// roomWriter runs one kind of a room's store writes (its presence key
// written again, see room.announceAgain; its members' claims put back, see
// room.writeClaims) on a goroutine of its own, so that the room goroutine,
// which serves the room's connections, never waits for the store: a write
// may wait up to requestTimeout.
//
// At most one write of a kind runs at a time. One asked for while one
// runs is done once more after it (asks coalesce), and reads what it
// writes when it starts, so the last write follows the last ask. A write
// that fails is logged and done again after a pause (retryFirst, doubling
// up to retryMax) until it succeeds. The writes run under the room's write
// context, which the room cancels when it stops; it then waits for the
// write under way (room.endWrites), so that none lands after the room let
// go of its keys.
type roomWriter struct {
	ctx   context.Context // the room's writes: canceled when it stops
	wg    *sync.WaitGroup // the room's writes under way
	log   *slog.Logger
	room  string
	write func(ctx context.Context, w *roomWriter) error

	mu      sync.Mutex
	running bool // a goroutine is writing
	again   bool // asked again while it writes

	// gate bounds what the writes log; only the running write uses it.
	gate logGate
}

// kick asks for a write. Room goroutine only (as room.endWrites): the
// write goroutine is counted in before the room waits for it.
func (w *roomWriter) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return // the room stops
	}
	if w.running {
		w.again = true
		return
	}
	w.running = true
	w.wg.Add(1)
	go w.run()
}

// run writes until a write succeeded and none was asked for since it
// began, or the room stops.
func (w *roomWriter) run() {
	defer w.wg.Done()
	pause := retryFirst
	for {
		ctx, cancel := context.WithTimeout(w.ctx, requestTimeout)
		err := w.write(ctx, w)
		cancel()
		if err != nil && w.ctx.Err() == nil {
			w.warn("Ubiq room write failed: retrying", "room", w.room, "retry_in", pause, "err", err)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-w.ctx.Done():
				t.Stop()
			}
			pause = min(2*pause, retryMax)
		} else {
			pause = retryFirst
		}
		w.mu.Lock()
		if w.ctx.Err() != nil || err == nil && !w.again {
			w.running, w.again = false, false
			w.mu.Unlock()
			return
		}
		w.again = false
		w.mu.Unlock()
	}
}

// warn logs a line at WARN within the writer's log budget. Write only.
func (w *roomWriter) warn(msg string, args ...any) {
	w.gate.log(w.log, slog.LevelWarn, msg, args...)
}
