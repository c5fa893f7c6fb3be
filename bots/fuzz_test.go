package bots

import (
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/xrealm/xrealm/mqttwire"
)

// FuzzReadTrace: a pose trace file is refused with an error, or gives at
// least one sample, every number finite and times strictly increasing.
// What WriteTo writes of it reads back with the same number of samples
// and values within the rounding WriteTo applies. A replay of it stays on
// the segments between samples: positions within the bounds of the two
// samples around them, rotations of unit length between samples.
func FuzzReadTrace(f *testing.F) {
	for _, s := range []string{
		"# a trace\n0 0 1.6 0 0 0 0 1\n\n1 2 1.6 0 0 0 0 1\n2 2 1.6 4 0 0 0 1\n",
		"0\t1\t2\t3\t0\t0.7071\t0\t0.7071\n",
		"0 0 0 0 0 0 0 1\n0.5 1 1 1 0 1 0 0\n",
		"0 0 0 0 0 0 0 1\n0.01 1 0 0 0 0 0 1\n",
		"0 0 0 0 0 0 0 1\n0.0001 1 0 0 0 0 0 1\n", // under 1 ms apart: written back exactly
		"1e9 0 0 0 0 0 0 1\n2e9 1 1 1 0 0 0 1\n",
		"0 0 0 0 0 0 0 1\n1e10 1 1 1 0 0 0 1\n",  // beyond what a time.Duration holds
		"0 0 0 0 0 0 0 1\n1e-10 1 1 1 0 0 0 1\n", // under a nanosecond
		"0 1 2 3\n", "0 1 2 x 0 0 0 1\n", "1 0 0 0 0 0 0 1\n0.5 0 0 0 0 0 0 1\n",
		"0 NaN 0 0 0 0 0 1\n", "0 Inf 0 0 0 0 0 1\n", "0 0x1p3 0 0 0 0 0 1\n", "0 1_0 0 0 0 0 0 1\n",
		"# only a comment\n", "", "\r\n", "   #\n0 0 0 0 0 0 0 0\n",
		strings.Repeat("x", 70000) + "\n",
	} {
		f.Add(s, 0.25)
	}
	f.Fuzz(func(t *testing.T, in string, phase float64) {
		tr, err := ReadTrace(strings.NewReader(in))
		if err != nil {
			if tr != nil {
				t.Fatalf("ReadTrace(%q) returned a trace with error %v", in, err)
			}
			return
		}
		if len(tr.Samples) == 0 {
			t.Fatalf("ReadTrace(%q) returned no samples and no error", in)
		}
		for i, s := range tr.Samples {
			for _, v := range sampleValues(s) {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("ReadTrace(%q): sample %d holds %v", in, i, v)
				}
			}
			if i > 0 && !(s.T > tr.Samples[i-1].T) {
				t.Fatalf("ReadTrace(%q): time %v after %v", in, s.T, tr.Samples[i-1].T)
			}
		}

		var sb strings.Builder
		if _, err := tr.WriteTo(&sb); err != nil {
			t.Fatal(err)
		}
		back, err := ReadTrace(strings.NewReader(sb.String()))
		if err != nil {
			t.Fatalf("WriteTo wrote a trace that ReadTrace refuses: %v\ninput:\n%s\nwritten:\n%s", err, in, sb.String())
		}
		if len(back.Samples) != len(tr.Samples) {
			t.Fatalf("round trip: %d samples, read back %d", len(tr.Samples), len(back.Samples))
		}
		for i := range tr.Samples {
			a, b := sampleValues(tr.Samples[i]), sampleValues(back.Samples[i])
			for j := range a {
				tol := 0.0005 // %.3f
				if j >= 4 {
					tol = 0.00005 // %.4f
				}
				if math.Abs(a[j]-b[j]) > tol*(1+1e-9)+1e-12*math.Abs(a[j]) {
					t.Fatalf("round trip of sample %d: value %d %v read back as %v", i, j, a[j], b[j])
				}
			}
		}

		// Replay: as behaviour.go starts it, with a phase within the trace.
		if math.IsNaN(phase) || math.IsInf(phase, 0) {
			phase = 0
		}
		sane := true // magnitudes where the arithmetic cannot overflow
		for _, s := range tr.Samples {
			for _, v := range sampleValues(s) {
				sane = sane && math.Abs(v) < 1e9
			}
		}
		if tr.Duration() < 0 {
			t.Fatalf("ReadTrace(%q): a trace of increasing times lasts %v", in, tr.Duration())
		}
		r := NewReplay(tr, math.Abs(phase)*tr.Duration().Seconds())
		if len(tr.Samples) > 1 && !(r.dur > 0) {
			t.Fatalf("ReadTrace(%q): a replay of %d samples over %v s does not move (duration %v)", in, len(tr.Samples), tr.Samples[len(tr.Samples)-1].T-tr.Samples[0].T, r.dur)
		}
		for k := 0; k < 50; k++ {
			p := r.Step(37*time.Millisecond, nil)
			if !sane {
				continue
			}
			i := r.i
			lo, hi := tr.Samples[i].Pose.Pos, tr.Samples[min(i+1, len(tr.Samples)-1)].Pose.Pos
			for _, c := range [][3]float64{{p.Pos.X, lo.X, hi.X}, {p.Pos.Y, lo.Y, hi.Y}, {p.Pos.Z, lo.Z, hi.Z}} {
				eps := 1e-9 * (1 + math.Abs(c[1]) + math.Abs(c[2]))
				if c[0] < math.Min(c[1], c[2])-eps || c[0] > math.Max(c[1], c[2])+eps {
					t.Fatalf("replay step %d: position %+v outside the samples %d and %d around it (%+v, %+v)", k, p.Pos, i, i+1, lo, hi)
				}
			}
			// Between samples the rotation is normalised; on a sample (one
			// sample, or the last) it is that sample's, as read.
			q := p.Rot
			if n := math.Sqrt(q.X*q.X + q.Y*q.Y + q.Z*q.Z + q.W*q.W); math.Abs(n-1) > 1e-9 && q != tr.Samples[i].Pose.Rot {
				t.Fatalf("replay step %d: rotation %+v of length %v between samples %d and %d", k, q, n, i, i+1)
			}
		}
	})
}

