package bots

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/ubiq"
)

// pingRecorder keeps what a bot's transport hands it.
type pingRecorder struct {
	mu    sync.Mutex
	poses int
	rtts  []time.Duration
}

func (p *pingRecorder) Receive(r *Received) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.RoundTrip {
		p.rtts = append(p.rtts, time.Duration(r.RecvNanos-r.SentNanos))
		return
	}
	p.poses++
}

func (p *pingRecorder) ReadDone() {}

// TestUbiqPeerPing: two bots in one room of a real xrealm Ubiq relay ping
// each other through it; each times round trips of its own pings, which
// are not counted as poses.
func TestUbiqPeerPing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, _ := startUbiqRelay(ctx, t, "ping-test")
	tr := &UbiqTransport{Addr: addr, Mode: UbiqAll, PayloadSize: 100}
	recs := []*pingRecorder{{}, {}}
	links := make([]Link, 2)
	for i := range links {
		var err error
		links[i], err = tr.Join(ctx, Identity{Index: i}, recs[i], false)
		if err != nil {
			t.Fatal(err)
		}
		defer links[i].Close()
	}
	// 30 Hz for 2.5 s: pings at 0 (no peer heard yet), 1 and 2 s. A
	// link pings by the stamps of its poses, so poses stamped on the
	// schedule (as a Fleet's are: when due) ping on it however late a
	// loaded machine runs this loop (stamped when sent, a loop that took
	// 4.4 s pinged four times).
	start := time.Now()
	for tick := 0; tick < 75; tick++ {
		due := start.Add(time.Duration(tick) * time.Second / 30)
		time.Sleep(time.Until(due))
		for _, l := range links {
			if err := l.SendPose(Pose{}, due.UnixNano()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The last poses and pongs are still on their way on a loaded
	// machine: wait for what the checks below need at least (a fixed
	// 100 ms does not always leave them time), then count.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		in := 0
		for _, r := range recs {
			r.mu.Lock()
			if len(r.rtts) >= 1 && r.poses >= 75 {
				in++
			}
			r.mu.Unlock()
		}
		if in == len(recs) {
			break
		}
	}
	for i, r := range recs {
		r.mu.Lock()
		rtts, poses := append([]time.Duration(nil), r.rtts...), r.poses
		r.mu.Unlock()
		if len(rtts) < 1 || len(rtts) > 3 {
			t.Errorf("bot %d timed %d round trips, want 1-3 (a ping a second once it heard a peer)", i, len(rtts))
		}
		for _, d := range rtts {
			if d <= 0 || d > 10*time.Second { // from the stamp: a late loop's lateness is in it
				t.Errorf("bot %d: round trip %v", i, d)
			}
		}
		if poses < 60 || poses > 75 {
			t.Errorf("bot %d counted %d poses, want the other's 75 or nearly (pings and pongs are not poses)", i, poses)
		}
	}
	if p := tr.Pings(); p < 2 || p > 6 {
		t.Errorf("Pings() = %d, want 2-6", p)
	}

	// A Ubiq client that joins the room learns that each bot's avatar
	// poses are state (ubiq.CoalesceKey): a full queue keeps the newest
	// pose, while the pings to its echo object are never coalesced.
	declared := make(chan map[string]string, 4)
	watcherID := ubiq.NetworkId{A: 0xbae, B: 1}
	watcher, err := ubiq.Dial(ctx, addr, ubiq.ClientOptions{OnFrame: func(f []byte) {
		if ubiq.IDOf(f) != watcherID { // the server's messages to the watcher
			return
		}
		var added struct {
			Peer ubiq.PeerInfo `json:"peer"`
		}
		if typ, err := ubiq.DecodeServer(f[ubiq.HeaderSize:], &added); err != nil || typ != "PeerAdded" {
			return
		}
		props := map[string]string{}
		for i, k := range added.Peer.Keys {
			if i < len(added.Peer.Values) {
				props[k] = added.Peer.Values[i]
			}
		}
		props["uuid"] = added.Peer.UUID
		declared <- props
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	if err := watcher.Request("Join", ubiq.JoinArgs{UUID: DefaultUbiqRoom, Peer: ubiq.PeerInfo{UUID: "0bae0000-0000-4000-8000-000000000000",
		ClientID: watcherID, Keys: []string{}, Values: []string{}}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{links[0].(*ubiqLink).peer: "1-b07", links[1].(*ubiqLink).peer: "2-b07"}
	for range want {
		select {
		case props := <-declared:
			if w, ok := want[props["uuid"]]; !ok || props[ubiq.CoalesceKey] != w {
				t.Errorf("peer %s declares %s=%q, want %q", props["uuid"], ubiq.CoalesceKey, props[ubiq.CoalesceKey], w)
			}
		case <-ctx.Done():
			t.Fatal("the watcher did not see both bots")
		}
	}
}

// TestUbiqEchoMalformed: frames to a bot's echo object that are not a
// well-formed ping or pong of the past are ignored (they come off the
// wire from any peer).
func TestUbiqEchoMalformed(t *testing.T) {
	l := &ubiqLink{}
	rec := &pingRecorder{}
	now := time.Now().UnixNano()
	for _, p := range []string{"", "ping", "ping 1", "ping 1 0", "ping 1 x", "ping 1 99999999999", "pong", "pong x", "pong -5", "pong 0",
		"pong 99999999999999999999", "pong 1000", "pong " + strconv.FormatInt(now+1, 10), "hello"} {
		l.onEcho([]byte(p), now, rec)
	}
	if len(rec.rtts) != 0 || rec.poses != 0 {
		t.Fatalf("malformed echoes recorded: %+v", rec)
	}
	l.onEcho([]byte("pong "+strconv.FormatInt(now-5e6, 10)), now, rec)
	if len(rec.rtts) != 1 {
		t.Fatalf("a well-formed pong was not timed")
	}
}

func FuzzParseEcho(f *testing.F) {
	for _, s := range []string{"ping 1700000000000000000 3", "pong 1700000000000000000", "ping 1 0", "pong", "ping  ", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ping, sent, from, ok := parseEcho(b)
		if !ok {
			return
		}
		// what parses formats back to the same text
		want := pongMagic + strconv.FormatInt(sent, 10)
		if ping {
			if from == 0 {
				t.Fatalf("ping from 0 accepted: %q", b)
			}
			want = pingMagic + strconv.FormatInt(sent, 10) + " " + strconv.FormatUint(uint64(from), 10)
		}
		if p2, s2, f2, ok2 := parseEcho([]byte(want)); !ok2 || p2 != ping || s2 != sent || f2 != from {
			t.Fatalf("%q parsed as %v %d %d, its formatting %q as %v %d %d %v", b, ping, sent, from, want, p2, s2, f2, ok2)
		}
	})
}

// startUbiqRelay starts a real xrealm Ubiq relay on an embedded bus (room
// bucket bucket) and returns its TCP address; the test stops it.
func startUbiqRelay(ctx context.Context, t *testing.T, bucket string) (string, jetstream.JetStream) {
	t.Helper()
	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: bucket, Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	nc, err := b.Connect("ubiq")
	if err != nil {
		t.Fatal(err)
	}
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ubiq.NewServer(ctx, ubiq.Config{NC: nc, JS: js, Bucket: bucket, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { l.Close() })
	return l.Addr().String(), js
}
