package volumetric

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// FuzzParseHeader: any payload is refused with an error, or gives a header
// that marshals back to its first HeaderSize bytes and a fragment index
// below the count.
func FuzzParseHeader(f *testing.F) {
	good := make([]byte, HeaderSize+3)
	Header{Description: 1, Client: 7, Frame: 9, Fragment: 2, Count: 3, CaptureUs: 42}.Marshal(good)
	f.Add(good)
	f.Add(good[:5])
	f.Add(append([]byte{2}, good[1:]...))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, data, err := ParseHeader(p)
		if err != nil {
			if len(p) < HeaderSize && !errors.Is(err, ErrShortPayload) {
				t.Fatalf("short payload of %d bytes: %v, want ErrShortPayload", len(p), err)
			}
			return
		}
		if h.Count == 0 || h.Fragment >= h.Count {
			t.Fatalf("accepted fragment %d of %d", h.Fragment, h.Count)
		}
		back := make([]byte, HeaderSize)
		h.Marshal(back)
		if !bytes.Equal(back, p[:HeaderSize]) || !bytes.Equal(data, p[HeaderSize:]) {
			t.Fatalf("header %+v does not round-trip %x", h, p[:HeaderSize])
		}
	})
}

// FuzzReassembler pushes the fuzz input as a stream of payloads (each a
// length byte and that many bytes): whatever they hold, the reassembler
// returns only descriptions whose data is as long as their fragments, and
// keeps at most MaxPending incomplete ones.
func FuzzReassembler(f *testing.F) {
	frags, _ := Packetize(Header{Client: 1, Frame: 2}, bytes.Repeat([]byte("pc"), 100), 80)
	var stream []byte
	for _, p := range frags {
		stream = append(append(stream, byte(len(p))), p...)
	}
	f.Add(stream)
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := NewReassembler(100 * time.Millisecond)
		now := time.Unix(0, 0)
		for len(stream) > 0 {
			n := int(stream[0])
			stream = stream[1:]
			p := stream[:min(n, len(stream))]
			stream = stream[len(p):]
			now = now.Add(time.Millisecond)
			d, err := r.Push(now, p)
			if err != nil && d != nil {
				t.Fatal("a description came with an error")
			}
			if d != nil && len(d.Data) > len(p)*65535 {
				t.Fatalf("a description of %d bytes from fragments of at most %d", len(d.Data), len(p))
			}
			if r.Pending() > MaxPending {
				t.Fatalf("%d incomplete descriptions kept, bound %d", r.Pending(), MaxPending)
			}
		}
		r.Expire(now.Add(time.Second))
		if r.Pending() != 0 {
			t.Fatalf("%d pending after every deadline passed", r.Pending())
		}
	})
}

// A sender that starts more descriptions than MaxPending and finishes none
// makes the oldest drop.
func TestReassemblerBoundsPending(t *testing.T) {
	r := NewReassembler(time.Second)
	now := time.Unix(0, 0)
	for i := range MaxPending + 10 {
		p := make([]byte, HeaderSize+1)
		Header{Frame: uint32(i), Count: 2}.Marshal(p)
		if _, err := r.Push(now.Add(time.Duration(i)*time.Millisecond), p); err != nil {
			t.Fatal(err)
		}
	}
	if r.Pending() != MaxPending || r.Stats().Expired != 10 {
		t.Fatalf("%d pending, %d dropped; want %d and 10", r.Pending(), r.Stats().Expired, MaxPending)
	}
}
