package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/report"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/allocator"
	"github.com/xrealm/xrealm/sfu/relay"
)

// Node is one SFU.
type Node struct {
	cfg      Config
	log      *slog.Logger
	instance string      // NodeInfo.Instance
	api      *webrtc.API // for relay links (data channels only)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	subs   []*nats.Subscription
	mgr    *Manager

	// signalSlots holds a token per signal being handled on its own
	// goroutine (handleSignal); at most maxSignalsInFlight
	signalSlots chan struct{}

	mu        sync.Mutex
	peers     map[string]*peer      // "session/client"
	local     map[string]*source    // published here, by key
	relayed   map[string]*source    // relayed from another node, by key
	directory map[string]TrackInfo  // every track of every session, by key
	poses     map[string]knownPose  // "session/client"
	links     map[string]*linkState // by peer node ID
	groups    map[string]*linkGroup // subscribers by remote IP (shared.go)
	heard     map[string]*heardNode // other nodes' liveness, by ID (liveness.go)
	// offers holds, by "session/client", the offers taken and not answered
	// yet (beginOffer); a leave that comes meanwhile marks them left
	offers map[string][]*offerToken
	// expected holds, by "session/client", the clients the manager placed
	// here (its ping, Signal.Place) whose offer has not come, with when:
	// heartbeats count them until it or their leave comes or expectGrace
	// passes
	expected map[string]time.Time
	// beat is the number of the last heartbeat (NodeInfo.Beat), counted
	// the clients it counted (NodeInfo.Clients), by "session/client"
	beat    uint64
	counted map[string]struct{}
	closed  bool

	purged atomic.Uint64 // directory entries of gone nodes removed (purgeNode)
	// probes counts the subscribers' probes for paused floors by
	// allocator.ProbeEvent (peer.reconcile)
	probes [allocator.ProbeFailed + 1]atomic.Uint64

	hops *hopHists // packet ages (hops.go)

	// ctlMu guards controls, the control messages waiting to be sent to
	// each other node (sendControl); a leaf lock
	ctlMu    sync.Mutex
	controls map[string]*controlQueue

	// wsPlaced and wsOfferTimeout are the WebSocket handler's placement
	// hooks (placement.placed, placement.timeout; tests).
	wsPlaced       func(Assignment)
	wsOfferTimeout func(node string) time.Duration
	// wsPingEvery and wsIdle, if set, replace the WebSocket handler's
	// wsPingInterval and wsIdleTimeout (tests).
	wsPingEvery, wsIdle time.Duration
	// expiring, if set, is called by expireNodes between finding node id
	// expired and purging it, with n.mu not held (tests).
	expiring func(id string)
	// joinStage, if set, is called by join with the client's key at
	// stageRegister (its peer not registered yet), stageAnswer (its
	// connection made, the answer not returned yet) and stageStartFailed
	// (making its connection failed), n.mu not held (tests).
	joinStage func(key, stage string)

	// hbMu orders heartbeats before the leave announcement: once Close
	// has set closed, heartbeat publishes nothing.
	hbMu      sync.Mutex
	announced bool // a heartbeat went out, so the manager may know the node
}

type linkState struct {
	once sync.Once
	done chan struct{}
	link *relay.Link
	err  error
}

func (ls *linkState) finish(l *relay.Link, err error) {
	ls.once.Do(func() {
		ls.link, ls.err = l, err
		close(ls.done)
	})
}

