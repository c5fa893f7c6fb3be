// Package buffer holds the retransmission buffer of one source track.
//
// The SFU keeps exactly one Buffer per published track, written once by the
// track's reader, and every subscriber's down track answers its NACKs from
// that shared buffer (after mapping its own sequence numbers back to the
// source's). Memory therefore grows with the number of source tracks, not
// with the number of subscribers; the benchmark in package downtrack
// measures it.
package buffer

import (
	"errors"
	"fmt"
	"sync"
)

// MaxPacket is the largest RTP packet a slot holds.
const MaxPacket = 1500

// ErrTooLarge reports a packet longer than MaxPacket.
var ErrTooLarge = errors.New("buffer: packet larger than MaxPacket")

// Buffer is a ring of the last Size packets of one RTP stream, indexed by
// sequence number. Write is for the single reader of the source track; Get
// may be called concurrently from any number of down tracks.
type Buffer struct {
	mu    sync.RWMutex
	mask  uint16
	arena []byte
	slots []slot
}

type slot struct {
	seq   uint16
	n     uint16
	valid bool
}

// New returns a buffer of size packets; size must be a power of two between
// 16 and 32768 (the sequence space must be at least twice the ring).
func New(size int) (*Buffer, error) {
	if size < 16 || size > 1<<15 || size&(size-1) != 0 {
		return nil, fmt.Errorf("buffer: size %d is not a power of two in [16, 32768]", size)
	}
	return &Buffer{mask: uint16(size - 1), arena: make([]byte, size*MaxPacket), slots: make([]slot, size)}, nil
}

// Size is the number of packets held.
func (b *Buffer) Size() int { return len(b.slots) }

// Bytes is the memory the buffer reserves for packets.
func (b *Buffer) Bytes() int { return len(b.arena) }

// Write stores a copy of the raw RTP packet pkt with sequence number seq,
// replacing the packet Size sequence numbers older.
func (b *Buffer) Write(seq uint16, pkt []byte) error {
	if len(pkt) > MaxPacket {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(pkt))
	}
	i := int(seq & b.mask)
	b.mu.Lock()
	copy(b.arena[i*MaxPacket:], pkt)
	b.slots[i] = slot{seq: seq, n: uint16(len(pkt)), valid: true}
	b.mu.Unlock()
	return nil
}

// Get copies the packet with sequence number seq into dst and returns its
// length, or false if it is no longer (or never was) in the buffer.
func (b *Buffer) Get(seq uint16, dst []byte) (int, bool) {
	i := int(seq & b.mask)
	b.mu.RLock()
	defer b.mu.RUnlock()
	s := b.slots[i]
	if !s.valid || s.seq != seq || len(dst) < int(s.n) {
		return 0, false
	}
	return copy(dst, b.arena[i*MaxPacket:i*MaxPacket+int(s.n)]), true
}
