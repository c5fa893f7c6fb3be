package ubiq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/xrealm/xrealm/interest"
)

// Bus payloads on a room's subject start with a kind byte, then the
// sender's uuid as [1-byte length][bytes], then the body.
const (
	busFrame    = 'm' // body: a whole Ubiq frame
	busPosition = 'p' // body: three float64 LE (x, y, z)
)

// InterestKey is the room property that configures interest management:
// JSON {"mode":"knn","k":20,"rate_hz":5,"hysteresis_ms":500} (the names of
// a scene's interest settings); absent or mode "all" means every member
// receives every message.
const InterestKey = "xrealm.interest"

// PositionKey is the peer property that carries a peer's position for
// k-nearest-neighbour rooms: "x,y,z" or a JSON array [x,y,z]. The server
// keeps it as soft state: it is neither stored with the peer's other
// properties nor sent to the other peers.
const PositionKey = "xrealm.position"

// interestConfig is a room's parsed InterestKey.
type interestConfig struct {
	Mode         string  `json:"mode"`
	K            int     `json:"k"`
	Rate         float64 `json:"rate_hz"`
	OldRate      float64 `json:"rate"` // the name before rate_hz, still read
	HysteresisMS float64 `json:"hysteresis_ms"`
}

// Bounds of a room's interest settings (parseInterest).
const (
	minInterestRate = 0.1       // Hz
	maxHysteresisMS = 3_600_000 // an hour
)

// parseInterest parses a room's InterestKey. A value that is not valid
// gives mode "all" and an error that says why.
func parseInterest(s string) (interestConfig, error) {
	all := interestConfig{Mode: "all"}
	if s == "" {
		return all, nil
	}
	var ic interestConfig
	if err := json.Unmarshal([]byte(s), &ic); err != nil {
		return all, fmt.Errorf("room property %s %q: %w", InterestKey, s, err)
	}
	switch ic.Mode {
	case "all":
		return all, nil
	case "knn":
	default:
		return all, fmt.Errorf("room property %s %q: mode must be knn or all, got %q", InterestKey, s, ic.Mode)
	}
	if ic.Rate == 0 {
		ic.Rate = ic.OldRate
	}
	ic.OldRate = 0
	if ic.K <= 0 {
		ic.K = 20
	}
	if ic.Rate <= 0 {
		ic.Rate = 5
	}
	// A tiny rate would make the recompute ticker's period overflow (a
	// peer could crash the node with it): rates keep to [0.1, 100] Hz, and
	// the hysteresis to an hour.
	ic.Rate = min(max(ic.Rate, minInterestRate), 100)
	if ic.HysteresisMS == 0 {
		ic.HysteresisMS = 500
	}
	ic.HysteresisMS = min(max(ic.HysteresisMS, 0), maxHysteresisMS)
	return ic, nil
}

// audience is an immutable snapshot of who on this node receives a room's
// messages.
type audience struct {
	knn      bool
	all      []*conn            // !knn: every local member and observer
	obs      []*conn            // knn: local observers, who get everything
	bySender map[string][]*conn // knn: local members whose set holds the sender
}

// attachment is how a local connection takes part in a room.
type attachment struct {
	member, observer bool
	granted          map[string]bool // peers this room told the connection about
	// as is the uuid under which the connection became a member here. It
	// outlives the membership: a peer that moves to another room takes a
	// new uuid (conn.uuid) at once, while its old member key here is
	// deleted later, and this room must not show the peer its old self.
	as string
}

type memberState struct {
	rec   memberRecord
	rev   uint64
	added []byte // PeerAdded for rec, encoded on first use
}

