package fanout

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Frame is one encoded message ready for the wire. Bytes is shared between
// connections and must not be changed after it is queued.
type Frame struct {
	Bytes []byte
	// Key, when not empty, lets a newer frame with the same key replace this
	// one while the queue is full.
	Key string
	// Urgent frames (interactions, acknowledgements) are written without
	// waiting for the linger interval, together with whatever is queued.
	Urgent bool
}

// Options bound a Writer's queue.
type Options struct {
	MaxFrames int // queue bound in frames (default 4096)
	MaxBytes  int // queue bound in bytes (default 8 MiB)
	// Linger spaces writes on a busy connection: a frame that arrives less
	// than Linger after the previous write waits until Linger has passed,
	// gathering whatever else arrives meanwhile into the same write. A frame
	// for a connection that wrote nothing for Linger goes out at once, so an
	// idle connection sees no added delay. 0 = write whenever frames wait.
	Linger time.Duration
	// WriteTimeout closes a connection whose writes make no progress for this
	// long (default 30s).
	WriteTimeout time.Duration
}

func (o *Options) defaults() {
	if o.MaxFrames <= 0 {
		o.MaxFrames = 4096
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 8 << 20
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
}

// Conn is what a Writer writes to.
type Conn interface {
	io.Writer
	SetWriteDeadline(time.Time) error
}

// Writer is a bounded outgoing queue drained by its own goroutine.
type Writer struct {
	conn Conn
	opt  Options

	mu     sync.Mutex
	queue  []Frame
	spare  []Frame
	bytes  int
	closed bool
	err    error

	wake   chan struct{}
	urgent chan struct{} // cuts a linger short
	done   chan struct{}

	dropped   atomic.Uint64
	coalesced atomic.Uint64
	written   atomic.Uint64
	batches   atomic.Uint64
}

// NewWriter starts a writer goroutine for conn. onError, if not nil, is
// called once when a write fails; the writer then discards further frames.
func NewWriter(conn Conn, opt Options, onError func(error)) *Writer {
	opt.defaults()
	w := &Writer{conn: conn, opt: opt, wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop(onError)
	return w
}

// Result says what Enqueue did with a frame.
type Result int

// Results of Enqueue.
const (
	Queued    Result = iota // appended to the queue
	Coalesced               // replaced an older frame with the same key
	Dropped                 // not queued: the queue is full or the writer closed
)

// Enqueue queues f. When the queue is full, f replaces the newest queued
// frame with the same key, or is dropped.
func (w *Writer) Enqueue(f Frame) Result {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Dropped
	}
	if len(w.queue) >= w.opt.MaxFrames || w.bytes+len(f.Bytes) > w.opt.MaxBytes {
		ok := f.Key != "" && w.replaceLocked(f)
		w.mu.Unlock()
		if ok {
			w.coalesced.Add(1)
			return Coalesced
		}
		w.dropped.Add(1)
		return Dropped
	}
	w.queue = append(w.queue, f)
	w.bytes += len(f.Bytes)
	if len(w.queue) == 1 {
		select { // under mu, so that Close cannot close wake meanwhile
		case w.wake <- struct{}{}:
		default:
		}
	}
	if f.Urgent {
		select {
		case w.urgent <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	return Queued
}

// replaceLocked replaces the newest queued frame with f's key.
func (w *Writer) replaceLocked(f Frame) bool {
	for i := len(w.queue) - 1; i >= 0; i-- {
		if w.queue[i].Key == f.Key {
			w.bytes += len(f.Bytes) - len(w.queue[i].Bytes)
			// Keep order of other frames; the newer state takes the old slot.
			w.queue[i] = f
			return true
		}
	}
	return false
}

func (w *Writer) loop(onError func(error)) {
	defer close(w.done)
	var buf []byte
	var last, deadline time.Time
	var linger *time.Timer
	for range w.wake {
		if w.opt.Linger > 0 {
			if wait := w.opt.Linger - time.Since(last); wait > 0 && !w.queuedUrgent() {
				if linger == nil {
					linger = time.NewTimer(wait)
				} else {
					linger.Reset(wait)
				}
				select {
				case <-linger.C:
				case <-w.urgent:
					linger.Stop()
				}
			}
		}
		select { // an urgent signal for frames about to be written is spent
		case <-w.urgent:
		default:
		}
		for {
			w.mu.Lock()
			batch := w.queue
			w.queue, w.spare = w.spare[:0], nil
			w.bytes = 0
			closed := w.closed
			w.mu.Unlock()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			buf = buf[:0]
			for i := range batch {
				buf = append(buf, batch[i].Bytes...)
				batch[i] = Frame{}
			}
			n := len(batch)
			w.mu.Lock()
			if w.spare == nil {
				w.spare = batch[:0]
			}
			w.mu.Unlock()
			if w.err == nil {
				// A write that makes no progress for WriteTimeout fails. The
				// deadline is moved only when half of it has passed: setting it
				// on every batch costs more than the writes of a small batch.
				if now := time.Now(); deadline.Sub(now) < w.opt.WriteTimeout/2 {
					deadline = now.Add(w.opt.WriteTimeout)
					w.conn.SetWriteDeadline(deadline)
				}
				if _, err := w.conn.Write(buf); err != nil {
					w.err = err
					if onError != nil {
						onError(err)
					}
				} else {
					w.written.Add(uint64(n))
					w.batches.Add(1)
				}
			}
			last = time.Now()
			if cap(buf) > 1<<20 {
				buf = nil // do not keep a large burst's buffer forever
			}
			if w.opt.Linger > 0 && !closed {
				break // the next frame waits for the linger interval
			}
		}
	}
}

// queuedUrgent reports whether an urgent frame waits in the queue.
func (w *Writer) queuedUrgent() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.queue {
		if w.queue[i].Urgent {
			return true
		}
	}
	return false
}

// Close stops accepting frames, lets the writer send what is queued, and
// waits for it to finish (bounded by the write timeout).
func (w *Writer) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.closed = true
	close(w.wake)
	select { // do not wait out a linger
	case w.urgent <- struct{}{}:
	default:
	}
	w.mu.Unlock()
	<-w.done
}

// Done is closed when the writer goroutine has finished.
func (w *Writer) Done() <-chan struct{} { return w.done }

// Stats are a writer's counters.
type Stats struct {
	Written, Batches, Dropped, Coalesced uint64
	Queued                               int
}

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	q := len(w.queue)
	w.mu.Unlock()
	return Stats{Written: w.written.Load(), Batches: w.batches.Load(), Dropped: w.dropped.Load(), Coalesced: w.coalesced.Load(), Queued: q}
}
