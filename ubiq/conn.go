package ubiq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/interest"
	"github.com/xrealm/xrealm/scene"
	"github.com/xrealm/xrealm/streamread"
)

const (
	requestTimeout = 5 * time.Second
	maxObserved    = 64
)

// frameSource reads whole frames from a transport.
type frameSource interface {
	// run reads frames and calls handle with each, until the transport
	// fails, stop reports true, or handle returns an error; it returns
	// that error. handle may keep a frame. It must not close the
	// transport itself (see conn.close). Before it handles what it read,
	// it charges it to the inbound budget (charge: frames and bytes; it
	// waits while the budget is spent, and reports false if the
	// connection closed meanwhile), everything the peer sends: frames,
	// and on WebSocket every message, control and text messages too, and
	// the bytes on the wire.
	run(stop func() bool, charge func(frames, bytes int) bool, handle func(f []byte) error) error
}

// streamSource reads frames from a byte stream (TCP or TLS).
type streamSource struct {
	nc   net.Conn
	r    frameReader
	slab slab
}

func newStreamSource(nc net.Conn, maxPayload int) *streamSource {
	s := &streamSource{nc: nc}
	s.r.max = maxPayload
	s.r.Init(4 << 10)
	return s
}

func (s *streamSource) run(stop func() bool, charge func(frames, bytes int) bool, handle func(f []byte) error) error {
	return streamread.Receive(s.nc, &s.r.Buffer, streamread.Options{Stop: stop}, func() error {
		for {
			f, ok, err := s.r.next()
			if err != nil || !ok {
				return err
			}
			if !charge(1, len(f)) {
				return net.ErrClosed // closed while it waited: the read loop ends, and no later frame is handled
			}
			// The frame is in the read buffer, which the next read
			// overwrites; relayed frames wait in other connections' queues.
			if err := handle(s.slab.copy(f)); err != nil {
				return err
			}
		}
	})
}

// conn is one Ubiq peer connection.
type conn struct {
	s         *Server
	nc        net.Conn
	src       frameSource
	transport string
	log       *slog.Logger
	w         *fanout.Writer
	session   string
	started   time.Time

	lastServer atomic.Int64 // unix nanos of the last message to the server, moved later by held time (admit)
	heldSince  atomic.Int64 // unix nanos when the current wait for the inbound budget began; 0: none
	heldCredit atomic.Int64 // nanos of held time added to lastServer since the last message to the server
	id         atomic.Pointer[string]

	// relayRoom is the room the read loop relays frames to: room, as the
	// request goroutine last set it.
	relayRoom atomic.Pointer[room]

	// Owned by the request goroutine (requests to the server are handled
	// apart from the read loop, so that slow room-state operations never
	// hold up relayed frames), and by the read loop while that goroutine
	// is idle (position updates, see serve).
	room        *room
	posBuf      []byte
	me          memberRecord
	memberAs    string // uuid of the member key written for room
	memberRev   uint64 // revision of this connection's last write of that key
	memberGen   string // generation of room's record that counted this connection in (claimRoom)
	memberClaim string // claim id under which it counted this connection in
	clientID    NetworkId
	observed    map[string]*room
	// cleaning holds, for the rooms this connection let go of, the
	// channels closed once each has stopped and been cleaned up (letGo).
	cleaning  []letting
	busBuf    []byte // read loop only
	pingReply []byte

	visMu    sync.Mutex
	vis      map[string]int       // peer uuid -> rooms that show it
	removing map[string]time.Time // peers whose PeerRemoved waits out the grace period
	timer    *time.Timer

	closeOnce sync.Once
	reason    atomic.Pointer[string]
	done      chan struct{} // closed by close

	// throttle holds the read loop back to the inbound budget
	// (Config.Inbound).
	throttle throttle

	// lost counts the frames that the queue refused for good: those that
	// came once it had overflowed (the peer is then disconnected) or while
	// it closed. (The writer's own count of dropped frames also counts the
	// state frames that deliver then queued past the bound.)
	lost atomic.Uint64
	// behind is set when the queue overflowed and the peer is disconnected
	// for it (tooSlow).
	behind atomic.Bool

	// logGate bounds the lines that the peer's requests log (peerInfo);
	// request goroutine only.
	logGate logGate
}

// A peer's requests log at INFO what they did, or what was wrong with
// them; a peer that sends many (bad JSON, refused joins, a join per cell
// change) would flood the logs. So one connection logs a burst of
// peerLogBurst lines, then one per peerLogEvery, and the next line logged
// says how many were not.
const (
	peerLogBurst = 20
	peerLogEvery = 2 * time.Second
)