// Start starts a node: it subscribes to its bus subjects, announces itself
// and, with Config.Manager, runs the session manager.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger.With("sfu", cfg.ID), instance: newInstance(),
		peers: map[string]*peer{}, local: map[string]*source{}, relayed: map[string]*source{},
		directory: map[string]TrackInfo{}, poses: map[string]knownPose{}, links: map[string]*linkState{},
		groups: map[string]*linkGroup{}, heard: map[string]*heardNode{}, hops: newHopHists(), offers: map[string][]*offerToken{},
		expected: map[string]time.Time{}, counted: map[string]struct{}{},
		signalSlots: make(chan struct{}, maxSignalsInFlight),
	}
	n.ctx, n.cancel = context.WithCancel(ctx)
	me := &webrtc.MediaEngine{}
	if err := relay.RegisterCodec(me); err != nil {
		return nil, fmt.Errorf("sfu: relay codec: %w", err)
	}
	// Relay links keep pion's default interceptors (NACK, reports, TWCC,
	// stats; NewAPI without a registry adds them) but with the node's
	// report interval and the batcher below them: with 64 RTP slots each
	// way the defaults sent ~75 reports a second in one burst, which the
	// bench's 54-packet uplink queues answered by dropping relayed media
	// (run F capture of s1→c).
	reg := &interceptor.Registry{}
	reg.Add(RTCPBatcherFactory{})
	if err := webrtc.RegisterDefaultInterceptorsWithOptions(me, reg,
		webrtc.WithReportReceiverOptions(reportOpts[report.ReceiverOption](cfg.ReportInterval, report.ReceiverInterval)...),
		webrtc.WithReportSenderOptions(reportOpts[report.SenderOption](cfg.ReportInterval, report.SenderInterval)...)); err != nil {
		return nil, fmt.Errorf("sfu: relay interceptors: %w", err)
	}
	n.api = webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithInterceptorRegistry(reg), webrtc.WithSettingEngine(n.relaySettingEngine()))
	// A permissions violation the bus reports from here on is about what
	// Start does: the token lacks the rights of an SFU node.
	watch := watchBus(cfg.NC, "sfu.node."+cfg.ID+".buscheck."+n.instance)
	defer watch.stop()
	if err := n.checkUnique(ctx, watch); err != nil {
		n.cancel()
		return nil, err
	}
	subs := []struct {
		subj string
		h    nats.MsgHandler
	}{
		{subjectSignal(cfg.ID), n.handleSignal},
		{"sfu.node." + cfg.ID + ".relay", n.handleRelayOffer},
		{"sfu.node." + cfg.ID + ".link", n.handleLinkRequest},
		{"sfu.tracks.*", n.handleTrackEvent},
		{"sfu.poses.*", n.handlePose},
		{subjectSync, func(*nats.Msg) { n.announceAll() }},
		{subjectNodes, n.handleNodeInfo},
	}
	for _, s := range subs {
		sub, err := cfg.NC.Subscribe(s.subj, s.h)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("sfu: subscribe %s: %w", s.subj, err)
		}
		n.subs = append(n.subs, sub)
	}
	if cfg.Manager {
		m, err := StartManager(cfg.NC, cfg.Logger)
		if err != nil {
			n.Close()
			return nil, err
		}
		n.mgr = m
	}
	if err := watch.check(ctx); err != nil {
		n.Close()
		return nil, err
	}
	col := &collector{n: n}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(col); err != nil {
			n.Close()
			return nil, fmt.Errorf("sfu: metrics: %w", err)
		}
	}
	_ = cfg.NC.Publish(subjectSync, nil) // learn the tracks that exist
	n.heartbeat()
	// the first heartbeat's publish is checked too; a check whose Flush
	// fails (the bus went away) fails Start
	if err := watch.check(ctx); err != nil {
		n.Close()
		if cfg.Registerer != nil {
			cfg.Registerer.Unregister(col)
		}
		return nil, err
	}
	if n.mgr != nil {
		// The manager learns of this node from its heartbeat, on the
		// manager's own subscription: a client that joins right after
		// Start (a page opened as the server came up) would find no node.
		n.waitKnown(ctx, startKnownWait)
	}
	n.wg.Add(1)
	go n.loop()
	n.log.Info("sfu node started", "site", cfg.Site, "manager", cfg.Manager, "instance", n.instance)
	return n, nil
}

// startKnownWait bounds how long Start waits for its own manager to have
// its first heartbeat.
const startKnownWait = 5 * time.Second

