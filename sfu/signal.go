package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/volumetric"
)

// Bus subjects; see docs/sfu.md.
const (
	subjectJoin  = "sfu.join"  // request: JoinRequest → Assignment
	subjectNodes = "sfu.nodes" // publish: NodeInfo heartbeats
	subjectSync  = "sfu.sync"  // publish: every node re-announces its tracks
)

func subjectSignal(node string) string { return "sfu.node." + node + ".signal" }

// subjectEvents is where a node publishes events for one client.
func subjectEvents(session, client string) string { return "sfu.client." + session + "." + client }

// JoinRequest asks the manager for a node.
type JoinRequest struct {
	Session string `json:"session"`
	Client  string `json:"client"`
	Site    string `json:"site"`
	// Near lists further sites in order of preference, used when no node
	// runs at Site (for example the sites with a direct link to it).
	Near []string `json:"near,omitempty"`
	// Exclude lists nodes not to place the client on, even the node it was
	// given before: those that failed it (Dial and the WebSocket handler
	// send the nodes that did not answer its offer, or refused it for their
	// load, when they ask again). The manager no longer counts the client
	// as placed on them.
	Exclude []string `json:"exclude,omitempty"`
	// Full lists those of Exclude that refused the client for their
	// clients (Reply.Full without Busy) on the attempt before this one:
	// the manager counts them full until their next heartbeat. A refusal
	// is named once, as a later join may come after that heartbeat.
	Full []string `json:"full,omitempty"`
}

// Assignment is the manager's answer.
type Assignment struct {
	Node      string `json:"node"`
	Site      string `json:"site"`
	Signal    string `json:"signal"`              // bus subject for Signal messages
	WebSocket string `json:"websocket,omitempty"` // the node's WebSocket URL, if it has one
	Error     string `json:"error,omitempty"`
	// Busy is set with Error when this manager cannot place the join now
	// but a manager may shortly: it is placing as many joins as it takes at
	// once, or it is shutting down (another manager of the queue group may
	// take the next request). Ask again shortly.
	Busy bool `json:"busy,omitempty"`
}

// NodeInfo is a node's heartbeat. A node that shuts down publishes it
// once more with Leaving set, after its last heartbeat and before it stops
// answering, so that the manager stops assigning it at once instead of
// after nodeTTL.
type NodeInfo struct {
	ID      string `json:"id"`
	Site    string `json:"site"`
	Clients int    `json:"clients"`
	// MaxClients is the node's Config.MaxClients: the manager takes a node
	// with Clients (and the clients it placed there since) at MaxClients
	// as full, and places a client there only when no node it may use
	// has room. 0 (an older node) is no bound known.
	MaxClients int    `json:"max_clients,omitempty"`
	Signal     string `json:"signal"`
	WebSocket  string `json:"websocket,omitempty"`
	Leaving    bool   `json:"leaving,omitempty"`
	// Instance is random per Start: it tells a node's restarts, or two
	// processes started with one ID, apart. The manager ignores a leave
	// announcement whose Instance is not that of the node's last heartbeat.
	Instance string `json:"instance,omitempty"`
	// Beat numbers an instance's heartbeats from 1 (0: an older node,
	// which does not). Clients counts the clients connected and those
	// the manager placed here before the heartbeat whose offer has not
	// come (expect.go).
	Beat uint64 `json:"beat,omitempty"`
}

// Signal is a client's message to its node, over the bus (request/reply)
// or the WebSocket.
type Signal struct {
	Op      string `json:"op"` // "offer", "pose", "stats", "leave", "ping"
	Session string `json:"session"`
	Client  string `json:"client"`
	SDP     string `json:"sdp,omitempty"`
	Pose    *Pose  `json:"pose,omitempty"`
	// Estimator names the bandwidth estimator for what the node sends to
	// this client (offer only): "gcc", "hera" (Config.Estimators); empty is
	// the node's default.
	Estimator string `json:"estimator,omitempty"`
	// PointClouds (offer only) is the number of point-cloud descriptions
	// the client receives at once over its data channel PointCloudLabel
	// instead of RTP slots (browsers; see datachannel.go); 0 means none.
	PointClouds int `json:"pointclouds,omitempty"`
	// Frames is the client's frame delivery report (op "stats").
	Frames *FrameReport `json:"frames,omitempty"`
	// Token (WebSocket signalling only) is the client's scene token, which
	// Config.Authorize checks in place of the request's cookie or header:
	// a page presents its own, since one browser's tabs share a cookie.
	// The handler never forwards it to a node.
	Token string `json:"token,omitempty"`
	// Place (op "ping", the manager's only) says that the manager places
	// the client on the node: its heartbeats count the client until its
	// offer comes (expect.go). The WebSocket handler never forwards it.
	Place bool `json:"place,omitempty"`
}

