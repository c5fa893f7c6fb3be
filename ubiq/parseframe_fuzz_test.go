package ubiq

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseFrame checks WebSocket messages (wire input: one frame each)
// with ParseFrame: it accepts a message exactly when ReadFrame reads the
// whole message as one frame, and a refusal names the message's or the
// frame's length.
func FuzzParseFrame(f *testing.F) {
	f.Add(NewFrame(ServerID, []byte(`{"type":"Ping","args":"{}"}`)), uint16(1<<10))
	f.Add(NewFrame(NetworkId{A: 1, B: 2}, nil), uint16(0))
	f.Add(append(NewFrame(NetworkId{A: 1, B: 2}, []byte("ab")), 0), uint16(16))
	f.Add(NewFrame(NetworkId{A: 1, B: 2}, []byte("abcd"))[:14], uint16(16))
	f.Add(append(NewFrame(ServerID, []byte("a")), NewFrame(ServerID, []byte("b"))...), uint16(16))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8}, uint16(16))
	f.Add([]byte{7, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7}, uint16(16))
	f.Add([]byte{1, 2}, uint16(16))
	f.Add([]byte{}, uint16(16))
	f.Fuzz(func(t *testing.T, msg []byte, maxPayload uint16) {
		max := int(maxPayload)
		err := ParseFrame(msg, max)
		r := bytes.NewReader(msg)
		fr, rerr := ReadFrame(r, max)
		whole := rerr == nil && r.Len() == 0 && len(fr) == len(msg)
		if (err == nil) != whole {
			t.Fatalf("ParseFrame(% x, %d) = %v; ReadFrame read %d of %d bytes, %v", msg, max, err, len(fr), len(msg), rerr)
		}
		if err != nil && !strings.Contains(err.Error(), "length") && !strings.Contains(err.Error(), strconv.Itoa(len(msg))) {
			t.Fatalf("ParseFrame(% x, %d): error %q names no length", msg, max, err)
		}
		// The server reads WebSocket messages as streams: it takes and
		// refuses the same ones, every refusal a *FrameError.
		var fe *FrameError
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("ParseFrame(% x, %d) = %v, not a FrameError", msg, max, err)
		}
		got, rerr := readMessageFrame(bytes.NewReader(msg), max)
		if (rerr == nil) != (err == nil) || rerr != nil && !errors.As(rerr, &fe) || rerr == nil && !bytes.Equal(got, msg) {
			t.Fatalf("readMessageFrame(% x, %d) = % x, %v; ParseFrame: %v", msg, max, got, rerr, err)
		}
	})
}
