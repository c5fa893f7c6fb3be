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

// Frame is one encoded message ready for the wire. A Frame is queued by
// pointer and shared by every connection it goes to: neither it nor its
// Bytes may change once it is queued. (A queue of pointers keeps a busy
// node's queues small enough to stay in the CPU's cache: a thousand
// connections each queue dozens of frames per linger.)
type Frame struct {
	Bytes []byte
	// Key, when not empty, lets a newer frame with the same key replace this
	// one while the queue is full.
	Key string
	// Urgent frames (interactions, acknowledgements) are written without
	// waiting for the linger interval, together with whatever is queued.
	Urgent bool
	// Keep frames (acknowledgements, membership changes: messages whose
	// loss would leave the peer wrong for good) are never dropped: when the
	// queue is full they are queued beyond its bound, up to as many frames
	// and bytes again. A connection that falls that far behind is failed
	// with ErrTooSlow rather than left with a silently wrong view.
	Keep bool
	// Within, when positive, bounds how long the frame may wait: the queue
	// is written at most Within after the frame was queued, or after the
	// linger interval if that ends sooner. For frames that should not wait a
	// whole linger but need not cost a system call of their own at once.
	Within time.Duration
}

// Options bound a Writer's queue.
type Options struct {
	MaxFrames int // queue bound in frames (default 4096)
	MaxBytes  int // queue bound in bytes (default DefaultMaxBytes)
	// Linger spaces writes on a busy connection: a frame that arrives less
	// than Linger after the previous write waits until Linger has passed,
	// gathering whatever else arrives meanwhile into the same write. A frame
	// for a connection that wrote nothing for Linger goes out at once, so an
	// idle connection sees no added delay. 0 = write whenever frames wait.
	Linger time.Duration
	// WriteTimeout closes a connection whose writes make no progress for this
	// long (default 30s).
	WriteTimeout time.Duration
	// Clock schedules the lingering writes; one clock should serve all of a
	// node's connections. nil = the Writer makes its own.
	Clock *Clock
	// OnCoalesce, if not nil, is told how many queued frames newer frames
	// of the same key have replaced, as they are replaced (a front end's
	// metric); it must not block.
	OnCoalesce func(n int)
}

// DefaultMaxBytes is a queue's byte bound when Options.MaxBytes is not set.
const DefaultMaxBytes = 8 << 20

