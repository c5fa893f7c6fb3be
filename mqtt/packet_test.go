package mqtt

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/xrealm/xrealm/mqttwire"
)

// testReader decodes packets from a byte stream, as a connection's read
// loop does from what its reads brought.
type testReader struct {
	decoder
	r *mqttwire.Reader
}

func newReader(b []byte, maxPublish int) *testReader {
	tr := &testReader{decoder: decoder{maxPublish: maxPublish}}
	tr.r = mqttwire.NewReader(16, tr.limit)
	for len(b) > 0 {
		n := copy(tr.r.Space(), b)
		tr.r.Advance(n)
		b = b[n:]
	}
	return tr
}

// readPacket decodes the next packet; io.EOF at the end of the stream,
// io.ErrUnexpectedEOF inside a packet.
func (tr *testReader) readPacket() (packets.ControlPacket, error) {
	cp, ok, err := tr.next(tr.r)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return cp, nil
	case tr.r.Buffered() > 0:
		return nil, io.ErrUnexpectedEOF
	default:
		return nil, io.EOF
	}
}

func TestReadPacketMalformed(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"empty", nil, "EOF"},
		{"length longer than 4 bytes", []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, "malformed remaining length"},
		{"truncated body", []byte{0x30, 0x0a, 0x00}, "EOF"},
		{"unknown packet type", []byte{0xf0, 0x00}, "unsupported packet type"},
		{"QoS 3", []byte{0x36, 0x02, 0x00, 0x00}, "QoS 3"},
		{"huge SUBSCRIBE", []byte{0x82, 0xff, 0xff, 0xff, 0x7f}, "exceeds"},
		{"publish topic longer than body", []byte{0x30, 0x03, 0x00, 0x09, 'a'}, "malformed PUBLISH"},
	}
	for _, tt := range tests {
		_, err := newReader(tt.in, 1024).readPacket()
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// An oversized PUBLISH is skipped, the packet after it is read, and at
// QoS 1 or 2 its packet id is recovered so that the refusal can be
// acknowledged: whether the payload is just over the limit (decoded) or so
// far over that the reader discards it unread.
func TestReadPacketOversizedPublishIsSkipped(t *testing.T) {
	for _, size := range []int{5000, 70000} { // the reader's own limit is 1000+65,539
		for qos := byte(0); qos <= 2; qos++ {
			big := encodePublish("a/b", bytes.Repeat([]byte("x"), size), qos, 4242)
			small := encodePublish("a/c", []byte("ok"), 0, 0)
			rd := newReader(append(big, small...), 1000)
			_, err := rd.readPacket()
			var tl errTooLarge
			if !errors.As(err, &tl) {
				t.Fatalf("size %d QoS %d: err = %v, want errTooLarge", size, qos, err)
			}
			if tl.qos != qos || tl.hasID != (qos > 0) || (qos > 0 && tl.id != 4242) {
				t.Errorf("size %d QoS %d: refusal %+v, want QoS %d and id 4242 when QoS > 0", size, qos, tl, qos)
			}
			cp, err := rd.readPacket()
			if err != nil {
				t.Fatalf("size %d QoS %d: the packet after an oversized one: %v", size, qos, err)
			}
			if p := cp.(*packets.PublishPacket); p.TopicName != "a/c" || string(p.Payload) != "ok" {
				t.Fatalf("size %d QoS %d: got %s", size, qos, p)
			}
		}
	}
}

func TestReadPacketRoundTrip(t *testing.T) {
	var stream []byte
	stream = append(stream, encodePublish("realm/s/ns/sc/o/uc/box", []byte(`{"a":1}`), 1, 7)...)
	stream = append(stream, encode(&packets.PingreqPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Pingreq}})...)
	rd := newReader(stream, 1<<20)
	cp, err := rd.readPacket()
	if err != nil {
		t.Fatal(err)
	}
	p := cp.(*packets.PublishPacket)
	if p.TopicName != "realm/s/ns/sc/o/uc/box" || p.Qos != 1 || p.MessageID != 7 || string(p.Payload) != `{"a":1}` {
		t.Fatalf("got %s", p)
	}
	// The body buffer is reused; the payload must not alias it.
	if _, err := rd.readPacket(); err != nil {
		t.Fatal(err)
	}
	if string(p.Payload) != `{"a":1}` {
		t.Fatal("payload changed after the next read")
	}
}

