package ubiq

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/fanout"
)

// TestNonReadingClientDoesNotSlowOthers fills a room with traffic while
// one member never reads: the others get every frame, the stalled peer's
// bounded queue drops or coalesces, and it stays connected.
func TestNonReadingClientDoesNotSlowOthers(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) {
		c.Writer = fanout.Options{MaxFrames: 64}
		c.PeerTimeout = time.Minute
	})
	id := newUUID()
	// The stalled peer speaks the protocol by hand and then stops reading.
	raw, err := net.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.(*net.TCPConn).SetReadBuffer(4096)
	stalled := &peer{uuid: newUUID(), clientID: NetworkId{A: 31337, B: 1}}
	raw.Write(NewFrame(ServerID, EncodeRequest("Join", JoinArgs{UUID: id, Peer: stalled.info(nil, nil)})))

	sender, reader := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	sender.join(JoinArgs{UUID: id})
	reader.join(JoinArgs{UUID: id})
	eventually(t, "all three members", func() bool { return ts.s.store != nil && countMembers(ts, id) == 3 })

	// 20 MB in bursts of 50 frames that the reader drains in between, so
	// that only the stalled peer falls behind.
	payload := []byte(strings.Repeat("p", 1000))
	for b := range 400 {
		for i := range 50 {
			// 100 objects: a full queue coalesces older poses of the same one.
			sender.c.Send(NetworkId{A: 7, B: uint32((b*50 + i) % 100)}, payload)
		}
		for i := range 50 {
			f := reader.frame()
			if got, want := IDOf(f.frame).B, uint32((b*50+i)%100); got != want {
				t.Fatalf("burst %d frame %d: object %d, want %d (in order, none lost)", b, i, got, want)
			}
		}
	}
	st := stalledStats(ts, stalled.uuid)
	if st.Dropped+st.Coalesced == 0 {
		t.Fatalf("stalled peer's queue neither dropped nor coalesced: %+v", st)
	}
	if st.Queued > 64 {
		t.Fatalf("stalled peer's queue holds %d frames, bound 64", st.Queued)
	}
	// Still connected.
	if stalledStats(ts, stalled.uuid) == (fanout.Stats{}) {
		t.Fatal("stalled peer was disconnected")
	}
	if !strings.Contains(collect(t, ts.s), `xrealm_ubiq_connection_coalesced_total{peer="`+stalled.uuid+`"`) {
		t.Fatal("no per-connection metric for the stalled peer")
	}
}

func countMembers(ts *testServer, room string) int {
	keys, _ := ts.s.store.listKeys(ts.s.ctx, "r."+room+".m.*")
	return len(keys)
}

func stalledStats(ts *testServer, uuid string) fanout.Stats {
	ts.s.mu.Lock()
	defer ts.s.mu.Unlock()
	for c := range ts.s.conns {
		if c.uuid() == uuid {
			return c.w.Stats()
		}
	}
	return fanout.Stats{}
}