// room is a room that has local members or observers on this node: one
// key watch, one bus subscription and one goroutine that owns the view.
type room struct {
	s    *Server
	id   string
	subj string
	refs int // guarded by Server.mu

	ready chan struct{}
	err   error
	cmds  chan func()
	stopc chan struct{}
	gone  chan struct{} // closed when the goroutine has let go of the room
	aud   atomic.Pointer[audience]

	// others counts the other nodes that have this room active (their
	// presence keys r.{room}.n.{node}); frames go on the bus only if some do.
	others atomic.Int32

	// state holds the objects whose frames members declared as state
	// (CoalesceKey): only those frames coalesce in a full queue.
	state atomic.Pointer[stateKeys]

	posMu   sync.Mutex
	posNext map[string]pendingPosition
	knnOn   atomic.Bool // positions matter: the room uses kNN interest
	// icKnown is set (under posMu) once the room has read its interest
	// setting: until then, positions are kept whatever it is (position).
	icKnown atomic.Bool
	// posBuf is the bus payload of a local member's position
	// (republishPositions); room goroutine only.
	posBuf []byte

	// Owned by the room goroutine.
	rec     *roomRecord
	rev     uint64
	members map[string]*memberState // by key token
	local   map[*conn]*attachment
	pending map[*conn]*pendingMember // member attachments waiting for their key
	ic      interestConfig
	knn     *interest.KNN
	placed  map[string]interest.Vec3 // positions of members, by uuid
	nodes   map[string]bool          // other nodes present, by key token
	ticker  *time.Ticker
	tickC   <-chan time.Time
	sub     *nats.Subscription
	watcher jetstream.KeyWatcher
	// resync holds, while a new watch (rewatch) delivers the room's keys
	// again, the keys it has delivered; nil otherwise.
	resync map[string]bool
	// rewatchC fires when a watch that could not start, or ended soon
	// after it started, is to be tried again; rewatched is when the last
	// was started.
	rewatchC  <-chan time.Time
	rewatched time.Time
	// watchStarted delivers the new watch that rewatch starts on a
	// goroutine of its own; nil while none is being started.
	watchStarted chan watchStart
	prefix       string
	self         string // this activation's presence name: node and sequence
	audDirty     bool
	// logGate bounds the lines logged about what members set (logBounded).
	logGate logGate
	// writes is the context of the room's store writes that run off its
	// goroutine (roomWriter), canceled by stopWrites; writing counts them.
	writes     context.Context
	stopWrites context.CancelFunc
	writing    sync.WaitGroup
	// presence writes this activation's presence key again (announceAgain).
	presence *roomWriter
	// claimMu guards claims, the claims of the local members (see
	// heldClaim), and what reclaim writes from: claimFrom, the room's
	// record as last seen, and claimCode, its last join code.
	claimMu   sync.Mutex
	claims    map[string]*heldClaim
	claimFrom *roomRecord
	claimCode string
	// claimWrite is held while reclaim writes, and by releaseClaim.
	claimWrite sync.Mutex
	// joinMu guards joins, the member keys of the Joins under way
	// (watchJoin), by key token.
	joinMu sync.Mutex
	joins  map[string]*joinWatch
	// reclaim puts back the claims that the room's record lost
	// (writeClaims).
	reclaim *roomWriter
	// Room goroutine: the revision of rec, or of its deletion (recGone),
	// and the last join code it had.
	recRev   uint64
	recGone  bool
	lastCode string
	// kNN audience, kept up to date by grant and ungrant so that a
	// snapshot costs a map copy, not a walk over every grant: by holds,
	// for each sender, the local non-observer connections granted it. Its
	// slices are shared with published snapshots and never changed in
	// place. audFull asks for a rebuild from scratch (observer flags or
	// the policy changed).
	by      map[string][]*conn
	obs     []*conn
	audFull bool
	// vis holds the PeerAdded and PeerRemoved messages of grant and
	// ungrant, in order, until publish has published the audience.
	vis []visibility
}

// visibility is a PeerAdded (added: the message) or a PeerRemoved (added
// nil) for connection c about peer id, waiting for publish.
type visibility struct {
	c     *conn
	id    string
	added []byte
}

func newRoom(s *Server, id string) *room {
	r := &room{s: s, id: id, subj: "ubiq.r." + id, ready: make(chan struct{}), cmds: make(chan func(), 256), stopc: make(chan struct{}), gone: make(chan struct{}),
		posNext: map[string]pendingPosition{}, members: map[string]*memberState{}, local: map[*conn]*attachment{},
		pending: map[*conn]*pendingMember{}, placed: map[string]interest.Vec3{}, nodes: map[string]bool{},
		self: s.node + "-" + strconv.FormatUint(s.activations.Add(1), 10), prefix: "r." + id + ".", ic: interestConfig{Mode: "all"}}
	r.aud.Store(&audience{})
	r.writes, r.stopWrites = context.WithCancel(s.ctx)
	r.presence = r.writer(r.writePresence)
	r.claims = map[string]*heldClaim{}
	r.joins = map[string]*joinWatch{}
	r.reclaim = r.writer(r.writeClaims)
	return r
}

// writer returns a roomWriter of the room that does write.
func (r *room) writer(write func(ctx context.Context, w *roomWriter) error) *roomWriter {
	return &roomWriter{ctx: r.writes, wg: &r.writing, log: r.s.log, room: r.id, write: write}
}

// endWrites cancels the room's writes under way and waits for them.
func (r *room) endWrites() {
	r.stopWrites()
	r.writing.Wait()
}

