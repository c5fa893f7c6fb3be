package fanout

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testnet"
)

// pipeConn records writes; block makes Write wait until released.
type pipeConn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	block  chan struct{}
	fail   error
}

func (c *pipeConn) Write(p []byte) (int, error) {
	if c.block != nil {
		<-c.block
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes++
	return c.buf.Write(p)
}
func (c *pipeConn) SetWriteDeadline(time.Time) error { return nil }
func (c *pipeConn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func TestWriterOrderAndClose(t *testing.T) {
	c := &pipeConn{}
	w := NewWriter(c, Options{}, nil)
	var want bytes.Buffer
	for i := 0; i < 1000; i++ {
		s := fmt.Sprintf("m%d;", i)
		want.WriteString(s)
		if w.Enqueue(&Frame{Bytes: []byte(s)}) != Queued {
			t.Fatalf("frame %d dropped", i)
		}
	}
	w.Close()
	if c.String() != want.String() {
		t.Fatalf("wrote %q..., want all frames in order", c.String()[:40])
	}
	if w.Enqueue(&Frame{Bytes: []byte("late")}) != Dropped {
		t.Fatal("enqueue after close succeeded")
	}
}

func TestWriterBatchesWhileBusy(t *testing.T) {
	c := &pipeConn{block: make(chan struct{})}
	w := NewWriter(c, Options{}, nil)
	w.Enqueue(&Frame{Bytes: []byte("a")}) // taken by the writer, which blocks in Write
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	for i := 0; i < 50; i++ {
		w.Enqueue(&Frame{Bytes: []byte("b")})
	}
	close(c.block)
	w.Close()
	if c.writes != 2 {
		t.Fatalf("%d writes, want 2 (one frame, then one batch of 50)", c.writes)
	}
	if s := w.Stats(); s.Written != 51 || s.Batches != 2 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestWriterBoundCoalesceAndDrop(t *testing.T) {
	c := &pipeConn{block: make(chan struct{})}
	w := NewWriter(c, Options{MaxFrames: 3}, nil)
	w.Enqueue(&Frame{Bytes: []byte("x")})
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	w.Enqueue(&Frame{Bytes: []byte("[p1a]"), Key: "p1"})
	w.Enqueue(&Frame{Bytes: []byte("[p2a]"), Key: "p2"})
	w.Enqueue(&Frame{Bytes: []byte("[o]")})
	// Queue full: a newer pose of p1 replaces the stale one; an unkeyed
	// frame and a pose with no queued predecessor are dropped.
	if w.Enqueue(&Frame{Bytes: []byte("[p1b]"), Key: "p1"}) != Coalesced {
		t.Fatal("coalescing frame dropped")
	}
	if w.Enqueue(&Frame{Bytes: []byte("[z]")}) != Dropped || w.Enqueue(&Frame{Bytes: []byte("[p3]"), Key: "p3"}) != Dropped {
		t.Fatal("frame accepted into a full queue")
	}
	close(c.block)
	w.Close()
	if got, want := c.String(), "x[p1b][p2a][o]"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	if s := w.Stats(); s.Dropped != 2 || s.Coalesced != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

// enqueueWant enqueues f and checks what Enqueue did with it.
func enqueueWant(t *testing.T, w *Writer, f *Frame, want Result) {
	t.Helper()
	if r := w.Enqueue(f); r != want {
		t.Fatalf("%s: %v, want %v", f.Bytes, r, want)
	}
}

// finish unblocks c, closes w and checks everything c got.
func finish(t *testing.T, c *pipeConn, w *Writer, want string) {
	t.Helper()
	close(c.block)
	w.Close()
	if got := c.String(); got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
}

// When the queue fills, the frames a newer frame of the same key supersedes
// go, each key's newest in the slot of its oldest, and the room they leave
// takes new frames, keyed or not.
func TestWriterCompactsFullQueue(t *testing.T) {
	c := &pipeConn{block: make(chan struct{})}
	var told atomic.Int64
	w := NewWriter(c, Options{MaxFrames: 6, OnCoalesce: func(n int) { told.Add(int64(n)) }}, nil)
	w.Enqueue(&Frame{Bytes: []byte("x")})
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	for _, f := range []*Frame{
		{Bytes: []byte("[p1a]"), Key: "p1"}, {Bytes: []byte("[p2a]"), Key: "p2"}, {Bytes: []byte("[p1b]"), Key: "p1"},
		{Bytes: []byte("[o]")}, {Bytes: []byte("[p2b]"), Key: "p2"}, {Bytes: []byte("[p1c]"), Key: "p1"},
	} {
		if r := w.Enqueue(f); r != Queued {
			t.Fatalf("%s: %v before the queue is full", f.Bytes, r)
		}
	}
	// Full: compaction leaves [p1c][p2b][o], with room for three more.
	enqueueWant(t, w, &Frame{Bytes: []byte("[z]")}, Queued)
	enqueueWant(t, w, &Frame{Bytes: []byte("[p3]"), Key: "p3"}, Queued)
	enqueueWant(t, w, &Frame{Bytes: []byte("[p2c]"), Key: "p2"}, Queued)
	// Full again: a key with queued frames replaces its newest; others drop.
	enqueueWant(t, w, &Frame{Bytes: []byte("[p2d]"), Key: "p2"}, Coalesced)
	enqueueWant(t, w, &Frame{Bytes: []byte("[p4]"), Key: "p4"}, Dropped)
	finish(t, c, w, "x[p1c][p2b][o][z][p3][p2d]")
	if s := w.Stats(); s.Coalesced != 4 || s.Dropped != 1 || told.Load() != 4 {
		t.Fatalf("stats = %+v, OnCoalesce told %d; want 4 coalesced, 1 dropped", s, told.Load())
	}
}

// The index of a full queue lasts until the queue is taken for a write:
// the next fill starts afresh.
func TestWriterIndexEndsWithTheWrite(t *testing.T) {
	c := &pipeConn{block: make(chan struct{})} // each receive releases one write
	w := NewWriter(c, Options{MaxFrames: 3}, nil)
	w.Enqueue(&Frame{Bytes: []byte("x")})
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	for _, f := range []*Frame{{Bytes: []byte("[p1a]"), Key: "p1"}, {Bytes: []byte("[p2a]"), Key: "p2"}, {Bytes: []byte("[p1b]"), Key: "p1"}} {
		w.Enqueue(f)
	}
	enqueueWant(t, w, &Frame{Bytes: []byte("[p2b]"), Key: "p2"}, Queued)
	c.block <- struct{}{} // "x" goes; the writer takes the queue and blocks again
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	for _, k := range []string{"k5", "k6", "k7"} {
		w.Enqueue(&Frame{Bytes: []byte("[" + k + "]"), Key: k})
	}
	// p2's old slot is gone with the write: nothing to replace.
	enqueueWant(t, w, &Frame{Bytes: []byte("[p2c]"), Key: "p2"}, Dropped)
	finish(t, c, w, "x[p1b][p2a][p2b][k5][k6][k7]")
}

func TestWriterErrorReportedOnce(t *testing.T) {
	c := &pipeConn{fail: errors.New("broken pipe")}
	var n int
	var mu sync.Mutex
	w := NewWriter(c, Options{}, func(error) { mu.Lock(); n++; mu.Unlock() })
	for i := 0; i < 10; i++ {
		w.Enqueue(&Frame{Bytes: []byte("a")})
		time.Sleep(time.Millisecond)
	}
	w.Close()
	if n != 1 {
		t.Fatalf("onError called %d times, want 1", n)
	}
}

// A connection that never reads must not block the goroutine that fans out.
func TestSlowConnDoesNotBlockEnqueue(t *testing.T) {
	c := &pipeConn{block: make(chan struct{})}
	w := NewWriter(c, Options{MaxFrames: 100}, nil)
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100000; i++ {
			w.Enqueue(&Frame{Bytes: []byte("pose"), Key: "k"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Enqueue blocked on a stalled connection")
	}
	close(c.block)
	w.Close()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func BenchmarkEnqueue(b *testing.B) {
	c := &pipeConn{}
	w := NewWriter(c, Options{}, nil)
	f := &Frame{Bytes: make([]byte, 300)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		w.Enqueue(f)
	}
	w.Close()
}

func TestWriterLingerBatchesSteadyTraffic(t *testing.T) {
	c := &pipeConn{}
	w := NewWriter(c, Options{Linger: 20 * time.Millisecond}, nil)
	w.Enqueue(&Frame{Bytes: []byte("a")}) // idle: written at once
	waitFor(t, func() bool { return w.Stats().Written == 1 })
	for i := 0; i < 10; i++ { // steady traffic inside one linger interval
		w.Enqueue(&Frame{Bytes: []byte("b")})
		time.Sleep(time.Millisecond)
	}
	waitFor(t, func() bool { return w.Stats().Written == 11 })
	w.Close()
	if s := w.Stats(); s.Batches > 3 {
		t.Fatalf("%d writes for 11 frames with a 20ms linger, want at most 3", s.Batches)
	}
}

// An urgent frame does not wait for the linger interval of a busy
// connection, and takes the queued frames with it.
func TestWriterUrgentSkipsLinger(t *testing.T) {
	c := &pipeConn{}
	w := NewWriter(c, Options{Linger: time.Hour}, nil)
	w.Enqueue(&Frame{Bytes: []byte("a")}) // idle: written at once
	waitFor(t, func() bool { return w.Stats().Written == 1 })
	w.Enqueue(&Frame{Bytes: []byte("b"), Key: "pose"}) // busy: would wait an hour
	time.Sleep(20 * time.Millisecond)
	if w.Stats().Written != 1 {
		t.Fatal("a pose was written before the linger interval")
	}
	w.Enqueue(&Frame{Bytes: []byte("c"), Urgent: true})
	waitFor(t, func() bool { return w.Stats().Written == 3 })
	if got := c.String(); got != "abc" {
		t.Fatalf("wrote %q, want abc", got)
	}
	// An urgent frame queued while the writer is idle is not delayed either.
	w.Enqueue(&Frame{Bytes: []byte("d"), Urgent: true})
	waitFor(t, func() bool { return w.Stats().Written == 4 })
	w.Close()
}

// A frame with Within shortens a busy connection's linger to its bound and
// takes the queued frames with it; the writer then lingers as before.
func TestWriterWithinShortensLinger(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn func(t *testing.T) (Conn, func() string)
	}{
		{"not a socket (writer goroutine)", func(t *testing.T) (Conn, func() string) {
			c := &pipeConn{}
			return c, c.String
		}},
		{"socket (clock, inline)", func(t *testing.T) (Conn, func() string) {
			a, b := testnet.TCPPair(t)
			var mu sync.Mutex
			var got []byte
			go func() {
				buf := make([]byte, 64)
				for {
					n, err := b.Read(buf)
					mu.Lock()
					got = append(got, buf[:n]...)
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
			return a, func() string { mu.Lock(); defer mu.Unlock(); return string(got) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, got := tc.conn(t)
			w := NewWriter(c, Options{Linger: time.Hour, Clock: NewClock()}, nil)
			defer w.Close()
			w.Enqueue(&Frame{Bytes: []byte("a")}) // idle: written at once
			waitFor(t, func() bool { return got() == "a" })
			w.Enqueue(&Frame{Bytes: []byte("b"), Key: "pose"}) // waits an hour
			w.Enqueue(&Frame{Bytes: []byte("c"), Within: 5 * time.Millisecond})
			waitFor(t, func() bool { return got() == "abc" })
			w.Enqueue(&Frame{Bytes: []byte("d"), Key: "pose"})
			time.Sleep(30 * time.Millisecond)
			if g := got(); g != "abc" {
				t.Fatalf("wrote %q after the bounded frame, want abc: the linger no longer holds", g)
			}
		})
	}
}

// Frames with Within on a busy connection bring its write forward again and
// again: each costs at most one write, and the clock entries they replace
// come due without writing and are gone once the connection is quiet.
func TestWriterWithinLeavesNoStaleWrites(t *testing.T) {
	a, b := testnet.TCPPair(t)
	go io.Copy(io.Discard, b)
	clock := NewClock()
	w := NewWriter(a, Options{Linger: 40 * time.Millisecond, Clock: clock}, nil)
	defer w.Close()
	w.Enqueue(&Frame{Bytes: []byte("a")}) // idle: written at once
	for i := 0; i < 20; i++ {
		w.Enqueue(&Frame{Bytes: []byte("p"), Key: "pose"})
		w.Enqueue(&Frame{Bytes: []byte("e"), Within: time.Millisecond})
		time.Sleep(3 * time.Millisecond)
	}
	waitFor(t, func() bool { return w.Stats().Written == 41 })
	if s := w.Stats(); s.Batches > 21 {
		t.Errorf("%d writes for 20 bounded frames, want at most 21", s.Batches)
	}
	waitFor(t, func() bool {
		clock.mu.Lock()
		defer clock.mu.Unlock()
		return len(clock.heap) == 0
	})
}

// BenchmarkEnqueueFullQueue: a reader that has stopped reading, in a scene
// of 450 senders; its queue stays full and every pose coalesces.
func BenchmarkEnqueueFullQueue(b *testing.B) {
	c := &pipeConn{block: make(chan struct{})}
	w := NewWriter(c, Options{MaxFrames: 4096, MaxBytes: 64 << 20}, nil)
	defer func() { close(c.block); w.Close() }()
	keys := make([]string, 450)
	for i := range keys {
		keys[i] = "realm/s/ns/scene/u/user" + strconv.Itoa(i) + "/cam"
	}
	pose := make([]byte, 330)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Enqueue(&Frame{Bytes: pose, Key: keys[i%len(keys)]})
	}
}

// Under overload every write is a full queue: it gathers into one buffer
// of its size, made at once, that release keeps for the next write
// instead of leaving it to the garbage collector.
func TestGatherFullQueueOfPoses(t *testing.T) {
	batch := make([]*Frame, 4096)
	for i := range batch {
		batch[i] = &Frame{Bytes: bytes.Repeat([]byte{byte(i)}, 400)}
	}
	buf := gather(batch, []byte("tail"))
	if want := 4096*400 + 4; len(*buf) != want {
		t.Fatalf("gathered %d bytes, want %d", len(*buf), want)
	}
	if (*buf)[400*7] != 7 || string((*buf)[len(*buf)-4:]) != "tail" {
		t.Fatal("frames or tail out of place")
	}
	if cap(*buf) > maxBatchBuf {
		t.Fatalf("a full queue of poses needs a %d-byte buffer, more than the %d that release keeps", cap(*buf), maxBatchBuf)
	}
	for i, f := range batch {
		if f != nil {
			t.Fatalf("slot %d not cleared", i)
		}
	}
	release(buf)
}

// Keep frames are queued past the bound, in order, up to the bound again;
// past that the writer fails with ErrTooSlow instead of losing one.
func TestWriterKeepFramesAreNotDropped(t *testing.T) {
	c := &pipeConn{block: make(chan struct{})}
	var failed atomic.Value
	w := NewWriter(c, Options{MaxFrames: 2}, func(err error) { failed.Store(err) })
	w.Enqueue(&Frame{Bytes: []byte("x")})
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	enqueueWant(t, w, &Frame{Bytes: []byte("[a]")}, Queued)
	enqueueWant(t, w, &Frame{Bytes: []byte("[b]"), Key: "b"}, Queued)
	enqueueWant(t, w, &Frame{Bytes: []byte("[c]")}, Dropped)
	enqueueWant(t, w, &Frame{Bytes: []byte("[K1]"), Keep: true}, Queued)
	enqueueWant(t, w, &Frame{Bytes: []byte("[b2]"), Key: "b"}, Coalesced)
	enqueueWant(t, w, &Frame{Bytes: []byte("[K2]"), Keep: true}, Queued)
	finish(t, c, w, "x[a][b2][K1][K2]")
	if failed.Load() != nil {
		t.Fatalf("writer failed: %v", failed.Load())
	}

	c = &pipeConn{block: make(chan struct{})}
	w = NewWriter(c, Options{MaxFrames: 2}, func(err error) { failed.Store(err) })
	w.Enqueue(&Frame{Bytes: []byte("x")})
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	for i := range 4 {
		enqueueWant(t, w, &Frame{Bytes: []byte(strconv.Itoa(i)), Keep: true}, Queued)
	}
	enqueueWant(t, w, &Frame{Bytes: []byte("lost"), Keep: true}, Dropped)
	close(c.block)
	waitFor(t, func() bool { return failed.Load() != nil })
	if err, _ := failed.Load().(error); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("writer failed with %v, want ErrTooSlow", err)
	}
	w.Close()
}

// A newer frame that replaces an older one of its key in a full queue
// keeps to the byte bound: a queue full by its frame count, of small
// poses, held every key's larger replacement, past MaxBytes without limit
// (up to MaxFrames frames of the largest size a peer may publish).
func TestWriterCoalesceKeepsByteBound(t *testing.T) {
	c := &pipeConn{block: make(chan struct{})}
	const maxFrames, maxBytes = 4, 100
	w := NewWriter(c, Options{MaxFrames: maxFrames, MaxBytes: maxBytes}, nil)
	w.Enqueue(&Frame{Bytes: []byte("x")})
	waitFor(t, func() bool { return w.Stats().Queued == 0 })
	for k := range maxFrames {
		enqueueWant(t, w, &Frame{Bytes: []byte{'a' + byte(k)}, Key: strconv.Itoa(k)}, Queued)
	}
	// Full by frames (4 bytes of 100). A 60-byte replacement fits (63
	// bytes); another does not, nor a larger one, and the queue keeps the
	// older frame; a replacement no larger than the frame it replaces
	// always fits.
	big := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	enqueueWant(t, w, &Frame{Bytes: big('A', 60), Key: "0"}, Coalesced)
	enqueueWant(t, w, &Frame{Bytes: big('B', 60), Key: "1"}, Dropped)
	enqueueWant(t, w, &Frame{Bytes: big('A', 61), Key: "0"}, Coalesced) // 64 bytes
	enqueueWant(t, w, &Frame{Bytes: big('A', 98), Key: "0"}, Dropped)   // 101 bytes
	enqueueWant(t, w, &Frame{Bytes: big('a', 10), Key: "0"}, Coalesced)
	enqueueWant(t, w, &Frame{Bytes: big('B', 88), Key: "1"}, Coalesced) // 100 bytes
	enqueueWant(t, w, &Frame{Bytes: []byte("C"), Key: "2"}, Coalesced)
	finish(t, c, w, "x"+string(big('a', 10))+string(big('B', 88))+"Cd")
}
