package ubiq

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// logLines is a slog.Handler that hands each message logged to a channel
// (dropped when it is full).
type logLines chan string

func (l logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logLines) WithGroup(string) slog.Handler            { return l }
func (l logLines) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}

// TestReclaimRetried: a room whose member's claim was counted out by a
// sweep of its node, and whose put-back fails (its join code went to
// another room meanwhile, and no other code is free), tries again until
// it lands: once the code is free, the room has its claim and its code
// back. A put-back tried once would leave the room without a code for as
// long as its member stays.
func TestReclaimRetried(t *testing.T) {
	logs := make(logLines, 1024)
	ts := startServer(t, nil, func(c *Config) { c.Logger = slog.New(logs) })
	const code = "aaa"
	ts.s.store.newCode = func() string { return code } // one code for all rooms
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, id := ts.s.node, newUUID()
	q := dialPeer(t, ts.tcp)
	if got := q.join(JoinArgs{UUID: id}).JoinCode; got != code {
		t.Fatalf("room %s has join code %s, want %s", id, got, code)
	}
	r := roomOf(ts, id)
	sweeper := &store{kv: ts.s.kv, node: "sweeper"}
	other, claim := newUUID(), newClaimID()
	r.do(func() {
		// Before the room sees it: the sweep's count-out of this node,
		// which frees the code, and another room that takes it.
		if err := sweeper.unclaimRoom(ctx, id, "", node, ""); err != nil {
			t.Error(err)
		}
		if _, _, err := ts.s.store.claimRoom(ctx, other, "", "", claim, false); err != nil {
			t.Error(err)
		}
	})
	for msg := ""; msg != "Ubiq room write failed: retrying"; {
		select {
		case msg = <-logs:
		case <-ctx.Done():
			t.Fatal("the room's put-back of its member's claim did not fail for want of a join code")
		}
	}
	if err := ts.s.store.unclaimRoom(ctx, other, "", node, claim); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim and the join code put back", func() bool {
		rec, _, err := ts.s.store.getRoom(ctx, id)
		return err == nil && rec.JoinCode == code && len(rec.Joined[node]) == 1 && !slices.Contains(rec.Joined[node], claim)
	})
}
