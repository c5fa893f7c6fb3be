package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Manager is the session manager: it tracks the live nodes from their
// heartbeats and assigns each joining client a node, preferring the
// client's site and then the least loaded node; a full node
// (NodeInfo.MaxClients) only when no other has room. A client that joins
// again keeps its node while that node is alive and has room for it: its
// own old connection is not counted twice, and counts again once the node
// no longer counts it (rejoinCount). A node that announces it is
// leaving (NodeInfo.Leaving) is dropped at once; one that does not answer
// when it is chosen (it vanished without announcing it) is dropped until its
// next heartbeat and the client is placed on another node. A join may
// exclude nodes (JoinRequest.Exclude), which no longer count the client
// as placed there; those that refused it as full (JoinRequest.Full) count
// as full until their next heartbeat. It places at most maxPlacing joins
// at once and answers further ones busy.
type Manager struct {
	nc     *nats.Conn
	log    *slog.Logger
	hb     *nats.Subscription // subjectNodes
	join   *nats.Subscription // subjectJoin
	ctx    context.Context    // ends at Close: joins are answered "shutting down"
	cancel context.CancelFunc
	wg     sync.WaitGroup // joins being placed
	// probeWait is how long a ping waits for its node (probeTimeout;
	// tests that hold pings lengthen it).
	probeWait atomic.Int64

	mu       sync.Mutex
	nodes    map[string]*nodeState
	assigned map[string]assignedTo // by "session/client"
	prunedAt time.Time             // when pruneAssigned last ran
	placing  int                   // joins being placed
	busy     bool                  // answering busy: placing reached maxPlacing and has not yet fallen below busyLowWater
	refused  int                   // joins answered busy while busy
}

// assignedTo is the node a client was last given, and when.
type assignedTo struct {
	node string
	at   time.Time
}

// assignedTTL is how long the manager remembers a client's node, so that
// the client gets it again when it joins again (a reload, a connection
// that failed); pruneEvery is how often it forgets older ones and those
// of nodes it no longer knows: a browser in a public scene may make up
// any number of client ids, and the map stays bounded by the joins of
// the last assignedTTL.
const (
	assignedTTL = 10 * time.Minute
	pruneEvery  = 10 * time.Second
)

// pruneAssigned forgets, at most every pruneEvery, the assignments older
// than assignedTTL and those to nodes that are gone; m.mu must be held.
func (m *Manager) pruneAssigned(now time.Time) {
	if now.Sub(m.prunedAt) < pruneEvery {
		return
	}
	m.prunedAt = now
	for key, a := range m.assigned {
		if _, live := m.nodes[a.node]; !live || now.Sub(a.at) >= assignedTTL {
			delete(m.assigned, key)
		}
	}
}

type nodeState struct {
	info NodeInfo
	seen time.Time
	// placed holds the clients ("session/client") placed on the node that
	// its heartbeats do not count yet, each with the number of the node's
	// last heartbeat before it knew of the placement (Reply.Beat;
	// awaitingPing until the ping answers): the heartbeats after that one
	// count the client (expect.go).
	placed map[string]uint64
	// refused says that a join since the node's last heartbeat was
	// refused there as full (JoinRequest.Full): the manager's count was
	// too low (other managers placed clients there too), and the node is
	// full until its next heartbeat counts its clients.
	refused bool
}

// awaitingPing is a placement's heartbeat number in nodeState.placed
// until its ping answers (settle): no heartbeat is known to count the
// client before the node has the ping, however slow the ping is. A
// failed ping removes it (unplace).
const awaitingPing = math.MaxUint64

func newNodeState(info NodeInfo, seen time.Time) *nodeState {
	return &nodeState{info: info, seen: seen, placed: map[string]uint64{}}
}

// heartbeat takes info, a heartbeat of the node's instance, at now: the
// placements it counts are no longer counted here; those awaiting their
// ping are kept. Those of a node that does not number its heartbeats
// (NodeInfo.Beat 0, an older node) are taken as counted by its next
// heartbeat.
func (ns *nodeState) heartbeat(info NodeInfo, now time.Time) {
	ns.info, ns.seen, ns.refused = info, now, false
	for key, beat := range ns.placed {
		if info.Beat == 0 || beat < info.Beat {
			delete(ns.placed, key)
		}
	}
}

// load is the node's clients: those of its heartbeat and those placed
// there that it does not count.
func (ns *nodeState) load() int { return ns.info.Clients + len(ns.placed) }

