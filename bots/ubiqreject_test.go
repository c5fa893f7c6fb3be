package bots

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A join the relay refuses (here: a room that is no RFC 4122 uuid) fails
// with the relay's reason. It fails if the transport waits for a SetRoom
// that never comes, for as long as its context lasts: a bot joining
// again after its connection ended (FleetConfig.Reconnect) would hang for
// good.
func TestUbiqJoinRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, _ := startUbiqRelay(ctx, t, "reject-test")

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

// A grid bot joins a room per cell as it moves; a refused cell join ends
// its link with the relay's reason, so the fleet counts it lost (and
// joins it again with --reconnect) instead of a bot that sends into a
// room it is not in.
func TestUbiqGridCellJoinRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, js := startUbiqRelay(ctx, t, "grid-reject-test")

	tr := &UbiqTransport{Addr: addr, Mode: UbiqGrid}
	link, err := tr.Join(ctx, Identity{Index: 0}, &pingRecorder{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	if err := link.SendPose(Pose{}, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-link.(*ubiqLink).joined:
	case <-link.Done():
		t.Fatalf("the first cell's join ended the link: %v", link.(*ubiqLink).Err())
	case <-ctx.Done():
		t.Fatal("no SetRoom for the first cell")
	}
	// The relay's room state goes away: its next join fails.
	if err := js.DeleteKeyValue(ctx, "grid-reject-test"); err != nil {
		t.Fatal(err)
	}
	if err := link.SendPose(Pose{Pos: Vec3{X: 500, Z: 500}}, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-link.Done():
	case <-ctx.Done():
		t.Fatal("the link outlived the refusal of its second cell's join")
	}
	if err := link.(*ubiqLink).Err(); err == nil || !strings.Contains(err.Error(), "refused the join of a cell room") {
		t.Fatalf("link ended with %v, want the relay's refusal of the cell's join", err)
	}
}
