package ubiq

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// TestClientReadsSplitAndBatchedFrames: the client's batched reader hands
// out every frame whole, whether frames arrive many per read, split
// across reads, or larger than its buffer.
func TestClientReadsSplitAndBatchedFrames(t *testing.T) {
	sizes := []int{4, 5, 100, 500, 4096, 70 << 10, 4, 1 << 20, 12, 500}
	for i := 0; i < 200; i++ {
		sizes = append(sizes, 4+i%600)
	}
	var stream []byte
	for i, n := range sizes {
		p := bytes.Repeat([]byte{byte(i)}, n)
		stream = AppendFrame(stream, NetworkId{A: uint32(i), B: 7}, p)
	}
	for _, chunking := range []struct {
		name string
		max  int
	}{{"whole", len(stream)}, {"small pieces", 7}, {"random pieces", 9000}} {
		t.Run(chunking.name, func(t *testing.T) {
			addr := serveOne(t, func(c net.Conn) {
				defer c.Close()
				rng := rand.New(rand.NewPCG(1, 2))
				for off := 0; off < len(stream); {
					n := min(1+rng.IntN(chunking.max), len(stream)-off)
					if _, err := c.Write(stream[off : off+n]); err != nil {
						return
					}
					off += n
				}
				time.Sleep(time.Second)
			})
			got := make(chan []byte, len(sizes))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Dial(ctx, addr, ClientOptions{OnFrameAt: func(f []byte, at int64) {
				if at <= 0 {
					t.Errorf("read time %d", at)
				}
				got <- append([]byte(nil), f...)
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i, n := range sizes {
				select {
				case f := <-got:
					if IDOf(f).A != uint32(i) || len(f) != HeaderSize+n || (n > 0 && f[len(f)-1] != byte(i)) {
						t.Fatalf("frame %d: id %v, %d bytes, want %d", i, IDOf(f), len(f), HeaderSize+n)
					}
				case <-ctx.Done():
					t.Fatalf("frame %d of %d not received", i, len(sizes))
				}
			}
		})
	}
}

func TestSlab(t *testing.T) {
	var s slab
	var frames [][]byte
	for _, n := range []int{16, 512, 8000, slabBlock/8 + 1, 600, 20} {
		f := s.alloc(n)
		if len(f) != n || cap(f) != n {
			t.Fatalf("alloc(%d): len %d cap %d", n, len(f), cap(f))
		}
		for i := range f {
			f[i] = byte(len(frames) + 1)
		}
		frames = append(frames, f)
	}
	for i, f := range frames {
		for _, b := range f {
			if b != byte(i+1) {
				t.Fatalf("frame %d overwritten", i)
			}
		}
	}
}

// TestClientSendFrames: several frames given to SendFrames at once (a
// server request and a relayed frame) all arrive, over TCP (one write) and
// over WebSocket (one message each, as the server requires).
func TestClientSendFrames(t *testing.T) {
	ts := startServer(t, nil, nil)
	for _, tc := range []struct{ name, addr string }{{"tcp", ts.tcp}, {"websocket", ts.ws}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := dialPeer(t, tc.addr), dialPeer(t, tc.addr)
			room := newUUID()
			a.join(JoinArgs{UUID: room})
			b.join(JoinArgs{UUID: room})
			obj := NetworkId{A: 77, B: 1}
			var out []byte
			out = AppendFrame(out, ServerID, EncodeRequest("Ping", ClientArgs{ClientID: a.clientID}))
			out = AppendFrame(out, obj, []byte("pose one"))
			out = AppendFrame(out, obj, []byte("pose two"))
			if err := a.c.SendFrames(out); err != nil {
				t.Fatal(err)
			}
			a.expect("Ping")
			for _, want := range []string{"pose one", "pose two"} {
				f := b.frame()
				if f.to != obj || string(f.frame[HeaderSize:]) != want {
					t.Fatalf("got %v %q, want %v %q", f.to, f.frame[HeaderSize:], obj, want)
				}
			}
		})
	}
}

// TestClientEnds: a TCP client's reader ends, and Done closes, however
// the connection ends: closed by the caller, from another goroutine or
// from OnFrame (the reader itself, which a close of a plain socket would
// wait for), by the peer, or on a malformed frame, which Err reports.
func TestClientEnds(t *testing.T) {
	hello := NewFrame(NetworkId{A: 1, B: 2}, []byte("hello"))
	short := binary.LittleEndian.AppendUint32(nil, 11) // below MinLength
	for _, tc := range []struct {
		name      string
		send      []byte
		closeIn   bool // Close from OnFrame on the first frame
		closeOut  bool // Close from the test once a frame arrived
		peerClose bool // the server closes after sending
		wantFrame bool // *FrameError
		wantEOF   bool
	}{
		{name: "closed from OnFrame", send: hello, closeIn: true},
		{name: "closed from outside", send: hello, closeOut: true},
		{name: "peer closes", send: hello, peerClose: true, wantEOF: true},
		{name: "malformed length", send: append(append([]byte(nil), hello...), short...), wantFrame: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveOne(t, func(s net.Conn) {
				s.Write(tc.send)
				if tc.peerClose {
					s.Close()
				}
			})
			got := make(chan struct{}, 8)
			var c *Client
			var err error
			ready := make(chan struct{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err = Dial(ctx, addr, ClientOptions{OnFrame: func(f []byte) {
				<-ready
				if !bytes.Equal(f, hello) {
					t.Errorf("frame % x, want % x", f, hello)
				}
				if tc.closeIn {
					c.Close()
				}
				got <- struct{}{}
			}})
			if err != nil {
				t.Fatal(err)
			}
			close(ready)
			select {
			case <-got:
			case <-ctx.Done():
				t.Fatal("no frame")
			}
			if tc.closeOut {
				c.Close()
			}
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatal("the reader did not end")
			}
			var fe *FrameError
			if errors.As(c.Err(), &fe) != tc.wantFrame {
				t.Fatalf("Err() = %v, want a FrameError: %v", c.Err(), tc.wantFrame)
			}
			if errors.Is(c.Err(), io.EOF) != tc.wantEOF {
				t.Fatalf("Err() = %v, want EOF: %v", c.Err(), tc.wantEOF)
			}
			if tc.closeIn || tc.closeOut {
				if !errors.Is(c.Err(), net.ErrClosed) {
					t.Fatalf("Err() = %v after Close, want net.ErrClosed", c.Err())
				}
			}
		})
	}
}

// serveOne listens on loopback and runs serve on the first connection
// accepted, which is closed when the test ends.
func serveOne(t *testing.T, serve func(net.Conn)) (addr string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	t.Cleanup(func() {
		l.Close()
		if c, ok := <-accepted; ok {
			c.Close()
		}
	})
	go func() {
		defer close(accepted)
		c, err := l.Accept()
		if err != nil {
			return
		}
		accepted <- c
		serve(c)
	}()
	return l.Addr().String()
}
