package ubiq

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"

	"github.com/xrealm/xrealm/fanout"
)

// TestNonReadingClientIsDisconnected fills a room with events (frames to
// objects nobody declared as state) while one member never reads. The
// others get every frame, in order. The stalled peer's queue takes events
// past its bound, up to the bound again, and no further: then the peer is
// disconnected, with a log line and a metric, and the others are told
// that it left. What it had been sent before is every frame from the
// first, in order: nothing was left out.
func TestNonReadingClientIsDisconnected(t *testing.T) {
	logs := &logBuffer{}
	ts, id, raw, stalled := startWithStalledPeer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})

	sender, reader := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	sender.join(JoinArgs{UUID: id})
	reader.join(JoinArgs{UUID: id})
	eventually(t, "all three members", func() bool { return countMembers(ts, id) == 3 })

	// 20 MB in bursts of 50 frames that the reader drains in between, so
	// that only the stalled peer falls behind.
	const bursts, burst = 400, 50
	maxQueued := 0
	for b := range bursts {
		for i := range burst {
			n := b*burst + i
			// 100 objects, none declared as state (CoalesceKey).
			sender.c.Send(NetworkId{A: 7, B: uint32(n % 100)}, seqPayload(n, 1000))
		}
		for i := range burst {
			n := b*burst + i
			f := reader.frame()
			if got, ok := payloadSeq(f.frame); !ok || got != n {
				t.Fatalf("burst %d frame %d: frame %d, want %d (in order, none lost)", b, i, got, n)
			}
		}
		maxQueued = max(maxQueued, stalledStats(ts, stalled.uuid).Queued)
	}
	// Past the bound of 64 frames by at most as much again (and the rest
	// of a write the socket took only part of).
	if maxQueued > 2*64+1 {
		t.Fatalf("the stalled peer's queue held %d frames, bound 64, and as much again for events", maxQueued)
	}
	eventually(t, "the stalled peer disconnected", func() bool { return connOf(ts, stalled.uuid) == nil })
	if m := collect(t, ts.s); !strings.Contains(m, "xrealm_ubiq_slow_disconnects_total 1\n") {
		t.Fatalf("the disconnection is not counted:\n%s", grepLines(m, "xrealm_ubiq_slow"))
	}
	remote := raw.LocalAddr().String()
	eventually(t, "the log line", func() bool {
		return strings.Contains(logs.String(), "fell too far behind")
	})
	line := grepLines(logs.String(), "fell too far behind")
	for _, want := range []string{"level=WARN", "peer=" + stalled.uuid, "remote=" + remote, `behind="more than 128 frames or`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %q", line, want)
		}
	}
	// The others are told that it left.
	for _, p := range []*peer{sender, reader} {
		if !hasRemoved(p.seen, stalled.uuid) {
			if m := p.expect("PeerRemoved"); !strings.Contains(m.args, stalled.uuid) {
				t.Fatalf("PeerRemoved %s, want the stalled peer %s", m.args, stalled.uuid)
			}
		}
	}

	// The stalled peer now reads what reached it before the server closed
	// the connection: the relayed frames are 0, 1, 2, ... with no gap.
	r := bufio.NewReader(raw)
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	next := 0
	for {
		f, err := ReadFrame(r, 1<<20)
		if err != nil {
			break // the end of what was written, maybe within a frame
		}
		if IDOf(f) == stalled.clientID {
			continue // a server message
		}
		got, ok := payloadSeq(f)
		if !ok || got != next {
			t.Fatalf("the stalled peer's relayed frame %d is frame %d: a frame was left out", next, got)
		}
		next++
	}
	if next == 0 {
		t.Fatal("the stalled peer read no relayed frame: the check of their order checked nothing")
	}
	if next >= bursts*burst {
		t.Fatalf("the stalled peer was sent all %d frames: it never fell behind", next)
	}
}

// hasRemoved reports whether ms holds a PeerRemoved for peer id.
func hasRemoved(ms []msg, id string) bool {
	for _, m := range ms {
		if m.typ == "PeerRemoved" && strings.Contains(m.args, id) {
			return true
		}
	}
	return false
}

// TestBigEventsToStalledPeerStayBounded: a sender of big events makes a
// stalled peer's queue hold at most twice its byte bound before the peer
// is disconnected, while a reading peer gets them all.
func TestBigEventsToStalledPeerStayBounded(t *testing.T) {
	const size, maxBytes = 200 << 10, 1 << 20
	ts, id, _, stalled := startWithStalledPeer(t, func(c *Config) {
		c.MaxFrame = 256 << 10
		c.Writer.MaxBytes = maxBytes
	})
	sender, reader := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	sender.join(JoinArgs{UUID: id})
	reader.join(JoinArgs{UUID: id})
	eventually(t, "all three members", func() bool { return countMembers(ts, id) == 3 })

	maxQueued := 0
	for n := range 100 { // 20 MB
		sender.c.Send(NetworkId{A: 7, B: 1}, seqPayload(n, size))
		if got, ok := payloadSeq(reader.frame().frame); !ok || got != n {
			t.Fatalf("the reader got frame %d, want %d", got, n)
		}
		maxQueued = max(maxQueued, stalledStats(ts, stalled.uuid).Queued)
	}
	// 2 MiB is 10 frames of 200 KiB, and the rest of a write the socket
	// took only part of may come first.
	if limit := 2*maxBytes/(HeaderSize+size) + 1; maxQueued > limit {
		t.Fatalf("the stalled peer's queue held %d frames of %d bytes, more than twice the bound of %d bytes", maxQueued, size, maxBytes)
	}
	eventually(t, "the stalled peer disconnected", func() bool { return connOf(ts, stalled.uuid) == nil })
}

