package ubiq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/xrealm/xrealm/interest"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		id      NetworkId
		payload []byte
	}{
		{"server", ServerID, []byte(`{"type":"Ping","args":"{}"}`)},
		{"object", NetworkId{A: 0xdeadbeef, B: 42}, bytes.Repeat([]byte{7}, 500)},
		{"minimal", NetworkId{A: 1, B: 2}, []byte("abcd")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFrame(tc.id, tc.payload)
			if got := int(binary.LittleEndian.Uint32(f)); got != len(tc.payload)+8 {
				t.Fatalf("length field %d, want payload+8 = %d", got, len(tc.payload)+8)
			}
			if tc.id == ServerID && !bytes.Equal(f[4:12], []byte{0, 0, 0, 0, 1, 0, 0, 0}) {
				t.Fatalf("server id bytes % x", f[4:12])
			}
			got, err := ReadFrame(bytes.NewReader(f), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, f) || IDOf(got) != tc.id {
				t.Fatalf("read back %x, want %x", got, f)
			}
			if err := ParseFrame(f, 1<<20); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFrameErrors(t *testing.T) {
	hdr := func(n int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(n)) }
	var fe *FrameError
	for _, tc := range []struct {
		name  string
		in    []byte
		frame bool // want a *FrameError
	}{
		{"negative", append(hdr(-1543503868), make([]byte, 6)...), true},
		{"zero", hdr(0), true},
		{"eleven", append(hdr(11), make([]byte, 11)...), true},
		{"too large", hdr(1<<20 + 9), true},
		{"truncated", append(hdr(20), make([]byte, 5)...), false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.in), 1<<20)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.As(err, &fe) != tc.frame {
				t.Fatalf("error %v: FrameError = %v, want %v", err, !tc.frame, tc.frame)
			}
			if !tc.frame && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v, want EOF", err)
			}
		})
	}
	// A WebSocket message must be exactly one frame.
	f := NewFrame(NetworkId{A: 1, B: 1}, []byte("hello"))
	// Every refusal is a *FrameError (the server counts it as malformed),
	// and reading the message as a stream refuses it too.
	for _, msg := range [][]byte{f[:len(f)-1], append(append([]byte{}, f...), 0), append(append([]byte{}, f...), f...), {1, 2}, {}, hdr(1<<20 + 9)} {
		if err := ParseFrame(msg, 1<<20); !errors.As(err, &fe) {
			t.Errorf("ParseFrame(% x) = %v, want a FrameError", msg, err)
		}
		if _, err := readMessageFrame(bytes.NewReader(msg), 1<<20); !errors.As(err, &fe) {
			t.Errorf("readMessageFrame(% x) = %v, want a FrameError", msg, err)
		}
	}
	if got, err := readMessageFrame(bytes.NewReader(f), 1<<20); err != nil || !bytes.Equal(got, f) {
		t.Errorf("readMessageFrame(% x) = % x, %v", f, got, err)
	}
}

