package ubiq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/internal/testnet"
)

func TestParseCoalesce(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []NetworkId
		bad  int
	}{
		{"", nil, 0},
		{"7-1", []NetworkId{{A: 7, B: 1}}, 0},
		{"00001f2e-00000007, ffffffff-0", []NetworkId{{A: 0x1f2e, B: 7}, {A: 0xffffffff}}, 0},
		{`["a-b","c-d"]`, []NetworkId{{A: 0xa, B: 0xb}, {A: 0xc, B: 0xd}}, 0},
		{"1-2 3-4\t5-6", []NetworkId{{A: 1, B: 2}, {A: 3, B: 4}, {A: 5, B: 6}}, 0},
		{"avatar, 1-2, 1-2-3, 123456789-1, -1, 1-, g-1", []NetworkId{{A: 1, B: 2}}, 6},
	} {
		got, bad := parseCoalesce(tc.in)
		if !slices.Equal(got, tc.want) || bad != tc.bad {
			t.Errorf("parseCoalesce(%q) = %v, %d bad; want %v, %d bad", tc.in, got, bad, tc.want, tc.bad)
		}
	}
	var many bytes.Buffer
	for i := range maxCoalesceIDs + 10 {
		fmt.Fprintf(&many, "%x-1,", i)
	}
	if got, _ := parseCoalesce(many.String()); len(got) != maxCoalesceIDs {
		t.Errorf("%d ids kept, want at most %d", len(got), maxCoalesceIDs)
	}
}

// gatedConn is the server's end of a peer's connection whose writes can be
// held: while held, the connection's writer blocks in Write, as on a peer
// that stopped reading, and what the room relays to the peer waits in its
// queue.
type gatedConn struct {
	net.Conn
	mu      sync.Mutex
	held    bool
	release chan struct{}
	blocked chan struct{} // gets a value when a write starts waiting
}

func (g *gatedConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	held, release := g.held, g.release
	g.mu.Unlock()
	if held {
		select {
		case g.blocked <- struct{}{}:
		default:
		}
		<-release
	}
	return g.Conn.Write(p)
}

func (g *gatedConn) hold() {
	g.mu.Lock()
	g.held, g.release = true, make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedConn) open() {
	g.mu.Lock()
	if g.held {
		g.held = false
		close(g.release)
	}
	g.mu.Unlock()
}

// rawPeer is a peer that speaks the protocol by hand over a connection the
// server serves through a gatedConn.
type rawPeer struct {
	t        *testing.T
	nc       net.Conn
	gate     *gatedConn
	uuid     string
	clientID NetworkId
	in       chan []byte
}

func dialGated(t *testing.T, ts *testServer) *rawPeer {
	cli, srv := testnet.TCPPair(t)
	p := &rawPeer{t: t, nc: cli, gate: &gatedConn{Conn: srv, blocked: make(chan struct{}, 1)}, uuid: newUUID(),
		clientID: NetworkId{A: 4000 + idSeq.Add(1), B: 9}, in: make(chan []byte, 1024)}
	ts.s.ServeConn(p.gate)
	t.Cleanup(p.gate.open) // before the server shuts down, if a test failed while held
	go func() {
		defer close(p.in)
		for {
			f, err := ReadFrame(cli, 1<<20)
			if err != nil {
				return
			}
			p.in <- f
		}
	}()
	return p
}

func (p *rawPeer) send(id NetworkId, payload []byte) {
	p.t.Helper()
	if _, err := p.nc.Write(NewFrame(id, payload)); err != nil {
		p.t.Fatal(err)
	}
}

// until reads frames until a server message of type typ whose args
// contain sub, and returns the frames before it.
func (p *rawPeer) until(typ, sub string) [][]byte {
	p.t.Helper()
	var before [][]byte
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-p.in:
			if !ok {
				p.t.Fatalf("connection closed before %s", typ)
			}
			if IDOf(f) == p.clientID {
				var r Request
				if json.Unmarshal(f[HeaderSize:], &r) == nil && r.Type == typ && bytes.Contains([]byte(r.Args), []byte(sub)) {
					return before
				}
			}
			before = append(before, f)
		case <-deadline:
			p.t.Fatalf("no %s %q within 10s", typ, sub)
		}
	}
}