// full reports whether the node has as many clients as it takes
// (NodeInfo.MaxClients), counting those placed there that its heartbeat
// does not count, or refused a client as full since that heartbeat. Such
// a node would refuse the client (Reply.Full), which
// would then ask again, excluding it: assign places clients on it only
// when no other node has room.
func (ns *nodeState) full() bool { return ns.fullBut(0) }

// fullBut is full with own of the clients counted left out: a client
// placed on the node before, joining again (a tab reloading), may still
// be counted in the heartbeat's Clients, which lags its leave by up to a
// heartbeat; it is not one more client (a tab reloading on a node at
// MaxClients stays there). A node that refused a client as full since
// its heartbeat is full whatever own is.
func (ns *nodeState) fullBut(own int) bool {
	return ns.refused || ns.info.MaxClients > 0 && ns.load()-own >= ns.info.MaxClients
}

// nodeTTL is how long a node counts as alive after a heartbeat.
const nodeTTL = 5 * time.Second

// Placement checks that the chosen node answers (Signal op "ping") before
// it assigns it, waiting at most probeTimeout, and tries at most
// placeAttempts nodes: 3 × 2 s stays within RequestJoin's default 10 s.
const (
	probeTimeout  = 2 * time.Second
	placeAttempts = 3
)

// maxPlacing bounds the joins being placed at once, each on its own
// goroutine for up to placeAttempts × probeTimeout; a join beyond it is
// answered busy at once (ErrBusy). Placing takes a bus round trip when the
// nodes answer, so only nodes that do not answer fill it.
const maxPlacing = 256

// busyLowWater: once busy, the manager logs that it no longer is when
// placing falls below it, not at each placement that ends (which under
// sustained overload would log a pair of lines per join).
const busyLowWater = maxPlacing * 3 / 4

// drainTimeout bounds how long Close waits for the joins queued on the
// manager's subscription to be answered.
const drainTimeout = 2 * time.Second

// errShuttingDown answers the joins that Close ends or finds queued, with
// Busy set: another manager (every serve node runs one, in the queue group
// sfu-manager) can place them.
var errShuttingDown = errors.New("sfu manager: shutting down")

// ErrBusy is what RequestJoin's error wraps when the manager answered busy
// (Assignment.Busy): it is placing as many joins as it takes at once, or it
// is shutting down. Ask again shortly (Dial and the WebSocket handler do).
var ErrBusy = errors.New("sfu manager busy")

