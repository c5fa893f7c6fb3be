package streamread

import "sync"

// Buffer holds the bytes read from a stream and not yet taken by its
// framing layer. Bytes go in through Space and Advance, and come out of
// Bytes and Discard. A slice from Bytes is valid until the next call to
// Space or Receive's next read.
//
// The zero Buffer is ready to use; NewBuffer sizes its own buffer.
type Buffer struct {
	buf        []byte
	start, end int    // unread bytes are buf[start:end]
	own        []byte // the buffer's own memory while buf is borrowed
}

// NewBuffer returns a Buffer whose own memory starts at size bytes and
// grows for larger packets.
func NewBuffer(size int) *Buffer {
	b := &Buffer{}
	b.Init(size)
	return b
}

// Init gives b own memory of size bytes (at least 8), for a Buffer
// embedded in a framing layer's reader.
func (b *Buffer) Init(size int) { *b = Buffer{buf: make([]byte, max(size, 8))} }

// Bytes returns the unread bytes.
func (b *Buffer) Bytes() []byte { return b.buf[b.start:b.end] }

// Discard marks the first n unread bytes as taken.
func (b *Buffer) Discard(n int) { b.start += n }

// Buffered is the number of bytes read and not yet taken.
func (b *Buffer) Buffered() int { return b.end - b.start }

// Space returns the free end of the buffer for the next read, after moving
// the unread bytes to the front; it grows the buffer when it is full.
// Slices from Bytes are invalid afterwards.
func (b *Buffer) Space() []byte {
	if b.start > 0 {
		b.end = copy(b.buf, b.buf[b.start:b.end])
		b.start = 0
	}
	if b.end == len(b.buf) {
		b.buf = append(b.buf, make([]byte, max(len(b.buf), 8))...)
	}
	return b.buf[b.end:]
}

// Advance records that n bytes were read into Space.
func (b *Buffer) Advance(n int) { b.end += n }

// sharedBufs holds read buffers that Receive borrows for one read at a
// time. sync.Pool keeps a list per P, so a read lands in a buffer that was
// just read on the same CPU and is in its cache; with a buffer per
// connection, hundreds of connections' buffers are not, and the kernel's
// copy into them was the bots' largest cost.
var sharedBufs = sync.Pool{New: func() any { b := make([]byte, sharedBufSize); return &b }}

const sharedBufSize = 64 << 10

// ownShrunk is the size a buffer grown past sharedBufSize returns to.
const ownShrunk = 4 << 10

// borrow moves the unread bytes into a shared buffer, in which the next
// reads land until giveBack; nil when more than a quarter of one is unread
// (a large packet in progress stays in the buffer's own memory).
func (b *Buffer) borrow() *[]byte {
	if b.end-b.start > sharedBufSize/4 {
		return nil
	}
	p := sharedBufs.Get().(*[]byte)
	b.own = b.buf
	b.end = copy(*p, b.buf[b.start:b.end])
	b.start = 0
	b.buf = *p
	return p
}

// giveBack moves the unread bytes back into the buffer's own memory and
// returns the shared one (p from borrow; nil: nothing borrowed).
func (b *Buffer) giveBack(p *[]byte) {
	if p == nil {
		return
	}
	unread := b.buf[b.start:b.end]
	switch {
	case len(unread) > len(b.own):
		b.own = make([]byte, 2*len(unread))
	case len(b.own) > sharedBufSize && len(unread) <= ownShrunk/2:
		// A large packet grew the buffer; it is done: let the memory go.
		b.own = make([]byte, ownShrunk)
	}
	b.end = copy(b.own, unread)
	b.start = 0
	b.buf, b.own = b.own, nil
	sharedBufs.Put(p)
}
