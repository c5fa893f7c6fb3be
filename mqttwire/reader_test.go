package mqttwire

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testnet"

	"github.com/xrealm/xrealm/streamread"
)

// publishPacket is a QoS 0 PUBLISH of payload on topic.
func publishPacket(topic, payload string) []byte {
	return append(AppendPublishHeader(nil, topic, 0, 0, len(payload)), payload...)
}

// takePayloads takes the complete packets in r, which must be PUBLISHes,
// and returns their payloads; it stops at the first error.
func takePayloads(r *Reader) ([]string, error) {
	var got []string
	for {
		first, body, ok, err := r.Next()
		if err != nil || !ok {
			return got, err
		}
		if first>>4 != 3 {
			return got, fmt.Errorf("packet type %d, not PUBLISH", first>>4)
		}
		tl := int(body[0])<<8 | int(body[1])
		got = append(got, string(body[2+tl:]))
	}
}

// feed appends b to r's unread bytes, as reads would.
func feed(r *Reader, b []byte) {
	for len(b) > 0 {
		n := copy(r.Space(), b)
		r.Advance(n)
		b = b[n:]
	}
}

// readPayloads feeds stream to r in chunks of chunk bytes and returns the
// payloads of the PUBLISH packets that come out.
func readPayloads(t *testing.T, r *Reader, stream []byte, chunk int) []string {
	t.Helper()
	var got []string
	for off := 0; off < len(stream); off += chunk {
		feed(r, stream[off:min(off+chunk, len(stream))])
		payloads, err := takePayloads(r)
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		got = append(got, payloads...)
	}
	return got
}

func TestReaderSplitsStream(t *testing.T) {
	big := strings.Repeat("x", 300)
	var stream []byte
	want := []string{"a", big, "", "c"}
	for i, p := range want {
		stream = append(stream, publishPacket("t/"+string(rune('0'+i)), p)...)
	}
	// Feed the stream in chunks of every size: packets split anywhere,
	// including inside the remaining length, must come out whole.
	for chunk := 1; chunk <= len(stream); chunk++ {
		got := readPayloads(t, NewReader(16, MaxLength(1<<10)), stream, chunk)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("chunk %d: payloads %q, want %q", chunk, got, want)
		}
	}
}

func TestReaderRejects(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
	}{
		{"five length bytes", "\x30\xff\xff\xff\xff\x01", "malformed remaining length"},
		{"over the limit", "\x30\x81\x08", "PUBLISH packet of 1025 bytes exceeds the limit of 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(8, MaxLength(1024))
			feed(r, []byte(tc.in))
			_, _, ok, err := r.Next()
			if ok || err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("next: ok %v, err %v; want an error with %q", ok, err, tc.err)
			}
		})
	}
	// An incomplete header is not an error: more bytes may come.
	r := NewReader(8, MaxLength(1024))
	feed(r, []byte("\x30\xff\xff"))
	if _, _, ok, err := r.Next(); ok || err != nil {
		t.Fatalf("incomplete header: ok %v, err %v", ok, err)
	}
}

// FuzzReader feeds arbitrary bytes, split at arbitrary points: the
// reader returns packets or an error, and never a body past its buffer.
func FuzzReader(f *testing.F) {
	f.Add(publishPacket("a/b", "hello"), uint8(3))
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, uint8(1))
	f.Add([]byte{0x90, 0x03, 0x00, 0x01, 0x00}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		step := int(chunk%32) + 1
		r := NewReader(4, MaxLength(1<<12))
		total := 0
		for off := 0; off < len(data); off += step {
			feed(r, data[off:min(off+step, len(data))])
			for {
				_, body, ok, err := r.Next()
				var tl *TooLargeError
				if errors.As(err, &tl) {
					continue // its bytes are skipped; the stream goes on
				}
				if err != nil {
					return
				}
				if !ok {
					break
				}
				if len(body) > 1<<12 {
					t.Fatalf("body of %d bytes over the limit", len(body))
				}
				total += len(body)
			}
		}
		if total > len(data) {
			t.Fatalf("%d body bytes from %d input bytes", total, len(data))
		}
	})
}

// A packet over the limit is reported once and its bytes skipped, however
// they arrive; the packets around it come out whole.
func TestReaderSkipsTooLarge(t *testing.T) {
	big := strings.Repeat("b", 5000)
	stream := append(publishPacket("t/a", "before"), publishPacket("t/b", big)...)
	stream = append(stream, publishPacket("t/c", "after")...)
	for _, chunk := range []int{1, 3, 100, 4096, len(stream)} {
		got, refused := feedInChunks(t, NewReader(16, MaxLength(1000)), stream, chunk)
		if len(refused) != 1 || strings.Join(got, "|") != "before|after" {
			t.Fatalf("chunk %d: %d too large, payloads %q", chunk, len(refused), got)
		}
		if tl := refused[0]; tl.Size != 2+3+5000 || tl.Limit != 1000 || PacketName(tl.First) != "PUBLISH" || tl.HasID {
			t.Fatalf("chunk %d: %+v", chunk, tl)
		}
	}
}

// The limit may depend on the packet type.
func TestReaderLimitByType(t *testing.T) {
	limit := func(first byte) int {
		if first>>4 == 3 {
			return 1 << 20
		}
		return 16
	}
	r := NewReader(64, limit)
	feed(r, publishPacket("t", strings.Repeat("p", 100)))
	feed(r, []byte{0x82, 20})
	if _, body, ok, err := r.Next(); !ok || err != nil || len(body) != 103 {
		t.Fatalf("PUBLISH of 103 bytes: ok %v, err %v, %d bytes", ok, err, len(body))
	}
	_, _, _, err := r.Next()
	var tl *TooLargeError
	if !errors.As(err, &tl) || PacketName(tl.First) != "SUBSCRIBE" || !strings.Contains(err.Error(), "SUBSCRIBE packet of 20 bytes exceeds the limit of 16") {
		t.Fatalf("SUBSCRIBE of 20 bytes: %v", err)
	}
}

