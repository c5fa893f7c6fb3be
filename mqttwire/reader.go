package mqttwire

import (
	"errors"
	"fmt"

	"github.com/xrealm/xrealm/streamread"
)

// Reader splits an MQTT byte stream into packets. Bytes go in through
// its Buffer (streamread.Receive, or Space and Advance), packets come out
// of Next. A packet's body is valid until the next call to Space or the
// next read.
type Reader struct {
	streamread.Buffer
	limit func(first byte) int
	// skip counts the bytes of a packet over the limit that are still to
	// be discarded.
	skip int
}

// NewReader returns a Reader whose own buffer starts at size bytes and
// grows for larger packets. limit gives the largest remaining length
// accepted for a packet with the given first byte (type and flags).
func NewReader(size int, limit func(first byte) int) *Reader {
	r := &Reader{limit: limit}
	r.Init(size)
	return r
}

// MaxLength is a limit for NewReader that accepts packets of every type up
// to n bytes.
func MaxLength(n int) func(byte) int { return func(byte) int { return n } }

// TooLargeError reports a packet whose remaining length is over the
// Reader's limit. The Reader discards the packet's bytes as they arrive,
// so the stream may go on with the next packet.
type TooLargeError struct {
	First       byte // the packet's first byte: type << 4 | flags
	Size, Limit int  // its remaining length and the limit
	// ID is the packet id of a PUBLISH at QoS 1 or 2, which the refusal
	// must still acknowledge; HasID is false when the packet has none (or
	// its topic length leaves no room for one).
	ID    uint16
	HasID bool
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("MQTT %s packet of %d bytes exceeds the limit of %d", PacketName(e.First), e.Size, e.Limit)
}

// ErrMalformedLength is returned for a remaining length of more than four
// bytes; the stream cannot go on.
var ErrMalformedLength = errors.New("malformed remaining length: more than 4 bytes")

// Next returns the next complete packet in the buffer: its first byte and
// its body. ok is false when the buffer holds no complete packet yet.
// After a *TooLargeError, Next may be called again; after any other error
// the stream is broken.
func (r *Reader) Next() (first byte, body []byte, ok bool, err error) {
	if r.skip > 0 {
		k := min(r.skip, r.Buffered())
		r.Discard(k)
		r.skip -= k
		if r.skip > 0 {
			return 0, nil, false, nil
		}
	}
	b := r.Bytes()
	n, mult, i := 0, 1, 1
	for ; ; i++ {
		if i >= len(b) {
			return 0, nil, false, nil
		}
		d := b[i]
		n += int(d&0x7f) * mult
		if d&0x80 == 0 {
			break
		}
		if i == 4 {
			return 0, nil, false, ErrMalformedLength
		}
		mult *= 128
	}
	if lim := r.limit(b[0]); n > lim {
		e := &TooLargeError{First: b[0], Size: n, Limit: lim}
		if b[0]>>4 == 3 && (b[0]>>1)&3 != 0 { // PUBLISH at QoS 1 or 2
			// Wait for its topic and packet id (at most 65,539 bytes), so
			// that it can be acknowledged.
			body := b[i+1:]
			if len(body) < 2 {
				return 0, nil, false, nil
			}
			if idEnd := 2 + (int(body[0])<<8 | int(body[1])) + 2; idEnd <= n {
				if len(body) < idEnd {
					return 0, nil, false, nil
				}
				e.ID, e.HasID = uint16(body[idEnd-2])<<8|uint16(body[idEnd-1]), true
			}
		}
		r.Discard(i + 1)
		r.skip = n
		k := min(r.skip, r.Buffered())
		r.Discard(k)
		r.skip -= k
		return 0, nil, false, e
	}
	end := i + 1 + n
	if len(b) < end {
		return 0, nil, false, nil
	}
	r.Discard(end)
	return b[0], b[i+1 : end], true, nil
}

var packetNames = [16]string{"reserved", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "reserved"}

// PacketName names the type of a packet with first byte first.
func PacketName(first byte) string { return packetNames[first>>4] }