// A room's goroutine logs what its members set that it cannot use (see
// room.logBounded) within the same budget, per room.
type logGate struct {
	tokens  float64
	at      time.Time
	skipped int
}

// log logs a line at level within the gate's budget; a line logged after
// some were not says how many.
func (g *logGate) log(l *slog.Logger, level slog.Level, msg string, args ...any) {
	now := time.Now()
	if g.at.IsZero() {
		g.tokens = peerLogBurst
	} else {
		g.tokens = min(peerLogBurst, g.tokens+now.Sub(g.at).Seconds()/peerLogEvery.Seconds())
	}
	g.at = now
	if g.tokens < 1 {
		g.skipped++
		return
	}
	g.tokens--
	if g.skipped > 0 {
		args = append(args, "unlogged_before", g.skipped)
		g.skipped = 0
	}
	l.Log(context.Background(), level, msg, args...)
}

// peerInfo logs a line at INFO about one of the peer's requests, within
// the connection's log budget.
func (c *conn) peerInfo(msg string, args ...any) {
	c.logGate.log(c.log, slog.LevelInfo, msg, args...)
}

func (c *conn) uuid() string {
	if p := c.id.Load(); p != nil {
		return *p
	}
	return ""
}

// close ends the connection; the read loop then cleans up.
func (c *conn) close(reason string) {
	c.closeOnce.Do(func() {
		c.reason.Store(&reason)
		close(c.done) // ends a wait for the inbound budget
		// On its own goroutine: closing a plain socket waits until its
		// reader has left the read callback (streamread.Receive), which may
		// be the caller or busy relaying to another connection that is
		// closing this one.
		go c.nc.Close()
	})
}

// closing reports whether close was called.
func (c *conn) closing() bool { return c.reason.Load() != nil }

func (c *conn) serve() {
	defer c.nc.Close()
	c.w = fanout.NewWriter(c.nc, c.s.cfg.Writer, func(err error) {
		if errors.Is(err, fanout.ErrTooSlow) {
			c.tooSlow() // already done by whoever queued the frame that overflowed
			return
		}
		c.close("write failed: " + err.Error())
	})
	c.vis = map[string]int{}
	c.removing = map[string]time.Time{}
	c.observed = map[string]*room{}
	c.lastServer.Store(time.Now().UnixNano())
	if c.s.cfg.Inbound.limited() {
		c.throttle.lim = newLimiter(c.s.cfg.Inbound, time.Now())
	}
	if !c.s.register(c) {
		c.w.Close()
		return
	}
	m := c.s.m
	m.connections.Inc()
	defer m.connections.Dec()
	defer c.cleanup()
	reqs := make(chan []byte, 256)
	// inFlight counts requests handed to the request goroutine and not yet
	// done. While it is zero that goroutine is idle, so the read loop may
	// take a position update itself, in order, without a hand-off (the
	// atomic orders the goroutines' accesses to the connection's state).
	var inFlight atomic.Int32
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		for p := range reqs {
			c.request(p)
			inFlight.Add(-1)
		}
	}()
	defer func() { close(reqs); <-handled }()
	// Every frame counts against the inbound budget (charged by the
	// source), server messages too: a flood of property changes or joins
	// reaches every member as a flood of relayed frames does.
	c.readError(c.src.run(c.closing, c.admit, func(f []byte) error {
		m.messagesIn.Inc()
		m.bytesIn.Add(float64(len(f)))
		if IDOf(f) == ServerID {
			c.lastServer.Store(time.Now().UnixNano())
			c.heldCredit.Store(0)
			if inFlight.Load() == 0 {
				if p, ok := positionRequest(f[HeaderSize:]); ok {
					c.setPosition(p)
					return nil
				}
			}
			inFlight.Add(1)
			reqs <- f[HeaderSize:]
			return nil
		}
		c.relay(f)
		return nil
	}))
}

func (c *conn) readError(err error) {
	var fe *FrameError
	switch {
	case c.reason.Load() != nil:
		c.log.Info("Ubiq connection closed", "peer", c.uuid(), "reason", *c.reason.Load())
	case errors.As(err, &fe):
		c.s.m.malformed.Inc()
		c.log.Warn("Ubiq connection closed: malformed frame", "peer", c.uuid(), "err", err)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Info("Ubiq connection closed by peer", "peer", c.uuid())
	default:
		c.log.Info("Ubiq connection closed on a read error", "peer", c.uuid(), "err", err)
	}
}