// FrameReport is what a subscriber measured of the point-cloud
// descriptions it received since it joined; the node exports it per
// subscriber.
type FrameReport struct {
	Complete uint64  `json:"complete"` // descriptions completed
	Expired  uint64  `json:"expired"`  // incomplete at their deadline
	P50Ms    float64 `json:"p50_ms"`   // capture → complete latency quantiles
	P90Ms    float64 `json:"p90_ms"`
	P99Ms    float64 `json:"p99_ms"`
	SumMs    float64 `json:"sum_ms"` // over all completed descriptions
	Count    uint64  `json:"count"`
}

// Reply answers a Signal.
type Reply struct {
	Op    string `json:"op"` // "answer", "ok", "error"
	SDP   string `json:"sdp,omitempty"`
	Error string `json:"error,omitempty"`
	// Site and Instance (op "ping" only) are the answering node's
	// (NodeInfo); Beat is the number of its last heartbeat
	// (NodeInfo.Beat) when it answered, and Counted says that it counted
	// the client (NodeInfo.Clients: connected, or placed here and
	// expected).
	Site     string `json:"site,omitempty"`
	Instance string `json:"instance,omitempty"`
	Beat     uint64 `json:"beat,omitempty"`
	Counted  bool   `json:"counted,omitempty"`
	// Full (op "error") says the node refused the signal for its load
	// (Config.MaxClients clients, or maxSignalsInFlight signals in
	// progress): another node may take it (errNodeFull).
	Full bool `json:"full,omitempty"`
	// Busy, with Full, says the load was the signals in progress, not the
	// clients (errNodeBusy): it says nothing of the node's clients, which
	// the manager counts (JoinRequest.Full).
	Busy bool `json:"busy,omitempty"`
}

// errNodeFull is what the error of a signal refused for the node's load
// wraps (Reply.Full): a placement asks the manager for another node.
var errNodeFull = errors.New("sfu node full")

// errNodeBusy is what the error of a signal refused for the node's
// signals in progress wraps besides errNodeFull (Reply.Busy).
var errNodeBusy = errors.New("signal slots taken")

// replyError is the error of rep, an "error" reply to op; it wraps
// errNodeFull when the node refused for its load, and errNodeBusy too
// when that load was its signals in progress.
func replyError(op string, rep Reply) error {
	switch {
	case rep.Full && rep.Busy:
		return fmt.Errorf("%s: %w (%w): %s", op, errNodeFull, errNodeBusy, rep.Error)
	case rep.Full:
		return fmt.Errorf("%s: %w: %s", op, errNodeFull, rep.Error)
	}
	return fmt.Errorf("%s: %s", op, rep.Error)
}

// Event is pushed to a client (subject sfu.client.<session>.<client>, or
// the WebSocket): which track each pre-negotiated receive slot carries now.
type Event struct {
	Op    string       `json:"op"` // "slots"
	Slots []SlotStatus `json:"slots"`
	// Node is the ID of the node that sent the event. A client's events
	// subject is the same whichever node it is on, so the WebSocket
	// handler and the Go client pass on only the events of the node the
	// client was placed on (eventGate): a node that failed the client's
	// offer may have taken it and still send events for slots of a
	// connection the client does not use. An event without it (an older
	// node) is passed on.
	Node string `json:"node,omitempty"`
}