// A receiver's queue is full; a newer frame to an object that its sender
// declared as state (CoalesceKey) replaces the stale one still queued, and
// one that finds no older frame of its object queued goes past the bound,
// where the next one replaces it. A frame to any other object, which may
// be an event (a Ubiq RPC, a WebRTC offer), is never replaced nor
// replaces one: it goes past the bound, in order. Nothing is lost. The
// sender is on the receiver's node, or on another node, whose frames come
// over the bus and whose properties through the room's key watch.
func TestFullQueueCoalescesOnlyDeclaredState(t *testing.T) {
	pose, event, filler, late := NetworkId{A: 0x1f2e, B: 7}, NetworkId{A: 0x1f2e, B: 8}, NetworkId{A: 0x1f2e, B: 9}, NetworkId{A: 0x1f2e, B: 0xa}
	declared := []string{"pose 2", "event 1", "event 2", "late 2"}
	undeclared := []string{"pose 1", "event 1", "pose 2", "event 2", "late 1", "late 2"}
	for _, tc := range []struct {
		name      string
		atJoin    string // CoalesceKey in the sender's Join
		appended  string // CoalesceKey appended after the Join
		remote    bool   // the sender is on another node
		want      []string
		coalesced uint64
	}{
		{name: "declared at join", atJoin: "1f2e-7 1f2e-a", want: declared, coalesced: 2},
		{name: "declared later", appended: "00001f2e-00000007,1f2e-a", want: declared, coalesced: 2},
		{name: "another object declared", atJoin: "1f2e-6", want: undeclared},
		{name: "nothing declared", want: undeclared},
		{name: "declared at join, on another node", atJoin: "1f2e-7,1f2e-a", remote: true, want: declared, coalesced: 2},
		{name: "declared later, on another node", appended: `["1f2e-7","1f2e-a"]`, remote: true, want: declared, coalesced: 2},
		{name: "nothing declared, on another node", remote: true, want: undeclared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := fmt.Sprintf("ubiq-coalesce-%d", bucketSeq.Add(1))
			mod := func(c *Config) {
				c.Bucket = bucket
				c.Writer = fanout.Options{MaxFrames: 16}
				c.PeerTimeout = time.Minute
			}
			ts, senderNode := startServer(t, nil, mod), ""
			room := newUUID()
			slow := dialGated(t, ts)
			slow.send(ServerID, EncodeRequest("Join", JoinArgs{UUID: room, Peer: PeerInfo{UUID: slow.uuid, ClientID: slow.clientID, Keys: []string{}, Values: []string{}}}))
			slow.until("SetRoom", room)

			senderNode = ts.tcp
			if tc.remote {
				senderNode = startServer(t, nil, mod).tcp
			}
			sender := dialPeer(t, senderNode)
			keys, values := []string{}, []string{}
			if tc.atJoin != "" {
				keys, values = []string{CoalesceKey}, []string{tc.atJoin}
			}
			sender.join(JoinArgs{UUID: room, Peer: sender.info(keys, values)})
			slow.until("PeerAdded", sender.uuid)
			if tc.appended != "" {
				sender.request("AppendPeerProperties", PropertiesArgs{Keys: []string{CoalesceKey}, Values: []string{tc.appended}})
				// The room has taken it in before it tells the others.
				slow.until("PeerPropertiesAppended", CoalesceKey)
			}

			// The slow peer stops reading: its writer blocks on the first
			// frame, and the rest wait in its queue.
			slow.gate.hold()
			sender.c.Send(filler, []byte("plug"))
			select {
			case <-slow.gate.blocked:
			case <-time.After(10 * time.Second):
				t.Fatal("the slow peer's writer did not block on the plug frame")
			}
			sender.c.Send(pose, []byte("pose 1"))
			sender.c.Send(event, []byte("event 1"))
			for i := range 14 {
				sender.c.Send(filler, fmt.Appendf(nil, "filler %d", i))
			}
			// (From another node the frames come over the bus: the sender's
			// barrier does not wait for them, the queue's counters do.)
			sender.barrier()
			eventually(t, "16 frames queued", func() bool { return stalledStats(ts, slow.uuid).Queued >= 16 })
			if st := stalledStats(ts, slow.uuid); st.Queued != 16 || st.Dropped != 0 || st.Coalesced != 0 {
				t.Fatalf("queue before it is full: %+v, want 16 queued and nothing dropped", st)
			}
			// The queue is full: these go past its bound of 16, or replace
			// a queued frame of their object.
			sender.c.Send(pose, []byte("pose 2"))
			sender.c.Send(event, []byte("event 2"))
			sender.c.Send(late, []byte("late 1"))
			sender.c.Send(late, []byte("late 2"))
			sender.barrier()
			eventually(t, "four more frames handled", func() bool {
				st := stalledStats(ts, slow.uuid)
				return uint64(st.Queued)+st.Coalesced >= 20
			})
			if st := stalledStats(ts, slow.uuid); st.Coalesced != tc.coalesced || uint64(st.Queued) != 20-tc.coalesced {
				t.Fatalf("full queue: %d coalesced and %d queued, want %d and %d", st.Coalesced, st.Queued, tc.coalesced, 20-tc.coalesced)
			}
			if c := connOf(ts, slow.uuid); c == nil || c.lost.Load() != 0 {
				t.Fatal("the slow peer was disconnected, or its queue refused frames")
			}

			slow.gate.open()
			slow.send(ServerID, EncodeRequest("Ping", ClientArgs{ClientID: slow.clientID}))
			var got []string
			for _, f := range slow.until("Ping", "") {
				if id := IDOf(f); id == pose || id == event || id == late {
					got = append(got, string(f[HeaderSize:]))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("the slow peer received %q, want %q", got, tc.want)
			}
		})
	}
}