// waitKnown waits until n's manager lists n, at most wait; a node it does
// not list by then is placed from its next heartbeat on.
func (n *Node) waitKnown(ctx context.Context, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for !slices.Contains(n.mgr.Nodes(), n.cfg.ID) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.log.Warn("sfu node: its manager has not had its first heartbeat yet", "waited", wait)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// ID is the node's ID.
func (n *Node) ID() string { return n.cfg.ID }

// Close stops the node and closes every connection.
func (n *Node) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	peers := make([]*peer, 0, len(n.peers))
	for _, p := range n.peers {
		peers = append(peers, p)
	}
	links := n.links
	n.links = map[string]*linkState{}
	n.mu.Unlock()
	left := n.leave() // before the subscriptions go: placement must stop choosing us first
	for _, s := range n.subs {
		_ = s.Unsubscribe()
	}
	if left {
		// a join placed before the manager had the announcement then finds
		// no responders at once (Manager.place) rather than waiting for
		// a reply
		_ = n.cfg.NC.FlushTimeout(leaveTimeout)
	}
	if n.mgr != nil {
		n.mgr.Close()
	}
	n.cancel()
	for _, p := range peers {
		p.close()
	}
	for _, ls := range links {
		select {
		case <-ls.done:
			if ls.link != nil {
				ls.link.Close()
			}
		default:
		}
	}
	n.wg.Wait()
}

func (n *Node) loop() {
	defer n.wg.Done()
	hb := time.NewTicker(n.cfg.Heartbeat)
	al := time.NewTicker(n.cfg.AllocateEvery)
	defer hb.Stop()
	defer al.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-hb.C:
			n.heartbeat()
			n.expireNodes(now)
			n.prunePoses(now)
		case now := <-al.C:
			n.mu.Lock()
			var changed []TrackInfo
			for key, s := range n.local {
				s.measure(now)
				if t, ok := n.directory[key]; ok {
					u := s.activity(t, now)
					u.Rate = s.announcedRate(t.Rate)
					if u != t {
						n.directory[key] = u
						changed = append(changed, u)
					}
				}
			}
			var resub []*source
			for _, s := range n.relayed {
				s.measure(now)
				if s.stalled(now) {
					resub = append(resub, s)
				}
			}
			for _, t := range changed {
				n.announce("add", t) // other nodes' directories
			}
			peers := n.peerList("")
			n.mu.Unlock()
			n.shareLinks(now, peers)
			for _, s := range resub {
				// the "sub" was lost (link not up in time) or the origin
				// restarted: ask again; "sub" is idempotent at the origin
				n.log.Debug("relayed track stalled, subscribing again", "track", s.info.Key())
				n.sendControl(s.info.Node, relay.Control{Op: "sub", Track: s.info.Key()})
			}
			for _, p := range peers {
				p.reconcile()
			}
		}
	}
}

// peerList returns the peers of a session ("" for all); n.mu must be held.
func (n *Node) peerList(session string) []*peer {
	out := []*peer{}
	for _, p := range n.peers {
		if session == "" || p.session == session {
			out = append(out, p)
		}
	}
	return out
}

func (n *Node) heartbeat() {
	n.hbMu.Lock()
	defer n.hbMu.Unlock()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.beat++
	hb := NodeInfo{ID: n.cfg.ID, Site: n.cfg.Site, Clients: n.clientsCounted(time.Now()), MaxClients: n.cfg.MaxClients, Signal: subjectSignal(n.cfg.ID), WebSocket: n.cfg.WebSocketURL,
		Instance: n.instance, Beat: n.beat}
	n.mu.Unlock()
	b, _ := json.Marshal(hb)
	_ = n.cfg.NC.Publish(subjectNodes, b)
	n.announced = true
}

// leaveTimeout bounds how long Close waits for the bus to take the leave
// announcement.
const leaveTimeout = 2 * time.Second