func (o *Options) defaults() {
	if o.MaxFrames <= 0 {
		o.MaxFrames = 4096
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
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

// Writer is a bounded outgoing queue. Its frames are written by the
// goroutine that enqueues them when the connection is idle, by the Clock
// when a linger ends, and by the Writer's own goroutine when a write must
// wait for the socket (or the connection is not a plain socket).
type Writer struct {
	conn Conn
	raw  syscall.RawConn // for inline writes; nil if conn is not a socket
	// inl is an inline write in progress (guarded by busy), and rawWrite
	// the function that raw.Write calls for it, made once: a closure made
	// per write would be three allocations per write.
	inl      inlineWrite
	rawWrite func(fd uintptr) bool
	opt      Options
	clock    *Clock

	mu     sync.Mutex
	queue  []*Frame
	spare  []*Frame
	bytes  int
	closed bool
	err    error // the first write error; guarded by mu
	// busy is set while bytes are being written, by the writer goroutine or
	// by an inline write, so that the two never interleave.
	busy bool
	// index holds the slot of each key's frame in the queue while indexed:
	// from when the queue was found full (compactLocked) until it is taken
	// for a write. The map is kept for the next time.
	index   map[string]int
	indexed bool
	// urgentQ is set while an urgent frame is queued.
	urgentQ bool
	// scheduled is set while the writer has an entry in its clock, for the
	// time dueAt.
	scheduled bool
	dueAt     int64
	// soonest is the earliest deadline of the queued frames with Within, in
	// ns since the clock's epoch; 0 = none.
	soonest int64

	last atomic.Int64 // end of the last write, in ns since the clock's epoch

	wake chan struct{} // the writer goroutine has frames to write
	done chan struct{}

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
	w := &Writer{conn: conn, opt: opt, clock: opt.Clock, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if w.clock == nil {
		w.clock = NewClock()
	}
	w.last.Store(w.clock.now() - int64(opt.Linger))
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
			w.rawWrite = w.inl.write
		}
	}
	go w.loop(onError)
	return w
}

// ErrTooSlow fails a Writer whose queue overflowed even the room kept for
// Keep frames: its reader has fallen too far behind to be told what changed.
var ErrTooSlow = errors.New("fanout: the peer reads too slowly: its queue is full even for frames that must not be lost")

// Result says what Enqueue did with a frame.
type Result int

// Results of Enqueue.
const (
	Queued    Result = iota // appended to the queue
	Coalesced               // replaced an older frame with the same key
	Dropped                 // not queued: the queue is full or the writer closed
)

// Enqueue queues f. When the queue is full, f replaces the newest queued
// frame with the same key (if the queue's bytes stay within MaxBytes, or f
// is no larger), or is dropped; a Keep frame is queued in the
// room beyond the bound, and fails the writer with ErrTooSlow when that is
// full too.
//
// When the connection is a socket and no write is under way, Enqueue may
// write itself, with one non-blocking system call, instead of waking the
// writer goroutine: an urgent frame goes out at once together with
// everything queued before it (ending a linger), and any frame goes out at
// once to a connection that wrote nothing for the linger interval. This
// saves a goroutine hand-off per hop. Whatever the socket does not take at
// once is queued for the writer goroutine, so a slow reader never blocks the
// caller.
func (w *Writer) Enqueue(f *Frame) Result {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Dropped
	}
	if w.raw != nil && !w.busy && w.err == nil &&
		(f.Urgent || (len(w.queue) == 0 && int64(w.sinceLast()) >= w.linger())) {
		w.busy = true
		batch := w.takeLocked()
		w.mu.Unlock()
		w.writeInline(batch, f.Bytes)
		return Queued
	}
	if w.fullLocked(f) && !w.indexed {
		w.compactLocked()
	}
	if w.fullLocked(f) && !(f.Keep && w.keepRoomLocked(f)) {
		if f.Keep {
			if w.err == nil {
				w.err = ErrTooSlow
				w.signal() // the writer goroutine reports it
			}
		} else if f.Key != "" && w.replaceLocked(f) {
			w.countCoalesced(1)
			w.mu.Unlock()
			return Coalesced
		}
		w.mu.Unlock()
		w.dropped.Add(1)
		return Dropped
	}
	if w.indexed && f.Key != "" {
		w.index[f.Key] = len(w.queue)
	}
	w.queue = append(w.queue, f)
	w.bytes += len(f.Bytes)
	w.urgentQ = w.urgentQ || f.Urgent
	if f.Within > 0 && !f.Urgent {
		if d := w.clock.now() + int64(f.Within); w.soonest == 0 || d < w.soonest {
			w.soonest = d
		}
	}
	if !w.busy { // otherwise the write under way schedules the next
		w.schedule()
	}
	w.mu.Unlock()
	return Queued
}

// sinceLast is the time since the end of the last write.
func (w *Writer) sinceLast() time.Duration {
	return time.Duration(w.clock.now() - w.last.Load())
}

// schedule arranges the next write of what is queued; w.mu is held and no
// write is under way. Urgent frames, errors to report, and a connection
// that is not a socket and is due now go to the writer goroutine; the rest
// waits for the clock at the end of the linger interval.
func (w *Writer) schedule() {
	at := w.nextAt()
	if (len(w.queue) == 0 || w.scheduled && !w.urgentQ && w.dueAt <= at) && w.err == nil {
		return // nothing to write, or the clock has it already
	}
	if w.urgentQ || w.err != nil || w.opt.Linger == 0 || (w.raw == nil && at <= w.clock.now()) {
		w.signal()
		return
	}
	if !w.scheduled || at < w.dueAt {
		// An entry for a later time may stay in the clock; when it fires it
		// finds nothing due and does nothing.
		w.scheduled, w.dueAt = true, at
		w.clock.add(w, at)
	}
}

