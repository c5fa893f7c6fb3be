package ubiq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/xrealm/xrealm/streamread"
)

// HeaderSize is the size of a frame's length field and NetworkId.
const HeaderSize = 12

// MinLength is the smallest valid value of the length field: a NetworkId
// and at least four payload bytes. Ubiq's own server closes connections
// that announce less, and so do we.
const MinLength = 12

// DefaultMaxFrame bounds the payload of a frame unless configured.
const DefaultMaxFrame = 4 << 20

// NetworkId addresses an object in Ubiq: A is written first on the wire,
// both as unsigned 32-bit little-endian integers.
type NetworkId struct {
	A uint32 `json:"a"`
	B uint32 `json:"b"`
}

// ServerID is the NetworkId of the room server (Ubiq's reserved id 1).
var ServerID = NetworkId{A: 0, B: 1}

func (id NetworkId) String() string {
	return strconv.FormatUint(uint64(id.A), 16) + "-" + strconv.FormatUint(uint64(id.B), 16)
}

// Put writes id into b[0:8].
func (id NetworkId) Put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:4], id.A)
	binary.LittleEndian.PutUint32(b[4:8], id.B)
}

// IDOf returns the NetworkId of a whole frame.
func IDOf(frame []byte) NetworkId {
	return NetworkId{A: binary.LittleEndian.Uint32(frame[4:8]), B: binary.LittleEndian.Uint32(frame[8:12])}
}

// AppendFrame appends a frame addressed to id carrying payload.
func AppendFrame(b []byte, id NetworkId, payload []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, HeaderSize)...)
	binary.LittleEndian.PutUint32(b[n:], uint32(len(payload)+8))
	id.Put(b[n+4:])
	return append(b, payload...)
}

// NewFrame returns a frame addressed to id carrying payload.
func NewFrame(id NetworkId, payload []byte) []byte {
	return AppendFrame(make([]byte, 0, HeaderSize+len(payload)), id, payload)
}

// FrameError reports a frame that cannot be read; the connection that sent
// it must be closed, as the stream is no longer in step.
type FrameError struct {
	Length int64 // the length field
	Max    int
}

func (e *FrameError) Error() string {
	if e.Length < MinLength {
		return fmt.Sprintf("ubiq frame length %d is below the minimum %d", e.Length, MinLength)
	}
	return fmt.Sprintf("ubiq frame length %d exceeds the limit %d", e.Length, e.Max+8)
}

// checkLength validates a length field against maxPayload.
func checkLength(n int32, maxPayload int) error {
	if n < MinLength || int64(n) > int64(maxPayload)+8 {
		return &FrameError{Length: int64(n), Max: maxPayload}
	}
	return nil
}

// ReadFrame reads one whole frame (header included) from r into a new
// slice. maxPayload bounds the payload; a length outside [MinLength,
// maxPayload+8] is a *FrameError.
func ReadFrame(r io.Reader, maxPayload int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int32(binary.LittleEndian.Uint32(hdr[:]))
	if err := checkLength(n, maxPayload); err != nil {
		return nil, err
	}
	f := make([]byte, 4+int(n))
	copy(f, hdr[:])
	if _, err := io.ReadFull(r, f[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f, nil
}

// frameReader splits a byte stream into frames. Bytes go in through its
// Buffer (streamread.Receive), frames come out of next.
type frameReader struct {
	streamread.Buffer
	max int // largest payload
}

// next returns the next complete frame in the buffer, header included,
// valid until the next read; ok is false when none is complete yet. An
// error (a *FrameError) breaks the stream.
func (r *frameReader) next() (f []byte, ok bool, err error) {
	b := r.Bytes()
	if len(b) < 4 {
		return nil, false, nil
	}
	n := int32(binary.LittleEndian.Uint32(b))
	if err := checkLength(n, r.max); err != nil {
		return nil, false, err
	}
	end := 4 + int(n)
	if len(b) < end {
		return nil, false, nil
	}
	r.Discard(end)
	return b[:end], true, nil
}

// slab hands out frame buffers carved from larger blocks: one allocation
// per block instead of one per frame. A frame is never written again once
// copied in, and a block is freed when no frame in it is referenced.
type slab struct{ free []byte }

const slabBlock = 64 << 10

// copy returns a copy of f in the slab.
func (s *slab) copy(f []byte) []byte {
	c := s.alloc(len(f))
	copy(c, f)
	return c
}

func (s *slab) alloc(n int) []byte {
	if n > slabBlock/8 {
		return make([]byte, n)
	}
	if len(s.free) < n {
		s.free = make([]byte, slabBlock)
	}
	f := s.free[:n:n]
	s.free = s.free[n:]
	return f
}

// ParseFrame checks that msg is exactly one whole frame, as every
// WebSocket message must be.
func ParseFrame(msg []byte, maxPayload int) error {
	if len(msg) < 4 {
		return &FrameError{Length: int64(len(msg)) - 4, Max: maxPayload}
	}
	n := int32(binary.LittleEndian.Uint32(msg))
	if err := checkLength(n, maxPayload); err != nil {
		return err
	}
	if int64(n)+4 != int64(len(msg)) {
		return fmt.Errorf("ubiq WebSocket message of %d bytes holds a frame of length %d (want exactly one whole frame)", len(msg), n)
	}
	return nil
}

// SplitFrames calls f for each whole frame at the start of b and returns
// the number of bytes consumed. It trusts the length fields (b holds
// frames this package produced).
func SplitFrames(b []byte, f func(frame []byte) error) (int, error) {
	off := 0
	for len(b)-off >= 4 {
		n := int(binary.LittleEndian.Uint32(b[off:]))
		if n < 8 || len(b)-off < 4+n {
			break
		}
		if err := f(b[off : off+4+n]); err != nil {
			return off, err
		}
		off += 4 + n
	}
	return off, nil
}
