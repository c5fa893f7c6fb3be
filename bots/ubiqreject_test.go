package bots

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A join the relay refuses (here: a room that is no RFC 4122 uuid) fails
// with the relay's reason. Before, the transport waited for a SetRoom
// that never came, for as long as its context lasted: a bot joining
// again after its connection ended (FleetConfig.Reconnect) hung for good.
func TestUbiqJoinRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := startUbiqRelay(ctx, t, "reject-test")

	tr := &UbiqTransport{Addr: addr, Mode: UbiqAll, Room: "not-a-uuid"}
	link, err := tr.Join(ctx, Identity{Index: 0}, &pingRecorder{}, false)
	if err == nil {
		link.Close()
		t.Fatal("joined room not-a-uuid, want the relay's refusal")
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), "refused the join") || !strings.Contains(err.Error(), "uuid") {
		t.Fatalf("join of room not-a-uuid: %v (context: %v), want the relay's refusal naming the uuid", err, ctx.Err())
	}
}
