package bus

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/xrealm/xrealm/auth"
)

// Config configures the embedded NATS server.
type Config struct {
	DataDir string // NATS keeps JetStream state in DataDir/jetstream
	Name    string // server name, unique in a cluster

	NATSAddr   string      // host:port for NATS clients; "" = no TCP listener
	NATSWSAddr string      // host:port for NATS over WebSocket; "" = none
	WSTLS      *tls.Config // TLS for the WebSocket listener; nil = plain

	ClusterName string   // "" = standalone
	ClusterAddr string   // host:port for routes
	Routes      []string // nats-route://host:port of other nodes

	// NoJetStream starts the server without JetStream, for plain NATS
	// only: a cluster node's check of the other nodes before it starts
	// its bus. Once a node has run JetStream in a cluster it is a peer of
	// the cluster's JetStream meta group, and stays one after it stops
	// (counted in the group's quorum) until an operator removes it.
	// JetStream cannot be turned on later: nats-server's EnableJetStream
	// on a running cluster node leaves the node out of its own list of
	// JetStream servers, and as meta leader it never places a stream
	// replica on itself (a stream of 3 replicas on 3 nodes then cannot
	// be placed).
	NoJetStream bool

	// MaxPayload is the largest message payload clients may send, in
	// bytes. The NATS server's own limit is HeadroomBytes above it, so that
	// a message at the limit still fits with the headers the bus adds, and
	// an object stored from it with its metadata.
	MaxPayload int

	Verifier TokenVerifier // checks client tokens; nil = clients need the internal secret
	Insecure bool          // no client authentication at all (benchmarks, dev)
	OnDeny   func()        // called for each refused client, e.g. to count it
	// OnViolation, if not nil, is called for each action of a connected
	// client that its permissions refuse: kind is "publish" or "subscribe".
	OnViolation func(kind string)
	Logger      *slog.Logger
	// Denials logs the refusals of NATS clients, the authenticator's lines
	// and the NATS server's own (authentication errors, permission
	// violations), a bounded number for the whole bus; nil = a DenyLog of
	// its own with the default bounds.
	Denials *auth.DenyLog
}

// HeadroomBytes is how much larger than Config.MaxPayload a message on the
// bus may be: room for NATS headers on a payload at the client limit, and
// for the metadata persist stores with an object.
const HeadroomBytes = 64 << 10

// Bus is a running embedded NATS server.
type Bus struct {
	srv       *server.Server
	secret    string
	sysSecret string // for ConnectSystem; "" on a bus without authentication
	log       *slog.Logger
	routes    []string     // the configured routes (Config.Routes) of a cluster node
	status    *routeStatus // the last route error the NATS server logged
}

// routeStatus keeps the last error line the NATS server logged about a
// route (a route it could not dial, one refused for another cluster name,
// a route to something that does not speak NATS): NATS only logs those,
// and a node whose routes all fail waits for JetStream without them.
type routeStatus struct {
	mu   sync.Mutex
	last string
	at   time.Time
}

func (r *routeStatus) set(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.at = msg, time.Now()
}

func (r *routeStatus) get() (string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.at
}

