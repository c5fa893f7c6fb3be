package bots

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/mqttwire"
)

// publishPacket is a QoS 0 PUBLISH of payload on topic.
func publishPacket(topic, payload string) []byte {
	return append(mqttwire.AppendPublishHeader(nil, topic, 0, 0, len(payload)), payload...)
}

// scriptedBroker accepts one connection, answers CONNECT with CONNACK and
// then writes script to it in writes of chunk bytes, pausing between them.
func scriptedBroker(t *testing.T, script []byte, chunk int) string {
	t.Helper()
	return fakeBroker(t, func(c net.Conn, _ *mqttwire.Reader) {
		for off := 0; off < len(script); off += chunk {
			if _, err := c.Write(script[off:min(off+chunk, len(script))]); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
	})
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
	c, err := DialMQTT(ctx, MQTTConfig{Addr: scriptedBroker(t, script, 13), ClientID: "t", OnPublish: func(topic, payload []byte, at int64) {
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
	c, err := DialMQTT(ctx, MQTTConfig{Addr: scriptedBroker(t, script, 64<<10), ClientID: "t", ReadBuffer: 1 << 10, OnPublish: func(_, p []byte, _ int64) {
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