// start subscribes, loads the room's keys and runs the goroutine.
func (r *room) start() {
	defer close(r.ready)
	defer func() {
		if r.err != nil {
			r.endWrites() // the room does not run
		}
	}()
	sub, err := r.s.cfg.NC.Subscribe(r.subj, r.fromBus)
	if err != nil {
		r.err = err
		return
	}
	sub.SetPendingLimits(-1, 256<<20)
	r.sub = sub
	// Announce this node before reading the room, so that every node that
	// sees our members has seen our presence first and publishes to us.
	if _, err := r.s.store.putOwned(r.s.ctx, presenceKey(r.id, r.self), []byte(r.s.node)); err != nil {
		sub.Unsubscribe()
		// The key may have been written all the same (its answer lost),
		// and its index entry was: both go.
		r.leavePresence(r.s.ctx)
		r.err = err
		return
	}
	w, err := r.s.kv.Watch(r.s.ctx, r.prefix+">")
	if err != nil {
		sub.Unsubscribe()
		r.leavePresence(r.s.ctx)
		r.err = err
		return
	}
	r.watcher = w
	for e := range w.Updates() {
		if e == nil {
			break
		}
		r.onEntry(e)
	}
	r.interestKnown() // a room without a record has none
	r.publish()
	go r.loop()
}

// leavePresence deletes this activation's presence key, or has it
// retried: while it is there, the other nodes take the room for active
// here, relay its frames here and do not remove it.
func (r *room) leavePresence(ctx context.Context) {
	st, key := r.s.store, presenceKey(r.id, r.self)
	r.s.retry.try(ctx, "delete presence key", r.id, false, func(ctx context.Context) error { return st.deleteOwned(ctx, key) })
}

func (r *room) loop() {
	defer close(r.gone)
	defer func() {
		r.sub.Unsubscribe()
		r.watcher.Stop()
		// A presence key written again after leavePresence would hold
		// the room here for good.
		r.endWrites()
		if h := r.s.beforeLeave; h != nil {
			h(r.id) // tests: a slow store
		}
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		r.leavePresence(ctx)
		cancel()
		if r.ticker != nil {
			r.ticker.Stop()
		}
		for c := range r.pending {
			r.dropPending(c)
		}
	}()
	updates := r.watcher.Updates()
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				r.logBounded(slog.LevelWarn, "Ubiq room watch ended: watching the room's keys again", "room", r.id)
				updates = r.rewatch()
				continue
			}
			if e == nil {
				r.endResync()
			} else {
				if r.resync != nil {
					r.resync[e.Key()] = true
				}
				r.onEntry(e)
			}
		case <-r.rewatchC:
			r.rewatchC = nil
			updates = r.rewatch()
		case ws := <-r.watchStarted:
			r.watchStarted = nil
			updates = r.watchStartedNow(ws)
		case f := <-r.cmds:
			if f == nil {
				return
			}
			f()
		case now := <-r.tickC:
			r.tick(now)
		}
		r.publish()
	}
}

// rewatch starts a new watch of the room's keys once the last one ended
// (bus trouble: a reconnect, its consumer gone), as the watch of the node
// heartbeats does. The new watch delivers every key of the room again,
// then changes: endResync, at the end of the former, drops the members and
// nodes whose keys went meanwhile and left no delete marker (purged). A
// watch that cannot start is tried again after NodeHeartbeat (rewatchC),
// and so is one whose last start was less than NodeHeartbeat ago; none is
// started while the server shuts down.
//
// The watch is started on a goroutine of its own, which hands it to the
// room's (watchStarted, watchStartedNow): its creation is a request on the
// bus, which waits up to the bus's request timeout while the bus is down,
// and meanwhile the room goes on serving its connections (attaching
// observers, detaching leavers, kNN recomputes). It returns nil: no
// updates until then.
func (r *room) rewatch() <-chan jetstream.KeyValueEntry {
	if r.s.ctx.Err() != nil || r.watchStarted != nil {
		return nil
	}
	if wait := r.s.cfg.NodeHeartbeat - time.Since(r.rewatched); wait > 0 {
		// The last one ended at once: no loop of watches.
		r.rewatchC = time.After(wait)
		return nil
	}
	r.rewatched = time.Now()
	started := make(chan watchStart)
	r.watchStarted = started
	go func() {
		if h := r.s.beforeRewatch; h != nil {
			h(r.id) // tests: changes made while the watch was down, a slow bus
		}
		w, err := r.s.kv.Watch(r.s.ctx, r.prefix+">")
		select {
		case started <- watchStart{w: w, err: err}:
		case <-r.gone: // the room stopped meanwhile
			if err == nil {
				w.Stop()
			}
		}
	}()
	return nil
}

// watchStart is a watch of a room's keys started by rewatch, or why it
// could not be.
type watchStart struct {
	w   jetstream.KeyWatcher
	err error
}

// watchStartedNow takes the watch that rewatch started in place of the
// one that ended, and returns its updates.
func (r *room) watchStartedNow(ws watchStart) <-chan jetstream.KeyValueEntry {
	if ws.err != nil {
		r.logBounded(slog.LevelWarn, "Ubiq room watch could not start again: retrying", "room", r.id, "retry_in", r.s.cfg.NodeHeartbeat, "err", ws.err)
		r.rewatchC = time.After(r.s.cfg.NodeHeartbeat)
		return nil
	}
	r.watcher.Stop()
	r.watcher = ws.w
	r.resync = map[string]bool{}
	return ws.w.Updates()
}