// cleanup leaves the room and the observed rooms.
func (c *conn) cleanup() {
	c.s.unregister(c)
	c.close("connection ended")
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if c.room != nil {
		c.leave(ctx, c.room)
		c.setRoom(nil)
	}
	dropped := make([]*room, 0, len(c.observed))
	for id, r := range c.observed {
		delete(c.observed, id)
		r.detachObserver(c)
		dropped = append(dropped, r)
	}
	c.letGo(dropped...)
	c.stopped()
	c.w.Close()
	c.visMu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.visMu.Unlock()
}

// relay forwards a frame to the sender's room, here and on other nodes.
func (c *conn) setRoom(r *room) {
	c.room = r
	c.relayRoom.Store(r)
}

func (c *conn) relay(f []byte) {
	r := c.relayRoom.Load()
	if r == nil {
		return // not in a room: Ubiq drops it too
	}
	id := c.uuid()
	c.s.delivered(r.dispatch(id, c, f))
	if r.others.Load() == 0 {
		return // no other node has this room
	}
	c.busBuf = append(appendBus(c.busBuf[:0], busFrame, id), f...)
	if err := c.s.cfg.NC.Publish(r.subj, c.busBuf); err != nil {
		c.s.busFailed("relayed frame", r.id, id, err)
	}
	if cap(c.busBuf) > 1<<20 {
		c.busBuf = nil
	}
}

// relayed is a relayed frame as its receivers' queues hold it; one is
// shared by all of them. A frame to an object that its sender declared as
// state (CoalesceKey) carries that object's key, so that in a full queue
// it replaces the older frame of the same sender to the same object. Any
// other frame may be an event, which nothing supersedes (a WebRTC offer or
// ICE candidate, an RPC): it is a Keep frame, which a full queue takes
// past its bound, up to the bound again, like the server's own messages.
// A receiver that falls further behind than that is disconnected
// (tooSlow). So a relayed frame is delivered, or replaced by newer state
// its sender declared, or its receiver is disconnected: never silently
// lost.
type relayed struct {
	f *fanout.Frame
	// kept is f as a Keep frame, for a state frame that finds a queue full
	// with no older frame of its key to replace; made on first need.
	kept *fanout.Frame
}

func newRelayed(frame []byte, key string) relayed {
	return relayed{f: &fanout.Frame{Bytes: frame, Key: key, Keep: key == ""}}
}

// deliver queues a relayed frame and reports whether it was queued. It
// never waits for the peer: a peer that has fallen too far behind is
// disconnected instead.
func (c *conn) deliver(m *relayed) bool {
	res := c.w.Enqueue(m.f) // queued, coalesced (counted by the writer's OnCoalesce), or refused
	if res == fanout.Dropped && !m.f.Keep {
		// State with no older frame of its key in the full queue to
		// replace: the newest state of its object, which nothing
		// supersedes yet. It goes past the bound like an event, and the
		// next frame of its key replaces it there.
		if m.kept == nil {
			m.kept = &fanout.Frame{Bytes: m.f.Bytes, Key: m.f.Key, Keep: true}
		}
		res = c.w.Enqueue(m.kept)
	}
	if res != fanout.Dropped {
		return true
	}
	c.lost.Add(1)
	c.s.m.dropped.Inc()
	c.tooSlow()
	return false
}

// keep queues a frame that must not be lost (a server message); a queue
// that cannot take it has overflowed, and the peer is disconnected.
func (c *conn) keep(f *fanout.Frame) {
	if c.w.Enqueue(f) == fanout.Dropped {
		c.lost.Add(1)
		c.tooSlow()
	}
}

// tooSlow disconnects the peer because its queue overflowed: it did not
// read while as many frames or bytes again as the bound piled up past it
// (Config.Writer). A frame that must not be lost was refused, so the peer
// is told by disconnection (it reconnects and joins afresh, with a true
// view of its room). It does not wait: it may run on another peer's read
// loop.
func (c *conn) tooSlow() {
	if c.closing() || !c.behind.CompareAndSwap(false, true) {
		return // closing anyway, or done: what is refused now goes with the connection
	}
	o := c.s.cfg.Writer
	c.s.m.slow.Inc()
	behind := fmt.Sprintf("more than %d frames or %d bytes queued", 2*o.MaxFrames, 2*o.MaxBytes)
	c.log.Warn("Ubiq peer disconnected: it fell too far behind, its queue overflowed", "peer", c.uuid(), "behind", behind,
		"written_frames", c.w.Stats().Written, "connected_for", time.Since(c.started).Round(time.Millisecond))
	c.close("fell too far behind: " + behind)
}

// sendServer queues a server message to the peer's RoomClient. Server
// messages (room and membership changes, replies) are Keep frames, as
// relayed events are: a full queue takes them past its bound, so that a
// slow peer catches up with a true view of its rooms or is disconnected.
func (c *conn) sendServer(msg []byte) {
	c.keep(&fanout.Frame{Bytes: NewFrame(c.clientIDFor(), msg), Keep: true})
}

