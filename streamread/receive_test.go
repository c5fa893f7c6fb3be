package streamread

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testnet"
)

// The tests frame their streams as a 4-byte big-endian length and that
// many bytes.

func frame(p string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...)
}

// take takes the complete frames in b and returns their payloads.
func take(b *Buffer) []string {
	var got []string
	for {
		u := b.Bytes()
		if len(u) < 4 {
			return got
		}
		n := 4 + int(binary.BigEndian.Uint32(u))
		if len(u) < n {
			return got
		}
		got = append(got, string(u[4:n]))
		b.Discard(n)
	}
}

// feed appends p to b's unread bytes, as reads would.
func feed(b *Buffer, p []byte) {
	for len(p) > 0 {
		n := copy(b.Space(), p)
		b.Advance(n)
		p = p[n:]
	}
}

func checkPayloads(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d frames, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: frame %d has %d bytes, want %d", what, i, len(got[i]), len(want[i]))
		}
	}
}

// Reads into a borrowed shared buffer hand the unread bytes back and forth
// whole: frames split at any point, and a frame too large to move into a
// shared buffer, come out as they went in.
func TestBufferBorrowsSharedBuffers(t *testing.T) {
	huge := strings.Repeat("h", sharedBufSize) // completes over several reads
	want := []string{"a", strings.Repeat("x", 300), huge, "", "c", huge, "d"}
	var stream []byte
	for _, p := range want {
		stream = append(stream, frame(p)...)
	}
	for _, chunk := range []int{1, 7, 300, 4096, sharedBufSize / 3, sharedBufSize} {
		for _, b := range []*Buffer{NewBuffer(16), {}} { // the zero Buffer too
			var got []string
			for off := 0; off < len(stream); off += chunk {
				p := b.borrow()
				feed(b, stream[off:min(off+chunk, len(stream))])
				got = append(got, take(b)...)
				b.giveBack(p)
			}
			checkPayloads(t, fmt.Sprint("chunk ", chunk), got, want)
			if b.Buffered() != 0 {
				t.Fatalf("chunk %d: %d bytes left over", chunk, b.Buffered())
			}
		}
	}
}

// receiveAll runs Receive on the server end of a connection and collects
// the payloads of the frames it hands over.
func receiveAll(nc net.Conn, stop func() bool) ([]string, error) {
	var b Buffer
	var got []string
	err := Receive(nc, &b, Options{Stop: stop}, func() error {
		got = append(got, take(&b)...)
		return nil
	})
	return got, err
}

// conns returns a plain socket's two ends (raw reads) and a wrapper's
// (net.Pipe, read through its Read).
func conns(t *testing.T) []struct {
	name           string
	client, server net.Conn
} {
	tcpC, tcpS := testnet.TCPPair(t)
	pipeC, pipeS := net.Pipe()
	t.Cleanup(func() { pipeC.Close(); pipeS.Close() })
	return []struct {
		name           string
		client, server net.Conn
	}{{"tcp", tcpC, tcpS}, {"pipe", pipeC, pipeS}}
}

// Receive hands over every frame, split across writes anywhere, and ends
// with io.EOF when the peer closes.
func TestReceiveSplitWrites(t *testing.T) {
	var stream []byte
	var want []string
	for i := range 40 {
		p := strings.Repeat("y", i*37)
		want = append(want, p)
		stream = append(stream, frame(p)...)
	}
	want = append(want, strings.Repeat("z", 200_000)) // larger than a shared buffer
	stream = append(stream, frame(want[len(want)-1])...)
	for _, tc := range conns(t) {
		t.Run(tc.name, func(t *testing.T) {
			go func() {
				for off := 0; off < len(stream); off += 1000 {
					if _, err := tc.client.Write(stream[off:min(off+1000, len(stream))]); err != nil {
						return
					}
					if off%7000 == 0 {
						time.Sleep(time.Millisecond) // let some reads come up short
					}
				}
				tc.client.Close()
			}()
			got, err := receiveAll(tc.server, func() bool { return false })
			if !errors.Is(err, io.EOF) {
				t.Fatalf("Receive ended with %v, want EOF", err)
			}
			checkPayloads(t, tc.name, got, want)
		})
	}
}

// A peer that sends and closes at once, before Receive's first read, is
// seen to have closed: the FIN that came with the data is not missed (it
// is found by the probe, up to probeEvery later).
func TestReceiveSeesCloseAfterBurst(t *testing.T) {
	for i := range 2 {
		c, s := testnet.TCPPair(t)
		c.Write(append(frame("one"), frame("two")...))
		c.Close()
		time.Sleep(5 * time.Millisecond)
		done := make(chan error, 1)
		var got []string
		go func() {
			var err error
			got, err = receiveAll(s, func() bool { return false })
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, io.EOF) || strings.Join(got, ",") != "one,two" {
				t.Fatalf("run %d: %q, %v; want one, two and EOF", i, got, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d: Receive missed the close", i)
		}
	}
}

// An error from handle ends Receive with that error; so do stop and a read
// deadline.
func TestReceiveEnds(t *testing.T) {
	t.Run("handle error", func(t *testing.T) {
		c, s := testnet.TCPPair(t)
		c.Write(frame("x"))
		mine := errors.New("mine")
		err := Receive(s, NewBuffer(16), Options{}, func() error { return mine })
		if err != mine {
			t.Fatalf("err %v, want handle's", err)
		}
	})
	t.Run("stop", func(t *testing.T) {
		c, s := testnet.TCPPair(t)
		var stopped atomic.Bool
		done := make(chan error, 1)
		go func() {
			_, err := receiveAll(s, stopped.Load)
			done <- err
		}()
		c.Write(frame("x"))
		time.Sleep(20 * time.Millisecond)
		stopped.Store(true)
		s.Close() // what a connection's close does: ends the poller's wait
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("err %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Receive did not end after stop and close")
		}
	})
	t.Run("idle", func(t *testing.T) {
		for _, tc := range conns(t) {
			go func() { // data for a while, then silence
				for range 5 {
					tc.client.Write(frame("x"))
					time.Sleep(20 * time.Millisecond)
				}
			}()
			start := time.Now()
			var b Buffer
			n := 0
			err := Receive(tc.server, &b, Options{Idle: 150 * time.Millisecond}, func() error {
				n += len(take(&b))
				return nil
			})
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || n != 5 {
				t.Fatalf("%s: err %v after %d frames, want a timeout after 5", tc.name, err, n)
			}
			if d := time.Since(start); d < 230*time.Millisecond {
				t.Fatalf("%s: timed out after %v, before 150 ms of silence", tc.name, d)
			}
		}
	})
}

// A buffer grown for a large frame gives the memory back once the frame
// is taken.
func TestBufferShrinksAfterLargeFrame(t *testing.T) {
	var b Buffer
	feed(&b, frame(strings.Repeat("L", 4*sharedBufSize)))
	if got := take(&b); len(got) != 1 {
		t.Fatalf("%d frames", len(got))
	}
	p := b.borrow()
	feed(&b, frame("small"))
	if got := take(&b); len(got) != 1 || got[0] != "small" {
		t.Fatalf("frames %q", got)
	}
	b.giveBack(p)
	if len(b.buf) > sharedBufSize {
		t.Fatalf("own buffer still %d bytes", len(b.buf))
	}
}
