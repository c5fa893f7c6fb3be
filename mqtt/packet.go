package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// maxControlPacket bounds packets other than PUBLISH (CONNECT, SUBSCRIBE...).
const maxControlPacket = 256 << 10

// errTooLarge marks a PUBLISH whose payload exceeds the limit; its bytes
// have been read and discarded, and the connection can go on.
type errTooLarge struct{ size, limit int }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("PUBLISH of %d bytes exceeds the %d-byte limit", e.size, e.limit)
}

// reader reads MQTT packets with size limits, using a reusable body buffer.
type reader struct {
	r          *bufio.Reader
	maxPublish int
	body       []byte
	// frame is the PUBLISH last read, encoded as the QoS 0 PUBLISH that
	// subscribers get; its Payload is a part of it (see readPublish).
	frame []byte
}

// readPacket reads one packet. Oversized PUBLISHes are skipped and reported
// as errTooLarge; other errors end the connection.
func (rd *reader) readPacket() (packets.ControlPacket, error) {
	first, err := rd.r.ReadByte()
	if err != nil {
		return nil, err
	}
	n, err := readVarint(rd.r)
	if err != nil {
		return nil, err
	}
	typ := first >> 4
	limit := maxControlPacket
	if typ == packets.Publish {
		limit = rd.maxPublish + 2 + 65535 + 2 // payload plus the largest topic and packet id
	}
	if n > limit {
		if typ == packets.Publish {
			if _, err := io.CopyN(io.Discard, rd.r, int64(n)); err != nil {
				return nil, err
			}
			return nil, errTooLarge{size: n, limit: rd.maxPublish}
		}
		return nil, fmt.Errorf("%s packet of %d bytes exceeds %d", packets.PacketNames[typ], n, limit)
	}
	fh := packets.FixedHeader{
		MessageType:     typ,
		Dup:             first&0x08 != 0,
		Qos:             (first >> 1) & 0x03,
		Retain:          first&0x01 != 0,
		RemainingLength: n,
	}
	if fh.Qos > 2 {
		return nil, fmt.Errorf("packet with QoS %d", fh.Qos)
	}
	if typ == packets.Publish {
		return rd.readPublish(fh)
	}
	cp, err := packets.NewControlPacketWithHeader(fh)
	if err != nil {
		return nil, err
	}
	if cap(rd.body) < n {
		rd.body = make([]byte, n)
	}
	body := rd.body[:n]
	if _, err := io.ReadFull(rd.r, body); err != nil {
		return nil, err
	}
	if err := cp.Unpack(bodyReader{bytes.NewReader(body)}); err != nil {
		return nil, fmt.Errorf("malformed %s packet: %w", packets.PacketNames[typ], err)
	}
	return cp, nil
}

// readPublish reads the body of a PUBLISH whose fixed header is fh. The
// message is read into the frame that subscribers will get, a QoS 0
// PUBLISH of the same topic and payload, so that a message costs one
// allocation and one copy on its way through the broker, where Paho's
// Unpack and a separate encoding for the subscribers made six and two. For
// QoS 0, whose body is the frame's, the body is read into it directly.
func (rd *reader) readPublish(fh packets.FixedHeader) (*packets.PublishPacket, error) {
	n := fh.RemainingLength
	idLen := 0
	if fh.Qos > 0 {
		idLen = 2
	}
	var body, frame []byte
	h := 1 + varintLen(n)
	if idLen == 0 {
		frame = make([]byte, h+n)
		frame[0] = packets.Publish << 4
		appendVarint(frame[1:1], n)
		body = frame[h:]
	} else {
		if cap(rd.body) < n {
			rd.body = make([]byte, n)
		}
		body = rd.body[:n]
	}
	if _, err := io.ReadFull(rd.r, body); err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, fmt.Errorf("malformed PUBLISH packet: %d bytes, too short for a topic length", n)
	}
	tl := int(body[0])<<8 | int(body[1])
	if 2+tl+idLen > n {
		return nil, fmt.Errorf("malformed PUBLISH packet: topic of %d bytes and packet id in a body of %d", tl, n)
	}
	p := &packets.PublishPacket{FixedHeader: fh, TopicName: string(body[2 : 2+tl])}
	if idLen > 0 {
		p.MessageID = uint16(body[2+tl])<<8 | uint16(body[3+tl])
		payload := body[2+tl+2:]
		frame = encodePublish(p.TopicName, payload, 0, 0)
		p.Payload = frame[len(frame)-len(payload):]
	} else {
		p.Payload = body[2+tl:]
	}
	if len(p.Payload) > rd.maxPublish {
		return nil, errTooLarge{size: len(p.Payload), limit: rd.maxPublish}
	}
	rd.frame = frame
	return p, nil
}

var errBadLength = errors.New("malformed remaining length")

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

func readVarint(r io.ByteReader) (int, error) {
	var v, mult int = 0, 1
	for i := 0; i < 4; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		v += int(b&0x7f) * mult
		if b&0x80 == 0 {
			return v, nil
		}
		mult *= 128
	}
	return 0, errBadLength
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
	rest := 2 + len(topic) + len(payload)
	if qos > 0 {
		rest += 2
	}
	b := make([]byte, 0, 1+varintLen(rest)+rest)
	b = append(b, packets.Publish<<4|qos<<1)
	b = appendVarint(b, rest)
	b = append(b, byte(len(topic)>>8), byte(len(topic)))
	b = append(b, topic...)
	if qos > 0 {
		b = append(b, byte(id>>8), byte(id))
	}
	return append(b, payload...)
}

// varintLen is the length of n as an MQTT remaining length.
func varintLen(n int) int {
	l := 1
	for n >= 128 {
		n >>= 7
		l++
	}
	return l
}

// appendVarint appends n as an MQTT remaining length.
func appendVarint(b []byte, n int) []byte {
	for {
		d := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}