func sampleValues(s TraceSample) [8]float64 {
	p := s.Pose
	return [8]float64{s.T, p.Pos.X, p.Pos.Y, p.Pos.Z, p.Rot.X, p.Rot.Y, p.Rot.Z, p.Rot.W}
}

// FuzzSeqWindow feeds received RTP sequence numbers (two bytes each) to
// the volumetric bot's loss window: a number received twice in a row is
// fresh at most once, and the advances add up to the span from the first
// number to the highest, unwrapped as the window unwraps them.
func FuzzSeqWindow(f *testing.F) {
	f.Add([]byte{0, 10, 0, 11, 0, 13, 0, 12})
	f.Add([]byte{0xff, 0xfe, 0xff, 0xff, 0, 0, 0, 1})
	f.Add([]byte{0, 1, 0x80, 1, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var w seqWindow
		var first, highest int64 // unwrapped
		var total uint64
		for i := 0; i+1 < len(b); i += 2 {
			s := binary.BigEndian.Uint16(b[i:])
			fresh, adv := w.add(s)
			if i == 0 {
				first, highest = int64(s), int64(s)
				if !fresh || adv != 1 {
					t.Fatalf("first number %d: fresh %v, advance %d", s, fresh, adv)
				}
			} else if d := int64(int16(s - uint16(highest))); d > 0 {
				highest += d
			}
			total += adv
			if again, adv2 := w.add(s); again || adv2 != 0 {
				t.Fatalf("number %d received twice in a row: fresh %v, advance %d the second time", s, again, adv2)
			}
		}
		if len(b) >= 2 && total != uint64(highest-first+1) {
			t.Fatalf("advances add up to %d, the span is %d", total, highest-first+1)
		}
	})
}

