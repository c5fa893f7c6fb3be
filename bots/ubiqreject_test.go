package bots

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/ubiq"
)

// A join the relay refuses (here: a room that is no RFC 4122 uuid) fails
// with the relay's reason. Before, the transport waited for a SetRoom
// that never came, for as long as its context lasted: a bot joining
// again after its connection ended (FleetConfig.Reconnect) hung for good.
func TestUbiqJoinRefused(t *testing.T) {
	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: "reject-test", Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	nc, err := b.Connect("ubiq")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ubiq.NewServer(ctx, ubiq.Config{NC: nc, JS: js, Bucket: "reject-test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { l.Close() })

	tr := &UbiqTransport{Addr: l.Addr().String(), Mode: UbiqAll, Room: "not-a-uuid"}
	link, err := tr.Join(ctx, Identity{Index: 0}, &pingRecorder{}, false)
	if err == nil {
		link.Close()
		t.Fatal("joined room not-a-uuid, want the relay's refusal")
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), "refused the join") || !strings.Contains(err.Error(), "uuid") {
		t.Fatalf("join of room not-a-uuid: %v (context: %v), want the relay's refusal naming the uuid", err, ctx.Err())
	}
}
