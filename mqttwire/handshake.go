package mqttwire

import (
	"errors"
	"io"
)

// ReadPacket reads from nc until r holds a complete packet and returns it:
// for a handshake, before streamread.Receive takes over. Bytes after the packet stay
// in r.
func ReadPacket(nc io.Reader, r *Reader) (first byte, body []byte, err error) {
	for {
		first, body, ok, err := r.Next()
		if err != nil || ok {
			return first, body, err
		}
		n, rerr := nc.Read(r.Space())
		r.Advance(n)
		if rerr != nil {
			if first, body, ok, err := r.Next(); err != nil || ok {
				return first, body, err
			}
			if errors.Is(rerr, io.EOF) && r.Buffered() > 0 {
				rerr = io.ErrUnexpectedEOF
			}
			return 0, nil, rerr
		}
	}
}