// endResync ends the delivery of the room's keys by a new watch
// (rewatch): the members and other nodes it did not deliver have gone
// while no watch ran.
func (r *room) endResync() {
	seen := r.resync
	if seen == nil {
		return
	}
	r.resync = nil
	for tok, m := range r.members {
		if !seen[r.prefix+"m."+tok] {
			r.removeMember(tok, m)
			r.membershipLost(m.rec.UUID)
		}
	}
	for tok := range r.nodes {
		if !seen[r.prefix+"n."+tok] {
			delete(r.nodes, tok)
		}
	}
	r.others.Store(int32(len(r.nodes)))
	if !seen[r.prefix+"n."+r.self] {
		r.announceAgain()
	}
}

// announceAgain has this activation's presence key written again
// (writePresence), which another node deleted while the room is active
// here: it took this node for dead (cut off from the bus for longer than
// NodeTimeout) and swept its keys. Without the key, the other nodes relay
// none of the room's frames or positions here, and may remove the room
// while local members or observers are in it. (Local members whose keys
// went too are disconnected, membershipLost, and join again; the claims
// of those whose keys stayed are put back, checkClaims.) The write runs off
// the room goroutine (roomWriter), again until it lands: meanwhile the
// room goes on serving its connections.
func (r *room) announceAgain() {
	r.logBounded(slog.LevelWarn, "Ubiq room presence key deleted by another node (it took this node for dead): writing it again", "room", r.id, "activation", r.self)
	r.presence.kick()
}

// writePresence writes this activation's presence key (announceAgain).
// (putOwned checks the key's index entry after the write: a sweep that
// ran meanwhile may have deleted it.)
func (r *room) writePresence(ctx context.Context, w *roomWriter) error {
	key := presenceKey(r.id, r.self)
	if _, err := r.s.store.putOwned(ctx, key, []byte(r.s.node)); err != nil {
		return fmt.Errorf("write presence key %s again (meanwhile the other nodes relay nothing of the room here): %w", key, err)
	}
	return nil
}

// publish publishes the audience if it changed, then sends the PeerAdded
// and PeerRemoved messages held back by grant and ungrant: a peer told
// that another was added receives every frame the other sends after
// that, and one told that another was removed no frame it sends after.
func (r *room) publish() {
	if r.audDirty {
		r.rebuild()
	}
	for i, v := range r.vis {
		if v.added != nil {
			v.c.see(v.id, v.added)
		} else {
			v.c.unsee(v.id)
		}
		r.vis[i] = visibility{}
	}
	r.vis = r.vis[:0]
}

// logBounded logs a line about what a member set, within the room's log
// budget (as peerInfo does for a peer's requests): a member may change a
// property with every request, and every node with the room active logs.
// Room goroutine only.
func (r *room) logBounded(level slog.Level, msg string, args ...any) {
	r.logGate.log(r.s.log, level, msg, args...)
}

// do runs f on the room goroutine and waits for it and for its messages.
func (r *room) do(f func()) {
	done := make(chan struct{})
	r.cmds <- func() { f(); r.publish(); close(done) }
	<-done
}

// stop ends the goroutine after the commands queued before.
func (r *room) stop() { r.cmds <- nil }

