package volumetric

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of the fragment header at the start of every RTP
// payload of a point-cloud track.
const HeaderSize = 22

// headerVersion is the first byte of a header (version 1, no flags).
const headerVersion = 1

// Header describes one fragment of one encoded description of one frame.
//
//	0      1      2           6           10        12        14               22
//	+------+------+-----------+-----------+---------+---------+----------------+
//	| ver  | desc | client    | frame     | frag    | count   | capture (µs)   |
//	+------+------+-----------+-----------+---------+---------+----------------+
//
// All integers are big-endian. capture is the sender's capture time in
// microseconds of its own clock; receivers on the same clock (tests, the
// bench) compute frame latency from it.
type Header struct {
	Description uint8
	Client      uint32
	Frame       uint32
	Fragment    uint16
	Count       uint16
	CaptureUs   uint64
}

// ErrShortPayload reports a payload smaller than a header.
var ErrShortPayload = errors.New("volumetric: payload shorter than the fragment header")

// Marshal writes h into b[:HeaderSize].
func (h Header) Marshal(b []byte) {
	b[0] = headerVersion
	b[1] = h.Description
	binary.BigEndian.PutUint32(b[2:], h.Client)
	binary.BigEndian.PutUint32(b[6:], h.Frame)
	binary.BigEndian.PutUint16(b[10:], h.Fragment)
	binary.BigEndian.PutUint16(b[12:], h.Count)
	binary.BigEndian.PutUint64(b[14:], h.CaptureUs)
}

// ParseHeader reads the header at the start of an RTP payload and returns it
// with the fragment's data.
func ParseHeader(payload []byte) (Header, []byte, error) {
	if len(payload) < HeaderSize {
		return Header{}, nil, fmt.Errorf("%w: %d bytes, the header is %d", ErrShortPayload, len(payload), HeaderSize)
	}
	if payload[0] != headerVersion {
		return Header{}, nil, fmt.Errorf("volumetric: header version %d, want %d", payload[0], headerVersion)
	}
	h := Header{
		Description: payload[1],
		Client:      binary.BigEndian.Uint32(payload[2:]),
		Frame:       binary.BigEndian.Uint32(payload[6:]),
		Fragment:    binary.BigEndian.Uint16(payload[10:]),
		Count:       binary.BigEndian.Uint16(payload[12:]),
		CaptureUs:   binary.BigEndian.Uint64(payload[14:]),
	}
	if h.Count == 0 || h.Fragment >= h.Count {
		return Header{}, nil, fmt.Errorf("volumetric: fragment %d of %d", h.Fragment, h.Count)
	}
	return h, payload[HeaderSize:], nil
}

// Packetize splits one encoded description into RTP payloads of at most mtu
// bytes each, header included. The last payload is the one that should carry
// the RTP marker bit.
func Packetize(h Header, data []byte, mtu int) ([][]byte, error) {
	room := mtu - HeaderSize
	if room <= 0 {
		return nil, fmt.Errorf("volumetric: mtu %d leaves no room after the %d-byte header", mtu, HeaderSize)
	}
	n := (len(data) + room - 1) / room
	if n == 0 {
		n = 1
	}
	if n > 0xffff {
		return nil, fmt.Errorf("volumetric: %d bytes need %d fragments, more than 65535", len(data), n)
	}
	out := make([][]byte, n)
	h.Count = uint16(n)
	for i := 0; i < n; i++ {
		chunk := data[min(i*room, len(data)):min((i+1)*room, len(data))]
		p := make([]byte, HeaderSize+len(chunk))
		h.Fragment = uint16(i)
		h.Marshal(p)
		copy(p[HeaderSize:], chunk)
		out[i] = p
	}
	return out, nil
}
