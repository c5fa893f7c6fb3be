package ubiq

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrealm/xrealm/fanout"
)

// TestNonReadingClientDoesNotSlowOthers fills a room with traffic while
// one member never reads: the others get every frame, the stalled peer's
// bounded queue drops, and it stays connected.
func TestNonReadingClientDoesNotSlowOthers(t *testing.T) {
	ts, id, _, stalled := startWithStalledPeer(t)

	sender, reader := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	sender.join(JoinArgs{UUID: id})
	reader.join(JoinArgs{UUID: id})
	eventually(t, "all three members", func() bool { return ts.s.store != nil && countMembers(ts, id) == 3 })

	// 20 MB in bursts of 50 frames that the reader drains in between, so
	// that only the stalled peer falls behind.
	payload := []byte(strings.Repeat("p", 1000))
	for b := range 400 {
		for i := range 50 {
			// 100 objects, none declared as state (CoalesceKey): a full
			// queue drops the newer frames.
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

// TestSlowPeerLearnsOfLateJoiner: a peer whose queue is full of relayed
// frames still gets the PeerAdded of a member who joined meanwhile, once it
// reads again: relayed frames are coalesced or dropped, server messages
// never.
func TestSlowPeerLearnsOfLateJoiner(t *testing.T) {
	ts, id, raw, slow := startWithStalledPeer(t)
	sender := dialPeer(t, ts.tcp)
	sender.join(JoinArgs{UUID: id})
	eventually(t, "two members", func() bool { return countMembers(ts, id) == 2 })
	payload := []byte(strings.Repeat("p", 1000))
	for i := range 5000 {
		sender.c.Send(NetworkId{A: 7, B: uint32(i % 100)}, payload)
	}
	sender.barrier() // the server has relayed them all
	if st := stalledStats(ts, slow.uuid); st.Dropped == 0 {
		t.Fatalf("the slow peer's queue never filled: %+v", st)
	}
	late := dialPeer(t, ts.tcp)
	late.join(JoinArgs{UUID: id})
	eventually(t, "three members", func() bool { return countMembers(ts, id) == 3 })
	sender.barrier()

	r := bufio.NewReader(raw)
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := ReadFrame(r, 1<<20)
		if err != nil {
			t.Fatalf("the slow peer read everything without a PeerAdded for the late joiner: %v", err)
		}
		if IDOf(f) != slow.clientID {
			continue
		}
		var req Request
		if json.Unmarshal(f[HeaderSize:], &req) != nil || req.Type != "PeerAdded" {
			continue
		}
		var a struct {
			Peer PeerInfo `json:"peer"`
		}
		if json.Unmarshal([]byte(req.Args), &a) == nil && a.Peer.UUID == late.uuid {
			return
		}
	}
}

// startWithStalledPeer starts a server whose queues hold 64 frames and
// joins a new room with a peer that speaks the protocol by hand over raw,
// with a small receive buffer, and does not read until the test does.
func startWithStalledPeer(t *testing.T) (ts *testServer, room string, raw net.Conn, p *peer) {
	t.Helper()
	ts = startServer(t, nil, func(c *Config) {
		c.Writer = fanout.Options{MaxFrames: 64}
		c.PeerTimeout = time.Minute
	})
	room = newUUID()
	// The small receive buffer is set before connecting, so that the
	// window the server sees is small from the start. Set after the
	// handshake, it shrank under a window already offered: the kernel
	// dropped the server's 64 KiB loopback segments, and their
	// retransmissions backed off past the test's read deadline (one run in
	// ten).
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	raw, err := d.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	p = &peer{uuid: newUUID(), clientID: NetworkId{A: 31337, B: 1}}
	if _, err := raw.Write(NewFrame(ServerID, EncodeRequest("Join", JoinArgs{UUID: room, Peer: p.info(nil, nil)}))); err != nil {
		t.Fatal(err)
	}
	return ts, room, raw, p
}