func TestSplitFrames(t *testing.T) {
	var b []byte
	for i := range 5 {
		b = AppendFrame(b, NetworkId{A: uint32(i), B: 3}, bytes.Repeat([]byte{byte(i)}, i+4))
	}
	var n int
	used, err := SplitFrames(b, func(f []byte) error {
		if IDOf(f).A != uint32(n) || len(f) != HeaderSize+n+4 {
			t.Errorf("frame %d: id %v len %d", n, IDOf(f), len(f))
		}
		n++
		return nil
	})
	if err != nil || n != 5 || used != len(b) {
		t.Fatalf("split %d frames, used %d of %d, err %v", n, used, len(b), err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(NewFrame(ServerID, []byte(`{"type":"Ping","args":"{\"clientid\":{\"a\":1,\"b\":2}}"}`)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte{12, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		total := 0
		for {
			fr, err := ReadFrame(r, 1<<16)
			if err != nil {
				break
			}
			n := int(binary.LittleEndian.Uint32(fr))
			if n < MinLength || n > 1<<16+8 || len(fr) != n+4 {
				t.Fatalf("accepted frame with length field %d and %d bytes", n, len(fr))
			}
			if ParseFrame(fr, 1<<16) != nil {
				t.Fatalf("ReadFrame accepted what ParseFrame refuses: % x", fr)
			}
			total += len(fr)
		}
		if total > len(in) {
			t.Fatalf("read %d bytes from %d", total, len(in))
		}
	})
}

func TestProps(t *testing.T) {
	var p props
	ck, cv := p.appendAll([]string{"a", "b", "a", "c"}, []string{"1", "2", "3"})
	if len(ck) != 2 || ck[0] != "a" || cv[0] != "3" || ck[1] != "b" {
		t.Fatalf("changed %v %v", ck, cv)
	}
	if ck, _ := p.appendAll([]string{"a"}, []string{"3"}); len(ck) != 0 {
		t.Fatalf("unchanged value reported: %v", ck)
	}
	ck, cv = p.appendAll([]string{"a", "zz"}, []string{"", ""})
	if len(ck) != 1 || ck[0] != "a" || cv[0] != "" {
		t.Fatalf("delete reported %v %v", ck, cv)
	}
	if _, ok := p.get("a"); ok {
		t.Fatal("empty value did not delete")
	}
}

func TestParsePosition(t *testing.T) {
	for in, ok := range map[string]bool{"1,2,3": true, "[1.5, -2, 3e2]": true, "1 2 3": true, "1,2": false, "a,b,c": false, "NaN,1,1": false} {
		if _, got := parsePosition(in); got != ok {
			t.Errorf("parsePosition(%q) ok = %v", in, got)
		}
	}
}

// positionRequest must read exactly what the general path would: the
// position of a position-only AppendPeerProperties, and nothing else.
func TestPositionRequest(t *testing.T) {
	req := func(keys, values []string) []byte {
		return EncodeRequest("AppendPeerProperties", PropertiesArgs{Keys: keys, Values: values})
	}
	tests := []struct {
		name    string
		payload []byte
		want    interest.Vec3
		ok      bool
	}{
		{"position", req([]string{PositionKey}, []string{"1.5,1.6,-20"}), interest.Vec3{X: 1.5, Y: 1.6, Z: -20}, true},
		{"JSON array", req([]string{PositionKey}, []string{"[1,2,3]"}), interest.Vec3{X: 1, Y: 2, Z: 3}, true},
		{"bad position", req([]string{PositionKey}, []string{"1,2"}), interest.Vec3{}, false},
		{"two values", req([]string{PositionKey, "name"}, []string{"1,2,3", "x"}), interest.Vec3{}, false},
		{"other key", req([]string{"name"}, []string{"1,2,3"}), interest.Vec3{}, false},
		{"escaped", req([]string{PositionKey}, []string{`1,2,3"`}), interest.Vec3{}, false},
		{"room properties", EncodeRequest("AppendRoomProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"1,2,3"}}), interest.Vec3{}, false},
		{"cut short", req([]string{PositionKey}, []string{"1,2,3"})[:60], interest.Vec3{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := positionRequest(tc.payload)
			if ok != tc.ok || got != tc.want {
				t.Errorf("positionRequest(%s) = %v, %v; want %v, %v", tc.payload, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestAppendPositionRequest(t *testing.T) {
	for _, v := range [][3]float64{{0, 0, 0}, {1.5, 1.6, -20.25}, {-99.994, 1e6, 3}} {
		got := AppendPositionRequest(nil, v[0], v[1], v[2])
		s := func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
		want := EncodeRequest("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{s(v[0]) + "," + s(v[1]) + "," + s(v[2])}})
		if !bytes.Equal(got, want) {
			t.Errorf("AppendPositionRequest(%v) = %s, EncodeRequest gives %s", v, got, want)
		}
		if p, ok := positionRequest(got); !ok || p.X != mustFloat(s(v[0])) || p.Z != mustFloat(s(v[2])) {
			t.Errorf("positionRequest(%s) = %v, %v", got, p, ok)
		}
	}
}

func mustFloat(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(err)
	}
	return f
}

// encodePeerRemoved writes plain uuids itself: the bytes must be
// EncodeRequest's, for plain and for unusual ids.
func TestEncodePeerRemoved(t *testing.T) {
	for _, id := range []string{"", "b07b07b0-0001-4000-8000-000000000001", "ABC-xyz-09", `quote"d`, "back\\slash", "tab\there", "ünï", "<html>"} {
		want := EncodeRequest("PeerRemoved", struct {
			UUID string `json:"uuid"`
		}{id})
		if got := encodePeerRemoved(id); !bytes.Equal(got, want) {
			t.Errorf("encodePeerRemoved(%q) = %s, want %s", id, got, want)
		}
	}
}

// feedFrames feeds in to a frameReader chunk bytes at a time and returns
// the frames that come out (copied) and the error that broke the stream.
func feedFrames(in []byte, chunk, maxPayload int) ([][]byte, error) {
	r := frameReader{max: maxPayload}
	var got [][]byte
	for off := 0; off < len(in); off += chunk {
		p := in[off:min(off+chunk, len(in))]
		for len(p) > 0 {
			n := copy(r.Space(), p)
			r.Advance(n)
			p = p[n:]
		}
		for {
			f, ok, err := r.next()
			if err != nil {
				return got, err
			}
			if !ok {
				break
			}
			got = append(got, bytes.Clone(f))
		}
	}
	return got, nil
}

// The TCP front end's frame reader finds whole frames however the stream
// is split, refuses the lengths ReadFrame refuses, and keeps a frame that
// is not complete yet.
func TestFrameReaderSplitsStream(t *testing.T) {
	var stream []byte
	var want [][]byte
	for i, n := range []int{4, 100, 20_000, 5, 70_000} {
		f := NewFrame(NetworkId{A: uint32(i), B: 9}, bytes.Repeat([]byte{byte(i)}, n))
		want = append(want, f)
		stream = append(stream, f...)
	}
	for _, chunk := range []int{1, 3, 11, 4096, 65_536, len(stream)} {
		got, err := feedFrames(stream, chunk, 1<<20)
		if err != nil || len(got) != len(want) {
			t.Fatalf("chunk %d: %d frames, %v; want %d", chunk, len(got), err, len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("chunk %d: frame %d differs", chunk, i)
			}
		}
	}
	hdr := func(n int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(n)) }
	var fe *FrameError
	for _, in := range [][]byte{hdr(-1), hdr(0), hdr(11), hdr(1<<20 + 9)} {
		if got, err := feedFrames(append(append([]byte{}, want[0]...), in...), 2, 1<<20); len(got) != 1 || !errors.As(err, &fe) {
			t.Errorf("length % x after a frame: %d frames, %v; want 1 and a FrameError", in, len(got), err)
		}
	}
	if got, err := feedFrames(want[1][:50], 7, 1<<20); len(got) != 0 || err != nil {
		t.Errorf("half a frame: %d frames, %v; want none and no error", len(got), err)
	}
}

// The frame reader agrees with ReadFrame on any input, split anywhere.
func FuzzFrameReader(f *testing.F) {
	f.Add(NewFrame(ServerID, []byte(`{"type":"Ping","args":"{}"}`)), uint8(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, uint8(1))
	f.Add(append(NewFrame(NetworkId{A: 1, B: 2}, []byte("abcd")), 12, 0, 0, 0, 1), uint8(5))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		got, err := feedFrames(in, int(chunk%64)+1, 1<<16)
		r := bytes.NewReader(in)
		for i := 0; ; i++ {
			want, werr := ReadFrame(r, 1<<16)
			if werr != nil {
				var fe *FrameError
				if len(got) != i || errors.As(werr, &fe) != (err != nil) {
					t.Fatalf("ReadFrame: %d frames, then %v; frame reader: %d frames, then %v", i, werr, len(got), err)
				}
				return
			}
			if i >= len(got) || !bytes.Equal(got[i], want) {
				t.Fatalf("frame %d: frame reader has %d frames, ReadFrame % x", i, len(got), want)
			}
		}
	})
}

// largestRead records the largest buffer Read was handed, and gives 100
// payload bytes after the header, then EOF.
type largestRead struct {
	data    []byte
	largest int
}

func (r *largestRead) Read(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// A frame that announces 4 MiB and sends 100 bytes takes a buffer of
// 64 KiB, not 4 MiB: a peer holds no more of the server's memory than it
// sent. (The test fails if a WebSocket message's 4-byte length field
// makes the server allocate the whole announced frame at once.)
func TestReadFrameGrowsAsBytesCome(t *testing.T) {
	const announced = 4 << 20
	hdr := binary.LittleEndian.AppendUint32(nil, announced+8)
	for _, tc := range []struct {
		name string
		read func(r io.Reader) error
	}{
		{"ReadFrame", func(r io.Reader) error { _, err := ReadFrame(r, announced); return err }},
		{"WebSocket message", func(r io.Reader) error { _, err := readMessageFrame(r, announced); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &largestRead{data: append(hdr, make([]byte, 100)...)}
			if err := tc.read(r); err == nil {
				t.Fatal("a frame cut short was read")
			}
			if r.largest > readChunk {
				t.Fatalf("read into a buffer of %d bytes for a frame that sent 100", r.largest)
			}
		})
	}
	// A whole frame of that size still reads.
	payload := bytes.Repeat([]byte("x"), announced)
	f, err := ReadFrame(bytes.NewReader(NewFrame(NetworkId{A: 1, B: 2}, payload)), announced)
	if err != nil || !bytes.Equal(f[HeaderSize:], payload) {
		t.Fatalf("whole frame: %d bytes, %v", len(f), err)
	}
}