func (r *room) onEntry(e jetstream.KeyValueEntry) {
	r.rev = e.Revision()
	key := e.Key()
	if !strings.HasPrefix(key, r.prefix) {
		return
	}
	rest := key[len(r.prefix):]
	deleted := e.Operation() != jetstream.KeyValuePut
	switch {
	case rest == "i":
		if deleted {
			// Members keep the room they have; a new joiner recreates it,
			// and so do the members here (checkClaims).
			r.recRev, r.recGone = e.Revision(), true
			r.checkClaims()
			return
		}
		var rec roomRecord
		if json.Unmarshal(e.Value(), &rec) != nil {
			return
		}
		old := r.rec
		r.rec, r.recRev, r.recGone = &rec, e.Revision(), false
		if rec.JoinCode != "" {
			r.lastCode = rec.JoinCode
		}
		r.checkClaims()
		// Switch policy before telling anyone, so that a member reacting to
		// the change (say, by sending its position) finds it in force.
		v, _ := rec.Props.get(InterestKey)
		ic, err := parseInterest(v)
		if err != nil && (old == nil || !old.Props.has(InterestKey, v)) {
			r.logBounded(slog.LevelWarn, "Ubiq room interest ignored: every member receives every message", "room", r.id, "err", err)
		}
		if ic != r.ic {
			r.setInterest(ic)
		}
		r.interestKnown()
		if old != nil {
			if ck, cv := rec.Props.diff(old.Props); len(ck) > 0 {
				msg := EncodeRequest("RoomPropertiesAppended", PropertiesArgs{Keys: ck, Values: cv})
				for c, a := range r.local {
					if a.member {
						c.sendServer(msg)
					}
				}
			}
		}
	case strings.HasPrefix(rest, "n."):
		if tok := rest[2:]; tok == r.self {
			if deleted {
				r.announceAgain()
			}
		} else {
			fresh := false
			if deleted {
				delete(r.nodes, tok)
			} else if !r.nodes[tok] {
				r.nodes[tok], fresh = true, true
			}
			r.others.Store(int32(len(r.nodes)))
			if fresh {
				r.republishPositions()
			}
		}
	case strings.HasPrefix(rest, "m."):
		tok := rest[2:]
		if deleted {
			if m := r.members[tok]; m != nil {
				r.removeMember(tok, m)
				r.membershipLost(m.rec.UUID)
			}
			r.joinKeyGone(tok, e.Revision())
			break
		}
		var rec memberRecord
		if json.Unmarshal(e.Value(), &rec) != nil {
			return
		}
		if m := r.members[tok]; m != nil {
			if m.rev == e.Revision() {
				break // delivered again by a new watch (rewatch)
			}
			old := m.rec
			m.rec, m.rev, m.added = rec, e.Revision(), nil
			if v, _ := rec.Props.get(CoalesceKey); v != old.Props.value(CoalesceKey) {
				r.setStateObjects(rec.UUID, &m.rec.Props)
			}
			if ck, cv := rec.Props.diff(old.Props); len(ck) > 0 {
				msg := EncodeRequest("PeerPropertiesAppended", PeerPropertiesArgs{UUID: rec.UUID, Keys: ck, Values: cv})
				for c, a := range r.local {
					if a.granted[rec.UUID] {
						c.sendServer(msg)
					}
				}
			}
		} else {
			r.addMember(tok, &memberState{rec: rec, rev: e.Revision()})
		}
	}
	r.attachPending()
}

func (r *room) addMember(tok string, m *memberState) {
	r.members[tok] = m
	id := m.rec.UUID
	r.setStateObjects(id, &m.rec.Props)
	if v, ok := m.rec.Props.get(PositionKey); ok {
		if p, ok := parsePosition(v); ok {
			r.placed[id] = p
			if r.knn != nil {
				r.knn.Set(id, p)
			}
		}
	}
	r.posMu.Lock()
	if pp, ok := r.posNext[id]; ok {
		delete(r.posNext, id)
		p := pp.p
		r.placed[id] = p
		if r.knn != nil {
			r.knn.Set(id, p)
		}
	}
	r.posMu.Unlock()
	if _, ok := r.placed[id]; !ok && r.knn != nil {
		r.knn.Add(id) // ranks after the positioned peers until it has a position
	}
	// A local connection waiting for this record joins the audience before
	// the others hear of it, so that their answers to PeerAdded reach it.
	r.attachPending()
	for c, a := range r.local {
		if r.wants(c, a, id) {
			r.grant(c, a, id)
		}
	}
}

func (r *room) removeMember(tok string, m *memberState) {
	delete(r.members, tok)
	id := m.rec.UUID
	// A position that came after the last recompute goes with the member
	// (a local peer's always comes before its key's deletion).
	r.posMu.Lock()
	delete(r.posNext, id)
	r.posMu.Unlock()
	r.setStateObjects(id, nil)
	delete(r.placed, id)
	if r.knn != nil {
		r.knn.Remove(id)
	}
	for c, a := range r.local {
		if a.granted[id] {
			r.ungrant(c, a, id)
		}
	}
}

// membershipLost disconnects the local connections that are members as
// peer id, whose member key was deleted while they stayed (the room is
// still theirs, and they are not closing, as they are when they leave):
// another node took this one for dead and swept its keys, or another
// connection of the same uuid left. The others have been told that the
// peer was removed; the peer reconnects and joins again.
func (r *room) membershipLost(id string) {
	for c, a := range r.local {
		if a.member && a.as == id && c.relayRoom.Load() == r && !c.closing() {
			r.s.log.Warn("Ubiq peer disconnected: its member key was removed while it stayed in the room (another node took this one for dead, or another connection of its uuid left)",
				"peer", id, "room", r.id)
			c.close("its member key in room " + r.id + " was removed")
		}
	}
}

// wants reports whether the connection should know about member id: not
// about itself, under its uuid now or the one it was a member here as. With
// kNN, a member without a position yet (at the last recompute) has no set
// and knows everyone, as an observer does.
func (r *room) wants(c *conn, a *attachment, id string) bool {
	if id == a.as || id == c.uuid() {
		return false
	}
	if a.observer || r.knn == nil {
		return a.member || a.observer
	}
	return a.member && (r.knn.Interested(a.as, id) || !r.knn.Positioned(a.as))
}

