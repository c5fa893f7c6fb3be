package mqtt

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/xrealm/xrealm/mqttwire"
)

// maxControlPacket bounds packets other than PUBLISH (CONNECT, SUBSCRIBE...).
const maxControlPacket = 256 << 10

// errTooLarge marks a PUBLISH whose payload exceeds the limit; its bytes
// have been read and discarded, and the connection can go on. At QoS 1 or
// 2 the refusal is acknowledged with the packet's id, as a denied publish
// is, so that the client does not keep it in flight for ever.
type errTooLarge struct {
	size, limit int
	qos         byte
	id          uint16
	hasID       bool
}

func (e errTooLarge) Error() string {
	return fmt.Sprintf("PUBLISH of %d bytes exceeds the %d-byte limit", e.size, e.limit)
}

// decoder turns the packets that a mqttwire.Reader finds into Paho's
// types. It sets the size limits: PUBLISH up to the payload limit (plus
// the largest topic and packet id), other packets up to maxControlPacket.
type decoder struct {
	maxPublish int
	// frame is the PUBLISH last decoded, encoded as the QoS 0 PUBLISH that
	// subscribers get; its Payload is a part of it (see decodePublish).
	frame []byte
}

// limit is the largest remaining length accepted for a packet with first
// byte first; it is the mqttwire.Reader's limit.
func (d *decoder) limit(first byte) int {
	if first>>4 == packets.Publish {
		return d.maxPublish + publishOverhead
	}
	return maxControlPacket
}

// publishOverhead is how much longer than its payload a PUBLISH's
// remaining length may be: the topic's length, the longest topic and a
// packet id.
const publishOverhead = 2 + 65535 + 2

// MaxPublishSize is the size of the largest whole PUBLISH packet with a
// payload of maxPayload bytes: its remaining length and the fixed header
// (one byte and at most four of length).
func MaxPublishSize(maxPayload int) int { return 1 + 4 + maxPayload + publishOverhead }

// next decodes the next complete packet in r; ok is false when r holds
// none. An oversized PUBLISH is skipped and reported as errTooLarge, and
// the stream can go on; other errors end the connection.
func (d *decoder) next(r *mqttwire.Reader) (cp packets.ControlPacket, ok bool, err error) {
	first, body, ok, err := r.Next()
	if err != nil {
		// Only here: a target for errors.As is made on the heap.
		var tl *mqttwire.TooLargeError
		if errors.As(err, &tl) && tl.First>>4 == packets.Publish {
			return nil, false, errTooLarge{size: tl.Size, limit: d.maxPublish, qos: (tl.First >> 1) & 3, id: tl.ID, hasID: tl.HasID}
		}
		return nil, false, err
	}
	if !ok {
		return nil, false, nil
	}
	cp, err = d.decode(first, body)
	return cp, err == nil, err
}

// decode decodes one packet: its first byte and its body, which the
// packet does not keep.
func (d *decoder) decode(first byte, body []byte) (packets.ControlPacket, error) {
	typ := first >> 4
	fh := packets.FixedHeader{
		MessageType:     typ,
		Dup:             first&0x08 != 0,
		Qos:             (first >> 1) & 0x03,
		Retain:          first&0x01 != 0,
		RemainingLength: len(body),
	}
	if fh.Qos > 2 {
		return nil, fmt.Errorf("packet with QoS %d", fh.Qos)
	}
	if typ == packets.Publish {
		return d.decodePublish(fh, body)
	}
	cp, err := packets.NewControlPacketWithHeader(fh)
	if err != nil {
		return nil, err
	}
	if err := cp.Unpack(bodyReader{bytes.NewReader(body)}); err != nil {
		return nil, fmt.Errorf("malformed %s packet: %w", packets.PacketNames[typ], err)
	}
	return cp, nil
}

// decodePublish decodes the body of a PUBLISH whose fixed header is fh.
// The message is copied into the frame that subscribers will get, a QoS 0
// PUBLISH of the same topic and payload, so that a message costs one
// allocation and one copy on its way through the broker, where Paho's
// Unpack and a separate encoding for the subscribers made six and two.
func (d *decoder) decodePublish(fh packets.FixedHeader, body []byte) (*packets.PublishPacket, error) {
	n := len(body)
	idLen := 0
	if fh.Qos > 0 {
		idLen = 2
	}
	if n < 2 {
		return nil, fmt.Errorf("malformed PUBLISH packet: %d bytes, too short for a topic length", n)
	}
	tl := int(body[0])<<8 | int(body[1])
	if 2+tl+idLen > n {
		return nil, fmt.Errorf("malformed PUBLISH packet: topic of %d bytes and packet id in a body of %d", tl, n)
	}
	p := &packets.PublishPacket{FixedHeader: fh, TopicName: string(body[2 : 2+tl])}
	payload := body[2+tl+idLen:]
	if len(payload) > d.maxPublish {
		e := errTooLarge{size: len(payload), limit: d.maxPublish, qos: fh.Qos}
		if idLen > 0 {
			e.id, e.hasID = uint16(body[2+tl])<<8|uint16(body[3+tl]), true
		}
		return nil, e
	}
	var frame []byte
	if idLen == 0 { // the body is the frame's: copy it behind a QoS 0 header
		h := 1 + mqttwire.LengthSize(n)
		frame = make([]byte, h+n)
		frame[0] = packets.Publish << 4
		mqttwire.AppendLength(frame[1:1], n)
		copy(frame[h:], body)
	} else {
		p.MessageID = uint16(body[2+tl])<<8 | uint16(body[3+tl])
		frame = encodePublish(p.TopicName, payload, 0, 0)
	}
	p.Payload = frame[len(frame)-len(payload):]
	d.frame = frame
	return p, nil
}

// bodyReader reads a packet body. A zero-length read succeeds even at the
// end of the body: Paho unpacks an empty PUBLISH payload with such a read,
// and bytes.Reader would answer it with io.EOF.
type bodyReader struct{ r *bytes.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return b.r.Read(p)
}

// encode returns a packet's wire bytes.
func encode(cp packets.ControlPacket) []byte {
	var b bytes.Buffer
	cp.Write(&b) // writing to a bytes.Buffer cannot fail
	return b.Bytes()
}

// encodePublish encodes a PUBLISH into one slice of its exact size. It is
// the one packet the broker encodes per message (every other packet goes
// through Paho's encoder, against which TestEncodePublishMatchesPaho checks
// it): Paho's PublishPacket.Write builds a header buffer and a body buffer
// and grows its output, several allocations and copies per message.
func encodePublish(topic string, payload []byte, qos byte, id uint16) []byte {
	b := make([]byte, 0, mqttwire.PublishSize(topic, qos, len(payload)))
	b = mqttwire.AppendPublishHeader(b, topic, qos, id, len(payload))
	return append(b, payload...)
}