// discardConn is a connection whose writes vanish: the client's
// acknowledgements go nowhere.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }

// FuzzMQTTClientHandle feeds a byte stream from a server to the bot's MQTT
// client, framed by mqttwire.Reader as its read loop frames it. Every
// PUBLISH it hands to OnPublish must carry the topic and payload that
// Paho's decoder reads from the same packet; malformed packets are errors,
// not panics.
func FuzzMQTTClientHandle(f *testing.F) {
	pub := func(topic, payload string, qos byte, id uint16) []byte {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Payload, p.Qos, p.MessageID = topic, []byte(payload), qos, id
		var b bytes.Buffer
		_ = p.Write(&b)
		return b.Bytes()
	}
	f.Add(pub("realm/s/ns/sc/u/cam", `{"object_id":"cam"}`, 0, 0))
	f.Add(append(pub("a/b", "x", 1, 7), pub("c", "", 2, 8)...))
	f.Add([]byte{0x90, 0x03, 0x00, 0x01, 0x00})       // SUBACK
	f.Add([]byte{0x62, 0x02, 0x00, 0x05})             // PUBREL
	f.Add([]byte{0x30, 0x02, 0x00, 0x05})             // topic overruns
	f.Add([]byte{0x32, 0x03, 0x00, 0x01, 'a'})        // no packet id
	f.Add([]byte{0x36, 0x05, 0x00, 0x01, 'a', 0, 1})  // QoS 3
	f.Add([]byte{0xd0, 0x00, 0xb0, 0x02, 0x00, 0x01}) // PINGRESP, UNSUBACK
	f.Fuzz(func(t *testing.T, stream []byte) {
		var gotTopic, gotPayload []byte
		calls := 0
		c := &MQTTClient{nc: discardConn{}, pending: map[uint16]chan []byte{}}
		c.cfg.OnPublish = func(topic, payload []byte, _ int64) {
			calls++
			gotTopic, gotPayload = append([]byte(nil), topic...), append([]byte(nil), payload...)
		}
		rd := mqttwire.NewReader(64, mqttwire.MaxLength(1<<16))
		n := copy(rd.Space(), stream)
		rd.Advance(n)
		rest := stream[n:]
		for {
			first, body, ok, err := rd.Next()
			if err != nil {
				return
			}
			if !ok {
				if len(rest) == 0 {
					return
				}
				n := copy(rd.Space(), rest)
				rd.Advance(n)
				rest = rest[n:]
				continue
			}
			calls = 0
			herr := c.handle(first, body, 0)
			if first>>4 != packets.Publish {
				continue
			}
			if herr != nil {
				if calls != 0 {
					t.Fatalf("handle reported %v after delivering the PUBLISH", herr)
				}
				continue
			}
			if calls != 1 {
				t.Fatalf("PUBLISH % x handled without error but delivered %d times", body, calls)
			}
			if len(gotTopic)+len(gotPayload) > len(body) {
				t.Fatalf("topic and payload of %d bytes from a body of %d", len(gotTopic)+len(gotPayload), len(body))
			}
			// Paho's reading of the same packet, where Paho reads one.
			if (first>>1)&3 == 3 {
				continue // QoS 3 is malformed; Paho's reading is no reference
			}
			full := append([]byte{first}, remainingLength(len(body))...)
			full = append(full, body...)
			cp, err := packets.ReadPacket(bytes.NewReader(full))
			if err != nil {
				continue
			}
			p := cp.(*packets.PublishPacket)
			if p.TopicName != string(gotTopic) || !bytes.Equal(p.Payload, gotPayload) {
				t.Fatalf("PUBLISH % x: client read topic %q payload %q, Paho %q %q", body, gotTopic, gotPayload, p.TopicName, p.Payload)
			}
		}
	})
}

func remainingLength(n int) []byte {
	var b []byte
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}