// nextAt is when what is queued is due: the end of the linger interval, or
// the deadline of a frame queued with Within if that is sooner; w.mu is
// held.
func (w *Writer) nextAt() int64 {
	at := w.last.Load() + w.linger()
	if w.soonest != 0 && w.soonest < at {
		at = w.soonest
	}
	return at
}

// wroteAt records the end of a write at now (clock time).
func (w *Writer) wroteAt(now int64) {
	w.last.Store(now)
	w.clock.tick(now)
}

// linger is the linger interval in ns, stretched by the clock's write
// budget.
func (w *Writer) linger() int64 {
	return int64(float64(w.opt.Linger) * w.clock.Stretch())
}

// signal wakes the writer goroutine; w.mu is held.
func (w *Writer) signal() {
	if w.closed {
		return // Close has woken it for the last time
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// fire is the clock's call at the end of the linger interval. On a socket,
// it writes what is queued on the clock's goroutine with one non-blocking
// system call; otherwise it wakes the writer goroutine.
func (w *Writer) fire(at int64) {
	w.mu.Lock()
	if !w.scheduled || at != w.dueAt {
		// An entry that an earlier one replaced (a frame with Within
		// brought the write forward) and that has been written since.
		w.mu.Unlock()
		return
	}
	w.scheduled = false
	if w.closed || w.busy || len(w.queue) == 0 {
		// Close flushes; a write under way schedules the next itself.
		w.mu.Unlock()
		return
	}
	if w.raw == nil || w.err != nil || w.urgentQ {
		w.clock.wrote()
		w.signal()
		w.mu.Unlock()
		return
	}
	if at := w.nextAt(); at > w.clock.now()+int64(clockSlack) {
		// An inline write went out since this was scheduled, or this is an
		// entry left for a later time.
		w.scheduled, w.dueAt = true, at
		w.clock.add(w, at)
		w.mu.Unlock()
		return
	}
	w.busy = true
	batch := w.takeLocked()
	w.mu.Unlock()
	w.clock.wrote()
	w.writeInline(batch, nil)
}

// takeLocked takes the queued frames for a write, leaving an empty queue
// (the spare one, if any) for what comes meanwhile; w.mu is held, and
// w.busy is or will be set. The frames are copied out after w.mu is
// released, so the goroutines fanning out to this connection do not wait
// for the copy.
func (w *Writer) takeLocked() []*Frame {
	batch := w.queue
	w.queue, w.spare = w.spare[:0], nil
	w.indexed = false
	w.bytes = 0
	w.urgentQ = false
	w.soonest = 0
	return batch
}

// writeInline writes the frames of batch followed by b with one
// non-blocking write on the caller's goroutine; w.busy is held, w.mu is
// not. The unwritten rest, if any, goes to the front of the queue for the
// writer goroutine, which waits for the socket.
func (w *Writer) writeInline(batch []*Frame, b []byte) {
	out := b
	var buf *[]byte
	if len(batch) > 0 {
		buf = gather(batch, b)
		out = *buf
	}
	n := len(batch)
	if b != nil {
		n++
	}
	w.inl = inlineWrite{out: out}
	err := w.raw.Write(w.rawWrite)
	sent, werr := w.inl.sent, w.inl.err
	w.inl = inlineWrite{}
	if werr == nil && err != nil {
		werr = err
	}
	w.wroteAt(w.clock.now())
	var rest []byte
	if werr == nil && sent < len(out) {
		rest = out[sent:]
		if buf != nil { // the buffer is reused: the rest needs its own copy
			rest = append([]byte(nil), rest...)
		}
	}
	if buf != nil {
		release(buf)
	}
	w.mu.Lock()
	w.busy = false
	if w.spare == nil && batch != nil {
		w.spare = batch[:0]
	}
	switch {
	case werr != nil:
		if w.err == nil {
			w.err = &inlineError{werr}
		}
	case rest != nil:
		// The socket is full: the rest goes first, then what was queued
		// meanwhile. The writer goroutine takes it from here.
		w.clock.behind.Add(1)
		w.queue = append(w.queue, nil)
		copy(w.queue[1:], w.queue)
		w.queue[0] = &Frame{Bytes: rest, Urgent: true}
		w.indexed = false // the slots have moved
		w.bytes += len(rest)
		w.urgentQ = true
	default:
		w.written.Add(uint64(n))
		w.batches.Add(1)
		w.inline.Add(uint64(n))
	}
	w.schedule()
	w.mu.Unlock()
}

// inlineWrite is the state of one inline write: what to write, how much
// of it went, and the error that stopped it.
type inlineWrite struct {
	out  []byte
	sent int
	err  error
}

// write writes as much of out as the socket takes without waiting; it is
// the function given to RawConn.Write.
func (iw *inlineWrite) write(fd uintptr) bool {
	for iw.sent < len(iw.out) {
		m, err := syscall.Write(int(fd), iw.out[iw.sent:])
		if m > 0 {
			iw.sent += m
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil && err != syscall.EAGAIN {
			iw.err = err
		}
		if err != nil || m <= 0 {
			break
		}
	}
	return true // never wait for the socket here
}

// batchBufs holds the buffers that writes gather a batch in. They are
// shared by all writers, rather than one per connection, so that the few
// in use stay in the CPU's cache: a node with a thousand busy connections
// would otherwise write each batch into a buffer of its own that the
// previous linger's traffic has long pushed out of the cache.
var batchBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxBatchBuf bounds the buffers kept in batchBufs; a larger burst's buffer
// is left to the garbage collector. It holds a full queue of poses (4,096
// frames of about 400 bytes): under overload, when readers fall behind,
// every write is such a batch, and a buffer made for each of them would
// be half a gigabyte a second of garbage (a collection every 55 ms at 550
// users in one scene).
const maxBatchBuf = 4 << 20

// gather copies the frames of batch, followed by tail, into a buffer from
// batchBufs, and clears batch's slots. The caller releases the buffer.
func gather(batch []*Frame, tail []byte) *[]byte {
	buf := batchBufs.Get().(*[]byte)
	n := len(tail)
	for _, f := range batch {
		n += len(f.Bytes)
	}
	if cap(*buf) < n {
		*buf = make([]byte, 0, n) // once, rather than growing by appends
	}
	b := (*buf)[:0]
	for i := range batch {
		b = append(b, batch[i].Bytes...)
		batch[i] = nil
	}
	*buf = append(b, tail...)
	return buf
}

// release returns a buffer from gather to batchBufs.
func release(buf *[]byte) {
	if cap(*buf) <= maxBatchBuf {
		*buf = (*buf)[:0]
		batchBufs.Put(buf)
	}
}

// inlineError marks a write error found by an inline write; the writer
// goroutine reports it through onError.
type inlineError struct{ err error }

func (e *inlineError) Error() string { return e.err.Error() }
func (e *inlineError) Unwrap() error { return e.err }

// fullLocked reports whether f does not fit the queue's bounds.
func (w *Writer) fullLocked(f *Frame) bool {
	return len(w.queue) >= w.opt.MaxFrames || w.bytes+len(f.Bytes) > w.opt.MaxBytes
}

// keepRoomLocked reports whether the room kept beyond the bound for Keep
// frames (as much again) takes f.
func (w *Writer) keepRoomLocked(f *Frame) bool {
	return len(w.queue) < 2*w.opt.MaxFrames && w.bytes+len(f.Bytes) <= 2*w.opt.MaxBytes
}

// compactLocked runs when the queue first fills: of the frames that share
// a key, it keeps one, the newest, in the slot of the oldest, and builds
// w.index, which then finds the queued frame of a key at once. So a full
// queue costs one pass over it per fill, not a search per frame (a slow
// reader of a busy scene gets thousands of frames a second). The frames
// it removes count as coalesced.
func (w *Writer) compactLocked() {
	if w.index == nil {
		w.index = make(map[string]int, 256)
	}
	clear(w.index)
	w.indexed = true
	q := w.queue
	n, removed := 0, 0
	for i := range q {
		f := q[i]
		if f.Key != "" {
			if j, ok := w.index[f.Key]; ok {
				w.bytes += len(f.Bytes) - len(q[j].Bytes)
				q[j] = f
				removed++
				continue
			}
			w.index[f.Key] = n
		}
		q[n] = f
		n++
	}
	clear(q[n:])
	w.queue = q[:n]
	w.countCoalesced(removed)
}

// countCoalesced counts n frames replaced by newer ones.
func (w *Writer) countCoalesced(n int) {
	if n == 0 {
		return
	}
	w.coalesced.Add(uint64(n))
	if w.opt.OnCoalesce != nil {
		w.opt.OnCoalesce(n)
	}
}

// replaceLocked puts f in the slot of the queued frame with its key, if
// there is one (the newer state takes the old slot; the order of the
// other frames stays) and the queue stays within its byte bound, or f is
// no larger than that frame; w.indexed is set.
func (w *Writer) replaceLocked(f *Frame) bool {
	i, ok := w.index[f.Key]
	if !ok {
		return false
	}
	grow := len(f.Bytes) - len(w.queue[i].Bytes)
	if grow > 0 && w.bytes+grow > w.opt.MaxBytes {
		// A queue full by its frame count would otherwise take every
		// key's larger replacement, past MaxBytes without limit.
		return false
	}
	w.bytes += grow
	w.queue[i] = f
	return true
}

func (w *Writer) loop(onError func(error)) {
	defer close(w.done)
	st := writerState{onError: onError}
	for range w.wake {
		if w.flush(&st) {
			return
		}
	}
	// wake is closed (Close): an inline write may still be finishing.
	w.flush(&st)
}

// writerState is the writer goroutine's own state.
type writerState struct {
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
		batch := w.takeLocked()
		closed, err := w.closed, w.err
		w.busy = len(batch) > 0
		w.mu.Unlock()
		if err != nil {
			st.report(err)
		}
		if len(batch) == 0 {
			return closed
		}
		n := len(batch)
		buf := gather(batch, nil)
		if err == nil {
			// A write that makes no progress for WriteTimeout fails. The
			// deadline is moved only when half of it has passed: setting it
			// on every batch costs more than the writes of a small batch.
			if now := time.Now(); st.deadline.Sub(now) < w.opt.WriteTimeout/2 {
				st.deadline = now.Add(w.opt.WriteTimeout)
				w.conn.SetWriteDeadline(st.deadline)
			}
			if _, werr := w.conn.Write(*buf); werr != nil {
				err = werr
			} else {
				w.written.Add(uint64(n))
				w.batches.Add(1)
			}
		}
		release(buf)
		w.wroteAt(w.clock.now())
		w.mu.Lock()
		w.busy = false
		if w.spare == nil {
			w.spare = batch[:0]
		}
		if err != nil && w.err == nil {
			w.err = err
		}
		lingering := w.opt.Linger > 0 && !w.closed
		if lingering && err == nil {
			w.schedule() // the next batch waits for the linger interval
		}
		w.mu.Unlock()
		if err != nil {
			st.report(err)
		}
		if lingering {
			return false
		}
	}
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
	close(w.wake) // the goroutine writes what is queued and ends
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
