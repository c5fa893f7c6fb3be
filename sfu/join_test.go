package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
	"github.com/pion/webrtc/v4"
)

// joinAnswers sends join requests without waiting for them (no goroutine
// per request) and records the manager's answers as they arrive.
type joinAnswers struct {
	nc    *nats.Conn
	inbox string

	mu  sync.Mutex
	got map[string]answer // by client
	n   int               // answers so far
}

type answer struct {
	Assignment
	seq int // 1 for the first answer to arrive, 2 for the next, …
}

func newJoinAnswers(t *testing.T, c *cluster) *joinAnswers {
	t.Helper()
	j := &joinAnswers{nc: c.conn(t, "joins"), inbox: nats.NewInbox(), got: map[string]answer{}}
	_, err := j.nc.Subscribe(j.inbox+".*", func(m *nats.Msg) {
		var a Assignment
		if err := json.Unmarshal(m.Data, &a); err != nil {
			a.Error = "bad answer: " + err.Error()
		}
		j.mu.Lock()
		j.n++
		j.got[strings.TrimPrefix(m.Subject, j.inbox+".")] = answer{a, j.n}
		j.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// send asks for a node for client of session s1 at site.
func (j *joinAnswers) send(t *testing.T, client, site string) {
	t.Helper()
	b, _ := json.Marshal(JoinRequest{Session: "s1", Client: client, Site: site})
	if err := j.nc.PublishRequest(subjectJoin, j.inbox+"."+client, b); err != nil {
		t.Fatal(err)
	}
}

// answers returns the answers so far.
func (j *joinAnswers) answers() map[string]answer {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.got)
}

// count returns how many answers so far satisfy ok.
func (j *joinAnswers) count(ok func(answer) bool) int {
	n := 0
	for _, a := range j.answers() {
		if ok(a) {
			n++
		}
	}
	return n
}

// TestManagerCloseAnswersQueuedJoins: when the manager closes, the join it
// is placing (its node does not answer the ping) and the joins queued on
// its subscription all have their answer by the time Close returns,
// instead of being left to their callers' timeout (10 s): "shutting down"
// with busy set, so that their callers ask again, which another manager
// may answer. A join after Close finds no manager (no responders, not a
// timeout).
func TestManagerCloseAnswersQueuedJoins(t *testing.T) {
	c, _ := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := c.nodes[0].mgr
	hungNode(t, ctx, c, "9", "h")
	j := newJoinAnswers(t, c)

	j.send(t, "placing", "h")
	waitFor(t, "the manager placing a join", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.placing == 1
	})
	// Holding the manager's lock stands in for a join handler held up (by
	// heartbeats, by Assign): the next joins queue on the subscription.
	unlock := sync.OnceFunc(m.mu.Unlock)
	m.mu.Lock()
	defer unlock()
	const queued = 50
	for i := range queued {
		j.send(t, fmt.Sprintf("q%d", i), "a")
	}
	if err := j.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "joins queued on the manager's subscription", func() bool {
		n, _, _ := m.join.Pending()
		return n == queued // the first is the handler's, waiting for the lock
	})
	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	waitFor(t, "Close to begin", func() bool { return m.ctx.Err() != nil })
	unlock()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
	got := j.answers()
	if len(got) != queued+1 {
		t.Fatalf("%d of %d joins answered when Close returned", len(got), queued+1)
	}
	for client, a := range got {
		if a.Error != errShuttingDown.Error() || !a.Busy {
			t.Errorf("join of %s: answer %+v, want %q with busy set", client, a.Assignment, errShuttingDown)
		}
	}
	if _, err := RequestJoin(ctx, j.nc, JoinRequest{Session: "s1", Client: "late", Site: "a"}); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("join after Close: err %v, want no responders", err)
	}
}

// heldPings is a node (fakeNode) that holds the manager's pings until
// release, then answers them and later ones ok.
type heldPings struct {
	mu       sync.Mutex
	held     []*nats.Msg
	released bool
}