// eventGate passes on a client's events from the node its placement is
// trying (try) or has placed it on, and drops those of any other node. While
// the placement runs, the tried node's events are held, merged by slot (an
// event lists only the slots that changed, so the latest status of each is
// what the client needs), and dropped when the placement moves on to
// another node: that node failed the client, and the slots it named are
// none of the client's connection. place passes the held events on, as one
// event, and every later one of that node at once.
type eventGate struct {
	deliver func(Event)

	mu     sync.Mutex
	node   string // the node tried, or placed on
	placed bool
	held   []SlotStatus // the tried node's events so far, one entry per slot
}

func newEventGate(deliver func(Event)) *eventGate { return &eventGate{deliver: deliver} }

// try notes that the placement sends the client's offer to node.
func (g *eventGate) try(node string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.node, g.placed, g.held = node, false, nil
}

// place notes that the client is on the node tried last, and passes on
// the events held for it.
func (g *eventGate) place() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.placed = true
	if len(g.held) > 0 {
		g.deliver(Event{Op: "slots", Slots: g.held, Node: g.node})
	}
	g.held = nil
}

// event takes one event from the bus.
func (g *eventGate) event(ev Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.node == "" || (ev.Node != "" && ev.Node != g.node) {
		return // no offer sent yet, or another node's: one that failed the client
	}
	if g.placed {
		g.deliver(ev)
		return
	}
	if ev.Op != "slots" {
		return
	}
	for _, st := range ev.Slots {
		i := slices.IndexFunc(g.held, func(h SlotStatus) bool { return h.Mid == st.Mid })
		if i < 0 {
			g.held = append(g.held, st)
		} else {
			g.held[i] = st
		}
	}
}

// SlotStatus is one receive slot, by the transceiver's mid; Track is nil
// when the slot is idle.
type SlotStatus struct {
	Mid   string     `json:"mid"`
	Track *TrackInfo `json:"track,omitempty"`
}

// Pose is a client's camera in the scene, used to rank publishers.
type Pose struct {
	Position [3]float64 `json:"position"`
	Forward  [3]float64 `json:"forward"`
	FOV      float64    `json:"fov"` // radians
}

// PoseMessage is published on sfu.poses.<session>.
type PoseMessage struct {
	Session string `json:"session"`
	Client  string `json:"client"`
	Pose    Pose   `json:"pose"`
}

// TrackEvent is published on sfu.tracks.<session>.
type TrackEvent struct {
	Op    string    `json:"op"` // "add", "remove"
	Track TrackInfo `json:"track"`
}

// LinkRequest asks the lower-ID node to dial a relay link.
type LinkRequest struct {
	From string `json:"from"`
}

// LinkOffer carries a relay link's offer or answer.
type LinkOffer struct {
	From  string `json:"from"`
	SDP   string `json:"sdp,omitempty"`
	Error string `json:"error,omitempty"`
}

func (n *Node) handleSignal(m *nats.Msg) {
	var s Signal
	if err := json.Unmarshal(m.Data, &s); err != nil {
		b, _ := json.Marshal(Reply{Op: "error", Error: "bad signal: " + err.Error()})
		_ = m.Respond(b)
		return
	}
	switch s.Op {
	case "ping", "pose", "stats":
		// cheap, and answered however busy the node is (the manager's
		// check that it answers)
		b, _ := json.Marshal(n.Signal(s))
		_ = m.Respond(b)
		return
	case "leave":
		// Never refused: nobody retries a leave, and a peer whose leave
		// was lost held its place (and the client's next offer was
		// refused as already connected) until ICE gave up, which under
		// load, when the slots are taken, is when leaves come. A lookup
		// here, and the close on a goroutine of its own (one per peer
		// at most: a peer closes once).
		rep := Reply{Op: "ok"}
		if err := validSignal(s); err != nil {
			rep = Reply{Op: "error", Error: err.Error()}
		} else {
			key := s.Session + "/" + s.Client
			n.unexpect(key) // not coming: no longer counted
			if p := n.leaveOffers(key); p != nil {
				go p.close()
			}
		}
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
		return
	}
	if rep, ok := n.takeSignalSlot(s); !ok {
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
		return
	}
	// An offer is noted as in flight here, before its goroutine, so that
	// a leave the client sends after it (handled inline above, perhaps
	// before the goroutine runs) finds it.
	var tok *offerToken
	if s.Op == "offer" {
		tok = n.beginOffer(s.Session + "/" + s.Client)
	}
	go func() {
		defer func() { <-n.signalSlots }()
		b, _ := json.Marshal(n.signal(s, tok))
		_ = m.Respond(b)
	}()
}