// clientIDFor returns where server messages go. It is read by room
// goroutines too, hence the lock.
func (c *conn) clientIDFor() NetworkId {
	c.visMu.Lock()
	defer c.visMu.Unlock()
	return c.clientID
}

func (c *conn) setClientID(id NetworkId) {
	c.visMu.Lock()
	c.clientID = id
	c.visMu.Unlock()
}

// see counts one more room that shows peer id; the first sends added, its
// PeerAdded message (encodePeerAdded).
func (c *conn) see(id string, added []byte) {
	c.visMu.Lock()
	defer c.visMu.Unlock()
	n := c.vis[id]
	c.vis[id] = n + 1
	if n > 0 {
		return
	}
	if _, ok := c.removing[id]; ok {
		delete(c.removing, id) // it came back within the grace period
		return
	}
	c.keep(&fanout.Frame{Bytes: NewFrame(c.clientID, added), Keep: true})
}

// encodePeerAdded returns the PeerAdded message for p.
func encodePeerAdded(p PeerInfo) []byte {
	return EncodeRequest("PeerAdded", struct {
		Peer PeerInfo `json:"peer"`
	}{p})
}

// encodePeerRemoved returns the PeerRemoved message for peer id. A uuid
// of letters, digits and dashes needs no escaping, so it is written
// directly; any other goes through EncodeRequest (same bytes).
func encodePeerRemoved(id string) []byte {
	for i := 0; i < len(id); i++ {
		if ch := id[i]; !(ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch == '-') {
			return EncodeRequest("PeerRemoved", struct {
				UUID string `json:"uuid"`
			}{id})
		}
	}
	b := make([]byte, 0, len(removedHead)+len(id)+len(removedTail))
	return append(append(append(b, removedHead...), id...), removedTail...)
}

const (
	removedHead = `{"type":"PeerRemoved","args":"{\"uuid\":\"`
	removedTail = `\"}"}`
)

// unsee counts one room less that shows peer id; when none is left,
// PeerRemoved follows after the grace period unless a room shows it again.
func (c *conn) unsee(id string) {
	c.visMu.Lock()
	defer c.visMu.Unlock()
	n := c.vis[id]
	if n <= 0 {
		return
	}
	if n > 1 {
		c.vis[id] = n - 1
		return
	}
	delete(c.vis, id)
	grace := c.s.cfg.RemoveGrace
	if grace <= 0 {
		c.sendRemovedLocked(id)
		return
	}
	c.removing[id] = time.Now().Add(grace)
	if c.timer == nil {
		c.timer = time.AfterFunc(grace, c.flushRemovals)
	} else if len(c.removing) == 1 {
		c.timer.Reset(grace)
	}
}

func (c *conn) sendRemovedLocked(id string) {
	c.keep(&fanout.Frame{Bytes: NewFrame(c.clientID, encodePeerRemoved(id)), Keep: true})
}