func heldNode(t *testing.T, ctx context.Context, c *cluster, id, site string) *heldPings {
	t.Helper()
	h := &heldPings{}
	fakeNode(t, ctx, c, id, site, func(m *nats.Msg) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.released {
			h.held = append(h.held, m)
			return
		}
		respondSignal(m, Reply{Op: "ok", Site: site})
	})
	return h
}

func (h *heldPings) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

func (h *heldPings) release() {
	h.mu.Lock()
	held := h.held
	h.held, h.released = nil, true
	h.mu.Unlock()
	for _, m := range held {
		respondSignal(m, Reply{Op: "ok"})
	}
}

// TestManagerBusy: a flood of joins while the chosen node holds the
// manager's pings. The manager places maxPlacing at once (that many pings
// wait) and answers the rest busy, every one of them before any placement
// is answered; it logs once that it is busy. A client that finds it busy
// asks again and then fails with ErrBusy. When the node answers, the joins
// being placed go to it, and the manager logs once that it is no longer
// busy, with the joins it refused.
func TestManagerBusy(t *testing.T) {
	c, logs := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := c.nodes[0].mgr
	m.probeWait.Store(int64(time.Minute)) // the pings wait for release, not for probeTimeout
	node9 := heldNode(t, ctx, c, "9", "h")
	defer node9.release()
	j := newJoinAnswers(t, c)
	isBusy := func(a answer) bool { return a.Busy && strings.HasPrefix(a.Error, ErrBusy.Error()) }

	const flood = 2 * maxPlacing
	for i := range flood {
		b, _ := json.Marshal(JoinRequest{Session: "s1", Client: fmt.Sprintf("u%d", i), Site: "h"})
		if err := j.nc.PublishRequest(subjectJoin, fmt.Sprintf("%s.u%d", j.inbox, i), b); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "busy answers to the joins beyond maxPlacing", func() bool { return j.count(isBusy) >= flood-maxPlacing })
	waitFor(t, "the pings of the joins being placed", func() bool { return node9.count() == maxPlacing })
	m.mu.Lock()
	placing := m.placing
	m.mu.Unlock()
	if placing != maxPlacing {
		t.Errorf("%d joins being placed, want maxPlacing (%d)", placing, maxPlacing)
	}
	busyWarning := []string{`msg="sfu manager busy: joins answered busy until placements end"`, fmt.Sprintf("placing=%d", maxPlacing)}
	if n := logs[0].count(busyWarning...); n != 1 {
		t.Errorf("the manager logged %d times that it is busy, want once", n)
	}

	clientLog := &logLines{}
	_, err := Dial(ctx, ClientConfig{NC: c.conn(t, "bot"), Session: "s1", Client: "bot", Site: "a", ICEAddresses: loopback, VideoSlots: 1,
		Logger: clientLog.logger()})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), fmt.Sprintf("(%d attempts)", joinAttempts)) {
		t.Errorf("client joining a busy manager: err %v, want ErrBusy after %d attempts", err, joinAttempts)
	}
	for attempt := 1; attempt < joinAttempts; attempt++ {
		if !clientLog.has(`msg="sfu client: join failed; asking the manager again"`, fmt.Sprintf("attempt=%d", attempt), "busy") {
			t.Errorf("the client did not log its retry after attempt %d", attempt)
		}
	}

	node9.release()
	waitFor(t, "every join answered", func() bool { return len(j.answers()) == flood })
	lastBusy, firstPlaced, placed := 0, flood+1, 0
	for client, a := range j.answers() {
		switch {
		case isBusy(a):
			lastBusy = max(lastBusy, a.seq)
		case a.Error == "" && a.Node == "9":
			firstPlaced = min(firstPlaced, a.seq)
			placed++
		default:
			t.Errorf("join of %s: answer %+v, want busy or node 9", client, a.Assignment)
		}
	}
	if placed != maxPlacing {
		t.Errorf("%d joins placed on node 9, want the %d being placed", placed, maxPlacing)
	}
	if lastBusy > firstPlaced {
		t.Errorf("busy answer %d arrived after placement %d, want every busy answer first", lastBusy, firstPlaced)
	}
	notBusy := regexp.MustCompile(`msg="sfu manager no longer busy" refused=(\d+)`)
	var refused int
	waitFor(t, "the manager to log that it is no longer busy", func() bool {
		mm := notBusy.FindStringSubmatch(logs[0].String())
		if mm != nil {
			refused, _ = strconv.Atoi(mm[1])
		}
		return mm != nil
	})
	if refused < flood-maxPlacing+joinAttempts {
		t.Errorf("the manager says it refused %d joins, want at least the flood's %d and the client's %d", refused, flood-maxPlacing, joinAttempts)
	}
	if n := logs[0].count(`msg="sfu manager no longer busy"`); n != 1 {
		t.Errorf("the manager logged %d times that it is no longer busy, want once", n)
	}
	if n := logs[0].count(busyWarning[0]); n != 1 {
		t.Errorf("the manager logged %d times that it is busy, want once", n)
	}
}

