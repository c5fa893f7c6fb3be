package ubiq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
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
	Max    int   // the largest payload
	// WebSocket is set for a WebSocket message, which must hold exactly
	// one whole frame. Message is then its size in bytes: a message
	// shorter than 4 bytes has no length field, and one that is not 4 +
	// Length bytes long (with a valid Length) holds less or more than its
	// frame. A negative Message is a message longer than -Message bytes
	// (the rest was not read).
	WebSocket bool
	Message   int64
}

func (e *FrameError) Error() string {
	switch {
	case e.WebSocket && e.Message >= 0 && e.Message < 4:
		return fmt.Sprintf("ubiq WebSocket message of %d bytes is too short to hold a frame's length field (4 bytes)", e.Message)
	case e.Length < MinLength:
		return fmt.Sprintf("ubiq frame length %d is below the minimum %d", e.Length, MinLength)
	case e.Length > int64(e.Max)+8:
		return fmt.Sprintf("ubiq frame length %d exceeds the limit %d", e.Length, e.Max+8)
	case e.WebSocket && e.Message < 0:
		return fmt.Sprintf("ubiq WebSocket message of more than %d bytes holds a frame of length %d (want exactly one whole frame)", -e.Message, e.Length)
	case e.WebSocket:
		return fmt.Sprintf("ubiq WebSocket message of %d bytes holds a frame of length %d (want exactly one whole frame)", e.Message, e.Length)
	}
	return fmt.Sprintf("ubiq frame length %d is invalid", e.Length)
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
	f, _, got, err := readFrame(r, maxPayload)
	if err != nil && got > 0 && errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return f, err
}

// readFrame reads one frame from r, the length field first, and returns
// it, the length its field announced (0 before it was read) and the number
// of bytes read. Errors are a *FrameError for a bad length, else r's
// (io.EOF or io.ErrUnexpectedEOF for a frame cut short).
func readFrame(r io.Reader, maxPayload int) (f []byte, n int32, got int, err error) {
	var hdr [4]byte
	if k, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, k, err
	}
	n = int32(binary.LittleEndian.Uint32(hdr[:]))
	if err := checkLength(n, maxPayload); err != nil {
		return nil, n, 4, err
	}
	// The frame's buffer grows as its bytes come, from 64 KiB, doubling:
	// a peer that announces a large frame and sends it slowly, or never,
	// holds no more memory than it sent (twice that at most).
	end := 4 + int(n)
	f = make([]byte, 4, min(end, readChunk))
	copy(f, hdr[:])
	for len(f) < end {
		if len(f) == cap(f) {
			f = slices.Grow(f, min(len(f), end-len(f)))
		}
		k, err := io.ReadFull(r, f[len(f):min(cap(f), end)])
		f = f[:len(f)+k]
		if err != nil {
			if errors.Is(err, io.EOF) && len(f) > 4 {
				err = io.ErrUnexpectedEOF
			}
			return nil, n, len(f), err
		}
	}
	return f, n, len(f), nil
}

// readChunk is the first buffer readFrame takes for a frame.
const readChunk = 64 << 10

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
// WebSocket message must be; any other message is a *FrameError.
func ParseFrame(msg []byte, maxPayload int) error {
	if len(msg) < 4 {
		return &FrameError{Max: maxPayload, WebSocket: true, Message: int64(len(msg))}
	}
	n := int32(binary.LittleEndian.Uint32(msg))
	if err := checkLength(n, maxPayload); err != nil {
		return err
	}
	if int64(n)+4 != int64(len(msg)) {
		return &FrameError{Length: int64(n), Max: maxPayload, WebSocket: true, Message: int64(len(msg))}
	}
	return nil
}

// readMessageFrame reads a WebSocket message from r (a message reader),
// which must hold exactly one whole frame, and returns the frame. It reads
// the length field first and no more than one byte past the frame, so a
// message that announces too much, or goes on past its frame, is refused
// without being buffered. A message that is not one frame is a
// *FrameError; other errors are the reader's.
func readMessageFrame(r io.Reader, maxPayload int) ([]byte, error) {
	f, n, got, err := readFrame(r, maxPayload)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, &FrameError{Length: int64(n), Max: maxPayload, WebSocket: true, Message: int64(got)}
	}
	if err != nil {
		return nil, err
	}
	var more [1]byte
	switch k, err := io.ReadFull(r, more[:]); {
	case k > 0:
		return nil, &FrameError{Length: int64(n), Max: maxPayload, WebSocket: true, Message: -int64(len(f))}
	case errors.Is(err, io.EOF):
		return f, nil
	default:
		return nil, err
	}
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
