package bus

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
}

// HeadroomBytes is how much larger than Config.MaxPayload a message on the
// bus may be: room for NATS headers on a payload at the client limit, and
// for the metadata persist stores with an object.
const HeadroomBytes = 64 << 10

// Bus is a running embedded NATS server.
type Bus struct {
	srv    *server.Server
	secret string
	log    *slog.Logger
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
	opts := &server.Options{
		ServerName: cfg.Name,
		JetStream:  true,
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
	if !cfg.Insecure {
		opts.CustomClientAuthentication = &authenticator{secret: secret, verify: cfg.Verifier, log: cfg.Logger, onDeny: cfg.OnDeny}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configure NATS server: %w", err)
	}
	srv.SetLoggerV2(&logAdapter{l: cfg.Logger.With("component", "nats"), onViolation: cfg.OnViolation}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("NATS server did not become ready within 30s (is a port in use?)")
	}
	return &Bus{srv: srv, secret: secret, log: cfg.Logger}, nil
}

func randomSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate internal secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func splitHostPort(addr, what string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s address %q: %w", what, addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s address %q: bad port", what, addr)
	}
	return h, port, nil
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
// meta-leader is elected) and returns a JetStream context on nc.
func (b *Bus) JetStream(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return js, nil
		}
		b.log.Info("waiting for JetStream", "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("JetStream not available: %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
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