// leave announces that the node is shutting down (NodeInfo.Leaving), after
// its last heartbeat; n.closed must be set. It waits until the bus has the
// announcement, so that it reaches the manager before the node's
// subscriptions go away, and reports whether it was announced.
func (n *Node) leave() bool {
	n.hbMu.Lock()
	defer n.hbMu.Unlock()
	if !n.announced {
		return false // Start failed before the first heartbeat
	}
	b, _ := json.Marshal(NodeInfo{ID: n.cfg.ID, Site: n.cfg.Site, Signal: subjectSignal(n.cfg.ID), WebSocket: n.cfg.WebSocketURL, Leaving: true, Instance: n.instance})
	err := n.cfg.NC.Publish(subjectNodes, b)
	if err == nil {
		err = n.cfg.NC.FlushTimeout(leaveTimeout)
	}
	if err != nil {
		n.log.Warn("sfu node leaving without announcing it; the manager drops it when it does not answer or its heartbeat expires",
			"subject", subjectNodes, "err", err)
		return false
	}
	n.log.Info("sfu node leaving: announced", "site", n.cfg.Site, "subject", subjectNodes)
	return true
}

// --- track directory -------------------------------------------------------

// announce publishes a change of a local track's directory entry. Callers
// hold n.mu, so that the announcements of one track leave in the order of
// its changes (a late "add" after "remove" would leave a ghost entry on
// every node).
func (n *Node) announce(op string, t TrackInfo) {
	b, _ := json.Marshal(TrackEvent{Op: op, Track: t})
	_ = n.cfg.NC.Publish("sfu.tracks."+t.Session, b)
}

func (n *Node) announceAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for key := range n.local {
		n.announce("add", n.directory[key]) // with its idle and speaking states
	}
}

func (n *Node) handleTrackEvent(m *nats.Msg) {
	var ev TrackEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Track.Session == "" {
		return
	}
	key := ev.Track.Key()
	n.mu.Lock()
	switch {
	case ev.Track.Node == n.cfg.ID:
		// our own announcement, back from the bus: the directory already
		// has this change or a newer one; only the local peers are told
	case ev.Op == "add":
		if old, ok := n.directory[key]; ok && old == ev.Track {
			n.mu.Unlock()
			return
		}
		n.directory[key] = ev.Track
	case ev.Op == "remove":
		if _, ok := n.directory[key]; !ok {
			n.mu.Unlock()
			return
		}
		delete(n.directory, key)
	default:
		n.mu.Unlock()
		return
	}
	peers := n.peerList(ev.Track.Session)
	n.mu.Unlock()
	for _, p := range peers {
		go p.reconcile()
	}
}

// knownPose is a client's last pose and when it came.
type knownPose struct {
	pose *Pose
	at   time.Time
}

func (n *Node) handlePose(m *nats.Msg) {
	var pm PoseMessage
	if json.Unmarshal(m.Data, &pm) != nil || pm.Session == "" || pm.Client == "" {
		return
	}
	n.mu.Lock()
	n.poses[pm.Session+"/"+pm.Client] = knownPose{pose: &pm.Pose, at: time.Now()}
	n.mu.Unlock()
}

// poseOf returns the last pose of client key ("session/client"), or nil;
// n.mu must be held.
func (n *Node) poseOf(key string) *Pose { return n.poses[key].pose }

// poseGrace is how long a node keeps the pose of a client it has no use
// for: one neither connected here nor publishing a track (a pose may come
// before the publisher's tracks are announced).
const poseGrace = 30 * time.Second

// prunePoses forgets the poses, older than poseGrace at now, of clients
// that are neither connected here nor in the track directory. A node uses
// a pose for its own clients (what they see) and for publishers (where they
// are); it hears every session's poses on the bus, and would otherwise
// keep the pose of every client that ever sent one, for good.
func (n *Node) prunePoses(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var publishing map[string]bool
	for key, kp := range n.poses {
		if now.Sub(kp.at) < poseGrace || n.peers[key] != nil {
			continue
		}
		if publishing == nil {
			publishing = make(map[string]bool, len(n.directory))
			for _, t := range n.directory {
				publishing[t.Session+"/"+t.Client] = true
			}
		}
		if !publishing[key] {
			delete(n.poses, key)
		}
	}
}

