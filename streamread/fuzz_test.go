package streamread

import (
	"bytes"
	"testing"
)

// FuzzBuffer drives a Buffer as Receive and a framing layer do, in an
// order the input picks: reads of any size (up to twice a shared buffer)
// into Space, with and without a borrowed shared buffer, and takes of any
// length. Every byte read comes out once, in order, whatever the order of
// borrows, growth and shrinking.
func FuzzBuffer(f *testing.F) {
	f.Add([]byte("hello, world"), uint32(1000), uint16(16), []byte{0, 2, 3, 1, 2, 2, 3, 0, 2, 1})
	f.Add([]byte{1, 2, 3}, uint32(3*sharedBufSize), uint16(0), []byte{0, 0x46, 1, 0x47, 0x0b, 0, 0x46, 0x13, 1})
	f.Add([]byte{0xff}, uint32(sharedBufSize/4+1), uint16(8), []byte{0x3e, 0, 0x3e, 0x03, 1, 0, 0xff, 1})
	f.Fuzz(func(t *testing.T, pattern []byte, size uint32, initial uint16, ops []byte) {
		if len(pattern) == 0 {
			pattern = []byte{0}
		}
		// A stream of up to 4 shared buffers, long enough to borrow, grow
		// and shrink, made from the input.
		stream := make([]byte, int(size%(4*sharedBufSize)))
		for i := range stream {
			stream[i] = pattern[i%len(pattern)] ^ byte(i>>8)
		}
		var b Buffer
		if initial > 0 {
			b.Init(int(initial))
		}
		in := stream
		var out []byte
		var borrowed *[]byte
		for _, op := range ops {
			arg := int(op >> 2)
			switch op & 3 {
			case 0:
				if borrowed == nil {
					borrowed = b.borrow()
				}
			case 1:
				b.giveBack(borrowed)
				borrowed = nil
			case 2: // a read of up to 2^(arg%18) bytes
				sp := b.Space()
				if len(sp) == 0 {
					t.Fatalf("Space is empty with %d bytes buffered", b.Buffered())
				}
				n := copy(sp, in[:min(len(in), 1<<(arg%18))])
				b.Advance(n)
				in = in[n:]
			case 3: // a take of arg² bytes
				n := min(arg*arg, b.Buffered())
				out = append(out, b.Bytes()[:n]...)
				b.Discard(n)
			}
			if b.Buffered() != len(b.Bytes()) || b.Buffered() < 0 {
				t.Fatalf("Buffered %d, Bytes %d", b.Buffered(), len(b.Bytes()))
			}
		}
		b.giveBack(borrowed)
		feed(&b, in)
		out = append(out, b.Bytes()...)
		if !bytes.Equal(out, stream) {
			i := 0
			for i < min(len(out), len(stream)) && out[i] == stream[i] {
				i++
			}
			t.Fatalf("ops %x: %d bytes out of %d in, first difference at byte %d", ops, len(out), len(stream), i)
		}
	})
}
