package fanout

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testnet"
)

// numbered returns frame i: its number, then size-4 bytes of filler.
func numbered(i uint32, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, i)
	for j := 4; j < size; j++ {
		b[j] = byte(i + uint32(j))
	}
	return b
}

// readNumbered reads n frames of the given size and checks their order and
// content.
func readNumbered(t *testing.T, r io.Reader, n, size int) {
	t.Helper()
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if want := numbered(uint32(i), size); !bytes.Equal(buf, want) {
			t.Fatalf("frame %d arrived as frame %d or corrupted", i, binary.BigEndian.Uint32(buf))
		}
	}
}

// On an idle socket, urgent frames are written by Enqueue itself, in order.
func TestInlineWritesOnIdleSocket(t *testing.T) {
	server, client := testnet.TCPPair(t)
	w := NewWriter(server, Options{Linger: time.Hour}, nil)
	const n, size = 200, 64
	done := make(chan struct{})
	go func() { defer close(done); readNumbered(t, client, n, size) }()
	for i := 0; i < n; i++ {
		w.Enqueue(&Frame{Bytes: numbered(uint32(i), size), Urgent: true})
	}
	<-done
	w.Close()
	s := w.Stats()
	if s.Written != n || s.Inline == 0 {
		t.Fatalf("stats %+v: want %d written, some inline", s, n)
	}
}

// A reader that stops reading fills the socket: Enqueue must not block, the
// rest of a partly written frame goes to the writer goroutine, and once the
// reader resumes every byte arrives in order.
func TestInlineWriteSlowReaderKeepsOrder(t *testing.T) {
	server, client := testnet.TCPPair(t)
	w := NewWriter(server, Options{MaxFrames: 1 << 20, MaxBytes: 64 << 20}, nil)
	const n, size = 3000, 10000 // 30 MB: far more than the socket buffers
	enqueued := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ {
			if w.Enqueue(&Frame{Bytes: numbered(uint32(i), size), Urgent: i%2 == 0}) != Queued {
				t.Errorf("frame %d not queued", i)
			}
		}
		close(enqueued)
	}()
	select {
	case <-enqueued:
	case <-time.After(20 * time.Second):
		t.Fatal("Enqueue blocked on a socket nobody reads")
	}
	readNumbered(t, client, n, size)
	w.Close()
	if s := w.Stats(); s.Inline == 0 || s.Inline == n {
		t.Fatalf("stats %+v: want some frames inline and the rest by the writer", s)
	}
}

// Enqueue from many goroutines while the writer goroutine and inline writes
// alternate: no frame is lost or torn.
func TestInlineConcurrentEnqueue(t *testing.T) {
	server, client := testnet.TCPPair(t)
	w := NewWriter(server, Options{Linger: 200 * time.Microsecond, MaxFrames: 1 << 20, MaxBytes: 64 << 20}, nil)
	const senders, per, size = 8, 500, 100
	var wg sync.WaitGroup
	var mu sync.Mutex // frames of one sender stay in order; numbering is global
	next := uint32(0)
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				mu.Lock()
				f := numbered(next, size)
				next++
				w.Enqueue(&Frame{Bytes: f, Urgent: i%3 == 0})
				mu.Unlock()
			}
		}(s)
	}
	done := make(chan struct{})
	go func() { defer close(done); readNumbered(t, client, senders*per, size) }()
	wg.Wait()
	<-done
	w.Close()
}

// Close waits for a frame that an inline write left partly written.
func TestCloseFlushesInlineRest(t *testing.T) {
	server, client := testnet.TCPPair(t)
	w := NewWriter(server, Options{MaxBytes: 64 << 20}, nil)
	const size = 32 << 20 // more than the socket buffers
	w.Enqueue(&Frame{Bytes: numbered(0, size), Urgent: true})
	done := make(chan struct{})
	go func() { defer close(done); readNumbered(t, client, 1, size) }()
	w.Close()
	<-done
}

// A write error found inline is reported once, by the writer goroutine.
func TestInlineErrorReported(t *testing.T) {
	server, client := testnet.TCPPair(t)
	errs := make(chan error, 4)
	w := NewWriter(server, Options{}, func(err error) { errs <- err })
	client.SetLinger(0)
	client.Close() // RST: the next writes fail
	for i := 0; i < 50; i++ {
		w.Enqueue(&Frame{Bytes: numbered(uint32(i), 1000), Urgent: true})
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("nil error reported")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write error never reported")
	}
	w.Close()
	if len(errs) != 0 {
		t.Fatal("error reported more than once")
	}
}

// An urgent frame takes the frames lingering in the queue along, written by
// Enqueue itself, in order.
func TestInlineUrgentTakesQueuedFrames(t *testing.T) {
	server, client := testnet.TCPPair(t)
	w := NewWriter(server, Options{Linger: time.Hour}, nil)
	w.Enqueue(&Frame{Bytes: numbered(0, 50)})           // idle: inline
	w.Enqueue(&Frame{Bytes: numbered(1, 50), Key: "p"}) // lingers
	w.Enqueue(&Frame{Bytes: numbered(2, 50), Key: "p"}) // lingers
	if s := w.Stats(); s.Written != 1 || s.Queued != 2 {
		t.Fatalf("before the urgent frame: %+v", s)
	}
	w.Enqueue(&Frame{Bytes: numbered(3, 50), Urgent: true})
	readNumbered(t, client, 4, 50)
	if s := w.Stats(); s.Inline != 4 || s.Queued != 0 {
		t.Fatalf("after the urgent frame: %+v, want all 4 written inline", s)
	}
	w.Close()
}