// routeLine reports whether a NATS server log line is about a route.
func routeLine(msg string) bool {
	return strings.Contains(msg, " - rid:") || strings.Contains(msg, "route")
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Bus, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	secret, err := randomSecret()
	if err != nil {
		return nil, err
	}
	sysSecret, err := randomSecret()
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		JetStream:  !cfg.NoJetStream,
		StoreDir:   cfg.DataDir, // NATS keeps its state in DataDir/jetstream
		NoSigs:     true,
		MaxPayload: int32(cfg.MaxPayload + HeadroomBytes),
	}
	switch {
	case cfg.NATSAddr != "":
		if opts.Host, opts.Port, err = splitHostPort(cfg.NATSAddr, "nats"); err != nil {
			return nil, err
		}
	case cfg.ClusterName != "":
		// nats-server starts routing only once its client listener is up:
		// a cluster node without a NATS address listens on a random
		// loopback port that nobody is told about.
		opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	default:
		opts.DontListen = true
	}
	if cfg.NATSWSAddr != "" {
		if opts.Websocket.Host, opts.Websocket.Port, err = splitHostPort(cfg.NATSWSAddr, "nats-ws"); err != nil {
			return nil, err
		}
		if cfg.WSTLS != nil {
			opts.Websocket.TLSConfig = cfg.WSTLS
		} else {
			opts.Websocket.NoTLS = true
		}
	}
	if cfg.ClusterName != "" {
		opts.Cluster.Name = cfg.ClusterName
		if opts.Cluster.Host, opts.Cluster.Port, err = splitHostPort(cfg.ClusterAddr, "cluster"); err != nil {
			return nil, err
		}
		if len(cfg.Routes) > 0 {
			opts.Routes = server.RoutesFromStr(strings.Join(cfg.Routes, ","))
		}
	}
	if cfg.Denials == nil {
		cfg.Denials = &auth.DenyLog{}
	}
	var srv *server.Server
	if !cfg.Insecure {
		opts.CustomClientAuthentication = &authenticator{secret: secret, verify: cfg.Verifier, log: cfg.Logger, onDeny: cfg.OnDeny, denials: cfg.Denials,
			sysSecret: sysSecret, sys: func() *server.Account { return srv.SystemAccount() }}
	} else {
		sysSecret = "" // no authentication: no way into the system account
	}
	// NATS binds its listeners itself, and one it cannot bind shows only
	// in its log: bind each address once first, so that a port in use
	// fails the start at once with the bind error, as the other listeners
	// do.
	if checkBinds {
		for _, l := range []struct {
			what string
			addr string
			port int
		}{
			{"nats", cfg.NATSAddr, opts.Port}, {"nats-ws", cfg.NATSWSAddr, opts.Websocket.Port}, {"cluster", cfg.ClusterAddr, opts.Cluster.Port},
		} {
			if l.port <= 0 || l.addr == "" {
				continue // off, or a port of the system's choosing
			}
			if err := checkBind(l.addr); err != nil {
				return nil, fmt.Errorf("%s listener on %s: %w", l.what, l.addr, err)
			}
		}
	}
	srv, err = server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configure NATS server: %w", err)
	}
	fatal := make(chan string, 1)
	status := &routeStatus{}
	srv.SetLoggerV2(&logAdapter{l: cfg.Logger.With("component", "nats"), onViolation: cfg.OnViolation, denials: cfg.Denials, fatal: fatal, routes: status}, false, false, false)
	go srv.Start()
	if err := waitReady(srv, fatal, readyTimeout); err != nil {
		srv.Shutdown()
		return nil, err
	}
	b := &Bus{srv: srv, secret: secret, sysSecret: sysSecret, log: cfg.Logger, status: status}
	if cfg.ClusterName != "" {
		b.routes = cfg.Routes
	}
	return b, nil
}

// checkBinds turns off the bind check of Start in a test of waitReady's
// fallback.
var checkBinds = true

const readyTimeout = 30 * time.Second

// checkBind binds addr and lets it go.
func checkBind(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// waitReady waits until srv accepts connections on all its listeners. A
// fatal error NATS logs meanwhile (a listener it could not bind, should the
// port be taken after checkBind) ends the wait at once with that error.
func waitReady(srv *server.Server, fatal <-chan string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !srv.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return fmt.Errorf("NATS server failed to start: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("NATS server did not become ready within %s", timeout)
		}
	}
	return nil
}

func randomSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate internal secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// splitHostPort splits a listener address for the NATS options. Port 0
// becomes server.RANDOM_PORT: to NATS, 0 means its default port for
// clients and no listener at all for routes and WebSocket.
func splitHostPort(addr, what string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s address %q: %w", what, addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s address %q: bad port", what, addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return h, port, nil
}