// receiveAll runs streamread.Receive on the server end of a connection and collects
// the payloads of the PUBLISH packets it hands over.
func receiveAll(nc net.Conn, stop func() bool) ([]string, error) {
	r := NewReader(16, MaxLength(1<<20))
	var got []string
	err := streamread.Receive(nc, &r.Buffer, streamread.Options{Stop: stop}, func() error {
		p, err := takePayloads(r)
		got = append(got, p...)
		return err
	})
	return got, err
}

// streamread.Receive with a Reader hands over every packet, split across writes anywhere, on a
// plain socket (raw reads) and on a wrapper (net.Pipe, read through its
// Read), and ends with io.EOF when the peer closes.
func TestReceiveSplitWrites(t *testing.T) {
	var stream []byte
	var want []string
	for i := range 40 {
		p := strings.Repeat("y", i*37)
		want = append(want, p)
		stream = append(stream, publishPacket("a/b", p)...)
	}
	want = append(want, strings.Repeat("z", 200_000)) // larger than a shared buffer
	stream = append(stream, publishPacket("a/b", want[len(want)-1])...)
	pipeC, pipeS := net.Pipe()
	tcpC, tcpS := testnet.TCPPair(t)
	for _, tc := range []struct {
		name           string
		client, server net.Conn
	}{{"tcp", tcpC, tcpS}, {"pipe", pipeC, pipeS}} {
		t.Run(tc.name, func(t *testing.T) {
			go func() {
				for off := 0; off < len(stream); off += 1000 {
					if _, err := tc.client.Write(stream[off:min(off+1000, len(stream))]); err != nil {
						return
					}
					if off%7000 == 0 {
						time.Sleep(time.Millisecond) // let some reads come up short
					}
				}
				tc.client.Close()
			}()
			got, err := receiveAll(tc.server, func() bool { return false })
			if !errors.Is(err, io.EOF) {
				t.Fatalf("Receive ended with %v, want EOF", err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d packets, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("packet %d: %d bytes, want %d", i, len(got[i]), len(want[i]))
				}
			}
		})
	}
}

// A malformed length ends Receive with ErrMalformedLength, after the
// packets before it.
func TestReceiveMalformed(t *testing.T) {
	c, s := testnet.TCPPair(t)
	c.Write(append(publishPacket("a", "x"), 0x30, 0xff, 0xff, 0xff, 0xff, 0x01))
	got, err := receiveAll(s, func() bool { return false })
	if !errors.Is(err, ErrMalformedLength) || len(got) != 1 {
		t.Fatalf("err %v after %d packets, want the malformed length after 1", err, len(got))
	}
}

func TestReadPacket(t *testing.T) {
	c, s := testnet.TCPPair(t)
	go func() {
		b := append(publishPacket("a", "first"), publishPacket("a", "second")...)
		for i := range b { // a byte at a time
			c.Write(b[i : i+1])
		}
		c.Write([]byte{0x30, 9, 0}) // then a truncated packet
		c.Close()
	}()
	r := NewReader(4, MaxLength(100))
	for _, want := range []string{"first", "second"} {
		_, body, err := ReadPacket(s, r)
		if err != nil || string(body[3:]) != want {
			t.Fatalf("ReadPacket: %q, %v; want %q", body, err, want)
		}
	}
	if _, _, err := ReadPacket(s, r); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated packet: %v, want io.ErrUnexpectedEOF", err)
	}
}

// A PUBLISH at QoS 1 or 2 over the limit reports its packet id, however its
// header arrives; one whose topic length leaves no room for an id reports
// none, and the stream goes on after both.
func TestReaderTooLargeKeepsPacketID(t *testing.T) {
	qos1 := []byte{0x32, 0x88, 0x27} // PUBLISH QoS 1, remaining length 5,000
	qos1 = append(qos1, 0, 3, 't', '/', 'q', 0x12, 0x34)
	qos1 = append(qos1, make([]byte, 5000-7)...)
	bad := []byte{0x34, 0xd0, 0x0f, 0xff, 0xff} // QoS 2, 2,000 bytes, topic length 65,535
	bad = append(bad, make([]byte, 2000-2)...)
	stream := append(append(qos1, bad...), publishPacket("t/c", "after")...)
	for _, chunk := range []int{1, 2, 7, 4096, len(stream)} {
		got, refused := feedInChunks(t, NewReader(16, MaxLength(1000)), stream, chunk)
		if len(refused) != 2 || !refused[0].HasID || refused[0].ID != 0x1234 || refused[1].HasID || strings.Join(got, "|") != "after" {
			t.Fatalf("chunk %d: refused %+v %+v, payloads %q", chunk, refused[0], refused[len(refused)-1], got)
		}
	}
}

// feedInChunks feeds stream to r chunk bytes at a time, taking packets as
// they complete, and returns the payloads of the PUBLISH packets and the
// packets refused as too large.
func feedInChunks(t *testing.T, r *Reader, stream []byte, chunk int) (payloads []string, refused []*TooLargeError) {
	t.Helper()
	for off := 0; off < len(stream); off += chunk {
		feed(r, stream[off:min(off+chunk, len(stream))])
		for {
			p, err := takePayloads(r)
			payloads = append(payloads, p...)
			var tl *TooLargeError
			if errors.As(err, &tl) {
				refused = append(refused, tl)
				continue
			}
			if err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
			break
		}
	}
	return payloads, refused
}
