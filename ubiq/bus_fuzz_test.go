package ubiq

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/interest"
)

func busPos(x, y, z float64) []byte {
	return appendPosition(appendBus(nil, busPosition, "p"), interest.Vec3{X: x, Y: y, Z: z})
}

// Bus payloads from other nodes: a relayed frame must be one whole frame,
// and a position finite; the rest is refused: a position of NaN or
// infinity would go into the room's kNN index, which takes only finite
// ones, and a frame whose length field does not match its body would put
// receivers' streams out of step.
func TestParseBus(t *testing.T) {
	frame := NewFrame(NetworkId{A: 1, B: 2}, []byte("abcd"))
	short := append([]byte(nil), frame...)
	binary.LittleEndian.PutUint32(short, 100)
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"frame", append(appendBus(nil, busFrame, "p"), frame...), true},
		{"frame, no sender", append(appendBus(nil, busFrame, ""), frame...), true},
		{"frame cut short", append(appendBus(nil, busFrame, "p"), frame[:len(frame)-1]...), false},
		{"frame padded", append(append(appendBus(nil, busFrame, "p"), frame...), 0), false},
		{"length field too long", append(appendBus(nil, busFrame, "p"), short...), false},
		{"header only", append(appendBus(nil, busFrame, "p"), frame[:HeaderSize]...), false},
		{"position", busPos(1, -2, 3e300), true},
		{"NaN", busPos(math.NaN(), 0, 0), false},
		{"+Inf", busPos(0, math.Inf(1), 0), false},
		{"-Inf", busPos(0, 0, math.Inf(-1)), false},
		{"position too short", busPos(1, 2, 3)[:20], false},
		{"sender longer than the payload", []byte{busFrame, 9, 'a'}, false},
		{"unknown kind", append(appendBus(nil, 'x', "p"), frame...), false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, _, body, ok := parseBus(tc.in)
			if ok && kind == busPosition {
				_, ok = decodePosition(body)
			}
			if ok != tc.ok {
				t.Fatalf("parseBus(% x): ok %v, want %v", tc.in, ok, tc.ok)
			}
		})
	}
}

// FuzzParseBus: what parseBus takes re-encodes to the same payload, a
// frame is one whole frame, and a decoded position is finite.
func FuzzParseBus(f *testing.F) {
	f.Add(append(appendBus(nil, busFrame, "peer"), NewFrame(ServerID, []byte("abcd"))...))
	f.Add(busPos(1, 2, 3))
	f.Add(busPos(math.NaN(), 2, 3))
	f.Add([]byte{busFrame, 200})
	f.Fuzz(func(t *testing.T, in []byte) {
		kind, sender, body, ok := parseBus(in)
		if !ok {
			return
		}
		if again := append(appendBus(nil, kind, sender), body...); !bytes.Equal(again, in) {
			t.Fatalf("parseBus(% x) = %c %q % x, which encodes as % x", in, kind, sender, body, again)
		}
		switch kind {
		case busFrame:
			if err := ParseFrame(body, math.MaxInt32-8); err != nil {
				t.Fatalf("parseBus(% x) took a frame that is not one: %v", in, err)
			}
		case busPosition:
			if p, ok := decodePosition(body); ok {
				for _, v := range []float64{p.X, p.Y, p.Z} {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatalf("decodePosition(% x) = %+v", body, p)
					}
				}
			}
		}
	})
}

// FuzzParseCoalesce: a peer's CoalesceKey property comes off the wire.
// Every NetworkId parseCoalesce returns reads back from its own string
// form, there are at most maxCoalesceIDs, and every entry is counted as
// an id or as bad.
func FuzzParseCoalesce(f *testing.F) {
	f.Add(`["1-2","a-b"]`)
	f.Add("ffffffff-ffffffff, 100000000-1, -, 1-, x")
	f.Add(strings.Repeat("1-1,", 100))
	f.Fuzz(func(t *testing.T, v string) {
		ids, bad := parseCoalesce(v)
		if len(ids) > maxCoalesceIDs || bad < 0 {
			t.Fatalf("parseCoalesce(%q): %d ids, %d bad", v, len(ids), bad)
		}
		for _, id := range ids {
			if back, ok := parseNetworkId(id.String()); !ok || back != id {
				t.Fatalf("parseCoalesce(%q): %v reads back as %v, %v", v, id, back, ok)
			}
		}
		entries := len(strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(`, []"`+"\t\n\r", r) }))
		if len(ids) < maxCoalesceIDs && len(ids)+bad != entries {
			t.Fatalf("parseCoalesce(%q): %d ids and %d bad of %d entries", v, len(ids), bad, entries)
		}
	})
}