// sessionTracks returns the directory entries of a session; n.mu must not
// be held.
func (n *Node) sessionTracks(session string) []TrackInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := []TrackInfo{}
	for _, t := range n.directory {
		if t.Session == session {
			out = append(out, t)
		}
	}
	return out
}

// addLocal adds s, a track a local client publishes, to the node's
// sources and the directory and announces it, unless a local source
// already has its key and keep(that source) holds: then it adds nothing
// and returns that source. A nil keep replaces any.
func (n *Node) addLocal(s *source, keep func(old *source) bool) (kept *source) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.local[s.info.Key()]; old != nil && keep != nil && keep(old) {
		return old
	}
	n.local[s.info.Key()] = s
	n.directory[s.info.Key()] = s.info
	n.announce("add", s.info)
	return nil
}

func (n *Node) removeLocal(s *source) {
	n.mu.Lock()
	if n.local[s.info.Key()] == s {
		delete(n.local, s.info.Key())
		delete(n.directory, s.info.Key())
		n.announce("remove", s.info)
	}
	peers := n.peerList(s.info.Session)
	var links []*relay.Link
	for _, ls := range n.links {
		select {
		case <-ls.done:
			if ls.link != nil {
				links = append(links, ls.link)
			}
		default:
		}
	}
	n.mu.Unlock()
	for _, l := range links {
		l.StopMedia(s.info.Key()) // frees its RTP slot, if any
	}
	for _, p := range peers {
		go p.reconcile()
	}
}

// --- sources for subscribers -------------------------------------------------

// acquire returns the source of a track for a local subscriber: the local
// one, or a relayed one, subscribing to the origin node if this is the
// first local subscriber.
func (n *Node) acquire(t TrackInfo) *source {
	key := t.Key()
	n.mu.Lock()
	if s := n.local[key]; s != nil {
		n.mu.Unlock()
		return s
	}
	if t.Node == n.cfg.ID {
		n.mu.Unlock()
		return nil // announced here but already gone
	}
	if s := n.relayed[key]; s != nil {
		n.mu.Unlock()
		return s
	}
	origin := t.Node
	s := newSource(t, func() {
		if n.ctx.Err() == nil { // a held-back request may be sent after Close
			n.sendControl(origin, relay.Control{Op: "pli", Track: key})
		}
	})
	s.hops = n.hopsFor(t)
	s.fetch = newFetcher(func(seqs []uint16) {
		if n.ctx.Err() == nil { // the batch timer may fire after Close
			n.sendControl(origin, relay.Control{Op: "nack", Track: key, Seqs: seqs})
		}
	})
	s.cadence = &cadence{fetch: s.fetch.want}
	s.subAt = time.Now()
	n.relayed[key] = s
	n.mu.Unlock()
	n.sendControl(origin, relay.Control{Op: "sub", Track: key})
	return s
}

// release is called when a subscriber stops using s; relayed sources with
// no subscriber left are unsubscribed at the origin.
func (n *Node) release(s *source, remaining int) {
	if remaining > 0 || s.info.Node == n.cfg.ID {
		return
	}
	key := s.info.Key()
	n.mu.Lock()
	if n.relayed[key] != s {
		n.mu.Unlock()
		return
	}
	delete(n.relayed, key)
	n.mu.Unlock()
	s.cadence.stop()
	n.sendControl(s.info.Node, relay.Control{Op: "unsub", Track: key})
}

// controlQueue holds the control messages for one node that are not sent
// yet, in the order they were made.
type controlQueue struct {
	pending []relay.Control
	running bool // a goroutine is sending them (drainControls)
}