// stateObject is an object of one sender whose frames are state.
type stateObject struct {
	sender string
	id     NetworkId
}

// A sender's state objects replace its previous ones (none when it
// leaves), leave other senders' alone, and queue under keys that differ
// between senders of the same object.
func TestStateKeys(t *testing.T) {
	a, b := NetworkId{A: 1, B: 2}, NetworkId{A: 3, B: 4}
	var m stateKeys
	steps := []struct {
		sender string
		ids    []NetworkId
		want   map[stateObject]bool
	}{
		{"p", []NetworkId{a}, map[stateObject]bool{{"p", a}: true}},
		{"q", []NetworkId{a, b}, map[stateObject]bool{{"p", a}: true, {"q", a}: true, {"q", b}: true}},
		{"p", []NetworkId{b}, map[stateObject]bool{{"p", b}: true, {"q", a}: true, {"q", b}: true}},
		{"q", nil, map[stateObject]bool{{"p", b}: true}},
		{"p", nil, map[stateObject]bool{}},
	}
	for i, st := range steps {
		m = m.withSender(st.sender, st.ids)
		if n := m.count(); n != len(st.want) {
			t.Fatalf("step %d: %d objects, want %d", i, n, len(st.want))
		}
		for k := range st.want {
			if _, ok := m.key(k.sender, k.id); !ok {
				t.Fatalf("step %d: %v missing", i, k)
			}
		}
		if !sameStateObjects(m, st.sender, st.ids) {
			t.Fatalf("step %d: sameStateObjects is false for what was just set", i)
		}
	}
	m = stateKeys{}.withSender("p", []NetworkId{a}).withSender("q", []NetworkId{a})
	if kp, _ := m.key("p", a); kp == func() string { kq, _ := m.key("q", a); return kq }() {
		t.Fatal("two senders' frames to one object share a queue key")
	}
	if sameStateObjects(m, "p", []NetworkId{a, b}) || sameStateObjects(m, "p", nil) {
		t.Fatal("sameStateObjects is true for another set")
	}
}

// TestStateKeysChangeCostsOneSender: a member's change of its state
// objects copies the room's senders, not every object of every sender.
// The whole map was copied: in a room of 1,000 members with 64 objects
// each, one member that changed its CoalesceKey with every request had
// every node's room goroutine copy 64,000 entries per request.
func TestStateKeysChangeCostsOneSender(t *testing.T) {
	const senders, objects = 1000, maxCoalesceIDs
	ids := make([]NetworkId, objects)
	for i := range ids {
		ids[i] = NetworkId{A: uint32(i), B: 1}
	}
	var m stateKeys
	for i := range senders {
		m = m.withSender(fmt.Sprint("peer", i), ids)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 10 {
		m = m.withSender("peer0", ids[:i+1])
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Fatalf("10 changes of one sender's state objects, of %d senders with %d each, allocated %d bytes", senders, objects, got)
	}
	if m.count() != (senders-1)*objects+10 {
		t.Fatalf("%d objects", m.count())
	}
}