func (r *room) grant(c *conn, a *attachment, id string) {
	m := r.members[keyToken(id)]
	if m == nil || a.granted[id] {
		return
	}
	a.granted[id] = true
	if m.added == nil {
		m.added = encodePeerAdded(m.rec.info())
	}
	r.vis = append(r.vis, visibility{c, m.rec.UUID, m.added})
	if r.knn != nil {
		r.audDirty = true
		if !a.observer && r.by != nil {
			old := r.by[id]
			r.by[id] = append(old[:len(old):len(old)], c) // a new slice
		}
	}
}

func (r *room) ungrant(c *conn, a *attachment, id string) {
	if !a.granted[id] {
		return
	}
	delete(a.granted, id)
	r.vis = append(r.vis, visibility{c: c, id: id})
	if r.knn != nil {
		r.audDirty = true
		if !a.observer && r.by != nil {
			r.by[id] = without(r.by[id], c)
			if len(r.by[id]) == 0 {
				delete(r.by, id)
			}
		}
	}
}

// reconcile makes a connection's grants match what it should know:
// additions first, so that a peer known before and after never disappears.
func (r *room) reconcile(c *conn, a *attachment) {
	for _, m := range r.members {
		if r.wants(c, a, m.rec.UUID) {
			r.grant(c, a, m.rec.UUID)
		}
	}
	for id := range a.granted {
		if !r.wants(c, a, id) {
			r.ungrant(c, a, id)
		}
	}
	if !a.member && !a.observer {
		delete(r.local, c)
	}
	r.audDirty = true
}

func (r *room) attachment(c *conn) *attachment {
	a := r.local[c]
	if a == nil {
		a = &attachment{granted: map[string]bool{}}
		r.local[c] = a
	}
	return a
}

func (r *room) attachMember(c *conn, as, claim string) {
	r.claimAttached(claim)
	a := r.attachment(c)
	a.member, a.as = true, as
	info := RoomInfo{UUID: r.id, Keys: []string{}, Values: []string{}}
	if r.rec != nil {
		info = r.rec.info()
	}
	// c joins the audience before it learns (SetRoom) that it is in the
	// room, so that every frame relayed after its SetRoom reaches it. A
	// frame relayed in between reaches it just before SetRoom, which a Ubiq
	// client treats like any message for an object it does not know yet.
	if r.knn == nil {
		r.rebuild()
	}
	c.sendServer(encodeSetRoom(info))
	r.reconcile(c, a)
	r.rebuild() // with kNN, the audience follows c's grants
}

func (r *room) cmdDetachMember(c *conn) {
	r.cmds <- func() {
		r.dropPending(c)
		if a := r.local[c]; a != nil {
			a.member = false
			r.reconcile(c, a)
		}
	}
}

// attachObserver and detachObserver wait until done, so that a
// SetObserved adds every new room before it removes any old one.
func (r *room) attachObserver(c *conn) {
	r.do(func() {
		a := r.attachment(c)
		a.observer = true
		r.audFull = true
		r.reconcile(c, a)
	})
}

func (r *room) detachObserver(c *conn) {
	r.do(func() {
		if a := r.local[c]; a != nil {
			a.observer = false
			r.audFull = true
			r.reconcile(c, a)
		}
	})
}

// setInterest switches the room's interest policy.
func (r *room) setInterest(ic interestConfig) {
	r.ic = ic
	if r.ticker != nil {
		r.ticker.Stop()
		r.ticker, r.tickC = nil, nil
	}
	r.knn = nil
	r.knnOn.Store(ic.Mode == "knn")
	if ic.Mode != "knn" {
		r.posMu.Lock()
		clear(r.posNext) // no recompute takes them now
		r.posMu.Unlock()
	}
	if ic.Mode == "knn" {
		r.knn = interest.NewKNN(interest.KNNConfig{K: ic.K, Hysteresis: time.Duration(ic.HysteresisMS * float64(time.Millisecond))})
		for _, m := range r.members {
			if p, ok := r.placed[m.rec.UUID]; ok {
				r.knn.Set(m.rec.UUID, p)
			} else {
				r.knn.Add(m.rec.UUID)
			}
		}
		r.knn.Recompute(time.Now())
		r.ticker = time.NewTicker(time.Duration(float64(time.Second) / ic.Rate))
		r.tickC = r.ticker.C
	}
	r.audFull = true
	for c, a := range r.local {
		r.reconcile(c, a)
	}
	r.audDirty = true
}

// pendingPosition is a position that waits for the next recompute, and
// when it came (Unix nanoseconds).
type pendingPosition struct {
	p  interest.Vec3
	at int64
}