// sendControl sends a control message to another node, linking first if
// needed; it does not block the caller. Messages to one node go in the
// order they were made: a sub and the unsub after it must not swap, or
// the origin would relay a track this node no longer forwards, or stop
// one it does.
func (n *Node) sendControl(node string, c relay.Control) {
	n.ctlMu.Lock()
	if n.controls == nil {
		n.controls = map[string]*controlQueue{}
	}
	q := n.controls[node]
	if q == nil {
		q = &controlQueue{}
		n.controls[node] = q
	}
	q.pending = append(q.pending, c)
	start := !q.running
	q.running = true
	n.ctlMu.Unlock()
	if start {
		n.wg.Add(1)
		go n.drainControls(node, q)
	}
}

// drainControls sends q's messages to node one after the other until q is
// empty.
func (n *Node) drainControls(node string, q *controlQueue) {
	defer n.wg.Done()
	for {
		n.ctlMu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			delete(n.controls, node)
			n.ctlMu.Unlock()
			return
		}
		c := q.pending[0]
		q.pending[0] = relay.Control{}
		q.pending = q.pending[1:]
		n.ctlMu.Unlock()
		l, err := n.link(node)
		if err != nil {
			// A link that fails may take its full timeout to say so: what
			// waited meanwhile is dropped with this message rather than
			// each waiting for a link attempt of its own (the queue would
			// grow faster than it drained). Dropping loses no state: a
			// relayed source that stalls asks for its track again.
			n.ctlMu.Lock()
			dropped := len(q.pending)
			clear(q.pending)
			q.pending = q.pending[:0]
			n.ctlMu.Unlock()
			n.log.Warn("relay controls not sent: no link", "peer", node, "op", c.Op, "track", c.Track, "dropped_after_it", dropped, "err", err)
			continue
		}
		if c.Op == "sub" {
			// the source's media comes over l now: the close of a link
			// this one replaced must leave it (OnClose)
			n.mu.Lock()
			if s := n.relayed[c.Track]; s != nil {
				s.subLink = l
			}
			n.mu.Unlock()
		}
		if err := l.SendControl(c); err != nil {
			n.log.Warn("relay control not sent", "peer", node, "op", c.Op, "track", c.Track, "err", err)
		}
	}
}

// --- relay links ---------------------------------------------------------------

var errClosed = errors.New("sfu: node closed")

// link returns the link to node, creating it if needed. The node with the
// lower ID always offers; the other asks it to.
func (n *Node) link(peerID string) (*relay.Link, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errClosed
	}
	ls := n.links[peerID]
	start := ls == nil
	if start {
		ls = &linkState{done: make(chan struct{})}
		n.links[peerID] = ls
	}
	n.mu.Unlock()
	if start {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.establish(peerID, ls)
		}()
	}
	select {
	case <-ls.done:
	case <-time.After(15 * time.Second):
		n.dropLink(peerID, ls)
		return nil, fmt.Errorf("sfu: link to node %s: timed out", peerID)
	case <-n.ctx.Done():
		return nil, errClosed
	}
	if ls.err != nil {
		n.dropLink(peerID, ls)
		return nil, ls.err
	}
	select {
	case <-ls.link.Ready():
		return ls.link, nil
	case <-time.After(15 * time.Second):
		n.dropLink(peerID, ls)
		ls.link.Close()
		return nil, fmt.Errorf("sfu: link to node %s: data channels did not open", peerID)
	case <-n.ctx.Done():
		return nil, errClosed
	}
}

func (n *Node) dropLink(peerID string, ls *linkState) {
	n.mu.Lock()
	if n.links[peerID] == ls {
		delete(n.links, peerID)
	}
	n.mu.Unlock()
}