// takeSignalSlot takes one of the node's maxSignalsInFlight signal slots
// for s, whether it came over the bus or the node's own WebSocket
// handler; when all are taken it returns the error reply (Full and Busy)
// that refuses s. The caller gives the slot back (<-n.signalSlots).
func (n *Node) takeSignalSlot(s Signal) (Reply, bool) {
	select {
	case n.signalSlots <- struct{}{}:
		return Reply{}, true
	default:
		if s.Op == "offer" {
			n.unexpect(s.Session + "/" + s.Client) // it goes elsewhere, or comes again
		}
		return Reply{Op: "error", Full: true, Busy: true, Error: fmt.Sprintf("sfu node %s is busy: %d signals (offers) in progress, at most %d; %q from %q/%q refused, try again",
			n.cfg.ID, len(n.signalSlots), cap(n.signalSlots), s.Op, s.Session, s.Client)}, false
	}
}

// offerToken is one offer a node took and has not answered yet; left is
// set (under Node.mu) by a leave of its client that came meanwhile.
type offerToken struct{ left bool }

// beginOffer notes an offer of key (session/client) as in flight; the
// caller ends it with endOffer once it is answered.
func (n *Node) beginOffer(key string) *offerToken {
	tok := &offerToken{}
	n.mu.Lock()
	n.offers[key] = append(n.offers[key], tok)
	n.mu.Unlock()
	return tok
}

// endOffer forgets tok, an offer of key.
func (n *Node) endOffer(key string, tok *offerToken) {
	n.mu.Lock()
	defer n.mu.Unlock()
	rest := slices.DeleteFunc(n.offers[key], func(t *offerToken) bool { return t == tok })
	if len(rest) == 0 {
		delete(n.offers, key)
	} else {
		n.offers[key] = rest
	}
}

// leaveOffers marks the offers of key (session/client) in flight as left, and
// returns its peer, or nil, for the caller to close. An offer taken
// before the leave then makes no peer, or closes the one it made, and
// answers with an error (join).
func (n *Node) leaveOffers(key string) *peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.offers[key] {
		t.left = true
	}
	return n.peers[key]
}

// maxSignalsInFlight bounds the signals a node handles at once off the
// bus, each on its own goroutine (an offer makes a PeerConnection and
// gathers its candidates); one beyond it is answered at once with an
// error. Without a bound a flood of signals started a goroutine each.
const maxSignalsInFlight = 64

// validSignal checks the names a signal carries.
func validSignal(s Signal) error {
	if err := validName("session", s.Session); err != nil {
		return err
	}
	return validName("client", s.Client)
}

// Signal handles one client message and returns the reply.
func (n *Node) Signal(s Signal) Reply { return n.signal(s, nil) }