// TestClientRetriesJoin: the node a client is placed on dies between the
// manager's ping and the client's offer, which finds no responders; the
// client asks the manager again, excluding node 2, and connects to the
// other node. Node 2 either stops answering (as if killed: its last
// heartbeat is fresh; the manager drops it when it next chooses it for a
// client that does not exclude it) or shuts down cleanly.
func TestClientRetriesJoin(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(t *testing.T, n *Node)
	}{
		{"stops answering", func(t *testing.T, n *Node) {
			if err := n.subs[0].Unsubscribe(); err != nil { // subjectSignal, first in Start
				t.Error(err)
			}
			if err := n.cfg.NC.Flush(); err != nil {
				t.Error(err)
			}
		}},
		{"shuts down", func(_ *testing.T, n *Node) { n.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := startLoggedCluster(t, "a", "b")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			clientLog := &logLines{}
			var placed []string
			cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "pcbot"), Session: "s1", Client: "pcbot", Site: "b", ICEAddresses: loopback, VideoSlots: 1,
				Logger: clientLog.logger(),
				placed: func(a Assignment) {
					if placed = append(placed, a.Node); len(placed) == 1 {
						tc.kill(t, c.nodes[1])
					}
				}})
			if err != nil {
				t.Fatalf("client at site b: %v (placed on %v)", err, placed)
			}
			t.Cleanup(cl.Close)
			if cl.Node != "1" || !slices.Equal(placed, []string{"2", "1"}) {
				t.Errorf("client on node %s, placed on %v; want node 1 after node 2", cl.Node, placed)
			}
			if s := cl.PC.ConnectionState(); s != webrtc.PeerConnectionStateConnected {
				t.Errorf("client's connection %s, want connected", s)
			}
			if !clientLog.has(`msg="sfu client: join failed; asking the manager again"`, "node=2", "attempt=1", "exclude=[2]", "no responders") {
				t.Error("the client did not log its retry")
			}
			if !hasPeer(c.nodes[0], "s1/pcbot") {
				t.Error("node 1 has no peer for the client")
			}
		})
	}
}

// hasPeer reports whether n has a peer for key ("session/client").
func hasPeer(n *Node, key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.peers[key] != nil
}

// joinPath joins client pcbot of session s1 at site b through cluster c,
// one of the two ways a client is placed (placement): placed and timeout
// are the placement's hooks. It returns the node the client is on and the
// log its retries go to.
type joinPath func(t *testing.T, ctx context.Context, c *cluster, nodeLogs []*logLines, placed func(Assignment), timeout func(string) time.Duration) (string, *logLines)

// joinOverBus joins with the Go client (Dial).
func joinOverBus(t *testing.T, ctx context.Context, c *cluster, _ []*logLines, placed func(Assignment), timeout func(string) time.Duration) (string, *logLines) {
	t.Helper()
	clientLog := &logLines{}
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "pcbot"), Session: "s1", Client: "pcbot", Site: "b", ICEAddresses: loopback, VideoSlots: 1,
		Logger: clientLog.logger(), placed: placed, offerTimeout: timeout})
	if err != nil {
		t.Fatalf("client at site b: %v", err)
	}
	t.Cleanup(cl.Close)
	if s := cl.PC.ConnectionState(); s != webrtc.PeerConnectionStateConnected {
		t.Errorf("client's connection %s, want connected", s)
	}
	return cl.Node, clientLog
}

