package ubiq

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/xrealm/xrealm/fanout"
)

// ICEServer is a STUN or TURN server offered to peers in every room's
// ice-servers property, for their WebRTC connections.
type ICEServer struct {
	URI      string `json:"uri"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// DefaultICEServers are Ubiq's defaults.
var DefaultICEServers = []ICEServer{{URI: "stun:stun.l.google.com:19302"}}

// Config configures a Server.
type Config struct {
	// NC is an in-process NATS connection with echo off (nats.NoEcho()).
	NC *nats.Conn
	// JS holds the room state bucket.
	JS jetstream.JetStream
	// TLS is the certificate for secure WebSocket (ServeWebSocket with
	// secure set).
	TLS *tls.Config
	// ICEServers go into every new room's ice-servers property; nil =
	// DefaultICEServers, empty non-nil = none.
	ICEServers []ICEServer
	Bucket     string // key-value bucket for room state; "" = "ubiq-rooms"
	Replicas   int    // bucket replicas; 0 = 1
	// MaxFrame is the largest frame payload; 0 = DefaultMaxFrame, or what
	// the bus carries if that is less (NC's largest message less
	// busOverhead). Set larger than that, it is an error.
	MaxFrame int
	// PeerTimeout drops peers that send nothing to the server for this
	// long (Ubiq: 10s; its clients ping every second).
	PeerTimeout time.Duration
	// NodeHeartbeat is how often this node rewrites its heartbeat key;
	// 0 = 2s. NodeTimeout is how long another node's heartbeat may stay
	// unchanged before this node declares it dead and deletes the members,
	// observers and room presence it wrote; 0 = 10s.
	NodeHeartbeat, NodeTimeout time.Duration
	// RemoveGrace delays PeerRemoved so that a peer that moves from one
	// visible room to another is not removed and added again; 0 = 250ms,
	// negative = none.
	RemoveGrace time.Duration
	// Writer bounds each connection's queue. A zero Linger means 5ms: a
	// busy connection then gets one write per 5ms instead of one per
	// frame (an idle one is written at once); negative turns it off.
	// Zero bounds are fanout's defaults (4096 frames, 8 MiB), and MaxBytes
	// is raised to hold at least one frame of MaxFrame. Past the bound a
	// queue takes as much again of frames that must not be lost (events
	// and server messages); a peer that falls further behind than that is
	// disconnected.
	Writer fanout.Options
	// Inbound is each connection's inbound budget: frames and bytes a
	// second, with bursts, that a peer may send (relayed frames and
	// server messages alike). Past it the server reads from that peer
	// only as fast as the budget allows, holding back the sender alone.
	// Zero fields are DefaultBudget's; a negative rate lifts that limit;
	// the byte burst is raised to hold one frame of MaxFrame.
	Inbound Budget
	// MaxRoomBlobBytes bounds what a room's blobs (SetBlob) take in the
	// key-value store, in bytes, each blob counted as its key, its value
	// and 64 bytes: a SetBlob past it is refused. 0 = 64 MiB; negative =
	// no limit.
	MaxRoomBlobBytes int64
	Logger           *slog.Logger
	Registerer       prometheus.Registerer // nil = metrics not registered
}

// DefaultMaxRoomBlobBytes is Config.MaxRoomBlobBytes's default.
const DefaultMaxRoomBlobBytes = 64 << 20

// Server is the Ubiq room server of one node.
type Server struct {
	cfg         Config
	log         *slog.Logger
	m           *metrics
	kv          jetstream.KeyValue
	store       *store
	ctx         context.Context
	cancel      context.CancelFunc
	node        string // this server's name in room presence keys
	activations atomic.Uint64

	mu     sync.Mutex
	rooms  map[string]*room
	conns  map[*conn]struct{}
	lns    []net.Listener
	https  []*http.Server
	closed bool
	wg     sync.WaitGroup // connections, sweeps and cleanup workers
	swept  chan struct{}

	liveDone chan struct{}
	// cleanups removes rooms that may be empty, in the background.
	cleanups *cleanups
	// beforeLeave, if set, runs in a stopping room's goroutine before it
	// deletes its presence key: tests use it to stand for a slow store.
	beforeLeave func(room string)
	// busLog bounds the lines logged for publishes on the bus that failed
	// (busFailed); guarded by busLogMu.
	busLogMu sync.Mutex
	busLog   logGate
	// beforeRewatch, if set, runs on the goroutine that starts a room's
	// new watch of its keys after its watch ended, before it does (tests).
	beforeRewatch func(room string)
	// attachWait bounds how long a room waits to see the member key of a
	// joiner (room.cmdAttachMember): 2*requestTimeout; tests shorten it.
	attachWait time.Duration
	// listing lists the published rooms for DiscoverRooms.
	listing roomListing
	// retry retries departure writes that failed (retrier).
	retry     *retrier
	retryDone chan struct{}
}

// busOverhead is what a bus message takes besides the largest frame: a
// relayed frame's sender tag (appendBus), and in the store the rest of a
// record (the bucket's largest value is MaxFrame+1024) and the headers of
// a conditional write.
const busOverhead = 2048

// NewServer creates the room bucket if needed and returns a server.
func NewServer(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.NC == nil || cfg.JS == nil {
		return nil, errors.New("ubiq: Config.NC and Config.JS are required")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = "ubiq-rooms"
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	// Frames travel on the bus (relayed to the other nodes, behind a
	// sender tag), and what they carry into the store (member and room
	// records, blobs) is as large: a frame larger than the bus carries
	// would reach this node's peers and no other's, and not be stored.
	busMax := int(cfg.NC.MaxPayload()) - busOverhead
	switch {
	case cfg.MaxFrame <= 0:
		cfg.MaxFrame = DefaultMaxFrame
		if busMax > 0 && busMax < cfg.MaxFrame {
			cfg.MaxFrame = busMax
		}
	case busMax > 0 && cfg.MaxFrame > busMax:
		return nil, fmt.Errorf("ubiq: MaxFrame %d is larger than the bus carries: its largest message is %d bytes, and a frame needs %d more for its sender and the store's record", cfg.MaxFrame, cfg.NC.MaxPayload(), busOverhead)
	}
	if cfg.Writer.Clock == nil { // one clock for all of this server's connections
		cfg.Writer.Clock = fanout.NewClock()
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = 10 * time.Second
	}
	if cfg.NodeHeartbeat <= 0 {
		cfg.NodeHeartbeat = 2 * time.Second
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 10 * time.Second
	}
	if cfg.NodeTimeout < 2*cfg.NodeHeartbeat {
		return nil, fmt.Errorf("ubiq: NodeTimeout %v must be at least twice NodeHeartbeat %v", cfg.NodeTimeout, cfg.NodeHeartbeat)
	}
	if cfg.RemoveGrace == 0 {
		cfg.RemoveGrace = 250 * time.Millisecond
	}
	if cfg.Writer.Linger == 0 {
		cfg.Writer.Linger = 5 * time.Millisecond
	}
	// The bounds are made explicit (fanout's defaults) for the log line of
	// a peer disconnected for falling behind, and a queue must hold the
	// largest frame: an event bigger than twice the byte bound would
	// otherwise disconnect even a peer whose queue is empty.
	if cfg.Writer.MaxFrames <= 0 {
		cfg.Writer.MaxFrames = 4096
	}
	if cfg.Writer.MaxBytes <= 0 {
		cfg.Writer.MaxBytes = 8 << 20
	}
	cfg.Writer.MaxBytes = max(cfg.Writer.MaxBytes, HeaderSize+cfg.MaxFrame)
	cfg.Inbound = cfg.Inbound.withDefaults()
	// a rested peer's largest frame, header included, passes at once
	cfg.Inbound.ByteBurst = max(cfg.Inbound.ByteBurst, float64(HeaderSize+cfg.MaxFrame))
	if cfg.MaxRoomBlobBytes == 0 {
		cfg.MaxRoomBlobBytes = DefaultMaxRoomBlobBytes
	}
	if cfg.ICEServers == nil {
		cfg.ICEServers = DefaultICEServers
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	kv, err := openStore(ctx, cfg.JS, cfg.Bucket, cfg.Replicas, cfg.MaxFrame+1024)
	if err != nil {
		return nil, err
	}
	iceProp := iceProperty(cfg.ICEServers)
	s := &Server{cfg: cfg, log: cfg.Logger, kv: kv, rooms: map[string]*room{}, conns: map[*conn]struct{}{}, node: newUUID(), attachWait: 2 * requestTimeout}
	s.store = &store{kv: kv, js: cfg.JS, node: s.node, afterPut: new(atomic.Pointer[func(string) error]), afterIndex: new(atomic.Pointer[func(string)]), newProps: func() props {
		var p props
		if iceProp != "" {
			p.set("ice-servers", iceProp)
		}
		return p
	}}
	s.store.wrote = s.listing.record
	s.listing.every = discoverEvery
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.m = newMetrics(s)
	s.cfg.Writer.OnCoalesce = func(n int) { s.m.coalesced.Add(float64(n)) }
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.m); err != nil {
			return nil, fmt.Errorf("ubiq metrics: %w", err)
		}
	}
	if err := s.store.heartbeat(ctx); err != nil {
		return nil, fmt.Errorf("ubiq node heartbeat: %w", err)
	}
	// Watch the heartbeats before returning, so that a node that is
	// already dead is timed from now.
	hw, err := kv.Watch(s.ctx, heartbeatKey("*"))
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("ubiq node heartbeats: %w", err)
	}
	s.swept = make(chan struct{})
	s.liveDone = make(chan struct{})
	s.retry = newRetrier(s)
	s.cleanups = newCleanups(s)
	s.retryDone = make(chan struct{})
	go s.sweep()
	go s.liveness(hw)
	go func() {
		defer close(s.retryDone)
		s.retry.run(s.ctx)
	}()
	return s, nil
}

// iceProperty is the ice-servers room property, in the form Ubiq's
// clients read: {"servers":[{uri,username,password,...}]}.
func iceProperty(servers []ICEServer) string {
	if len(servers) == 0 {
		return ""
	}
	type entry struct {
		ICEServer
		TimeoutSeconds int `json:"timeoutSeconds"`
		RefreshSeconds int `json:"refreshSeconds"`
	}
	out := struct {
		Servers []entry `json:"servers"`
	}{}
	for _, s := range servers {
		out.Servers = append(out.Servers, entry{ICEServer: s})
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// sweep drops silent peers and purges old delete markers.
func (s *Server) sweep() {
	defer close(s.swept)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	purge := time.Now()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			limit := now.Add(-s.cfg.PeerTimeout).UnixNano()
			s.mu.Lock()
			var silent []*conn
			for c := range s.conns {
				if c.silentSince(now) < limit {
					silent = append(silent, c)
				}
			}
			s.mu.Unlock()
			for _, c := range silent {
				s.m.timeouts.Inc()
				c.close(fmt.Sprintf("silent to the server for %v", s.cfg.PeerTimeout))
			}
			if now.Sub(purge) > 10*time.Minute {
				purge = now
				ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
				if err := s.store.purgeMarkers(ctx); err != nil {
					s.log.Info("purge of old room delete markers failed", "err", err)
				}
				cancel()
			}
		}
	}
}

// liveness rewrites this node's heartbeat and watches the other nodes'.
// A node whose heartbeat has not changed for NodeTimeout (by this node's
// clock, so clocks need not agree) is dead: this node deletes the keys it
// owned, so that its members leave their rooms (PeerRemoved reaches the
// peers on the surviving nodes) and its empty rooms are removed. Every
// surviving node sweeps; deletes are conditional and idempotent.
func (s *Server) liveness(w jetstream.KeyWatcher) {
	defer close(s.liveDone)
	defer w.Stop()
	t := time.NewTicker(s.cfg.NodeHeartbeat)
	defer t.Stop()
	heard := map[string]time.Time{} // node -> when its heartbeat last changed here
	self := heartbeatKey(s.node)
	updates := w.Updates()
	for {
		select {
		case <-s.ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				// The watch ended (bus trouble): start a new one.
				if s.ctx.Err() != nil {
					return
				}
				nw, err := s.kv.Watch(s.ctx, heartbeatKey("*"))
				if err != nil {
					s.log.Warn("watching node heartbeats failed", "err", err)
					updates = nil
					continue
				}
				w.Stop()
				w, updates = nw, nw.Updates()
				continue
			}
			if e == nil || e.Key() == self {
				continue
			}
			node := strings.TrimPrefix(e.Key(), "h.")
			if e.Operation() == jetstream.KeyValuePut {
				heard[node] = time.Now()
			} else {
				delete(heard, node)
			}
		case now := <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.NodeHeartbeat)
			if err := s.store.heartbeat(ctx); err != nil {
				s.log.Warn("ubiq node heartbeat failed", "err", err)
			}
			cancel()
			if updates == nil { // retry a failed watch
				if nw, err := s.kv.Watch(s.ctx, heartbeatKey("*")); err == nil {
					w.Stop()
					w, updates = nw, nw.Updates()
				}
			}
			for node, at := range heard {
				if now.Sub(at) >= s.cfg.NodeTimeout {
					delete(heard, node)
					s.sweepNode(node, now.Sub(at))
				}
			}
		}
	}
}

// sweepTimeout bounds one sweep of a dead node's keys, first or retried.
const sweepTimeout = time.Minute

// sweepNode deletes a dead node's keys in the background.
func (s *Server) sweepNode(node string, silent time.Duration) {
	s.mu.Lock() // Shutdown sets closed under mu before it waits for wg
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, sweepTimeout)
		defer cancel()
		rooms, err := s.store.sweepNode(ctx, node, s.tryWrite)
		if err != nil {
			// Its keys could not be listed: the whole sweep is retried,
			// with as long for each try as the first had.
			s.log.Warn("ubiq node stopped its heartbeat, but sweeping its keys failed: retrying", "node", node, "silent", silent, "err", err)
			s.retry.addJob(&retryJob{what: "sweep a dead node", timeout: sweepTimeout, do: func(ctx context.Context) error {
				rooms, err := s.store.sweepNode(ctx, node, s.tryWrite)
				if err != nil {
					return err
				}
				s.afterSweep(node, silent, rooms)
				// Here, not queued (cleanups): the retrier may run while
				// Shutdown waits for the connections and cleanups.
				for _, id := range rooms {
					s.removeEmptyLogged(ctx, id)
				}
				return nil
			}}, err)
			return
		}
		s.afterSweep(node, silent, rooms)
		for _, id := range rooms {
			s.removeIfEmpty(id, nil)
		}
	}()
}

// afterSweep counts and logs a dead node's sweep, which touched rooms.
func (s *Server) afterSweep(node string, silent time.Duration, rooms []string) {
	s.m.nodesSwept.Inc()
	s.m.keysSwept.Add(float64(len(rooms)))
	s.log.Warn("ubiq node stopped its heartbeat: removed its members, observers and room presence", "node", node, "silent", silent, "rooms", len(rooms))
}

// busFailed logs a publish on the bus that failed, within one log budget
// for the server (logGate): while the bus connection is down, every frame
// relayed to another node and every position fails, in every room, and
// the cause is the one connection they share.
func (s *Server) busFailed(what, room, peer string, err error) {
	s.busLogMu.Lock()
	defer s.busLogMu.Unlock()
	s.busLog.log(s.log, slog.LevelWarn, "Ubiq bus publish failed", "what", what, "room", room, "peer", peer, "err", err)
}

// acquire returns the active room id, starting it if needed.
func (s *Server) acquire(id string) (*room, error) { return s.take(id, true) }

// acquireActive returns room id if it is active (or starting) on this
// node, nil otherwise; it never starts one. (Rooms leave s.rooms with
// their last reference, so the check and the reference are one step.)
func (s *Server) acquireActive(id string) *room {
	r, _ := s.take(id, false)
	return r
}

// take adds a reference to room id, starting the room if it is not active
// and start is true.
func (s *Server) take(id string, start bool) (*room, error) {
	s.mu.Lock()
	r := s.rooms[id]
	if r == nil {
		if !start {
			s.mu.Unlock()
			return nil, nil
		}
		r = newRoom(s, id)
		s.rooms[id] = r
		s.m.rooms.Inc()
		s.mu.Unlock()
		r.start()
		s.mu.Lock()
	}
	r.refs++
	s.mu.Unlock()
	<-r.ready
	if r.err != nil {
		s.mu.Lock()
		r.refs--
		if s.rooms[id] == r {
			delete(s.rooms, id)
			s.m.rooms.Dec()
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("activate room %s: %w", id, r.err)
	}
	return r, nil
}

// active reports whether room id is active on this node.
func (s *Server) active(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rooms[id]
	return r != nil && r.refs > 0
}

// release drops one reference to r, stopping it with the last; then it
// returns a channel closed once the room goroutine has let go of the
// room's subscription, watch and presence key (nil if r still runs).
func (s *Server) release(r *room) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.refs--
	if r.refs == 0 && s.rooms[r.id] == r {
		delete(s.rooms, r.id)
		s.m.rooms.Dec()
		r.stop()
		return r.gone
	}
	return nil
}

// removeIfEmpty asks for the deletion of a room's state, in the
// background, once nobody is in it (cleanups), for by (the *conn that let
// go of it, nil for the node: the queue is served round-robin by asker),
// and returns a channel closed when that is done (nil if the room is held
// here: not empty).
func (s *Server) removeIfEmpty(id string, by *conn) <-chan struct{} {
	// A room this node holds has a local member or observer: not empty.
	// (The last local holder to release it calls this again.) This spares
	// the key listing, a JetStream consumer per call, on every cell change.
	if s.active(id) {
		return nil
	}
	if by == nil {
		return s.cleanups.ask(id, nil) // a nil *conn in an any is not nil
	}
	return s.cleanups.ask(id, by)
}

func (s *Server) delivered(n int) {
	if n > 0 {
		s.m.messagesOut.Add(float64(n))
	}
}

func (s *Server) register(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Serve accepts Ubiq TCP connections on l until l is closed or Shutdown.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return errors.New("ubiq: server closed")
	}
	s.lns = append(s.lns, l)
	s.mu.Unlock()
	return fanout.Accept(l, s.isClosed, s.ServeConn)
}

// ServeConn serves one Ubiq stream connection (TCP or TLS) in a new
// goroutine.
func (s *Server) ServeConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	s.serve(nc, newStreamSource(nc, s.cfg.MaxFrame), "tcp")
}

func (s *Server) serve(nc net.Conn, src frameSource, transport string) {
	// Counted in under mu, as Shutdown sets closed before it waits for
	// wg: a connection is never added while Shutdown waits.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c := &conn{s: s, nc: nc, src: src, transport: transport, session: newUUID(), started: time.Now(), done: make(chan struct{}),
			log: s.log.With("remote", nc.RemoteAddr().String(), "transport", transport)}
		c.serve()
	}()
}

// ServeWebSocket serves Ubiq over WebSocket on l, over TLS with Config.TLS
// when secure, until l is closed or Shutdown.
func (s *Server) ServeWebSocket(l net.Listener, secure bool) error {
	if secure {
		if s.cfg.TLS == nil {
			l.Close()
			return errors.New("ubiq: secure WebSocket needs Config.TLS")
		}
		l = tls.NewListener(l, s.cfg.TLS)
	}
	hs := &http.Server{Handler: s.WebSocketHandler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return errors.New("ubiq: server closed")
	}
	s.https = append(s.https, hs)
	s.mu.Unlock()
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Connections returns the number of open connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Shutdown stops accepting, closes every connection and waits for them
// (and their room departures; departure writes that failed and wait for
// a retry are tried once more) until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, l := range s.lns {
		l.Close()
	}
	hss := s.https
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, hs := range hss {
		hs.Close()
	}
	for _, c := range conns {
		c.close("server shutting down")
	}
	done := make(chan struct{})
	go func() {
		// Connections leave their rooms before the background work stops,
		// and departure writes that failed are retried meanwhile.
		s.wg.Wait()
		s.retry.final(ctx)
		s.cancel()
		<-s.liveDone
		<-s.retryDone
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		s.kv.Delete(ctx, heartbeatKey(s.node))
		cancel()
		<-s.swept
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.cancel()
		return ctx.Err()
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