// signal is Signal with tok, when set, the offer's token (beginOffer),
// which it ends; an offer without one is noted in flight here.
func (n *Node) signal(s Signal, tok *offerToken) Reply {
	key := s.Session + "/" + s.Client
	if tok != nil {
		defer n.endOffer(key, tok)
	}
	if err := validSignal(s); err != nil {
		return Reply{Op: "error", Error: err.Error()}
	}
	switch s.Op {
	case "offer":
		if tok == nil {
			tok = n.beginOffer(key)
			defer n.endOffer(key, tok)
		}
		// counted as connected from here on, or refused
		defer n.unexpect(key)
		sdp, err := n.join(s.Session, s.Client, s.SDP, s.Estimator, s.PointClouds, tok)
		if err != nil {
			return Reply{Op: "error", Error: err.Error(), Full: errors.Is(err, errNodeFull)}
		}
		return Reply{Op: "answer", SDP: sdp}
	case "pose":
		if s.Pose == nil {
			return Reply{Op: "error", Error: "pose: missing pose"}
		}
		b, _ := json.Marshal(PoseMessage{Session: s.Session, Client: s.Client, Pose: *s.Pose})
		_ = n.cfg.NC.Publish("sfu.poses."+s.Session, b)
		return Reply{Op: "ok"}
	case "stats":
		if s.Frames == nil {
			return Reply{Op: "error", Error: "stats: missing frames"}
		}
		n.mu.Lock()
		p := n.peers[key]
		n.mu.Unlock()
		if p == nil {
			return Reply{Op: "error", Error: "stats: client " + key + " is not connected here"}
		}
		f := *s.Frames
		p.frames.Store(&f)
		return Reply{Op: "ok"}
	case "leave":
		n.unexpect(key) // not coming: no longer counted
		if p := n.leaveOffers(key); p != nil {
			p.close()
		}
		return Reply{Op: "ok"}
	case "ping": // the manager's check that the node answers (Manager.place)
		n.mu.Lock()
		closing, beat := n.closed, n.beat
		_, counted := n.counted[key]
		if s.Place && !closing {
			n.expect(key, time.Now())
		}
		n.mu.Unlock()
		if closing {
			return Reply{Op: "error", Error: "sfu node " + n.cfg.ID + " is shutting down", Site: n.cfg.Site, Instance: n.instance}
		}
		return Reply{Op: "ok", Site: n.cfg.Site, Instance: n.instance, Beat: beat, Counted: counted}
	}
	return Reply{Op: "error", Error: fmt.Sprintf("unknown op %q", s.Op)}
}

// signalQueue is how many signals a WebSocket's reader holds while the
// handler places its join.
const signalQueue = 16

// maxSignal bounds a WebSocket signalling message. An offer is a few
// kilobytes to a few hundred (an SDP section per slot), and a signal goes
// on to its node over the bus, which takes messages of about this size
// (the server's default MaxPayload). A larger message closes the socket
// with status 1009 (message too big); without a bound a client could make
// the handler buffer any amount before it had been authorized.
const maxSignal = 1 << 20

// wsSignal is one message read from a signalling WebSocket: a signal, or
// why the message is not one.
type wsSignal struct {
	s   Signal
	err error
}

// badSignal says why msg, a WebSocket message, is not a Signal, quoting
// (the start of) it.
func badSignal(msg []byte, err error) error {
	const show = 200
	if len(msg) > show {
		return fmt.Errorf("sfu: bad signal: %v; message of %d bytes starting %q", err, len(msg), msg[:show])
	}
	return fmt.Errorf("sfu: bad signal: %v; message %q", err, msg)
}

// A signalling WebSocket is pinged every wsPingInterval, and closed (the
// client leaves) when nothing came from it, a message or a pong, for
// wsIdleTimeout, or when a write to it takes more than wsWriteTimeout.
// Browsers and gorilla/websocket answer pings by themselves. The pings and
// the read deadline find a socket whose client went silent (a laptop that
// sleeps, a network that drops without a FIN) dead also while the node has
// nothing to send it, and the write deadline frees the event callback from
// a socket that stopped reading; without them the handler, its bus
// subscription and the socket would stay for good.
const (
	wsPingInterval = 20 * time.Second
	wsIdleTimeout  = 60 * time.Second
	wsWriteTimeout = 10 * time.Second
)

var upgrader = websocket.Upgrader{ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10, CheckOrigin: func(*http.Request) bool { return true }}

