package fanout

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
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
	raw  syscall.RawConn // for inline writes; nil if conn is not a socket
	opt  Options

	mu     sync.Mutex
	queue  []Frame
	spare  []Frame
	bytes  int
	closed bool
	err    error // the first write error; guarded by mu
	// busy is set while bytes are being written, by the writer goroutine or
	// by an inline write, so that the two never interleave.
	busy bool
	buf  []byte // the inline writer's batch buffer; used only under busy

	epoch time.Time
	last  atomic.Int64 // end of the last write, in ns since epoch

	wake   chan struct{}
	urgent chan struct{} // cuts a linger short
	done   chan struct{}

	dropped   atomic.Uint64
	coalesced atomic.Uint64
	written   atomic.Uint64
	batches   atomic.Uint64
	inline    atomic.Uint64
}

// NewWriter starts a writer goroutine for conn. onError, if not nil, is
// called once when a write fails; the writer then discards further frames.
func NewWriter(conn Conn, opt Options, onError func(error)) *Writer {
	opt.defaults()
	w := &Writer{conn: conn, opt: opt, wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1), done: make(chan struct{}), epoch: time.Now()}
	w.last.Store(-int64(opt.Linger))
	// Inline writes go straight to the socket, so only for plain sockets:
	// a wrapper (TLS, WebSocket) must see every byte through its Write.
	var sc syscall.Conn
	switch c := conn.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	}
	if sc != nil {
		if raw, err := sc.SyscallConn(); err == nil {
			w.raw = raw
		}
	}
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
//
// When the connection is a socket and no write is under way, Enqueue may
// write itself, with one non-blocking system call, instead of waking the
// writer goroutine: an urgent frame goes out at once together with
// everything queued before it (ending a linger), and any frame goes out at
// once to a connection that wrote nothing for the linger interval. This
// saves a goroutine hand-off per hop. Whatever the socket does not take at
// once is queued for the writer goroutine, so a slow reader never blocks the
// caller.
func (w *Writer) Enqueue(f Frame) Result {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Dropped
	}
	if w.raw != nil && !w.busy && w.err == nil &&
		(f.Urgent || (len(w.queue) == 0 && w.sinceLast() >= w.opt.Linger)) {
		w.busy = true
		w.buf = w.buf[:0]
		for i := range w.queue {
			w.buf = append(w.buf, w.queue[i].Bytes...)
			w.queue[i] = Frame{}
		}
		n := len(w.queue) + 1
		w.queue = w.queue[:0]
		w.bytes = 0
		w.mu.Unlock()
		w.writeInline(f.Bytes, n)
		return Queued
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

// sinceLast is the time since the end of the last write.
func (w *Writer) sinceLast() time.Duration {
	return time.Since(w.epoch) - time.Duration(w.last.Load())
}

// writeInline writes w.buf (the frames that were queued) followed by b, n
// frames in all, with one non-blocking write on the caller's goroutine;
// w.busy is held. The unwritten rest, if any, goes to the front of the
// queue for the writer goroutine.
func (w *Writer) writeInline(b []byte, n int) {
	out := b
	if len(w.buf) > 0 {
		w.buf = append(w.buf, b...)
		out = w.buf
	}
	var sent int
	var werr error
	err := w.raw.Write(func(fd uintptr) bool {
		for sent < len(out) {
			m, err := syscall.Write(int(fd), out[sent:])
			if m > 0 {
				sent += m
			}
			if err == syscall.EINTR {
				continue
			}
			if err != nil && err != syscall.EAGAIN {
				werr = err
			}
			if err != nil || m <= 0 {
				break
			}
		}
		return true // never wait for the socket here
	})
	if werr == nil && err != nil {
		werr = err
	}
	w.last.Store(int64(time.Since(w.epoch)))
	var rest []byte
	if werr == nil && sent < len(out) {
		rest = out[sent:]
		if len(w.buf) > 0 { // w.buf is reused: the rest needs its own copy
			rest = append([]byte(nil), rest...)
		}
	}
	if cap(w.buf) > 1<<20 {
		w.buf = nil
	}
	w.mu.Lock()
	w.busy = false
	switch {
	case werr != nil:
		if w.err == nil {
			w.err = &inlineError{werr}
		}
	case rest != nil:
		// The socket is full: the rest goes first, then what was queued
		// meanwhile. The writer goroutine takes it from here.
		w.queue = append(w.queue, Frame{})
		copy(w.queue[1:], w.queue)
		w.queue[0] = Frame{Bytes: rest, Urgent: true}
		w.bytes += len(rest)
	default:
		w.written.Add(uint64(n))
		w.batches.Add(1)
		w.inline.Add(uint64(n))
	}
	if (len(w.queue) > 0 || w.err != nil) && !w.closed {
		select {
		case w.wake <- struct{}{}:
		default:
		}
		select {
		case w.urgent <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

// inlineError marks a write error found by an inline write; the writer
// goroutine reports it through onError.
type inlineError struct{ err error }

func (e *inlineError) Error() string { return e.err.Error() }
func (e *inlineError) Unwrap() error { return e.err }

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
	st := writerState{onError: onError}
	var linger *time.Timer
	for range w.wake {
		if w.opt.Linger > 0 {
			if wait := w.opt.Linger - w.sinceLast(); wait > 0 && !w.queuedUrgent() {
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
		if w.flush(&st) {
			return
		}
	}
	// wake is closed (Close): an inline write may still be finishing.
	w.flush(&st)
}

// writerState is the writer goroutine's own state.
type writerState struct {
	buf      []byte
	deadline time.Time
	reported bool
	onError  func(error)
}

func (st *writerState) report(err error) {
	if !st.reported && st.onError != nil {
		st.reported = true
		var ie *inlineError
		if errors.As(err, &ie) {
			err = ie.err
		}
		st.onError(err)
	}
}

// flush writes what is queued, in batches, until the queue is empty or, with
// a linger interval, after one batch. It reports true when the writer is
// closed and everything is written.
func (w *Writer) flush(st *writerState) bool {
	for {
		w.mu.Lock()
		if w.busy { // an inline write is under way
			closed := w.closed
			w.mu.Unlock()
			if !closed {
				return false // it wakes the writer when it is done
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		batch := w.queue
		w.queue, w.spare = w.spare[:0], nil
		w.bytes = 0
		closed, err := w.closed, w.err
		w.busy = len(batch) > 0
		w.mu.Unlock()
		if err != nil {
			st.report(err)
		}
		if len(batch) == 0 {
			return closed
		}
		st.buf = st.buf[:0]
		for i := range batch {
			st.buf = append(st.buf, batch[i].Bytes...)
			batch[i] = Frame{}
		}
		n := len(batch)
		if err == nil {
			// A write that makes no progress for WriteTimeout fails. The
			// deadline is moved only when half of it has passed: setting it
			// on every batch costs more than the writes of a small batch.
			if now := time.Now(); st.deadline.Sub(now) < w.opt.WriteTimeout/2 {
				st.deadline = now.Add(w.opt.WriteTimeout)
				w.conn.SetWriteDeadline(st.deadline)
			}
			if _, werr := w.conn.Write(st.buf); werr != nil {
				err = werr
			} else {
				w.written.Add(uint64(n))
				w.batches.Add(1)
			}
		}
		w.last.Store(int64(time.Since(w.epoch)))
		w.mu.Lock()
		w.busy = false
		if w.spare == nil {
			w.spare = batch[:0]
		}
		if err != nil && w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
		if err != nil {
			st.report(err)
		}
		if cap(st.buf) > 1<<20 {
			st.buf = nil // do not keep a large burst's buffer forever
		}
		if w.opt.Linger > 0 && !closed {
			return false // the next frame waits for the linger interval
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
	// Inline counts the frames written by Enqueue itself (included in
	// Written and Batches).
	Written, Batches, Inline, Dropped, Coalesced uint64
	Queued                                       int
}

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	q := len(w.queue)
	w.mu.Unlock()
	return Stats{Written: w.written.Load(), Batches: w.batches.Load(), Inline: w.inline.Load(), Dropped: w.dropped.Load(), Coalesced: w.coalesced.Load(), Queued: q}
}