// joinOverWebSocket joins as a browser does, through node 1's WebSocket
// handler: one offer, answered over the socket, and a connection.
func joinOverWebSocket(t *testing.T, ctx context.Context, c *cluster, nodeLogs []*logLines, placed func(Assignment), timeout func(string) time.Duration) (string, *logLines) {
	t.Helper()
	n1 := c.nodes[0]
	var node string
	n1.wsPlaced = func(a Assignment) {
		node = a.Node
		if placed != nil {
			placed(a)
		}
	}
	n1.wsOfferTimeout = timeout
	pc, rep := offerOverWebSocket(t, ctx, n1, "s1", "pcbot", "b")
	if rep.Op != "answer" {
		t.Fatalf("WebSocket client at site b: reply %+v, want an answer", rep)
	}
	connected := make(chan struct{})
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateConnected {
			close(connected)
		}
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: rep.SDP}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("the WebSocket client did not connect")
	}
	return node, nodeLogs[0]
}

// dialSignalling serves h (a node's WebSocket handler) on a test server and
// dials it for site; both close when the test ends.
func dialSignalling(t *testing.T, ctx context.Context, h http.Handler, site string) *websocket.Conn {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"?site="+site, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// offerOverWebSocket connects to n's WebSocket handler with ?site=site,
// sends the offer of a browser-like PeerConnection (one receive-only video
// slot) for session and client, and returns the connection and the reply.
// The socket stays open until the test ends.
func offerOverWebSocket(t *testing.T, ctx context.Context, n *Node, session, client, site string) (*webrtc.PeerConnection, Reply) {
	t.Helper()
	pc := newBrowserLikePC(t)
	t.Cleanup(func() { _ = pc.Close() })
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	sdp, err := Gathered(pc, true)
	if err != nil {
		t.Fatal(err)
	}
	ws := dialSignalling(t, ctx, n.Handler(), site)
	if err := ws.WriteJSON(Signal{Op: "offer", Session: session, Client: client, SDP: sdp}); err != nil {
		t.Fatal(err)
	}
	for { // events may come before the answer
		var rep Reply
		if err := ws.ReadJSON(&rep); err != nil {
			t.Fatal(err)
		}
		if rep.Op != "slots" {
			return pc, rep
		}
	}
}

// TestJoinExcludesFailedNode: the node a client is placed on (site b)
// answers the manager's pings but not the client's offer: a node that
// hangs in the offer, or answers too late. Here it hands the offer to
// node 2, which registers the client, and drops the answer. The client
// (the Go client, or node 1's WebSocket handler for a browser) sends the
// failed node a leave, which reaches node 2, and asks the manager again
// excluding it, and connects to node 1. It fails if the manager keeps
// the client on the node that answered its pings (node 2 would then refuse
// the second offer, "already connected", and keep the first peer), if the
// failed node is not sent the leave, or if the WebSocket handler does not
// ask again.
func TestJoinExcludesFailedNode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		join     joinPath
		retryMsg string
	}{
		{"bus", joinOverBus, `msg="sfu client: join failed; asking the manager again"`},
		{"WebSocket", joinOverWebSocket, `msg="sfu: join of a WebSocket client failed; asking the manager again"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, logs := startLoggedCluster(t, "a", "c")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			n2 := c.nodes[1]
			var (
				mu  sync.Mutex
				ops []string // what node 9 received
			)
			fakeNode(t, ctx, c, "9", "b", func(m *nats.Msg) {
				var s Signal
				if err := json.Unmarshal(m.Data, &s); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ops = append(ops, s.Op+" "+s.Session+"/"+s.Client)
				mu.Unlock()
				switch s.Op {
				case "ping":
					respondSignal(m, Reply{Op: "ok", Site: "b"})
				case "offer", "leave":
					if r := n2.Signal(s); r.Op == "error" {
						t.Errorf("node 2: %s: %s", s.Op, r.Error)
					}
					// the answer never reaches the client
				}
			})
			var (
				pmu    sync.Mutex
				placed []string
			)
			node, retryLog := tc.join(t, ctx, c, logs,
				func(a Assignment) {
					pmu.Lock()
					placed = append(placed, a.Node)
					pmu.Unlock()
				},
				func(node string) time.Duration {
					if node == "9" {
						return 300 * time.Millisecond // never answers: no need to wait 10 s
					}
					return offerTimeout
				})
			pmu.Lock()
			if node != "1" || !slices.Equal(placed, []string{"9", "1"}) {
				t.Errorf("client on node %s, placed on %v; want node 1 after node 9", node, placed)
			}
			pmu.Unlock()
			if !retryLog.has(tc.retryMsg, "node=9", "attempt=1", "exclude=[9]") {
				t.Error("the client did not log its retry excluding node 9")
			}
			waitFor(t, "node 9 to receive the client's leave", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(ops, "leave s1/pcbot")
			})
			mu.Lock()
			if want := []string{"ping s1/pcbot", "offer s1/pcbot", "leave s1/pcbot"}; !slices.Equal(ops, want) {
				t.Errorf("node 9 received %v, want %v", ops, want)
			}
			mu.Unlock()
			waitFor(t, "node 2 to drop the peer of the offer it took", func() bool { return !hasPeer(n2, "s1/pcbot") })
			if !hasPeer(c.nodes[0], "s1/pcbot") {
				t.Error("node 1 has no peer for the client")
			}
			if !slices.Contains(c.nodes[0].mgr.Nodes(), "9") {
				t.Error("the manager dropped node 9, which answers its pings")
			}
			if logs[0].has("sfu node did not answer", "node=9") {
				t.Error("the manager says node 9 did not answer its ping")
			}
		})
	}
}

// TestWebSocketJoinRetriesBusy: a WebSocket client's first offer finds the
// manager busy (here a manager that is shutting down); the handler asks
// again, and the next manager places it.
func TestWebSocketJoinRetriesBusy(t *testing.T) {
	c, logs := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := c.nodes[0]
	n.mgr.Close() // the fake manager below answers every join
	mgr := c.conn(t, "mgr")
	var joins atomic.Int32
	if _, err := mgr.QueueSubscribe(subjectJoin, "sfu-manager", func(m *nats.Msg) {
		a := Assignment{Node: "7", Site: "a", Signal: subjectSignal("7")}
		if joins.Add(1) == 1 {
			a = Assignment{Error: errShuttingDown.Error(), Busy: true}
		}
		b, _ := json.Marshal(a)
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := mgr.Subscribe(subjectSignal("7"), func(m *nats.Msg) { respondSignal(m, Reply{Op: "answer", SDP: "v=0"}) }); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
	ws := dialSignalling(t, ctx, n.Handler(), "a")
	if err := ws.WriteJSON(Signal{Op: "offer", Session: "s1", Client: "w1", SDP: "v=0"}); err != nil {
		t.Fatal(err)
	}
	var rep Reply
	if err := ws.ReadJSON(&rep); err != nil {
		t.Fatal(err)
	}
	if rep.Op != "answer" || joins.Load() != 2 {
		t.Errorf("reply %+v after %d joins, want an answer after 2", rep, joins.Load())
	}
	if !logs[0].has(`msg="sfu: join of a WebSocket client failed; asking the manager again"`, "client=w1", "attempt=1", "shutting down") {
		t.Error("the handler did not log its retry")
	}
}

func TestJoinBackoff(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		retry int
		rand  float64
		want  time.Duration
	}{
		{1, 0, 250 * ms},
		{1, 0.5, 187500 * time.Microsecond},
		{2, 0, 500 * ms},
		{3, 0, time.Second},
		{4, 0, 2 * time.Second},
		{4, 0.999999, 1000001 * time.Microsecond}, // at least half
		{5, 0, 4 * time.Second},                   // the bound
		{6, 0, 4 * time.Second},
		{1000, 0.5, 3 * time.Second},
	} {
		b := joinBackoff
		b.rand = func() float64 { return tc.rand }
		if got := b.delay(tc.retry); got != tc.want {
			t.Errorf("delay(%d) with rand %v = %s, want %s", tc.retry, tc.rand, got, tc.want)
		}
	}
	for retry := 1; retry < 10; retry++ { // math/rand: within [half, whole] of the bounded step
		step := min(joinBackoff.base<<(retry-1), joinBackoff.max)
		if d := joinBackoff.delay(retry); d <= step/2 || d > step {
			t.Errorf("delay(%d) = %s, want in (%s, %s]", retry, d, step/2, step)
		}
	}
}

// TestPlacementHonoursContext: a placement waiting to ask a busy manager
// again stops when its context ends, with both errors, and asks no more.
func TestPlacementHonoursContext(t *testing.T) {
	c := startCluster(t, "a")
	c.nodes[0].mgr.Close() // the manager below answers busy
	nc := c.conn(t, "busy")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var joins atomic.Int32
	if _, err := nc.Subscribe(subjectJoin, func(m *nats.Msg) {
		joins.Add(1)
		b, _ := json.Marshal(Assignment{Error: "sfu manager busy: test", Busy: true})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// the caller gives up when the placement logs its retry, i.e. while
	// it waits to ask again
	giveUp := slog.New(slog.NewTextHandler(writerFunc(func([]byte) { cancel() }), nil))
	p := placement{nc: c.conn(t, "client"), req: JoinRequest{Session: "s1", Client: "u1", Site: "a"}, log: giveUp,
		retryMsg: "retry", send: func(context.Context, Assignment, Signal) (Reply, error) {
			t.Error("a busy placement sent its signal")
			return Reply{}, nil
		}}
	_, _, err := p.run(ctx, Signal{Op: "offer", Session: "s1", Client: "u1"})
	if !errors.Is(err, ErrBusy) || !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want ErrBusy and context.Canceled", err)
	}
	if n := joins.Load(); n != 1 {
		t.Errorf("%d joins, want 1: the placement asked again after its context ended", n)
	}
}

// writerFunc is an io.Writer that hands what is written to f.
type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) {
	f(p)
	return len(p), nil
}

func TestWaitHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with an ended context: %v, want context.Canceled", err)
	}
	if err := wait(context.Background(), 0); err != nil {
		t.Fatalf("wait 0: %v", err)
	}
}

// TestWebSocketClosedDuringPlacement: a browser that sends a leave and
// closes its socket (as sfu.ts does when a tab closes) while the handler
// waits to ask a busy manager again ends the placement: the handler
// returns without asking for all its attempts (a tab that is gone is not
// placed), and the leave does not start a placement of its own.
func TestWebSocketClosedDuringPlacement(t *testing.T) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := c.nodes[0]
	n.mgr.Close() // the manager below answers busy
	mgr := c.conn(t, "mgr")
	var joins atomic.Int32
	asked := make(chan struct{}, joinAttempts)
	if _, err := mgr.Subscribe(subjectJoin, func(m *nats.Msg) {
		joins.Add(1)
		b, _ := json.Marshal(Assignment{Error: "sfu manager busy: test", Busy: true})
		_ = m.Respond(b)
		asked <- struct{}{}
	}); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	ws := dialSignalling(t, ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		n.Handler().ServeHTTP(w, r)
	}), "a")
	if err := ws.WriteJSON(Signal{Op: "offer", Session: "s1", Client: "w1", SDP: "v=0"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the handler did not ask the manager")
	}
	// as a browser's tab that closes: a leave, then the close
	if err := ws.WriteJSON(Signal{Op: "leave", Session: "s1", Client: "w1"}); err != nil {
		t.Fatal(err)
	}
	ws.Close()
	select {
	case <-returned:
	case <-ctx.Done():
		t.Fatal("the handler did not return after its socket closed")
	}
	if got := joins.Load(); got >= joinAttempts {
		t.Errorf("the handler asked the manager %d times for a closed socket, want fewer than %d", got, joinAttempts)
	}
}

// TestWebSocketTakesAnOfferFirst: before its first join a socket answers
// any signal but an offer with an error, and starts no placement.
func TestWebSocketTakesAnOfferFirst(t *testing.T) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := c.nodes[0]
	mgr := c.conn(t, "watch")
	var joins atomic.Int32
	if _, err := mgr.Subscribe(subjectJoin, func(*nats.Msg) { joins.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
	ws := dialSignalling(t, ctx, n.Handler(), "a")
	for _, op := range []string{"stats", "pose"} {
		if err := ws.WriteJSON(Signal{Op: op, Session: "s1", Client: "w1"}); err != nil {
			t.Fatal(err)
		}
		var rep Reply
		if err := ws.ReadJSON(&rep); err != nil {
			t.Fatal(err)
		}
		if rep.Op != "error" || !strings.Contains(rep.Error, fmt.Sprintf("%q before an offer", op)) {
			t.Errorf("%s first: reply %+v, want an error that it came before an offer", op, rep)
		}
	}
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := joins.Load(); got != 0 {
		t.Errorf("%d join requests for a socket that sent no offer", got)
	}
}

// TestPlacementDeadline: a placement whose nodes take the offer and never
// answer ends when its deadline (placementTimeout, short here) runs out,
// with an error that says so and names the nodes it placed the client on
// and excluded, each of which got a leave. Node 8 gives up on its offer
// early and is excluded; node 9's offer would wait offerTimeout, longer
// than the deadline, and node 1 (the manager's) answers nothing. Before,
// such a placement took up to five join requests and offers, about a
// minute, before a browser heard why.
func TestPlacementDeadline(t *testing.T) {
	c := startCluster(t, "z")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.nodes[0].subs[0].Unsubscribe(); err != nil { // node 1's signal subject
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		ops = map[string][]string{} // by node: what it received
	)
	for _, id := range []string{"8", "9"} {
		fakeNode(t, ctx, c, id, "a", func(m *nats.Msg) {
			var s Signal
			if err := json.Unmarshal(m.Data, &s); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ops[id] = append(ops[id], s.Op)
			mu.Unlock()
			if s.Op == "ping" { // the manager's: it places clients here
				respondSignal(m, Reply{Op: "ok", Site: "a"})
			}
		})
	}
	var placed []string
	n1 := c.nodes[0]
	p := placement{nc: c.conn(t, "client"), req: JoinRequest{Session: "s1", Client: "u1", Site: "a"}, log: slog.New(slog.DiscardHandler),
		retryMsg: "retry",
		send: func(ctx context.Context, a Assignment, s Signal) (Reply, error) {
			return n1.signalNode(ctx, a.Signal, s) // as the WebSocket handler does
		},
		placed: func(a Assignment) { placed = append(placed, a.Node) },
		timeout: func(node string) time.Duration {
			if node == "8" {
				return 300 * time.Millisecond
			}
			return offerTimeout
		},
		deadline: 2 * time.Second,
	}
	a, _, err := p.run(ctx, Signal{Op: "offer", Session: "s1", Client: "u1", SDP: "v=0"})
	if !errors.Is(err, errPlacementTimeout) {
		t.Fatalf("placement on nodes that never answer: assignment %+v, err %v; want the placement's deadline", a, err)
	}
	if a.Node != "" {
		t.Errorf("assignment %+v, want none: no node answered", a)
	}
	want := fmt.Sprintf("placed on nodes %v, excluded %v as they did not answer", placed, placed)
	if len(placed) == 0 || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("err %q, want one with the attempts and %q", err, want)
	}
	for _, id := range placed {
		waitFor(t, "node "+id+" to receive the client's leave", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(ops[id], "leave")
		})
	}
}