// Handler serves WebSocket signalling (mount it at /sfu/ws). A client sends
// Signal messages as JSON text frames, each with its session and client,
// and receives Reply messages in order, interleaved with Event messages
// for it. The first offer may go to any node's handler: it asks the
// manager for the client's node (query parameter site=) and forwards the
// signals there over the bus, so a browser needs one WebSocket only. It
// places the client as Dial does (placement): when the manager is busy, or
// the node does not answer the first message, it asks the manager again,
// excluding that node. A socket signals for one session and client, those
// of its first join (and, with Config.Authorize, only for a session and
// client the request, or the token in its offer, may use); before that join it takes only an offer (a leave ends
// it). When it closes, the client leaves, also while its join is being
// placed (the placement ends).
func (n *Node) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site := r.URL.Query().Get("site")
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		pingEvery, idle := wsPingInterval, wsIdleTimeout
		if n.wsPingEvery > 0 {
			pingEvery = n.wsPingEvery
		}
		if n.wsIdle > 0 {
			idle = n.wsIdle
		}
		var wmu sync.Mutex
		// a write that fails or times out closes the socket, which ends
		// the reader below and so the handler: the client leaves
		send := func(v any) error {
			wmu.Lock()
			defer wmu.Unlock()
			_ = conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
			err := conn.WriteJSON(v)
			if err != nil {
				_ = conn.Close()
			}
			return err
		}
		var (
			target          string
			session, client string // what this socket signals for, from its first join
			evSub           *nats.Subscription
			gate            *eventGate // the events of the node the client is placed on
		)
		defer func() {
			if evSub != nil {
				_ = evSub.Unsubscribe()
			}
			// a socket that closes or fails leaves, as a tab that closes
			// must (also when the answer to its join could not be sent)
			if target != "" {
				n.forward(target, Signal{Op: "leave", Session: session, Client: client})
			}
		}()
		// The socket is read on a goroutine of its own, so that a socket
		// that closes while its join is being placed ends the placement
		// (ctx) instead of leaving it to retry for a tab that is gone. Its
		// queue holds what a browser sends before it closes (a leave, a
		// stats report) so that the reader still sees the close; a client
		// that sends more than that while it waits is held back by it.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		// A message that is not a Signal is answered with an error that
		// says why, in its turn; the socket goes on.
		conn.SetReadLimit(maxSignal)
		// a pong (read by ReadMessage) counts as the client heard from
		conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(idle)) })
		go func() {
			t := time.NewTicker(pingEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteTimeout)); err != nil {
						_ = conn.Close()
						return
					}
				}
			}
		}()
		signals := make(chan wsSignal, signalQueue)
		go func() {
			defer cancel()
			defer close(signals)
			for {
				// the time the reader waits for the queue below is not
				// the client's silence
				_ = conn.SetReadDeadline(time.Now().Add(idle))
				_, msg, err := conn.ReadMessage()
				if err != nil {
					return
				}
				var in wsSignal
				if err := json.Unmarshal(msg, &in.s); err != nil {
					in = wsSignal{err: badSignal(msg, err)}
				}
				select {
				case signals <- in:
				case <-ctx.Done():
					return
				}
			}
		}()
		for in := range signals {
			if in.err != nil {
				if err := send(Reply{Op: "error", Error: in.err.Error()}); err != nil {
					return
				}
				continue
			}
			s := in.s
			token := s.Token
			s.Token = ""    // a node has no use for it: it stays here
			s.Place = false // the manager's: a client does not place itself
			if target != "" && (s.Session != session || s.Client != client) {
				_ = send(Reply{Op: "error", Error: fmt.Sprintf("sfu: this WebSocket signals for session %q client %q, not session %q client %q", session, client, s.Session, s.Client)})
				continue
			}
			if target == "" {
				if s.Op == "leave" { // nothing placed to leave: the client is gone
					return
				}
				if err := validName("session", s.Session); err != nil {
					_ = send(Reply{Op: "error", Error: err.Error()})
					continue
				}
				if err := validName("client", s.Client); err != nil {
					_ = send(Reply{Op: "error", Error: err.Error()})
					continue
				}
				if n.cfg.Authorize != nil {
					if err := n.cfg.Authorize(r, s.Session, s.Client, token); err != nil {
						n.log.Info("SFU signalling refused", "session", s.Session, "client", s.Client, "remote", r.RemoteAddr, "reason", err.Error())
						_ = send(Reply{Op: "error", Error: err.Error()})
						continue
					}
				}
				if s.Op != "offer" {
					_ = send(Reply{Op: "error", Error: fmt.Sprintf("sfu: %q before an offer: this WebSocket has no connection to signal for yet", s.Op)})
					continue
				}
				// subscribed before the offer: the node's first events may
				// come before its answer reaches this handler; only those
				// of the node the client is placed on go to the socket
				// (the callback keeps its own gate: after a failed placement
				// a late event of the old subscription must not touch the
				// next attempt's)
				g := newEventGate(func(ev Event) { _ = send(ev) })
				gate = g
				evSub, _ = n.cfg.NC.Subscribe(subjectEvents(s.Session, s.Client), func(m *nats.Msg) {
					var ev Event
					if json.Unmarshal(m.Data, &ev) == nil {
						g.event(ev)
					}
				})
				a, rep, err := n.placeWebSocketClient(ctx, JoinRequest{Session: s.Session, Client: s.Client, Site: site}, s, gate)
				if a.Node == "" { // no node answered: the next message asks again
					if evSub != nil {
						_ = evSub.Unsubscribe()
						evSub = nil
					}
					// Full: the nodes were busy; the client may try again
					_ = send(Reply{Op: "error", Error: err.Error(), Full: errors.Is(err, errNodeFull)})
					continue
				}
				target, session, client = a.Signal, s.Session, s.Client
				gate.place() // its events so far go before its answer, as they came
				if err != nil && rep.Op != "error" {
					rep = Reply{Op: "error", Error: err.Error()}
				}
				if err := send(rep); err != nil {
					return
				}
				continue
			}
			if err := send(n.forward(target, s)); err != nil {
				return
			}
		}
	})
}

