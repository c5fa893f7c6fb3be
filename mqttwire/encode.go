package mqttwire

// LengthSize is the number of bytes of n as an MQTT remaining length.
func LengthSize(n int) int {
	l := 1
	for n >= 128 {
		n >>= 7
		l++
	}
	return l
}

// AppendLength appends n as an MQTT remaining length.
func AppendLength(b []byte, n int) []byte {
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

// publishRest is the remaining length of a PUBLISH.
func publishRest(topic string, qos byte, n int) int {
	rest := 2 + len(topic) + n
	if qos > 0 {
		rest += 2 // the packet id
	}
	return rest
}

// PublishSize is the size of a PUBLISH on topic at qos with a payload of n
// bytes.
func PublishSize(topic string, qos byte, n int) int {
	rest := publishRest(topic, qos, n)
	return 1 + LengthSize(rest) + rest
}

// AppendPublishHeader appends the fixed header, the topic and, at QoS 1
// and 2, the packet id of a PUBLISH whose payload of n bytes follows.
func AppendPublishHeader(b []byte, topic string, qos byte, id uint16, n int) []byte {
	b = append(b, 3<<4|qos<<1)
	b = AppendLength(b, publishRest(topic, qos, n))
	b = append(b, byte(len(topic)>>8), byte(len(topic)))
	b = append(b, topic...)
	if qos > 0 {
		b = append(b, byte(id>>8), byte(id))
	}
	return b
}