func (c *conn) flushRemovals() {
	c.visMu.Lock()
	defer c.visMu.Unlock()
	now := time.Now()
	var next time.Time
	for id, at := range c.removing {
		if !at.After(now) {
			delete(c.removing, id)
			c.sendRemovedLocked(id)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if !next.IsZero() {
		c.timer.Reset(time.Until(next))
	}
}

// positionRequest returns the position of a position-only
// AppendPeerProperties in EncodeRequest's spelling.
func positionRequest(p []byte) (interest.Vec3, bool) {
	if len(p) < len(posReqHead)+len(posReqTail) || !bytes.HasPrefix(p, posReqHead) || !bytes.HasSuffix(p, posReqTail) {
		return interest.Vec3{}, false
	}
	v := p[len(posReqHead) : len(p)-len(posReqTail)]
	if bytes.ContainsAny(v, `\"`) {
		return interest.Vec3{}, false // escapes or more values: general path
	}
	return parsePosition(string(v))
}

// request handles a message to the room server.
func (c *conn) request(payload []byte) {
	if p, ok := positionRequest(payload); ok {
		c.setPosition(p)
		return
	}
	var req Request
	if err := json.Unmarshal(payload, &req); err != nil {
		c.peerInfo("Ubiq server message is not JSON {type,args}", "peer", c.uuid(), "err", err, "message", scene.Quote(payload))
		return
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, requestTimeout)
	defer cancel()
	args := []byte(req.Args)
	bad := func(err error) {
		c.peerInfo("Ubiq server message has bad arguments", "type", req.Type, "peer", c.uuid(), "err", err, "args", scene.Quote(args))
	}
	switch req.Type {
	case "Join":
		var a JoinArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		c.join(ctx, a)
	case "AppendPeerProperties":
		var a PropertiesArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		c.appendPeerProperties(ctx, a.Keys, a.Values)
	case "AppendRoomProperties":
		var a PropertiesArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		if c.room == nil {
			return
		}
		ck, _, err := c.s.store.appendRoomProps(ctx, c.room.id, a.Keys, a.Values, c.s.cfg.MaxFrame/2)
		var le *RoomPropsLimitError
		if errors.As(err, &le) {
			c.peerInfo("Ubiq AppendRoomProperties refused", "peer", c.uuid(), "err", err)
		} else if err != nil {
			c.log.Warn("append room properties failed", "room", c.room.id, "err", err)
		} else if len(ck) == 0 {
			// Nothing changed: Ubiq still answers, with an empty update.
			c.sendServer(EncodeRequest("RoomPropertiesAppended", PropertiesArgs{Keys: []string{}, Values: []string{}}))
		}
	case "DiscoverRooms":
		var a DiscoverArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		c.setClientID(a.ClientID)
		var rooms []RoomInfo
		var err error
		if a.JoinCode != "" {
			rooms, err = c.s.store.discover(ctx, a.JoinCode)
		} else {
			rooms, err = c.s.published(ctx)
		}
		if err != nil {
			c.log.Warn("discover rooms failed", "err", err)
			rooms = []RoomInfo{}
		}
		// As many as fit the largest frame, as every server message.
		msg, n := encodeRooms(rooms, a, c.s.cfg.MaxFrame)
		if n < len(rooms) {
			c.peerInfo("Ubiq DiscoverRooms answered with part of the list: the rest would not fit the largest frame", "peer", c.uuid(),
				"listed", n, "rooms", len(rooms), "max_frame", c.s.cfg.MaxFrame)
		}
		c.sendServer(msg)
	case "SetBlob":
		var a SetBlobArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		if c.room != nil {
			// The GetBlob answer quotes the blob again, in which a
			// character may take up to 7 times its bytes ('<' is
			// "\\u003c"): it must fit a frame, as every server message.
			if n := len(EncodeRequest("Blob", BlobArgs(a))); n > c.s.cfg.MaxFrame {
				c.peerInfo("Ubiq SetBlob refused: its GetBlob answer would be larger than the largest frame", "peer", c.uuid(),
					"blob", scene.Quote([]byte(a.UUID)), "answer_bytes", n, "max_frame", c.s.cfg.MaxFrame)
				return
			}
			var le *BlobLimitError
			var ne *NameError
			if err := c.s.store.setBlob(ctx, c.room.id, a.UUID, a.Blob, c.s.cfg.MaxRoomBlobBytes); errors.As(err, &le) {
				c.peerInfo("Ubiq SetBlob refused: the room's blobs would exceed their limit", "peer", c.uuid(), "blob", scene.Quote([]byte(a.UUID)), "err", err)
			} else if errors.As(err, &ne) {
				c.peerInfo("Ubiq SetBlob refused", "peer", c.uuid(), "err", err)
			} else if err != nil {
				c.log.Warn("set blob failed", "room", c.room.id, "err", err)
			}
		}
	case "GetBlob":
		var a GetBlobArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		c.setClientID(a.ClientID)
		blob := ""
		if c.room != nil {
			var err error
			var ne *NameError
			if blob, err = c.s.store.getBlob(ctx, c.room.id, a.UUID); errors.As(err, &ne) {
				c.peerInfo("Ubiq GetBlob refused; answered with no blob", "peer", c.uuid(), "err", err)
			} else if err != nil {
				c.log.Warn("get blob failed", "room", c.room.id, "err", err)
			}
		}
		c.sendServer(encodeBlob(a.UUID, blob, c.s.cfg.MaxFrame))
	case "Ping":
		var a ClientArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		if a.ClientID != (NetworkId{}) { // none: the one set before (a Client's watchdog)
			c.setClientID(a.ClientID)
		}
		if c.pingReply == nil { // the same for the whole connection
			c.pingReply = EncodeRequest("Ping", struct {
				SessionID string `json:"sessionId"`
			}{c.session})
		}
		c.sendServer(c.pingReply)
	case "SetObserved":
		var a SetObservedArgs
		if err := json.Unmarshal(args, &a); err != nil {
			bad(err)
			return
		}
		if a.ClientID != (NetworkId{}) {
			c.setClientID(a.ClientID)
		}
		c.setObserved(ctx, a.Rooms)
	default:
		c.peerInfo("unknown Ubiq server message", "type", req.Type, "peer", c.uuid())
	}
}

func (c *conn) reject(a JoinArgs, reason string) {
	// The reason may quote the Join's room uuid or code, whatever their size.
	c.peerInfo("Ubiq join rejected", "peer", c.uuid(), "reason", cutString(reason, MaxNameLen))
	c.sendServer(encodeRejected(reason, a, c.s.cfg.MaxFrame))
}

func (c *conn) join(ctx context.Context, a JoinArgs) {
	// The Join always carries the RoomClient's id, where the answer goes.
	c.setClientID(a.Peer.ClientID)
	if err := checkName("peer uuid", a.Peer.UUID, MaxPeerUUIDLen); err != nil {
		c.reject(a, "Could not join: "+err.Error())
		return
	}
	// A room's name goes into its record and its SetRoom message, whose
	// properties take at most half the largest frame (RoomPropsLimitError).
	if err := checkName("room name", a.Name, MaxNameLen); err != nil {
		c.reject(a, "Could not join: "+err.Error())
		return
	}
	// It also carries the peer's identity and properties, which take
	// effect only if the peer moves into the room: a peer's member key is
	// named by its uuid, so a member that changed it in place (a Join that
	// is refused, or for the room it is in) would leave its old key, and
	// write a second one, behind when it goes.
	me := c.me
	me.UUID = a.Peer.UUID
	me.SceneID, me.ClientID, me.Session = a.Peer.SceneID, a.Peer.ClientID, c.session
	me.Props = c.me.Props.clone()
	pk, pv, pos, hasPos := takePosition(a.Peer.Keys, a.Peer.Values)
	me.Props.appendAll(pk, pv)
	if err := c.checkPeer(&me); err != nil {
		c.reject(a, "Could not join: "+err.Error())
		return
	}
	id := me.UUID
	if c.room == nil {
		c.id.Store(&id) // for the logs, and the answer's peer field
	}

	var target, code string
	var err error
	switch {
	case a.UUID != "":
		if !validUUID(a.UUID) {
			c.reject(a, "Could not join room with uuid "+a.UUID+". We require an RFC4122 uuid.")
			return
		}
		target = a.UUID
	case a.JoinCode != "":
		target, err = c.s.store.roomByCode(ctx, a.JoinCode)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			c.reject(a, "Could not join room with code "+a.JoinCode+". No such room exists.")
			return
		}
		if err != nil {
			c.log.Warn("Ubiq join failed", "peer", id, "joincode", a.JoinCode, "err", err)
			c.reject(a, "Could not join room with code "+a.JoinCode+": "+err.Error())
			return
		}
		code = a.JoinCode
	default:
		target = newUUID()
	}
	if c.room != nil && c.room.id == target {
		return // already there
	}
	// Count the peer in before its member key goes in: the room then keeps
	// its join code, or takes one, and is not removed meanwhile.
	claim := newClaimID()
	rec, recRev, err := c.s.store.claimRoom(ctx, target, code, a.Name, claim, a.Publish)
	c.s.freeCodeLater(err) // a code reserved for the join, which failed
	var codeErr *JoinCodeError
	switch {
	case errors.Is(err, errCodeGone):
		c.reject(a, "Could not join room with code "+a.JoinCode+". No such room exists.")
		return
	case errors.As(err, &codeErr):
		c.log.Warn("Ubiq join failed: no free join code", "peer", id, "room", target, "err", err)
		c.reject(a, "Could not join: "+err.Error())
		return
	case err != nil:
		// The claim's write may have landed all the same (its answer
		// lost): take it out, which is nothing if it did not.
		c.unclaim(ctx, target, "", claim)
		c.log.Warn("Ubiq join failed", "peer", id, "room", target, "err", err)
		c.reject(a, "Could not join room "+target+": "+err.Error())
		return
	}
	r, err := c.s.acquire(target)
	if err != nil {
		c.unclaim(ctx, target, rec.Gen, claim)
		c.atBound()
		c.track(nil, c.s.removeIfEmpty(target, c))
		c.log.Warn("Ubiq join failed", "peer", id, "room", target, "err", err)
		c.reject(a, "Could not join room "+target+": "+err.Error())
		return
	}
	r.holdClaim(c, claim, rec.Gen, recRev)
	r.watchJoin(me.UUID)
	rev, err := c.s.store.putMember(ctx, target, &me)
	if err != nil {
		r.unwatchJoin(keyToken(me.UUID))
		// The write may have landed all the same (its answer lost): its
		// key goes, before the count-out, as in a departure.
		st, session := c.s.store, c.session
		c.s.tryWrite(ctx, "delete member key", target, false, func(ctx context.Context) error {
			return st.deleteMember(ctx, target, me.UUID, 0, session)
		})
		c.unclaimHeld(ctx, r, rec.Gen, claim)
		c.letGo(r)
		c.log.Warn("Ubiq join failed", "peer", id, "room", target, "err", err)
		c.reject(a, "Could not join room "+target+": "+err.Error())
		return
	}
	c.me = me
	c.id.Store(&id)
	old, oldAs, oldRev, oldGen, oldClaim := c.room, c.memberAs, c.memberRev, c.memberGen, c.memberClaim
	c.setRoom(r)
	c.memberAs, c.memberRev, c.memberGen, c.memberClaim = id, rev, rec.Gen, claim
	r.cmdAttachMember(c, id, rev, claim)
	if hasPos {
		c.setPosition(pos) // in the new room
	}
	if old != nil {
		c.leaveAs(ctx, old, oldAs, oldRev, oldGen, oldClaim)
	}
	c.peerInfo("Ubiq peer joined room", "peer", id, "room", target, "name", rec.Name, "joincode", rec.JoinCode)
}

// unclaim counts the peer out of room (generation gen), where it claimed
// a place under claim id claim, after it joined or failed to. A count-out
// that fails is retried in the background: until it is done, the room
// keeps its join code and is not removed. A count-out is idempotent (it
// removes its claim id), so one whose write landed but reported an error
// can be retried safely.
func (c *conn) unclaim(ctx context.Context, room, gen, claim string) {
	s, node := c.s, c.s.node
	s.tryWrite(ctx, "count out of the room", room, true, func(ctx context.Context) error {
		return s.store.unclaimRoom(ctx, room, gen, node, claim)
	})
}

// unclaimHeld counts the peer out of room r, where it holds claim id claim
// (holdClaim) on the room's record of generation gen: the room stops
// holding the claim first, so that it does not put the claim back
// (writeClaims), and may have moved it to another generation.
func (c *conn) unclaimHeld(ctx context.Context, r *room, gen, claim string) {
	if g, ok := r.releaseClaim(claim); ok {
		gen = g
	}
	c.unclaim(ctx, r.id, gen, claim)
}

// leave takes the peer out of room r as a member.
func (c *conn) leave(ctx context.Context, r *room) {
	c.leaveAs(ctx, r, c.memberAs, c.memberRev, c.memberGen, c.memberClaim)
}

// leaveAs takes the peer out of room r, where it was a member as peer uuid
// as with its member key last written at revision rev, counted in by the
// room's record of generation gen under claim id claim. The key is deleted only if nobody wrote
// it since: a peer that reconnected (the same uuid on a new connection)
// before its old connection ended keeps its membership.
func (c *conn) leaveAs(ctx context.Context, r *room, as string, rev uint64, gen, claim string) {
	s, id := c.s, r.id
	// In order: a count-out that freed the join code while the member
	// key's deletion waits for a retry would leave a ghost member in a
	// room without a code (retrier.try queues it behind).
	session := c.session
	s.tryWrite(ctx, "delete member key", id, false, func(ctx context.Context) error { return s.store.deleteMember(ctx, id, as, rev, session) })
	c.unclaimHeld(ctx, r, gen, claim)
	r.cmdDetachMember(c)
	c.letGo(r)
}

// takePosition removes PositionKey from a property append and returns
// the last valid position among its values, which the caller feeds to the
// peer's room instead (it is soft state, not a stored property). Keys
// past the values, and values past the keys, are left as they are. It
// takes one pass over the lists, and changes neither: a request may hold
// some 160,000 entries.
func takePosition(keys, values []string) (k, v []string, p interest.Vec3, ok bool) {
	n := min(len(keys), len(values))
	first := slices.Index(keys[:n], PositionKey)
	if first < 0 {
		return keys, values, p, false
	}
	k = append(make([]string, 0, len(keys)-1), keys[:first]...)
	v = append(make([]string, 0, len(values)-1), values[:first]...)
	for i := first; i < n; i++ {
		if keys[i] != PositionKey {
			k, v = append(k, keys[i]), append(v, values[i])
		}
	}
	for i := n - 1; i >= first && !ok; i-- { // the last valid position
		if keys[i] == PositionKey {
			p, ok = parsePosition(values[i])
		}
	}
	return append(k, keys[n:]...), append(v, values[n:]...), p, ok
}

func (c *conn) setPosition(p interest.Vec3) {
	r := c.room
	if r == nil {
		return
	}
	c.posBuf = r.localPosition(c.uuid(), p, c.posBuf)
}

func (c *conn) appendPeerProperties(ctx context.Context, keys, values []string) {
	keys, values, p, ok := takePosition(keys, values)
	if ok {
		c.setPosition(p)
	}
	next := c.me.Props.clone()
	ck, _ := next.appendAll(keys, values)
	if len(ck) == 0 {
		return
	}
	me := c.me
	me.Props = next
	if err := c.checkPeer(&me); err != nil {
		c.peerInfo("Ubiq AppendPeerProperties refused", "peer", c.uuid(), "err", err)
		return
	}
	c.me.Props = next
	if c.room == nil {
		return
	}
	rev, err := c.s.store.putMember(ctx, c.room.id, &c.me)
	if err != nil {
		c.log.Warn("append peer properties failed", "room", c.room.id, "err", err)
		return
	}
	c.memberRev = rev
}

// PropsLimitError refuses peer properties that would make the peer's
// PeerAdded message (its PeerInfo, quoted twice) larger than the largest
// frame (Config.MaxFrame): a queue takes no server message over twice its
// byte bound, so every peer sent one would be disconnected; its member
// record could not be stored; and a peer could otherwise grow its
// connection's memory without bound, key by key.
type PropsLimitError struct {
	Size, Limit int // the PeerAdded message's size, and the largest frame
}

func (e *PropsLimitError) Error() string {
	return fmt.Sprintf("peer properties would make the peer's PeerAdded message %d bytes, more than the largest frame, %d", e.Size, e.Limit)
}

// checkPeer returns a *PropsLimitError if m's PeerAdded message is too
// large.
func (c *conn) checkPeer(m *memberRecord) error {
	if n := len(encodePeerAdded(m.info())); n > c.s.cfg.MaxFrame {
		return &PropsLimitError{Size: n, Limit: c.s.cfg.MaxFrame}
	}
	return nil
}

// setObserved replaces the observed rooms: new rooms are attached before
// old ones are released, so that a peer seen through both never
// disappears.
func (c *conn) setObserved(ctx context.Context, rooms []string) {
	want := map[string]bool{}
	var list []string
	for _, id := range rooms {
		if want[id] {
			continue
		}
		if !validUUID(id) {
			c.peerInfo("Ubiq SetObserved: not a room uuid, ignored", "peer", c.uuid(), "room", scene.Quote([]byte(id)))
			continue
		}
		if len(want) >= maxObserved {
			c.peerInfo("Ubiq SetObserved: too many rooms, the rest ignored", "peer", c.uuid(), "asked", len(rooms), "limit", maxObserved)
			break
		}
		want[id] = true
		list = append(list, id)
	}
	// Prepare the new rooms concurrently (state and activation are round
	// trips to JetStream), then attach them in order, then let go of the
	// old ones. A room already active on this node needs neither: its
	// record exists, and this node's presence key in it tells the other
	// nodes that it is held (there is no key per observer).
	ready := make([]*room, len(list))
	failed := make([]bool, len(list))
	var wg sync.WaitGroup
	for i, id := range list {
		if c.observed[id] != nil {
			continue
		}
		if r := c.s.acquireActive(id); r != nil {
			ready[i] = r
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.s.store.observeRoom(ctx, id); err != nil {
				c.log.Warn("observe room failed", "room", id, "err", err)
				failed[i] = true
				return
			}
			r, err := c.s.acquire(id)
			if err != nil {
				c.log.Warn("observe room failed", "room", id, "err", err)
				failed[i] = true
				return
			}
			ready[i] = r
		}()
	}
	wg.Wait()
	for i, id := range list {
		if r := ready[i]; r != nil {
			r.attachObserver(c)
			c.observed[id] = r
		}
	}
	var old []string
	for id := range c.observed {
		if !want[id] {
			old = append(old, id)
		}
	}
	dropped := make([]*room, 0, len(old))
	for _, id := range old {
		r := c.observed[id]
		delete(c.observed, id)
		r.detachObserver(c)
		dropped = append(dropped, r)
	}
	now := make([]string, 0, len(c.observed))
	for _, id := range list {
		if c.observed[id] != nil {
			now = append(now, id)
		}
	}
	// The answer goes before any wait for the rooms let go of (letGo).
	c.sendServer(EncodeRequest("Observed", ObservedArgs{Rooms: now}))
	c.letGo(dropped...)
	// A room that could not be taken up may have had its record created
	// all the same, which nobody would remove: ask for its removal, as a
	// failed Join does.
	for i, id := range list {
		if failed[i] {
			c.atBound()
			c.track(nil, c.s.removeIfEmpty(id, c))
		}
	}
}