// placeWebSocketClient places a WebSocket client whose first message is
// first (placement): it asks the manager for a node and sends the node
// first, again while the manager answers busy or the node does not
// answer, as Dial does. gate learns each node tried.
func (n *Node) placeWebSocketClient(ctx context.Context, req JoinRequest, first Signal, gate *eventGate) (Assignment, Reply, error) {
	p := placement{
		nc:       n.cfg.NC,
		req:      req,
		log:      n.log,
		retryMsg: "sfu: join of a WebSocket client failed; asking the manager again",
		send: func(ctx context.Context, a Assignment, s Signal) (Reply, error) {
			return n.signalNode(ctx, a.Signal, s)
		},
		placed: func(a Assignment) {
			gate.try(a.Node)
			if n.wsPlaced != nil {
				n.wsPlaced(a)
			}
		},
		timeout: n.wsOfferTimeout,
	}
	return p.run(ctx, first)
}

// forward sends a signal to a node over the bus; an error is an error
// reply.
func (n *Node) forward(subject string, s Signal) Reply {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := n.signalNode(ctx, subject, s)
	if err != nil && rep.Op != "error" {
		return Reply{Op: "error", Error: err.Error()}
	}
	return rep
}

// signalNode sends a signal to the node whose signal subject is subject,
// this node's own directly, and returns its reply: with an error when it
// is an error reply or the node did not answer.
func (n *Node) signalNode(ctx context.Context, subject string, s Signal) (Reply, error) {
	if subject == subjectSignal(n.cfg.ID) {
		rep := n.signalOwn(s)
		if rep.Op == "error" {
			return rep, replyError(s.Op, rep)
		}
		return rep, nil
	}
	return requestSignal(ctx, n.cfg.NC, subject, s)
}

// signalOwn handles s, a signal of the node's own WebSocket handler for
// this node, as handleSignal does those of the bus: an offer takes one of
// the maxSignalsInFlight signal slots the bus's take, and is refused (Full)
// when none is free; a leave, ping, pose or stats is handled at once.
func (n *Node) signalOwn(s Signal) Reply {
	switch s.Op {
	case "ping", "pose", "stats", "leave":
		return n.Signal(s)
	}
	if rep, ok := n.takeSignalSlot(s); !ok {
		return rep
	}
	defer func() { <-n.signalSlots }()
	return n.Signal(s)
}

var errNoNode = errors.New("sfu: no SFU node is available")

// FrameReportOf converts a receiver's frame statistics into a report.
func FrameReportOf(s volumetric.FrameStats) FrameReport {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return FrameReport{Complete: s.Complete, Expired: s.Expired, P50Ms: ms(s.P50), P90Ms: ms(s.P90), P99Ms: ms(s.P99), SumMs: ms(s.Sum), Count: s.N}
}