// WaitRoute waits until a cluster node has a route to at least one other
// node. While it waits it logs, at first and then every
// jetStreamLogEvery, the node's route status (RouteStatus); the error it
// returns when ctx ends says the same. It returns at once for a node that
// is not in a cluster.
func (b *Bus) WaitRoute(ctx context.Context) error {
	if len(b.routes) == 0 {
		return nil
	}
	var logged time.Time
	for len(b.RouteNames()) == 0 {
		if logged.IsZero() || time.Since(logged) >= jetStreamLogEvery {
			logged = time.Now()
			b.log.Info("waiting for a route to another node of the cluster", "cluster", b.RouteStatus())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no route to another node of the cluster: %w (%s)", ctx.Err(), b.RouteStatus())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Server returns the embedded server.
func (b *Bus) Server() *server.Server { return b.srv }

// Connect opens an in-process connection with full rights for an internal
// service.
func (b *Bus) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{
		nats.InProcessServer(b.srv),
		nats.Name(name),
		nats.Token(b.secret),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(64 << 20),
		nats.PingInterval(20 * time.Second),
	}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("in-process NATS connection %q: %w", name, err)
	}
	return nc, nil
}

// JetStream waits until JetStream answers (in a cluster, until the
// meta-leader is elected) and returns a JetStream context on nc. While it
// waits it logs, at first and then every jetStreamLogEvery, why: in a
// cluster, the other nodes this one has routes to and the last route error
// (see RouteStatus); the error it returns when ctx ends says the same.
func (b *Bus) JetStream(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var logged time.Time
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return js, nil
		}
		if logged.IsZero() || time.Since(logged) >= jetStreamLogEvery {
			logged = time.Now()
			if st := b.RouteStatus(); st != "" {
				b.log.Info("waiting for JetStream", "err", err, "cluster", st)
			} else {
				b.log.Info("waiting for JetStream", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			if st := b.RouteStatus(); st != "" {
				return nil, fmt.Errorf("JetStream not available: %w (%s)", err, st)
			}
			return nil, fmt.Errorf("JetStream not available: %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// jetStreamLogEvery is how often JetStream logs that it still waits.
const jetStreamLogEvery = 10 * time.Second

// RouteNames returns the names of the other nodes this node has a route
// to, sorted, each once.
func (b *Bus) RouteNames() []string {
	rz, err := b.srv.Routez(nil)
	if err != nil {
		return nil
	}
	var names []string
	for _, r := range rz.Routes {
		if r.RemoteName != "" && !slices.Contains(names, r.RemoteName) {
			names = append(names, r.RemoteName)
		}
	}
	slices.Sort(names)
	return names
}

// RouteStatus describes a cluster node's routes for a message about
// waiting for the cluster: the other nodes it is connected to, its
// configured routes, and the last route error the NATS server logged. It
// is "" for a node that is not in a cluster.
func (b *Bus) RouteStatus() string {
	if len(b.routes) == 0 {
		return ""
	}
	var sb strings.Builder
	if names := b.RouteNames(); len(names) == 0 {
		sb.WriteString("connected to no other node")
	} else {
		fmt.Fprintf(&sb, "connected to %d other node(s) (%s)", len(names), strings.Join(names, ", "))
	}
	fmt.Fprintf(&sb, "; --routes %s", strings.Join(b.routes, ","))
	if last, at := b.status.get(); last != "" {
		fmt.Fprintf(&sb, "; last route error, %s ago: %s", time.Since(at).Round(time.Second), last)
	}
	return sb.String()
}

// ConnectSystem opens an in-process connection to the NATS system account,
// for requests only that account may make (JetStream's
// $JS.API.SERVER.REMOVE). A bus without authentication (Config.Insecure)
// has no way into it.
func (b *Bus) ConnectSystem(name string, opts ...nats.Option) (*nats.Conn, error) {
	if b.sysSecret == "" {
		return nil, fmt.Errorf("in-process NATS system connection %q: the bus runs without authentication (--insecure), which admits no connection to the system account", name)
	}
	all := append([]nats.Option{
		nats.InProcessServer(b.srv),
		nats.Name(name),
		nats.Token(b.sysSecret),
	}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("in-process NATS system connection %q: %w", name, err)
	}
	return nc, nil
}

// ClientURL returns the URL of the NATS TCP listener, or "" without one.
func (b *Bus) ClientURL() string {
	if b.srv.Addr() == nil {
		return ""
	}
	return b.srv.ClientURL()
}

// Shutdown stops the server; JetStream state is flushed to disk.
func (b *Bus) Shutdown() {
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}