const (
	// maxPendingPositions bounds the positions waiting for a recompute: a
	// room takes no new peer's position past it, but still its waiting
	// peers' newer ones.
	maxPendingPositions = 1 << 16
	// pendingPositionTTL is how long a position may wait for its peer's
	// member record (which normally comes within a key-value round trip).
	// One from a peer that is not a member is dropped after it: its record
	// was deleted before the position came over the bus, or never came.
	pendingPositionTTL = 2 * requestTimeout
)

// position records a position from a remote peer; the goroutine applies
// it at its next recompute.
func (r *room) position(id string, p interest.Vec3) {
	if !r.knnOn.Load() && r.icKnown.Load() {
		return
	}
	r.posMu.Lock()
	r.positionLocked(id, p)
	r.posMu.Unlock()
}

// positionLocked records a position, under posMu. Until the room has read
// its interest setting (interestKnown), it keeps positions whatever the
// setting: the other nodes send theirs as this one takes the room up
// (republishPositions), and once only.
func (r *room) positionLocked(id string, p interest.Vec3) {
	if !r.knnOn.Load() && r.icKnown.Load() {
		return
	}
	if _, ok := r.posNext[id]; ok || len(r.posNext) < maxPendingPositions {
		r.posNext[id] = pendingPosition{p: p, at: time.Now().UnixNano()}
	}
}

// localPosition records the position of local member id and, if another
// node has the room active, publishes it (buf: the caller's buffer for
// the payload, returned). Under posMu, so that a node that takes the room
// up is sent each local member's latest position last: either here, or
// by republishPositions.
func (r *room) localPosition(id string, p interest.Vec3, buf []byte) []byte {
	r.posMu.Lock()
	defer r.posMu.Unlock()
	r.positionLocked(id, p)
	if r.others.Load() == 0 {
		return buf
	}
	buf = appendPosition(appendBus(buf[:0], busPosition, id), p)
	if err := r.s.cfg.NC.Publish(r.subj, buf); err != nil {
		r.s.busFailed("position", r.id, id, err)
	}
	return buf
}

// interestKnown marks the room's interest setting as read (its record, or
// the first read of its keys, without one): from now on, a room that does
// not use kNN interest takes no positions, and drops those it kept.
func (r *room) interestKnown() {
	if r.icKnown.Load() {
		return
	}
	r.posMu.Lock()
	r.icKnown.Store(true)
	if !r.knnOn.Load() {
		clear(r.posNext)
	}
	r.posMu.Unlock()
}

// republishPositions publishes the latest positions of the room's local
// members once another node has taken the room up: positions go on the
// bus only while another node has the room active, so that node has not
// heard those of the members that have not moved since, and would rank
// them last. (It keeps them even before it has read the room's interest
// setting: position.)
func (r *room) republishPositions() {
	if r.knn == nil {
		return
	}
	r.posMu.Lock()
	defer r.posMu.Unlock()
	for c, a := range r.local {
		if !a.member || c.relayRoom.Load() != r {
			continue
		}
		id := a.as
		p, ok := r.placed[id]
		if pp, next := r.posNext[id]; next {
			p, ok = pp.p, true
		}
		if !ok {
			continue
		}
		r.posBuf = appendPosition(appendBus(r.posBuf[:0], busPosition, id), p)
		if err := r.s.cfg.NC.Publish(r.subj, r.posBuf); err != nil {
			r.s.busFailed("position", r.id, id, err)
		}
	}
}

func (r *room) tick(now time.Time) {
	if r.knn == nil {
		return
	}
	stale := now.Add(-pendingPositionTTL).UnixNano()
	r.posMu.Lock()
	for id, pp := range r.posNext {
		if r.members[keyToken(id)] != nil {
			r.placed[id] = pp.p
			r.knn.Set(id, pp.p)
			delete(r.posNext, id)
		} else if pp.at < stale {
			delete(r.posNext, id) // from a peer whose member record never came, or is gone
		}
	}
	r.posMu.Unlock()
	changes := r.knn.Recompute(now)
	if len(changes) == 0 {
		return
	}
	byID := make(map[string]*conn, len(r.local))
	for c, a := range r.local {
		if a.member {
			byID[a.as] = c
		}
	}
	for _, ch := range changes {
		c := byID[ch.Observer]
		if c == nil {
			continue
		}
		a := r.local[c]
		if a.observer {
			continue // observers know everyone
		}
		if ch.First {
			// c has a position now: from knowing everyone to its set.
			r.reconcile(c, a)
			continue
		}
		for _, id := range ch.Entered {
			r.grant(c, a, id)
		}
		for _, id := range ch.Left {
			r.ungrant(c, a, id)
		}
	}
}

