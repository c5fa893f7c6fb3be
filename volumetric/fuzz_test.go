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
			checkHeld(t, r)
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

// A fragment without data, received twice, counts once: the second is a
// duplicate, not the description's missing fragment. (Held as nil, the
// first looked absent, and the pair completed "fragment 0 of 2" and "0 of
// 2" as the two of 2, without fragment 1's data.)
func TestReassemblerEmptyFragmentTwice(t *testing.T) {
	r := NewReassembler(time.Second)
	now := time.Unix(0, 0)
	empty := make([]byte, HeaderSize)
	Header{Client: 1, Frame: 5, Fragment: 0, Count: 2}.Marshal(empty)
	for i := range 2 {
		if d, err := r.Push(now, empty); err != nil || d != nil {
			t.Fatalf("push %d of the empty fragment 0 of 2: %+v, %v; want nothing completed", i+1, d, err)
		}
	}
	if s := r.Stats(); s.Duplicates != 1 || s.Complete != 0 || r.Pending() != 1 {
		t.Fatalf("stats %+v, %d pending; want 1 duplicate and the description pending", s, r.Pending())
	}
	last := make([]byte, HeaderSize+3)
	Header{Client: 1, Frame: 5, Fragment: 1, Count: 2}.Marshal(last)
	copy(last[HeaderSize:], "abc")
	d, err := r.Push(now, last)
	if err != nil || d == nil || string(d.Data) != "abc" {
		t.Fatalf("fragment 1 of 2: %+v, %v; want the description with data \"abc\"", d, err)
	}
}

// checkHeld fails if r holds more than its byte bound or if its count of
// what it holds disagrees with its pending descriptions.
func checkHeld(t *testing.T, r *Reassembler) {
	t.Helper()
	held := 0
	for _, p := range r.pending {
		held += len(p.frags) * fragSlotBytes
		for _, f := range p.frags {
			held += len(f)
		}
	}
	if held != r.held || held > r.maxBytes {
		t.Fatalf("%d bytes pending, %d counted, bound %d", held, r.held, r.maxBytes)
	}
}

// A sender whose descriptions are large, or announce many fragments, and
// never complete makes the oldest drop once the bytes held would pass the
// bound (MaxPending alone let 32 descriptions of 65535 fragments stay); a
// description larger than the bound on its own drops; and a normal one
// still completes.
func TestReassemblerBoundsPendingBytes(t *testing.T) {
	r := NewReassembler(time.Hour)
	r.maxBytes = 1 << 20
	now := time.Unix(0, 0)
	frag := func(frame uint32, i, count uint16, size int) []byte {
		p := make([]byte, HeaderSize+size)
		Header{Client: 3, Frame: frame, Fragment: i, Count: count}.Marshal(p)
		return p
	}
	push := func(p []byte) *Description {
		t.Helper()
		now = now.Add(time.Millisecond)
		d, err := r.Push(now, p)
		if err != nil {
			t.Fatal(err)
		}
		checkHeld(t, r)
		return d
	}
	// 20 descriptions of 100 fragments, 8 of 10 kB sent of each: 1.6 MB
	for f := range uint32(20) {
		for i := range uint16(8) {
			if d := push(frag(f, i, 100, 10_000)); d != nil {
				t.Fatalf("incomplete description %d completed", f)
			}
		}
	}
	if r.Stats().Expired == 0 {
		t.Fatalf("stats %+v: nothing dropped for 1.6 MB of a 1 MiB bound", r.Stats())
	}
	if _, ok := r.pending[fragKey{3, 19, 0}]; !ok {
		t.Fatal("the newest description was dropped, not the oldest")
	}
	// one description of 200 fragments of 10 kB: more than the bound alone
	dropped := r.Stats().Expired
	for i := range uint16(120) {
		if d := push(frag(100, i, 200, 10_000)); d != nil {
			t.Fatal("a description larger than the bound completed")
		}
	}
	if _, ok := r.pending[fragKey{3, 100, 0}]; ok || r.Stats().Expired <= dropped || r.Stats().Late == 0 {
		t.Fatalf("stats %+v: the description larger than the bound is still pending, or was not given up", r.Stats())
	}
	// a normal description completes
	frags, err := Packetize(Header{Client: 3, Frame: 200}, bytes.Repeat([]byte("pc"), 5000), 1200)
	if err != nil {
		t.Fatal(err)
	}
	var d *Description
	for _, p := range frags {
		d = push(p)
	}
	if d == nil || len(d.Data) != 10000 {
		t.Fatalf("normal description after the hostile ones: %+v", d)
	}
}