// StartManager starts a session manager on nc.
func StartManager(nc *nats.Conn, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{nc: nc, log: log, nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.probeWait.Store(int64(probeTimeout))
	hb, err := nc.Subscribe(subjectNodes, m.handleHeartbeat)
	if err != nil {
		m.cancel()
		return nil, fmt.Errorf("sfu manager: subscribe %s: %w", subjectNodes, err)
	}
	join, err := nc.QueueSubscribe(subjectJoin, "sfu-manager", m.handleJoin)
	if err != nil {
		m.cancel()
		_ = hb.Unsubscribe()
		return nil, fmt.Errorf("sfu manager: subscribe %s: %w", subjectJoin, err)
	}
	m.hb, m.join = hb, join
	return m, nil
}

// Close stops the manager. Joins being placed and those already queued on
// its subscription are answered busy ("shutting down"), so that their
// callers do not wait for their timeout and ask again, which another
// manager may answer; later joins find no manager (no responders) or
// another one. It returns when every join taken has its answer.
func (m *Manager) Close() {
	m.cancel()
	_ = m.hb.Unsubscribe()
	m.drain()
	m.mu.Lock() // a join that begin counted before the cancel is in wg
	m.mu.Unlock()
	m.wg.Wait()
}

// drain ends the join subscription after the joins queued on it, which
// handleJoin answers "shutting down" once the context has ended, and
// waits for it, at most drainTimeout.
func (m *Manager) drain() {
	closed := m.join.StatusChanged(nats.SubscriptionClosed)
	if err := m.join.Drain(); err != nil {
		return // already closed (a second Close), or the connection is
	}
	select {
	case <-closed:
	case <-time.After(drainTimeout):
		pending, _, _ := m.join.Pending()
		m.log.Warn("sfu manager: joins still queued when closing; their callers wait for their timeout",
			"subject", subjectJoin, "queued", pending, "waited", drainTimeout)
	}
}

func (m *Manager) handleHeartbeat(msg *nats.Msg) {
	info, ok := parseNodeInfo(msg.Data)
	if !ok {
		return
	}
	m.mu.Lock()
	old, known := m.nodes[info.ID]
	var current string // the known node's instance
	if known {
		current = old.info.Instance
	}
	// A leave from another instance than the one whose heartbeats the
	// manager has is not the known node's: ignored (liveness.go).
	stale := staleLeave(info, known, current)
	switch {
	case stale:
	case info.Leaving:
		delete(m.nodes, info.ID)
	case known && info.Instance == current:
		old.heartbeat(info, time.Now())
	default:
		m.nodes[info.ID] = newNodeState(info, time.Now())
	}
	m.mu.Unlock()
	switch {
	case stale:
		m.log.Warn("sfu node: ignored a leave announcement from another instance than the node's (a second process with its ID, or its previous run)",
			"node", info.ID, "site", info.Site, "instance", info.Instance, "current_instance", current, "current_site", old.info.Site)
	case info.Leaving && known:
		m.log.Info("sfu node left; no longer assigned", "node", info.ID, "site", info.Site, "instance", info.Instance)
	case !info.Leaving && !known:
		m.log.Info("sfu node joined", "node", info.ID, "site", info.Site, "instance", info.Instance)
	case !info.Leaving && info.Instance != current:
		m.log.Warn("sfu node: heartbeat from another instance with this node's ID (it restarted, or two processes use the ID)",
			"node", info.ID, "site", info.Site, "instance", info.Instance, "previous_instance", current, "previous_site", old.info.Site)
	}
}

func (m *Manager) handleJoin(msg *nats.Msg) {
	var req JoinRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		respondAssignment(msg, Assignment{Error: "bad join request: " + err.Error()})
		return
	}
	if err := validName("session", req.Session); err != nil {
		respondAssignment(msg, Assignment{Error: err.Error()})
		return
	}
	if err := validName("client", req.Client); err != nil {
		respondAssignment(msg, Assignment{Error: err.Error()})
		return
	}
	if err := m.begin(); err != nil {
		respondAssignment(msg, Assignment{Error: err.Error(), Busy: true}) // ErrBusy or errShuttingDown
		return
	}
	// Placing waits for the chosen node's answer: not on the subscription's
	// goroutine, which would hold up every other join.
	go func() {
		defer m.end()
		respondAssignment(msg, m.place(m.ctx, req))
	}()
}

// begin counts a join to be placed; it fails when the manager is closing
// (errShuttingDown) or already placing maxPlacing joins (ErrBusy). The
// first refusal of a busy spell is logged.
func (m *Manager) begin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return errShuttingDown
	}
	if m.placing >= maxPlacing {
		m.refused++
		if !m.busy {
			m.busy = true
			m.log.Warn("sfu manager busy: joins answered busy until placements end", "placing", m.placing, "low_water", busyLowWater)
		}
		return fmt.Errorf("%w: %d joins being placed; try again shortly", ErrBusy, m.placing)
	}
	m.placing++
	m.wg.Add(1)
	return nil
}

// end is called when a join that begin counted has its answer. A busy
// spell ends, and is logged with the joins it refused, when placing falls
// below busyLowWater.
func (m *Manager) end() {
	m.mu.Lock()
	m.placing--
	refused, placing := 0, m.placing
	if m.busy && m.placing < busyLowWater {
		m.busy = false
		refused, m.refused = m.refused, 0
	}
	m.mu.Unlock()
	if refused > 0 {
		m.log.Info("sfu manager no longer busy", "refused", refused, "placing", placing)
	}
	m.wg.Done()
}

func respondAssignment(msg *nats.Msg, a Assignment) {
	b, _ := json.Marshal(a)
	_ = msg.Respond(b)
}