// rebuild publishes a new audience snapshot.
func (r *room) rebuild() {
	r.audDirty = false
	a := &audience{knn: r.knn != nil}
	if !a.knn {
		for c := range r.local {
			a.all = append(a.all, c)
		}
		r.aud.Store(a)
		return
	}
	if r.audFull || r.by == nil {
		r.audFull = false
		r.by, r.obs = make(map[string][]*conn, len(r.members)), nil
		for c, at := range r.local {
			if at.observer {
				r.obs = append(r.obs, c)
				continue
			}
			for id := range at.granted {
				r.by[id] = append(r.by[id], c)
			}
		}
		// Capacity = length, so that grant's append makes a new slice.
		for id, l := range r.by {
			r.by[id] = l[:len(l):len(l)]
		}
	}
	a.obs, a.bySender = r.obs, maps.Clone(r.by)
	r.aud.Store(a)
}

// without returns a new slice of l without c.
func without(l []*conn, c *conn) []*conn {
	out := make([]*conn, 0, len(l))
	for _, x := range l {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}

// dispatch delivers a frame from sender (from, if local) to this node's
// audience and returns the number of connections it was queued for.
func (r *room) dispatch(sender string, from *conn, frame []byte) int {
	a := r.aud.Load()
	// Only frames to an object that the sender declared as state carry a
	// key, and may replace or be replaced by a newer one in a full queue;
	// any other frame may be an event (see CoalesceKey and relayed).
	f := newRelayed(frame, r.frameKey(sender, frame))
	n := 0
	if !a.knn {
		for _, c := range a.all {
			if c != from && c.deliver(&f) {
				n++
			}
		}
		return n
	}
	for _, c := range a.obs {
		if c != from && c.deliver(&f) {
			n++
		}
	}
	for _, c := range a.bySender[sender] {
		if c.deliver(&f) {
			n++
		}
	}
	return n
}

func (r *room) fromBus(m *nats.Msg) {
	kind, sender, body, ok := parseBus(m.Data)
	if !ok {
		return
	}
	switch kind {
	case busFrame:
		r.s.delivered(r.dispatch(sender, nil, body))
	case busPosition:
		if p, ok := decodePosition(body); ok {
			r.position(sender, p)
		}
	}
}

// parseBus splits a bus payload (appendBus) into its kind, sender and
// body. A frame's body must hold a whole frame: its length field is the
// rest of the body, within the largest frame of any node (a frame that
// is cut short or padded would put a receiver's stream out of step).
func parseBus(d []byte) (kind byte, sender string, body []byte, ok bool) {
	if len(d) < 2 || len(d) < 2+int(d[1]) {
		return 0, "", nil, false
	}
	sender, body = string(d[2:2+int(d[1])]), d[2+int(d[1]):]
	switch d[0] {
	case busFrame:
		if len(body) < HeaderSize {
			return 0, "", nil, false
		}
		if n := int32(binary.LittleEndian.Uint32(body)); n < MinLength || int64(n)+4 != int64(len(body)) {
			return 0, "", nil, false
		}
	case busPosition:
		if len(body) != 24 {
			return 0, "", nil, false
		}
	default:
		return 0, "", nil, false
	}
	return d[0], sender, body, true
}

// decodePosition reads a position from a bus body (appendPosition). Only
// a finite one is a position: the kNN index takes no NaN or infinity,
// which the peers' own positions never are (parsePosition).
func decodePosition(b []byte) (interest.Vec3, bool) {
	if len(b) != 24 {
		return interest.Vec3{}, false
	}
	p := interest.Vec3{
		X: math.Float64frombits(binary.LittleEndian.Uint64(b)),
		Y: math.Float64frombits(binary.LittleEndian.Uint64(b[8:])),
		Z: math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
	}
	for _, v := range [3]float64{p.X, p.Y, p.Z} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return interest.Vec3{}, false
		}
	}
	return p, true
}

// appendBus appends a bus payload header for sender, whose length is at
// most MaxPeerUUIDLen, as a peer's uuid (a longer one is cut, and no
// member of another node would match it).
func appendBus(b []byte, kind byte, sender string) []byte {
	if len(sender) > MaxPeerUUIDLen {
		sender = sender[:MaxPeerUUIDLen]
	}
	b = append(b, kind, byte(len(sender)))
	return append(b, sender...)
}

func appendPosition(b []byte, p interest.Vec3) []byte {
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.X))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Y))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Z))
}

// parsePosition reads "x,y,z", "x y z" or "[x,y,z]".
func parsePosition(s string) (interest.Vec3, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimSuffix(s, "]"), "[")
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	if len(f) != 3 {
		return interest.Vec3{}, false
	}
	var v [3]float64
	for i, x := range f {
		var err error
		if v[i], err = strconv.ParseFloat(x, 64); err != nil || math.IsNaN(v[i]) || math.IsInf(v[i], 0) {
			return interest.Vec3{}, false
		}
	}
	return interest.Vec3{X: v[0], Y: v[1], Z: v[2]}, true
}