func (n *Node) establish(peerID string, ls *linkState) {
	ctx, cancel := context.WithTimeout(n.ctx, 15*time.Second)
	defer cancel()
	if !relay.Offerer(n.cfg.ID, peerID) {
		// Ask the offerer to dial; its offer arrives in handleRelayOffer,
		// which completes ls.
		// The answer comes once the offerer's link is up or failed; an
		// error in it fails this one at once (it was not read: the link
		// waited its timeout for an offer that would not come).
		b, _ := json.Marshal(LinkRequest{From: n.cfg.ID})
		msg, err := n.cfg.NC.RequestWithContext(ctx, "sfu.node."+peerID+".link", b)
		if err != nil {
			ls.finish(nil, fmt.Errorf("sfu: ask node %s to link: %w", peerID, err))
			return
		}
		var rep LinkOffer
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			ls.finish(nil, fmt.Errorf("sfu: ask node %s to link: %s", peerID, badRelayMessage("answer", msg.Data, err)))
		} else if rep.Error != "" {
			ls.finish(nil, fmt.Errorf("sfu: node %s did not link: %s", peerID, rep.Error))
		}
		return
	}
	l, offer, err := relay.Dial(n.api, webrtc.Configuration{}, peerID, (*relayHandler)(n), max(n.cfg.RelaySlots, 0))
	if err != nil {
		ls.finish(nil, err)
		return
	}
	b, _ := json.Marshal(LinkOffer{From: n.cfg.ID, SDP: offer})
	msg, err := n.cfg.NC.RequestWithContext(ctx, "sfu.node."+peerID+".relay", b)
	if err != nil {
		l.Close()
		ls.finish(nil, fmt.Errorf("sfu: relay offer to node %s: %w", peerID, err))
		return
	}
	var ans LinkOffer
	if err := json.Unmarshal(msg.Data, &ans); err != nil || ans.Error != "" {
		l.Close()
		ls.finish(nil, fmt.Errorf("sfu: relay answer from node %s: %v %s", peerID, err, ans.Error))
		return
	}
	if err := l.Accept(ans.SDP); err != nil {
		l.Close()
		ls.finish(nil, err)
		return
	}
	ls.finish(l, nil)
	if n.ctx.Err() != nil {
		// Close went through the links before this one was done, and
		// skipped it
		l.Close()
	}
}

// badRelayMessage says why msg, a relay offer or link request (what), was
// refused, quoting (the start of) it.
func badRelayMessage(what string, msg []byte, err error) string {
	const show = 200
	if len(msg) > show {
		return fmt.Sprintf("bad %s: %v; message of %d bytes starting %q", what, err, len(msg), msg[:show])
	}
	return fmt.Sprintf("bad %s: %v; message %q", what, err, msg)
}

// parseRelayMessage decodes a relay offer or link request (what) into v
// and checks the node it is from.
func parseRelayMessage(what string, data []byte, v any, from func() string) error {
	if err := json.Unmarshal(data, v); err != nil {
		return errors.New(badRelayMessage(what, data, err))
	}
	if err := validName("node", from()); err != nil {
		return errors.New(badRelayMessage(what, data, err))
	}
	return nil
}

func (n *Node) handleLinkRequest(m *nats.Msg) {
	var req LinkRequest
	if err := parseRelayMessage("link request", m.Data, &req, func() string { return req.From }); err != nil {
		// answered at once: the asking node would wait for its timeout
		b, _ := json.Marshal(LinkOffer{Error: err.Error()})
		_ = m.Respond(b)
		return
	}
	go func() {
		_, err := n.link(req.From)
		reply := LinkOffer{}
		if err != nil {
			reply.Error = err.Error()
		}
		b, _ := json.Marshal(reply)
		_ = m.Respond(b)
	}()
}