// arena-py publishes an empty QoS 2 message to $NETWORK/latency.
func TestReadPacketEmptyPayload(t *testing.T) {
	for _, qos := range []byte{0, 1, 2} {
		cp, err := newReader(encodePublish("$NETWORK/latency", nil, qos, 3), 1024).readPacket()
		if err != nil {
			t.Fatalf("QoS %d empty PUBLISH: %v", qos, err)
		}
		if p := cp.(*packets.PublishPacket); p.TopicName != "$NETWORK/latency" || len(p.Payload) != 0 {
			t.Fatalf("got %s", p)
		}
	}
}

func TestIsObjectSubject(t *testing.T) {
	for subj, want := range map[string]bool{
		"realm.s.ns.sc.o.uc.box":    true,
		"realm.s.ns.sc.o.uc.box.to": false,
		"realm.s.ns.sc.u.uc.cam":    false,
		"other.s.ns.sc.o.uc.box":    false,
		"realm.s.ns.sc.o.uc":        false,
		"realm.d.ns.sc.o.uc.box":    false,
	} {
		if got := isObjectSubject(subj, "realm"); got != want {
			t.Errorf("isObjectSubject(%q) = %v, want %v", subj, got, want)
		}
	}
}

func TestCoalesceKey(t *testing.T) {
	for in, want := range map[string]string{
		"realm/s/ns/sc/u/uc/cam": "realm/s/ns/sc/u/uc/cam",
		"realm/s/ns/sc/o/uc/box": "",
		"realm/s/ns/sc/u":        "",
		"a/b":                    "",
	} {
		if got := coalesceKey(in); got != want {
			t.Errorf("coalesceKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzReadPacket feeds arbitrary bytes to the packet reader: it must return
// packets or errors, never panic, and never allocate beyond its limits.
func FuzzReadPacket(f *testing.F) {
	f.Add(encodePublish("a/b", []byte("x"), 1, 1))
	f.Add([]byte{0x10, 0x0c, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3c, 0x00, 0x00})
	f.Add([]byte{0x82, 0x06, 0x00, 0x01, 0x00, 0x01, '#', 0x00})
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := newReader(b, 4096)
		for i := 0; i < 16; i++ {
			cp, err := rd.readPacket()
			if err != nil {
				var tl errTooLarge
				if errors.As(err, &tl) {
					continue
				}
				return
			}
			if p, ok := cp.(*packets.PublishPacket); ok && len(p.Payload) > 4096 {
				t.Fatalf("payload of %d bytes passed a 4096 limit", len(p.Payload))
			}
		}
	})
}

// pahoPublish is Paho's encoding of a PUBLISH, the reference for
// encodePublish.
func pahoPublish(topic string, payload []byte, qos byte, id uint16) []byte {
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Payload, p.Qos, p.MessageID = topic, payload, qos, id
	return encode(p)
}

func TestEncodePublishMatchesPaho(t *testing.T) {
	// Remaining lengths on both sides of each varint boundary.
	sizes := []int{0, 1, 120, 121, 122, 16375, 16376, 16377, 2097144, 2097145}
	for _, qos := range []byte{0, 1, 2} {
		for _, n := range sizes {
			for _, topic := range []string{"", "realm/s/ns/sc/u/camera_1_x"} {
				payload := bytes.Repeat([]byte{'p'}, n)
				got := encodePublish(topic, payload, qos, 0xbeef)
				want := pahoPublish(topic, payload, qos, 0xbeef)
				if !bytes.Equal(got, want) {
					t.Fatalf("qos %d, topic %q, payload %d: encodePublish differs from Paho (len %d vs %d)", qos, topic, n, len(got), len(want))
				}
				if cap(got) != len(got) {
					t.Errorf("qos %d, payload %d: capacity %d for %d bytes", qos, n, cap(got), len(got))
				}
			}
		}
	}
}

// FuzzEncodePublish checks encodePublish against Paho for any topic,
// payload, QoS and packet id, and that the reader reads back what it wrote.
func FuzzEncodePublish(f *testing.F) {
	f.Add("a/b", []byte("x"), byte(0), uint16(0))
	f.Add("realm/s/ns/sc/u/cam", bytes.Repeat([]byte("y"), 300), byte(1), uint16(7))
	f.Fuzz(func(t *testing.T, topic string, payload []byte, qos byte, id uint16) {
		qos %= 3
		if len(topic) > 65535 {
			return
		}
		got := encodePublish(topic, payload, qos, id)
		if want := pahoPublish(topic, payload, qos, id); !bytes.Equal(got, want) {
			t.Fatalf("encodePublish(%q, %d bytes, %d, %d) differs from Paho", topic, len(payload), qos, id)
		}
		cp, err := newReader(got, len(payload)+1).readPacket()
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		p := cp.(*packets.PublishPacket)
		if p.TopicName != topic || !bytes.Equal(p.Payload, payload) || p.Qos != qos || (qos > 0 && p.MessageID != id) {
			t.Fatalf("read back %q %d bytes qos %d id %d", p.TopicName, len(p.Payload), p.Qos, p.MessageID)
		}
	})
}

// TestReadPublishFrame checks that a PUBLISH read at any QoS comes with the
// QoS 0 frame that subscribers get, its payload a part of that frame.
func TestReadPublishFrame(t *testing.T) {
	for _, tc := range []struct {
		topic   string
		payload []byte
		qos     byte
	}{
		{"realm/s/ns/sc/u/cam", bytes.Repeat([]byte("p"), 310), 0},
		{"realm/s/ns/sc/o/box", []byte(`{"object_id":"box"}`), 1},
		{"a", nil, 2},
		{"big", bytes.Repeat([]byte("q"), 20000), 0}, // a 3-byte remaining length
	} {
		in := encodePublish(tc.topic, tc.payload, tc.qos, 9)
		rd := newReader(append(in, in...), 1<<20)
		var first *packets.PublishPacket
		for range 2 { // the second read must not disturb the first's message
			cp, err := rd.readPacket()
			if err != nil {
				t.Fatalf("%q qos %d: %v", tc.topic, tc.qos, err)
			}
			p := cp.(*packets.PublishPacket)
			if p.TopicName != tc.topic || !bytes.Equal(p.Payload, tc.payload) || p.Qos != tc.qos || (tc.qos > 0 && p.MessageID != 9) {
				t.Fatalf("%q qos %d: read %q, %d bytes, qos %d, id %d", tc.topic, tc.qos, p.TopicName, len(p.Payload), p.Qos, p.MessageID)
			}
			if want := encodePublish(tc.topic, tc.payload, 0, 0); !bytes.Equal(rd.frame, want) {
				t.Fatalf("%q qos %d: frame % x, want % x", tc.topic, tc.qos, rd.frame[:min(len(rd.frame), 16)], want[:min(len(want), 16)])
			}
			if len(p.Payload) > 0 && &p.Payload[0] != &rd.frame[len(rd.frame)-len(p.Payload)] {
				t.Fatalf("%q qos %d: the payload is a copy, not a part of the frame", tc.topic, tc.qos)
			}
			if first == nil {
				first = p
			}
		}
		if !bytes.Equal(first.Payload, tc.payload) {
			t.Fatalf("%q qos %d: the second read changed the first message's payload", tc.topic, tc.qos)
		}
	}
}
