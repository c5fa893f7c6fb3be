package ubiq

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestBusPublishFailuresLogBounded: while the bus connection is down, the
// frames and positions a node relays to others all fail to publish; the
// node logs a burst of lines about it, then few, not one per frame.
func TestBusPublishFailuresLogBounded(t *testing.T) {
	bucket := fmt.Sprintf("ubiq-buslog-%d", bucketSeq.Add(1))
	logs := &logBuffer{}
	s1 := startServer(t, nil, func(c *Config) { c.Bucket, c.Logger = bucket, slog.New(slog.NewTextHandler(logs, nil)) })
	s2 := startServer(t, nil, func(c *Config) { c.Bucket = bucket })
	id := newUUID()
	a, b := dialPeer(t, s1.tcp), dialPeer(t, s2.tcp)
	a.join(JoinArgs{UUID: id, Peer: a.info(nil, nil)})
	b.join(JoinArgs{UUID: id, Peer: b.info(nil, nil)})
	a.expect("PeerAdded")
	a.c.Send(NetworkId{A: 1, B: 2}, []byte("before"))
	if f := b.frame(); string(f.frame[HeaderSize:]) != "before" {
		t.Fatalf("b got %q", f.frame[HeaderSize:])
	}

	s1.nc.Close() // node 1's bus connection is gone
	const frames = 200
	for i := range frames {
		if err := a.c.Send(NetworkId{A: 1, B: 2}, fmt.Appendf(nil, "frame %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	a.barrier() // every frame before the Ping was relayed
	n := strings.Count(logs.String(), "bus publish failed")
	if n < 1 || n >= frames/2 {
		t.Fatalf("%d lines logged for %d frames that could not be published, want at least 1 and far fewer than %d:\n%s",
			n, frames, frames, grepLines(logs.String(), "bus publish failed"))
	}
}
