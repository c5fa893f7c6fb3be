package ubiq

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/bus"
)

// TestMaxFrameFitsTheBus: frames, and what they carry into the store,
// travel on the bus, so the largest frame is what the bus carries. With
// the default (4 MiB) on a bus of smaller messages (xrealm serve's is
// 1 MiB and some), a frame between the two reached the sender's own node
// and no other (a WARN line for each), a blob or member record that large
// was not stored, and a room record filled to the bus's limit took no
// more claims. The default now shrinks to the bus's limit; a MaxFrame set
// larger is an error that says so.
func TestMaxFrameFitsTheBus(t *testing.T) {
	dir := t.TempDir()
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "ubiq-small", Insecure: true, MaxPayload: 64 << 10, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	bucket := fmt.Sprintf("ubiq-small-%d", bucketSeq.Add(1))
	mod := func(c *Config) { c.Bucket = bucket }
	s1, s2 := startServer(t, b, mod), startServer(t, b, mod)
	limit := int(s1.nc.MaxPayload())
	if got := s1.s.cfg.MaxFrame; got > limit-busOverhead {
		t.Fatalf("MaxFrame %d on a bus that carries %d", got, limit)
	}

	id := newUUID()
	a, c := dialPeer(t, s1.tcp), dialPeer(t, s1.tcp)
	far := dialPeer(t, s2.tcp)
	for _, p := range []*peer{a, c, far} {
		p.join(JoinArgs{UUID: id})
	}
	eventually(t, "node 2's presence on node 1", func() bool {
		r := s1.s.acquireActive(id)
		if r == nil {
			return false
		}
		defer s1.s.release(r)
		return r.others.Load() > 0
	})
	// A frame over what the bus carries is refused, for every peer: the
	// sender is closed as sending a malformed frame.
	a.c.Send(NetworkId{A: 1, B: 1}, make([]byte, limit))
	select {
	case <-a.c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sender of a frame larger than the bus carries is still connected")
	}
	for _, p := range []*peer{c, far} {
		for _, m := range p.barrier() {
			if m.typ == "" {
				t.Fatalf("peer on %s received the frame of %d bytes", map[bool]string{true: "node 1", false: "node 2"}[p == c], len(m.frame))
			}
		}
	}

	// Set larger than the bus carries, MaxFrame is an error.
	nc, err := b.Connect("ubiq-test", nats.NoEcho())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewServer(ctx, Config{NC: nc, JS: js, Bucket: bucket + "-big", MaxFrame: limit, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint("MaxFrame ", limit)) || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
		t.Fatalf("NewServer with MaxFrame %d on a bus of %d: %v", limit, limit, err)
	}
}