// TestQueueHoldsTheLargestFrame: a byte bound below the largest frame is
// raised to it, so that an event of the largest size does not disconnect
// a peer that reads. (A queue takes twice its bound of events, so two
// such frames in a row fit even behind the rest of a partial write.)
func TestQueueHoldsTheLargestFrame(t *testing.T) {
	const maxFrame = 64 << 10
	ts := startServer(t, nil, func(c *Config) {
		c.MaxFrame = maxFrame
		c.Writer.MaxBytes = 1 << 10
	})
	if got := ts.s.cfg.Writer.MaxBytes; got != HeaderSize+maxFrame {
		t.Fatalf("byte bound %d, want %d", got, HeaderSize+maxFrame)
	}
	room := newUUID()
	sender, reader := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	sender.join(JoinArgs{UUID: room})
	reader.join(JoinArgs{UUID: room})
	reader.expect("PeerAdded")
	for n := 0; n < 6; n += 2 {
		// The second of a pair waits in the queue for the linger.
		sender.c.Send(NetworkId{A: 7, B: 1}, seqPayload(n, maxFrame))
		sender.c.Send(NetworkId{A: 7, B: 1}, seqPayload(n+1, maxFrame))
		for i := n; i < n+2; i++ {
			if got, ok := payloadSeq(reader.frame().frame); !ok || got != i {
				t.Fatalf("the reader got frame %d, want %d", got, i)
			}
		}
	}
}

// seqPayload returns a payload of size bytes that starts with n.
func seqPayload(n, size int) []byte {
	b := fmt.Appendf(nil, "%d ", n)
	return append(b, bytes.Repeat([]byte{'p'}, size-len(b))...)
}

// payloadSeq reads the number that seqPayload put in frame f.
func payloadSeq(f []byte) (int, bool) {
	p := f[HeaderSize:]
	i := bytes.IndexByte(p, ' ')
	if i < 0 {
		return -1, false
	}
	n, err := strconv.Atoi(string(p[:i]))
	return n, err == nil
}

func countMembers(ts *testServer, room string) int {
	keys, _ := ts.s.store.listKeys(ts.s.ctx, "r."+room+".m.*")
	return len(keys)
}

// connOf returns the server's connection of peer uuid, if it has one.
func connOf(ts *testServer, uuid string) *conn {
	ts.s.mu.Lock()
	defer ts.s.mu.Unlock()
	for c := range ts.s.conns {
		if c.uuid() == uuid {
			return c
		}
	}
	return nil
}

func stalledStats(ts *testServer, uuid string) fanout.Stats {
	if c := connOf(ts, uuid); c != nil {
		return c.w.Stats()
	}
	return fanout.Stats{}
}

// TestSlowPeerLearnsOfLateJoiner: a peer whose queue is full of relayed
// state still gets the PeerAdded of a member who joined meanwhile, once it
// reads again: state is coalesced, server messages never, and the peer
// stays connected.
func TestSlowPeerLearnsOfLateJoiner(t *testing.T) {
	ts, id, raw, slow := startWithStalledPeer(t, nil)
	sender := dialPeer(t, ts.tcp)
	var state []string
	for b := range 50 {
		state = append(state, fmt.Sprintf("7-%x", b))
	}
	sender.join(JoinArgs{UUID: id, Peer: sender.info([]string{CoalesceKey}, []string{strings.Join(state, ",")})})
	eventually(t, "two members", func() bool { return countMembers(ts, id) == 2 })
	payload := []byte(strings.Repeat("p", 1000))
	for i := range 5000 {
		sender.c.Send(NetworkId{A: 7, B: uint32(i % 50)}, payload)
	}
	sender.barrier() // the server has relayed them all
	if st := stalledStats(ts, slow.uuid); st.Coalesced == 0 {
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
			break
		}
	}
	if c := connOf(ts, slow.uuid); c == nil || c.lost.Load() != 0 {
		t.Fatal("the slow peer was disconnected, or lost frames")
	}
}

// startWithStalledPeer starts a server whose queues hold 64 frames and
// joins a new room with a peer that speaks the protocol by hand over raw,
// with a small receive buffer, and does not read until the test does.
// The senders have no inbound budget: these tests fill queues with floods
// (20 MB in some), which a budget would only slow down. mod, if not nil,
// changes the configuration further.
func startWithStalledPeer(t *testing.T, mod func(*Config)) (ts *testServer, room string, raw net.Conn, p *peer) {
	t.Helper()
	ts = startServer(t, nil, func(c *Config) {
		c.Writer = fanout.Options{MaxFrames: 64}
		c.PeerTimeout = time.Minute
		c.Inbound = Budget{FramesPerSecond: -1, BytesPerSecond: -1}
		if mod != nil {
			mod(c)
		}
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

// logBuffer collects a server's log for a test.
type logBuffer = testlog.Buffer

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
