package bots

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// publishPacket is a QoS 0 PUBLISH of payload on topic.
func publishPacket(topic, payload string) []byte {
	return append(appendPublishHeader(nil, topic, len(payload)), payload...)
}

// feed appends b to r's unread bytes, as reads would.
func feed(r *packetReader, b []byte) {
	for len(b) > 0 {
		n := copy(r.space(), b)
		r.end += n
		b = b[n:]
	}
}

// readPayloads feeds stream to r in chunks of chunk bytes, borrowing a
// shared buffer around each if borrow, and returns the payloads of the
// PUBLISH packets that come out.
func readPayloads(t *testing.T, r *packetReader, stream []byte, chunk int, borrow bool) []string {
	t.Helper()
	var got []string
	for off := 0; off < len(stream); off += chunk {
		var p *[]byte
		if borrow {
			p = r.borrow()
		}
		feed(r, stream[off:min(off+chunk, len(stream))])
		for {
			first, body, ok, err := r.next()
			if err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
			if !ok {
				break
			}
			if first>>4 != 3 {
				t.Fatalf("chunk %d: packet type %d", chunk, first>>4)
			}
			tl := int(body[0])<<8 | int(body[1])
			got = append(got, string(body[2+tl:]))
		}
		r.giveBack(p)
	}
	return got
}

func TestPacketReaderSplitsStream(t *testing.T) {
	big := strings.Repeat("x", 300)
	var stream []byte
	want := []string{"a", big, "", "c"}
	for i, p := range want {
		stream = append(stream, publishPacket("t/"+string(rune('0'+i)), p)...)
	}
	// Feed the stream in chunks of every size: packets split anywhere,
	// including inside the remaining length, must come out whole.
	for chunk := 1; chunk <= len(stream); chunk++ {
		got := readPayloads(t, newPacketReader(16, 1<<10), stream, chunk, false)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("chunk %d: payloads %q, want %q", chunk, got, want)
		}
	}
}

func TestPacketReaderRejects(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
	}{
		{"five length bytes", "\x30\xff\xff\xff\xff\x01", "malformed remaining length"},
		{"over the limit", "\x30\x81\x08", "exceeds the client's limit of 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPacketReader(8, 1024)
			feed(r, []byte(tc.in))
			_, _, ok, err := r.next()
			if ok || err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("next: ok %v, err %v; want an error with %q", ok, err, tc.err)
			}
		})
	}
	// An incomplete header is not an error: more bytes may come.
	r := newPacketReader(8, 1024)
	r.end = copy(r.space(), "\x30\xff\xff")
	if _, _, ok, err := r.next(); ok || err != nil {
		t.Fatalf("incomplete header: ok %v, err %v", ok, err)
	}
}

// fakeBroker accepts one connection, answers CONNECT with CONNACK and then
// writes script to it in writes of chunk bytes, pausing between them.
func fakeBroker(t *testing.T, script []byte, chunk int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 512)
		if _, err := c.Read(buf); err != nil { // CONNECT
			return
		}
		c.Write([]byte{0x20, 2, 0, 0})
		for off := 0; off < len(script); off += chunk {
			if _, err := c.Write(script[off:min(off+chunk, len(script))]); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
	}()
	return ln.Addr().String()
}

func TestClientReadsSplitWritesAndEndsOnMalformed(t *testing.T) {
	var script []byte
	for i := range 50 {
		script = append(script, publishPacket("realm/s/p/s/u/c/cam", strings.Repeat("y", i*7))...)
	}
	script = append(script, 0x30, 0xff, 0xff, 0xff, 0xff, 0x7f) // malformed length
	got := make(chan int, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialMQTT(ctx, MQTTConfig{Addr: fakeBroker(t, script, 13), ClientID: "t", OnPublish: func(topic, payload []byte, at int64) {
		if !bytes.Equal(topic, []byte("realm/s/p/s/u/c/cam")) || at <= 0 {
			t.Errorf("topic %q at %d", topic, at)
		}
		got <- len(payload)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the client did not end on a malformed packet")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "malformed remaining length") {
		t.Fatalf("Err() = %v, want the malformed length", err)
	}
	close(got)
	i := 0
	for n := range got {
		if n != i*7 {
			t.Fatalf("payload %d has %d bytes, want %d", i, n, i*7)
		}
		i++
	}
	if i != 50 {
		t.Fatalf("got %d payloads, want 50", i)
	}
}

func TestClientGrowsForLargePackets(t *testing.T) {
	payload := strings.Repeat("z", 200_000)
	script := append(publishPacket("a/b", payload), publishPacket("a/b", "after")...)
	got := make(chan string, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialMQTT(ctx, MQTTConfig{Addr: fakeBroker(t, script, 64<<10), ClientID: "t", ReadBuffer: 1 << 10, OnPublish: func(_, p []byte, _ int64) {
		got <- string(p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, want := range []string{payload, "after"} {
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("payload of %d bytes, want %d", len(p), len(want))
			}
		case <-ctx.Done():
			t.Fatal("timed out")
		}
	}
}

// FuzzPacketReader feeds arbitrary bytes, split at arbitrary points: the
// reader returns packets or an error, and never a body past its buffer.
func FuzzPacketReader(f *testing.F) {
	f.Add(publishPacket("a/b", "hello"), uint8(3))
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, uint8(1))
	f.Add([]byte{0x90, 0x03, 0x00, 0x01, 0x00}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		step := int(chunk%32) + 1
		r := newPacketReader(4, 1<<12)
		total := 0
		for off := 0; off < len(data); off += step {
			feed(r, data[off:min(off+step, len(data))])
			for {
				_, body, ok, err := r.next()
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

// Reads into a borrowed shared buffer hand the unread bytes back and forth
// whole: packets split at any point, and a packet too large to move into
// a shared buffer, come out as they went in.
func TestPacketReaderBorrowsSharedBuffers(t *testing.T) {
	huge := strings.Repeat("h", sharedBufSize) // completes over several reads
	want := []string{"a", strings.Repeat("x", 300), huge, "", "c", huge, "d"}
	var stream []byte
	for _, p := range want {
		stream = append(stream, publishPacket("t/x", p)...)
	}
	for _, chunk := range []int{1, 7, 300, 4096, sharedBufSize / 3, sharedBufSize} {
		got := readPayloads(t, newPacketReader(16, 1<<20), stream, chunk, true)
		if len(got) != len(want) {
			t.Fatalf("chunk %d: %d packets, want %d", chunk, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("chunk %d: packet %d has %d bytes, want %d", chunk, i, len(got[i]), len(want[i]))
			}
		}
	}
}