// place assigns a node to a client (assign) and checks that the node
// answers on its signal subject. A node that does not (no responders: it
// vanished without announcing that it left; or no answer within
// probeTimeout) is dropped until its next heartbeat and the next best node
// is tried, placeAttempts nodes at most. A client that joins again is
// kept on its node once the node has said whether it still counts the
// client (rejoinCount). When ctx ends (Close) the join is answered busy,
// "shutting down".
func (m *Manager) place(ctx context.Context, req JoinRequest) Assignment {
	var unreachable []string
	var heard *rejoinAnswer
	for len(unreachable) < placeAttempts {
		a, ask := m.assign(req, time.Now(), heard)
		if a.Error != "" {
			if len(unreachable) > 0 {
				a.Error += fmt.Sprintf(" (nodes %v did not answer)", unreachable)
			}
			return a
		}
		rep, err := m.probe(ctx, req, a, !ask)
		if err != nil {
			m.unplace(a.Node, req.Session+"/"+req.Client)
		}
		if ctx.Err() != nil {
			return Assignment{Error: errShuttingDown.Error(), Busy: true}
		}
		if err == nil && ask {
			// assign, told, does not ask again
			heard = &rejoinAnswer{node: a.Node, instance: rep.Instance, beat: rep.Beat, counted: rep.Counted}
			continue
		}
		if err == nil {
			m.settle(a.Node, req.Session+"/"+req.Client, rep)
			if len(unreachable) > 0 {
				m.log.Info("sfu client placed on another node", "session", req.Session, "client", req.Client, "node", a.Node, "unreachable", unreachable)
			}
			return a
		}
		if !nodeGone(err) {
			return Assignment{Error: err.Error()}
		}
		m.log.Info("sfu node did not answer; dropped until its next heartbeat", "node", a.Node, "site", a.Site,
			"session", req.Session, "client", req.Client, "err", err)
		m.drop(a.Node)
		unreachable = append(unreachable, a.Node)
	}
	return Assignment{Error: fmt.Sprintf("%v: nodes %v did not answer", errNoNode, unreachable)}
}

// probe asks the assigned node whether it answers, with place telling it
// that the client is placed there (Signal.Place), and returns its reply.
func (m *Manager) probe(ctx context.Context, req JoinRequest, a Assignment, place bool) (Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.probeWait.Load()))
	defer cancel()
	b, _ := json.Marshal(Signal{Op: "ping", Session: req.Session, Client: req.Client, Place: place})
	msg, err := m.nc.RequestWithContext(ctx, a.Signal, b)
	if err != nil {
		return Reply{}, fmt.Errorf("sfu manager: ping node %s on %s: %w", a.Node, a.Signal, err)
	}
	var r Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.Op != "ok" {
		return Reply{}, fmt.Errorf("sfu manager: ping node %s on %s: %w: %s", a.Node, a.Signal, errNodeRefused, r.Error)
	}
	return r, nil
}

// settle takes rep, the answer of node to the ping of client key's
// placement: the node's heartbeats after rep.Beat count the client, and
// the manager counts it itself until it has one of them, unless
// heartbeat rep.Beat counted it already (Reply.Counted: its old
// connection). An answer without Beat (an older node) or from another
// instance than the manager knows has the placement counted until the
// heartbeat after the one the manager has.
func (m *Manager) settle(node, key string, rep Reply) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := m.nodes[node]
	if ns == nil {
		return
	}
	beat, ok := ns.placed[key]
	if !ok {
		return
	}
	if rep.Beat == 0 || rep.Instance != ns.info.Instance {
		if beat == awaitingPing {
			ns.placed[key] = ns.info.Beat + 1
		}
		return
	}
	if rep.Counted || rep.Beat < ns.info.Beat {
		// counted by the heartbeat of the ping, or by a later one the
		// manager has
		delete(ns.placed, key)
		return
	}
	ns.placed[key] = rep.Beat
}

// unplace forgets client key's placement on node that awaits its ping,
// which failed: the client is placed elsewhere, or not at all.
func (m *Manager) unplace(node, key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ns := m.nodes[node]; ns != nil && ns.placed[key] == awaitingPing {
		delete(ns.placed, key)
	}
}

// errNodeRefused is a ping's error when the node answers that it takes no
// clients (it is shutting down).
var errNodeRefused = errors.New("node refused")

// nodeGone reports whether a probe's error means that the node is gone
// rather than that the manager cannot ask (closed, bus down).
func nodeGone(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, errNodeRefused)
}

// drop forgets a node that did not answer until its next heartbeat (even
// one that came during the ping: a node that sends heartbeats but does not
// answer is not one to place clients on).
func (m *Manager) drop(id string) {
	m.mu.Lock()
	delete(m.nodes, id)
	m.mu.Unlock()
}