func (n *Node) handleRelayOffer(m *nats.Msg) {
	var off LinkOffer
	respond := func(o LinkOffer) { b, _ := json.Marshal(o); _ = m.Respond(b) }
	if err := parseRelayMessage("relay offer", m.Data, &off, func() string { return off.From }); err != nil {
		respond(LinkOffer{Error: err.Error()})
		return
	}
	if !relay.Offerer(off.From, n.cfg.ID) {
		respond(LinkOffer{Error: fmt.Sprintf("node %s must not offer to node %s", off.From, n.cfg.ID)})
		return
	}
	// A node that closes refuses the offer, before the answer and after
	// it (the handler may run while Close empties the links): a link kept
	// then would be in no map Close goes through, open for good.
	shutting := func() LinkOffer {
		return LinkOffer{Error: fmt.Sprintf("node %s is shutting down: relay offer from node %s refused", n.cfg.ID, off.From)}
	}
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		respond(shutting())
		return
	}
	l, ans, err := relay.Answer(n.api, webrtc.Configuration{}, off.From, off.SDP, (*relayHandler)(n))
	if err != nil {
		respond(LinkOffer{Error: err.Error()})
		return
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		l.Close()
		respond(shutting())
		return
	}
	ls := n.links[off.From]
	if ls == nil {
		ls = &linkState{done: make(chan struct{})}
		n.links[off.From] = ls
	} else {
		select {
		case <-ls.done: // a previous link: replace it
			if ls.link != nil {
				old := ls.link
				defer old.Close()
			}
			ls = &linkState{done: make(chan struct{})}
			n.links[off.From] = ls
		default:
		}
	}
	// finished under n.mu: Close, which takes the links under it, finds
	// the link done and closes it
	ls.finish(l, nil)
	n.mu.Unlock()
	respond(LinkOffer{From: n.cfg.ID, SDP: ans})
}

// relayHandler handles what arrives on relay links.
type relayHandler Node

func (h *relayHandler) OnControl(l *relay.Link, c relay.Control) {
	n := (*Node)(h)
	n.mu.Lock()
	s := n.local[c.Track]
	n.mu.Unlock()
	if s == nil {
		return
	}
	switch c.Op {
	case "sub":
		s.addRelay(l.Peer, l, l.SendMedia)
		s.keyframe()
	case "unsub":
		s.removeRelay(l.Peer)
		l.StopMedia(c.Track)
	case "pli":
		s.keyframe()
	case "nack":
		buf := make([]byte, 1500)
		for _, seq := range c.Seqs {
			if k, ok := s.buf.Get(seq, buf); ok {
				_ = l.SendMedia(c.Track, buf[:k])
			}
		}
	}
}

func (h *relayHandler) OnMedia(_ *relay.Link, track string, pkt []byte) {
	n := (*Node)(h)
	n.mu.Lock()
	s := n.relayed[track]
	n.mu.Unlock()
	if s != nil {
		s.write(pkt)
	}
}

// OnRefused logs the first control message a link refused, and the
// following ones at debug level (xrealm_sfu_relay_refused_total counts
// them all): a peer that sends them may send many.
func (h *relayHandler) OnRefused(l *relay.Link, c relay.Control, err error) {
	n := (*Node)(h)
	lvl := slog.LevelDebug
	if l.Refused.Load() == 1 {
		lvl = slog.LevelWarn
	}
	n.log.Log(n.ctx, lvl, "relay control refused", "peer", l.Peer, "op", c.Op, "mid", c.Mid, "track", c.Track, "refused", l.Refused.Load(), "err", err)
}

func (h *relayHandler) OnClose(l *relay.Link) {
	n := (*Node)(h)
	n.mu.Lock()
	if ls := n.links[l.Peer]; ls != nil {
		select {
		case <-ls.done:
			if ls.link == l {
				delete(n.links, l.Peer)
			}
		default:
		}
	}
	// Only what belongs to l goes: a replacement link to the same node
	// may have set up relays and subscribed sources already, and taking
	// those would stop their media until they stalled and were asked for
	// again. A relayed source whose "sub" was not sent yet goes too (it
	// is acquired again).
	var orphans []*source
	for k, s := range n.relayed {
		if s.info.Node == l.Peer && (s.subLink == nil || s.subLink == l) {
			delete(n.relayed, k)
			s.cadence.stop()
			orphans = append(orphans, s)
		}
	}
	for _, s := range n.local {
		s.removeRelayOn(l.Peer, l)
	}
	peers := n.peerList("")
	n.mu.Unlock()
	if len(orphans) > 0 {
		for _, p := range peers {
			p.dropSources(orphans)
		}
	}
}
