package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/interest"
)

// TokenVerifier checks an xrealm token; *auth.Keys is one.
type TokenVerifier interface {
	Verify(token string) (*auth.Claims, error)
}

// Config configures the front end.
type Config struct {
	// NC is an in-process NATS connection with echo off (nats.NoEcho()).
	NC *nats.Conn
	// JS publishes persisted object messages durably; nil = plain publish.
	JS jetstream.JetStream
	// Realm is the realm whose object messages the persistence stream
	// stores; QoS 1 object messages of this realm are acknowledged only
	// after JetStream stored them.
	Realm    string
	Verifier TokenVerifier
	// Insecure accepts every connection with full rights (benchmarks only).
	Insecure   bool
	MaxPayload int // largest PUBLISH payload in bytes
	Writer     fanout.Options
	Logger     *slog.Logger
	Metrics    *Metrics // may be nil
	// SceneInterest, if set, returns the interest policy of a scene and its
	// recompute period, or nil for a scene without interest management.
	// It is asked when this node starts serving the scene.
	SceneInterest func(ns, scene string) (interest.Policy, time.Duration)
}

// Server is the MQTT front end of one node.
type Server struct {
	cfg Config
	hub *Hub
	log *slog.Logger
	m   *Metrics
	// denials logs refused actions, a bounded number of lines a second
	// for all connections together.
	denials auth.DenyLog

	mu      sync.Mutex
	clients map[clientKey]*conn // by user and client id, for session takeover
	conns   map[*conn]struct{}
	lns     []net.Listener
	closed  bool
	wg      sync.WaitGroup
}

// NewServer creates the front end.
func NewServer(cfg Config) (*Server, error) {
	if cfg.NC == nil {
		return nil, errors.New("mqtt: Config.NC is required")
	}
	if cfg.Verifier == nil && !cfg.Insecure {
		return nil, errors.New("mqtt: Config.Verifier is required unless Insecure")
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 1 << 20
	}
	if cfg.Writer.Clock == nil { // one clock for all of this server's connections
		cfg.Writer.Clock = fanout.NewClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	m := cfg.Metrics
	cfg.Writer.OnCoalesce = func(n int) { m.Coalesced.Add(float64(n)) }
	s := &Server{cfg: cfg, log: cfg.Logger, m: m, clients: map[clientKey]*conn{}, conns: map[*conn]struct{}{}}
	s.hub = NewHub(cfg.NC, cfg.Logger, func(n int) { s.m.MessagesOut.Add(float64(n)) })
	s.hub.interestFor = cfg.SceneInterest
	return s, nil
}

// Hub returns the server's hub.
func (s *Server) Hub() *Hub { return s.hub }

// Serve accepts connections on l until l is closed or Shutdown is called.
func (s *Server) Serve(l net.Listener, transport string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return errors.New("mqtt: server closed")
	}
	s.lns = append(s.lns, l)
	s.mu.Unlock()
	return fanout.Accept(l, s.isClosed, func(nc net.Conn) { s.ServeConn(nc, transport) })
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// ServeConn serves one client connection in a new goroutine.
func (s *Server) ServeConn(nc net.Conn, transport string) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c := newConn(s, nc, transport)
		c.serve()
	}()
}

// clientKey is what MQTT session takeover goes by: a client id of one
// user. Client ids are no secret (a client's id is the userClient level
// of the topics it publishes on, which everyone in the scene receives), so
// a connection takes over only from a connection of its own user: another
// user's connection with the same id is left alone, and both stay. An
// anonymous user's name is not unique either (anyone may ask for a token
// as anonymous-bob), so for anonymous users it is the token that must be
// the same (token holds its digest; "" for other users).
type clientKey struct{ user, id, token string }

func (c *conn) key() clientKey { return clientKey{c.user, c.clientID, c.anonToken} }

// register records c as the connection of its user and client id,
// closing an older connection of the same user with the same id (MQTT
// session takeover). It fails once the server is shutting down.
func (s *Server) register(c *conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	old := s.clients[c.key()]
	s.clients[c.key()] = c
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	if old != nil {
		old.close("session taken over by a new connection with the same client id")
	}
	return true
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	if s.clients[c.key()] == c {
		delete(s.clients, c.key())
	}
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes every connection (sending nothing more)
// and waits for their goroutines until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, l := range s.lns {
		l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close("server shutting down")
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connections returns the number of open connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func randomClientID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "xrealm-" + hex.EncodeToString(b)
}

// Kick closes the connections with client id clientID (of any user), as
// a network failure would: their last wills, if any, are published. It
// reports whether such a client was connected.
func (s *Server) Kick(clientID, reason string) bool {
	s.mu.Lock()
	var kicked []*conn
	for k, c := range s.clients {
		if k.id == clientID {
			kicked = append(kicked, c)
		}
	}
	s.mu.Unlock()
	for _, c := range kicked {
		c.close(reason)
	}
	return len(kicked) > 0
}