// assign picks the node for a client at now: the node it was given before,
// while that node is alive, not excluded (req.Exclude) and has room for it
// (rejoinCount), else the best live node not excluded. The excluded nodes
// no longer count the client as placed there, nor does the client's old
// node when it moves; those that refused the client as full (req.Full) are
// full until their next heartbeat. ask reports that the client's node may
// keep it, but whether the node still counts the client is to be asked
// first (a ping, Reply.Counted): the caller asks and calls assign again
// with the answer, heard. Told, assign does not ask.
func (m *Manager) assign(req JoinRequest, now time.Time, heard *rejoinAnswer) (a Assignment, ask bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := req.Session + "/" + req.Client
	m.pruneAssigned(now)
	for _, id := range req.Full {
		if ns := m.nodes[id]; ns != nil {
			ns.refused = true
		}
	}
	for _, id := range req.Exclude {
		// the client is not there: the node refused its offer, or did not
		// answer it and was told to drop it
		if ns := m.nodes[id]; ns != nil {
			delete(ns.placed, key)
		}
	}
	if a, ok := m.assigned[key]; ok && !slices.Contains(req.Exclude, a.node) && now.Sub(a.at) < assignedTTL {
		if ns := m.nodes[a.node]; ns != nil && now.Sub(ns.seen) < nodeTTL {
			switch rejoinCount(ns, key, heard) {
			case rejoinCounted:
				if !ns.fullBut(1) {
					m.assigned[key] = assignedTo{node: a.node, at: now}
					return assignment(ns.info), false
				}
			case rejoinAsk:
				if !ns.fullBut(1) { // else full however the node answers
					return assignment(ns.info), true
				}
			case rejoinNew:
				if !ns.full() {
					ns.placed[key] = awaitingPing
					m.assigned[key] = assignedTo{node: a.node, at: now}
					return assignment(ns.info), false
				}
			}
		}
	}
	var live []*nodeState
	for id, ns := range m.nodes {
		if now.Sub(ns.seen) >= nodeTTL {
			delete(m.nodes, id)
			m.log.Info("sfu node lost: no heartbeat", "node", id, "site", ns.info.Site, "last_heartbeat", ns.seen.Format(time.RFC3339Nano))
			continue
		}
		if slices.Contains(req.Exclude, id) {
			continue
		}
		live = append(live, ns)
	}
	if len(live) == 0 {
		if len(req.Exclude) > 0 {
			return Assignment{Error: fmt.Sprintf("%v (excluding nodes %v: they did not answer the client or were full)", errNoNode, req.Exclude)}, false
		}
		return Assignment{Error: errNoNode.Error()}, false
	}
	sort.Slice(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if fa, fb := a.full(), b.full(); fa != fb {
			return fb // a node with room first, even at another site
		}
		if ra, rb := siteRank(req, a.info.Site), siteRank(req, b.info.Site); ra != rb {
			return ra < rb
		}
		if la, lb := a.load(), b.load(); la != lb {
			return la < lb
		}
		return a.info.ID < b.info.ID
	})
	best := live[0]
	if old, ok := m.assigned[key]; ok && old.node != best.info.ID {
		// the client moves: its old node no longer counts it as placed
		// there
		if ns := m.nodes[old.node]; ns != nil {
			delete(ns.placed, key)
		}
	}
	best.placed[key] = awaitingPing
	m.assigned[key] = assignedTo{node: best.info.ID, at: now}
	return assignment(best.info), false
}

// siteRank is 0 for the client's site, i+1 for its i-th near site, and
// after those for any other site.
func siteRank(req JoinRequest, site string) int {
	if site == req.Site {
		return 0
	}
	for i, s := range req.Near {
		if s == site {
			return i + 1
		}
	}
	return len(req.Near) + 1
}

func assignment(info NodeInfo) Assignment {
	return Assignment{Node: info.ID, Site: info.Site, Signal: info.Signal, WebSocket: info.WebSocket}
}

// RequestJoin asks the manager on the bus for a node. When the manager is
// busy the error wraps ErrBusy.
func RequestJoin(ctx context.Context, nc *nats.Conn, req JoinRequest) (Assignment, error) {
	b, _ := json.Marshal(req)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, subjectJoin, b)
	if err != nil {
		return Assignment{}, fmt.Errorf("sfu: join %s/%s: %w", req.Session, req.Client, err)
	}
	var a Assignment
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return Assignment{}, fmt.Errorf("sfu: join %s/%s: %w", req.Session, req.Client, err)
	}
	if a.Error != "" {
		err := fmt.Errorf("sfu: join %s/%s: %s", req.Session, req.Client, a.Error)
		if a.Busy {
			err = busyError{err}
		}
		return a, err
	}
	return a, nil
}

// busyError is RequestJoin's error when the manager answered busy.
type busyError struct{ error }

func (busyError) Is(target error) bool { return target == ErrBusy }

// Nodes returns the IDs of the live nodes.
func (m *Manager) Nodes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, ns := range m.nodes {
		if time.Since(ns.seen) < nodeTTL {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
