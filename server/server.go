// Package server composes xrealm's parts into the program `xrealm serve`
// runs: the embedded NATS bus with JetStream, the signing keys and scene
// settings, the persistence store, the MQTT front end on TCP, TLS and
// WebSocket, and the HTTP and HTTPS routes.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/cpuload"
	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/httpapi"
	"github.com/xrealm/xrealm/mqtt"
	"github.com/xrealm/xrealm/persist"
	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/tlscert"
	"github.com/xrealm/xrealm/ubiq"
	"github.com/xrealm/xrealm/webclient"
)

// Server is a running xrealm node.
type Server struct {
	cfg  Config
	log  *slog.Logger
	bus  *bus.Bus
	ncs  []*nats.Conn
	mqtt *mqtt.Server
	ubiq *ubiq.Server
	http []*http.Server
	lns  []net.Listener
	wg   sync.WaitGroup

	Keys     *auth.Keys
	Store    *persist.Store
	Settings *auth.SettingsStore
	Registry *prometheus.Registry
	Mux      *http.ServeMux
	SFU      *sfu.Node

	stopStore context.CancelFunc
	instance  string   // this run of the node, in its cluster identity (identity.go)
	dataLock  *os.File // the lock on cfg.DataDir (lockDataDir), held until Close

	askMu     sync.Mutex
	lastAsker string // the instance whose identity request serveIdentity handled last (firstAsk)

	// closing is set by Close before it closes the internal connections;
	// an internal connection that closes before that has failed the node
	// (fail).
	closing atomic.Bool
	// frontsShut is set by Shutdown once it has shut the front ends down,
	// so that Close does not do it again.
	frontsShut atomic.Bool
	closed     sync.WaitGroup // one per internal connection, until its close handler has run
	failOnce   sync.Once
	failed     chan struct{} // closed by fail
	failErr    error         // set before failed is closed
	// handler is what the HTTP and HTTPS listeners serve: starting until
	// Start has made Mux, then Mux.
	handler atomic.Pointer[routes]
}

// routes is the handler the HTTP listeners serve, in a struct so that it
// can be swapped atomically.
type routes struct{ http.Handler }

// starting answers every request with 503 while the node starts; a health
// check gets {"status":"starting"}.
func starting(node string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		if r.URL.Path == "/healthz" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"status":"starting","node":%q}`+"\n", node)
			return
		}
		http.Error(w, "xrealm is starting; try again shortly", http.StatusServiceUnavailable)
	})
}

// Start starts a node and returns once every listener accepts connections
// and the persistence store is ready.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, failed: make(chan struct{}), instance: newInstance()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if cfg.Insecure {
		log.Warn("AUTHENTICATION IS OFF (--insecure): anyone can read and write every scene. Use only for benchmarks and development.")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if s.dataLock, err = lockDataDir(cfg.DataDir); err != nil {
		var nl *noLockError
		if !errors.As(err, &nl) {
			return nil, err
		}
		log.Warn(err.Error())
	}
	if s.Keys, err = auth.LoadOrCreateKeys(cfg.DataDir); err != nil {
		return nil, err
	}
	var tlsConf *tls.Config
	if cfg.HTTPSAddr != "" || cfg.MQTTSAddr != "" || cfg.UbiqWSSAddr != "" {
		if tlsConf, err = tlscert.Load(cfg.TLSCert, cfg.TLSKey, cfg.DataDir, []string{cfg.PublicHost}); err != nil {
			return nil, err
		}
	}

	// Bind the front ends' listeners before anything starts, so that a
	// port in use fails the start at once.
	bound := map[string]net.Listener{}
	for _, b := range []struct{ what, addr string }{
		{"http", cfg.HTTPAddr}, {"https", cfg.HTTPSAddr}, {"mqtt", cfg.MQTTAddr}, {"mqtts", cfg.MQTTSAddr},
		{"mqtt-ws", cfg.MQTTWSAddr}, {"ubiq", cfg.UbiqAddr}, {"ubiq-ws", cfg.UbiqWSAddr}, {"ubiq-wss", cfg.UbiqWSSAddr},
	} {
		if b.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", b.addr)
		if err != nil {
			return nil, fmt.Errorf("%s listener on %s: %w", b.what, b.addr, err)
		}
		s.lns = append(s.lns, l)
		bound[b.what] = l
	}
	if cfg.ClusterName != "" {
		// The bus binds the NATS listeners only after the cluster identity
		// check, which waits for a route to another node: check them now,
		// or a port in use fails the start only once the others are up.
		for _, b := range []struct{ what, addr string }{{"nats", cfg.NATSAddr}, {"nats-ws", cfg.NATSWSAddr}} {
			if b.addr == "" {
				continue
			}
			l, err := net.Listen("tcp", b.addr)
			if err != nil {
				return nil, fmt.Errorf("%s listener on %s: %w", b.what, b.addr, err)
			}
			l.Close()
		}
	}

	// Serve on the listeners bound at the start: HTTP and HTTPS at once,
	// answering 503 until all is ready (a health check or a client gets an
	// answer while the node waits for its cluster's other nodes, rather
	// than a connection that hangs), the others once all is ready.
	type serveFn func(net.Listener) error
	listen := func(what string, tlsc *tls.Config, serve serveFn) {
		l, ok := bound[what]
		if !ok {
			return
		}
		if tlsc != nil {
			l = tls.NewListener(l, tlsc)
		}
		log.Info("listening", "what", what, "addr", l.Addr().String())
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				log.Error("listener stopped", "what", what, "err", err)
			}
		}()
	}
	httpServe := func(h http.Handler) serveFn {
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		s.http = append(s.http, hs)
		return hs.Serve
	}
	mqttServe := func(transport string) serveFn {
		return func(l net.Listener) error { return s.mqtt.Serve(l, transport) }
	}
	s.handler.Store(&routes{starting(cfg.nodeName())})
	served := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.handler.Load().ServeHTTP(w, r) })
	listen("http", nil, httpServe(served))
	listen("https", tlsConf, httpServe(served))

	s.Registry = prometheus.NewRegistry()
	s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	natsDenials := prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_nats_auth_denials_total", Help: "NATS client connections refused by token authentication."})
	s.Registry.MustRegister(natsDenials)
	mqttMetrics := mqtt.NewMetrics(s.Registry) // xrealm_auth_denials_total counts every front end's refusals
	busCfg := bus.Config{
		OnDeny: func() {
			natsDenials.Inc()
			mqttMetrics.AuthDenials.WithLabelValues("nats-connect").Inc()
		},
		OnViolation: func(kind string) { mqttMetrics.AuthDenials.WithLabelValues("nats-" + kind).Inc() },
		DataDir:     cfg.DataDir, Name: cfg.nodeName(),
		NATSAddr: cfg.NATSAddr, NATSWSAddr: cfg.NATSWSAddr,
		ClusterName: cfg.ClusterName, ClusterAddr: cfg.ClusterAddr, Routes: cfg.Routes,
		MaxPayload: cfg.MaxPayload, Verifier: s.Keys, Insecure: cfg.Insecure,
		Logger: log,
	}
	if cfg.ClusterName != "" {
		// Before this node runs JetStream: a node of another realm would
		// take over the persistence stream, and a node that has run
		// JetStream in the cluster stays a peer of its meta group after
		// it stops.
		if err := s.checkClusterFirst(ctx, busCfg); err != nil {
			return nil, err
		}
	}
	if s.bus, err = bus.Start(busCfg); err != nil {
		return nil, err
	}
	s.Registry.MustRegister(s.bus.Collector())
	svc, err := s.connect("xrealm-services")
	if err != nil {
		return nil, err
	}
	if cfg.ClusterName != "" {
		if err := s.serveIdentity(svc); err != nil {
			return nil, err
		}
		if err := s.serveRemovePeer(svc); err != nil {
			return nil, err
		}
	}
	front, err := s.connect("xrealm-mqtt", nats.NoEcho())
	if err != nil {
		return nil, err
	}
	js, err := s.bus.JetStream(ctx, svc)
	if err != nil {
		return nil, err
	}
	replicas, self := cfg.replicas(ctx)
	if len(self) > 0 {
		log.Info("not counting routes to this node's own cluster address as nodes", "routes", self, "cluster_addr", cfg.ClusterAddr, "replicas", replicas)
	}
	if cfg.Replicas > 0 && cfg.ClusterName != "" {
		// Every node's --replicas applies to the whole cluster's state:
		// one node given fewer lowers them for all.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if n, err := existingReplicas(actx, js); err == nil && n > cfg.Replicas {
			log.Warn("--replicas lowers the replicas of the whole cluster's scene state, for every node: fewer nodes may fail before stored objects become unavailable or are lost; "+
				"leave --replicas out to keep the existing replicas", "replicas", cfg.Replicas, "existing", n)
		}
		cancel()
	}
	if cfg.Replicas <= 0 {
		if err := retry(ctx, log, "read the replicas of existing scene state", replicas, func(ctx context.Context) error {
			replicas, err = defaultReplicas(ctx, js, replicas, log)
			return err
		}); err != nil {
			return nil, err
		}
	}
	if err := retry(ctx, log, "open scene settings", replicas, func(ctx context.Context) error {
		s.Settings, err = auth.OpenSettings(ctx, js, replicas)
		return err
	}); err != nil {
		return nil, err
	}
	if err := retry(ctx, log, "open persistence store", replicas, func(ctx context.Context) error {
		s.Store, err = persist.Open(ctx, persist.Config{JS: js, NC: svc, Replicas: replicas, Realms: []string{cfg.Realm}, Logger: log, Registerer: s.Registry})
		return err
	}); err != nil {
		return nil, err
	}
	storeCtx, stop := context.WithCancel(context.Background())
	s.stopStore = stop
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.Store.Run(storeCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("persistence applier stopped", "err", err)
		}
	}()

	// The MQTT front end's lingering writes keep to a budget (the bus's
	// isolation benchmark: many connections with small fan-out are bound by
	// writes and reads, not deliveries); the Ubiq front end has a clock of
	// its own, without one.
	ubiqWriter := cfg.Writer
	if cfg.Writer.Clock == nil {
		cfg.Writer.Clock = fanout.NewBudgetClock(cfg.writeBudget())
		ubiqWriter.Clock = fanout.NewClock()
		// Spend CPU on latency while the machine has it to spare.
		if g, err := cpuload.Machine(); err == nil {
			cfg.Writer.Clock.FollowLoad(g)
			if l := g.Limit(); l > 0 {
				log.Info("MQTT write budget follows the CPU use of this process's cgroup against its limit, and the machine's", "cpus", l)
			}
		} else {
			log.Info("MQTT write budget does not follow the machine's CPU load", "err", err)
		}
	}
	if cfg.UbiqLinger != 0 {
		ubiqWriter.Linger = cfg.UbiqLinger
	}
	// An MQTT connection's queue holds at least the largest PUBLISH the
	// node lets through: with --max-payload above the byte bound, every
	// copy of such a message to a busy or WebSocket connection would be
	// dropped, the publisher acknowledged.
	if cfg.Writer.MaxBytes <= 0 {
		cfg.Writer.MaxBytes = fanout.DefaultMaxBytes
	}
	cfg.Writer.MaxBytes = max(cfg.Writer.MaxBytes, mqtt.MaxPublishSize(cfg.MaxPayload))
	s.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xrealm_mqtt_write_linger_stretch",
		Help: "Factor by which the write budget stretches the MQTT connections' write linger (1: not at all)."}, cfg.Writer.Clock.Stretch))
	s.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xrealm_mqtt_write_budget_boost",
		Help: "Factor by which the MQTT write budget is raised while the machine's CPUs have room (1: not at all)."}, cfg.Writer.Clock.Boost))
	s.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "xrealm_mqtt_lingering_writes_total",
		Help: "Writes that ended an MQTT connection's write linger (the writes the write budget counts)."}, func() float64 { return float64(cfg.Writer.Clock.Writes()) }))
	s.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "xrealm_mqtt_lingering_writes_behind_total",
		Help: "Lingering MQTT writes made more than 10 ms late or into a full socket: the node or its readers not keeping up."}, func() float64 { return float64(cfg.Writer.Clock.Behind()) }))
	frontJS, err := s.bus.JetStream(ctx, front)
	if err != nil {
		return nil, err
	}
	if s.mqtt, err = mqtt.NewServer(mqtt.Config{
		NC: front, JS: frontJS, Realm: cfg.Realm, Verifier: s.Keys, Insecure: cfg.Insecure,
		MaxPayload: cfg.MaxPayload, Writer: cfg.Writer, Logger: log.With("component", "mqtt"),
		Metrics:       mqttMetrics,
		SceneInterest: s.sceneInterest,
	}); err != nil {
		return nil, err
	}
	s.Registry.MustRegister(s.mqtt.ConnectionCollector())

	ubiqNC, err := s.connect("xrealm-ubiq", nats.NoEcho())
	if err != nil {
		return nil, err
	}
	ubiqJS, err := s.bus.JetStream(ctx, ubiqNC)
	if err != nil {
		return nil, err
	}
	if err := retry(ctx, log, "open Ubiq room state", replicas, func(ctx context.Context) error {
		s.ubiq, err = ubiq.NewServer(ctx, ubiq.Config{
			NC: ubiqNC, JS: ubiqJS, TLS: tlsConf, ICEServers: cfg.UbiqICEServers, Replicas: replicas,
			Writer: ubiqWriter, Logger: log.With("component", "ubiq"), Registerer: s.Registry,
		})
		return err
	}); err != nil {
		return nil, err
	}

	access := &httpapi.Access{Realm: cfg.Realm, Keys: s.Keys, Settings: s.Settings, Insecure: cfg.Insecure,
		Log: log.With("component", "http"), Denials: mqttMetrics.AuthDenials.WithLabelValues("http")}
	s.Mux = http.NewServeMux()
	httpapi.New(httpapi.Config{Realm: cfg.Realm, PublicHost: cfg.PublicHost, Access: access, Settings: s.Settings, TokenTTL: cfg.TokenTTL, Logger: log}).Register(s.Mux)
	s.Mux.Handle("/persist/", s.Store.Handler(access.Scene))
	s.Mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	s.Mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := s.Err(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"status":"failed","node":%q,"error":%q}`+"\n", cfg.nodeName(), err.Error())
			return
		}
		fmt.Fprintf(w, `{"status":"ok","node":%q,"mqtt_connections":%d}`+"\n", cfg.nodeName(), s.mqtt.Connections())
	})
	s.Mux.Handle("/mqtt", s.mqtt.WebSocketHandler("ws"))
	s.Mux.Handle("/mqtt/", s.mqtt.WebSocketHandler("ws"))

	sfuNC, err := s.connect("xrealm-sfu")
	if err != nil {
		return nil, err
	}
	// The SFU node runs until Close: ctx bounds the start only (the
	// node's own start checks have their own time limits), and a node
	// whose context ended stopped announcing itself, and its session
	// manager then dropped it as dead.
	if s.SFU, err = sfu.Start(context.WithoutCancel(ctx), sfu.Config{
		NC: sfuNC, ID: sfuID(cfg.nodeName()), Site: cfg.Site, Manager: true, MaxClients: cfg.SFUMaxClients,
		Authorize: sfuAccess(access), Registerer: s.Registry, Logger: log.With("component", "sfu"),
	}); err != nil {
		return nil, fmt.Errorf("start SFU: %w", err)
	}
	s.Mux.Handle("/sfu/ws", s.SFU.Handler())
	s.Mux.Handle("/", webclient.Handler(webclient.Dir()))

	// The HTTP and HTTPS listeners have answered since the start; now
	// they serve the routes.
	s.handler.Store(&routes{s.Mux})
	listen("mqtt", nil, mqttServe("tcp"))
	listen("mqtts", tlsConf, mqttServe("tls"))
	listen("mqtt-ws", nil, httpServe(s.mqtt.WebSocketHandler("ws")))
	listen("ubiq", nil, s.ubiq.Serve)
	listen("ubiq-ws", nil, httpServe(s.ubiq.WebSocketHandler()))
	listen("ubiq-wss", tlsConf, httpServe(s.ubiq.WebSocketHandler()))
	log.Info("xrealm is ready", "node", cfg.nodeName(), "realm", cfg.Realm, "data", cfg.DataDir, "replicas", replicas, "cluster", cfg.ClusterName)
	return s, nil
}

// sfuID turns a node name into an SFU node id (letters, digits, '-', '_').
func sfuID(name string) string {
	id := []byte(name)
	for i, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			id[i] = '-'
		}
	}
	if len(id) == 0 {
		return "xrealm"
	}
	if len(id) > 64 {
		id = id[:64]
	}
	return string(id)
}

// connect opens an internal connection to the node's bus. The node's
// services depend on it for their whole life: NATS closes a connection
// for good after a protocol error (a subject over its control-line limit,
// say), so one that closes while the node runs fails the node (Failed)
// instead of leaving it to serve without its services.
func (s *Server) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	var handled sync.Once
	s.closed.Add(1)
	done := func() { handled.Do(s.closed.Done) }
	opts = append(opts, nats.ClosedHandler(func(nc *nats.Conn) {
		defer done()
		if s.closing.Load() {
			return
		}
		why := "closed"
		if err := nc.LastError(); err != nil {
			why = err.Error()
		}
		s.fail(fmt.Errorf("the internal NATS connection %q of the node's services closed (%s); the node cannot serve without it and must be restarted", name, why))
	}))
	nc, err := s.bus.Connect(name, opts...)
	if err != nil {
		done()
		return nil, err
	}
	s.ncs = append(s.ncs, nc)
	return nc, nil
}

// defaultReplicas returns the replicas a node without --replicas opens its
// JetStream state with: def (DefaultReplicas), or the replicas the scene
// settings bucket already has if that is more, so that a node that joins a
// cluster knowing fewer routes than the cluster has nodes does not shrink
// the replicas of the cluster's state.
func defaultReplicas(ctx context.Context, js jetstream.JetStream, def int, log *slog.Logger) (int, error) {
	n, err := existingReplicas(ctx, js)
	if err != nil {
		return 0, err
	}
	if n > def {
		log.Info("keeping the replicas of the existing scene state", "replicas", n, "default", def)
		return n, nil
	}
	return def, nil
}

// existingReplicas returns the replicas of the existing scene state (the
// scene settings bucket's), or 0 if there is none yet.
func existingReplicas(ctx context.Context, js jetstream.JetStream) (int, error) {
	st, err := js.Stream(ctx, "KV_"+auth.SettingsBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().Config.Replicas, nil
}

// Waits between the attempts of retry, and between its log lines.
const (
	retryFirstWait = 500 * time.Millisecond
	retryMaxWait   = 2 * time.Second
	retryLogEvery  = 10 * time.Second
)

// retry runs f until it succeeds, fails for good (permanent) or ctx ends;
// in a cluster, JetStream assets cannot be created until enough peers have
// joined. The wait
// between attempts doubles from retryFirstWait to retryMaxWait, and a line
// is logged for the first failure and then at most every retryLogEvery.
// When JetStream cannot place replicas copies (fewer JetStream servers in
// the cluster than replicas), the line is a warning and it, and the error
// once ctx ends, say what to do. That advice stays once any attempt has
// given cause for it: a later attempt may fail otherwise (JetStream not
// available while the cluster elects its meta leader, a timeout) without
// there being more servers. The first attempt that fails for want of
// servers is logged at once, even within retryLogEvery of the last line.
func retry(ctx context.Context, log *slog.Logger, what string, replicas int, f func(ctx context.Context) error) error {
	wait := retryFirstWait
	var logged time.Time
	var hint string
	var placementErr error // the last error that gave the hint
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if permanent(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		h := placementHint(err, replicas)
		first := h != "" && hint == ""
		if h != "" {
			hint, placementErr = h, err
		}
		if attempt == 1 || first || time.Since(logged) >= retryLogEvery {
			logged = time.Now()
			if hint != "" {
				log.Warn("retrying", "what", what, "attempt", attempt, "err", err, "hint", hint)
			} else {
				log.Info("retrying", "what", what, "attempt", attempt, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			switch {
			case hint == "":
				return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
			case h != "":
				return fmt.Errorf("%s: %s; gave up: %w (last error: %v)", what, hint, ctx.Err(), err)
			default:
				return fmt.Errorf("%s: %s; gave up: %w (last error: %v; last placement error: %v)", what, hint, ctx.Err(), err, placementErr)
			}
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMaxWait)
	}
}

// permanent reports whether err is one that no later attempt can get past:
// JetStream's refusal of the configuration asked for (replicas > 1 on a
// node that is not in a cluster, a negative replica count, an invalid
// stream configuration, subjects that overlap another stream's, a bad
// request). Waiting for peers, for a meta leader or for an answer is not.
func permanent(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jsErrReplicasNotSupported, jsErrReplicasNegative, jsErrStreamInvalidConfig, jsErrSubjectOverlap, jsErrBadRequest:
		return true
	}
	return false
}

// JetStream API error codes of configurations JetStream refuses for good
// (nats-server's errors.json).
const (
	jsErrBadRequest           jetstream.ErrorCode = 10003 // bad request
	jsErrStreamInvalidConfig  jetstream.ErrorCode = 10052 // stream configuration invalid
	jsErrSubjectOverlap       jetstream.ErrorCode = 10065 // subjects overlap with an existing stream
	jsErrReplicasNotSupported jetstream.ErrorCode = 10074 // replicas > 1 not supported in non-clustered mode
	jsErrReplicasNegative     jetstream.ErrorCode = 10133 // replicas count cannot be negative
)

// jsErrNoPeers is the JetStream API error code of a stream or consumer that
// cannot be placed on enough servers ("no suitable peers for placement").
const jsErrNoPeers jetstream.ErrorCode = 10005

// placementHint returns what to do about err if it is JetStream's refusal
// to place replicas copies of a stream, and "" otherwise.
func placementHint(err error, replicas int) string {
	var apiErr *jetstream.APIError
	if !(errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoPeers) && !strings.Contains(err.Error(), "no suitable peers") {
		return ""
	}
	return fmt.Sprintf("the stream needs %d replicas but the cluster has fewer JetStream servers that can hold one: "+
		"start more nodes, or set --replicas to at most the number of nodes "+
		"(without --replicas a node uses one per node it knows of, itself and each of its --routes to another node, at most %d)",
		replicas, MaxDefaultReplicas)
}

// Addrs returns the bound address of each listener, in the order
// http, https, mqtt, mqtts, mqtt-ws (skipping those turned off).
func (s *Server) Addrs() []net.Addr {
	var out []net.Addr
	for _, l := range s.lns {
		out = append(out, l.Addr())
	}
	return out
}

// Shutdown stops the node gracefully: listeners first, then connections,
// the persistence applier and finally the bus, which flushes JetStream.
func (s *Server) Shutdown(ctx context.Context) error {
	// Each error names the part that did not stop in time: `xrealm
	// serve` exited with a bare "context deadline exceeded".
	var errs []error
	for _, hs := range s.http {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: HTTP server: requests still running: %w", err))
		}
	}
	if s.mqtt != nil {
		if err := s.mqtt.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: MQTT front end: %w", err))
		}
	}
	if s.ubiq != nil {
		if err := s.ubiq.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: Ubiq front end: %w", err))
		}
	}
	s.frontsShut.Store(true)
	s.Close()
	return errors.Join(errs...)
}

// waitTimeout waits for wg, or for d at most.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	select {
	case <-ch:
	case <-time.After(d):
	}
}

// fail marks the node as failed with err, once: Failed is closed, Err
// returns err, and /healthz answers 503 with it.
func (s *Server) fail(err error) {
	s.failOnce.Do(func() {
		s.log.Error("node failed", "err", err)
		s.failErr = err
		close(s.failed)
	})
}

// Failed is closed when the node has failed while running (an internal
// connection it cannot do without has closed); Err says why. The caller
// should shut the node down and report the error: `xrealm serve` exits
// with it, so that a supervisor restarts the node.
func (s *Server) Failed() <-chan struct{} { return s.failed }

// Err returns why the node failed, or nil while it has not.
func (s *Server) Err() error {
	select {
	case <-s.failed:
		return s.failErr
	default:
		return nil
	}
}

// Close stops everything at once.
func (s *Server) Close() {
	s.closing.Store(true)
	if !s.frontsShut.Load() {
		// The front ends close their listeners and connections, and stop
		// their background work, without waiting, so that no client
		// connection is left open on a node without a bus.
		now, cancel := context.WithCancel(context.Background())
		cancel()
		if s.mqtt != nil {
			s.mqtt.Shutdown(now)
		}
		if s.ubiq != nil {
			s.ubiq.Shutdown(now)
		}
	}
	for _, l := range s.lns {
		l.Close()
	}
	for _, hs := range s.http {
		hs.Close()
	}
	if s.SFU != nil {
		s.SFU.Close()
	}
	if s.stopStore != nil {
		s.stopStore()
	}
	for _, nc := range s.ncs {
		nc.Close()
	}
	// Their close handlers run on NATS's own goroutines: once they have,
	// a closed node can no longer be marked failed.
	waitTimeout(&s.closed, 5*time.Second)
	s.wg.Wait()
	if s.bus != nil {
		s.bus.Shutdown()
	}
	if s.dataLock != nil {
		s.dataLock.Close() // releases the lock, once the bus has let go of the directory
		s.dataLock = nil
	}
}

// sfuAccess lets a WebSocket signal for the SFU session of the scene its URL
// names (/sfu/ws?scene={namespace}/{scene}) if the request may read that
// scene, with the same rules as the scene's other routes: a token (the one
// in the first offer, else the Bearer header or the mqtt_token cookie,
// which a browser sends with the socket), or the scene's settings; a token
// for the scene binds its holder to the client id of its userclient
// (httpapi.Access.SceneClients, sfu.NameOf).
func sfuAccess(access *httpapi.Access) func(r *http.Request, session, client, token string) error {
	return func(r *http.Request, session, client, token string) error {
		if access.Insecure {
			return nil
		}
		ns, scene, ok := strings.Cut(r.URL.Query().Get("scene"), "/")
		if !ok || ns == "" || scene == "" || strings.Contains(scene, "/") {
			return fmt.Errorf("sfu: the WebSocket URL must name its scene, /sfu/ws?scene={namespace}/{scene}; got scene=%q", r.URL.Query().Get("scene"))
		}
		if want := sfu.SessionOf(ns, scene); session != want {
			return fmt.Errorf("sfu: session %q is not the session of scene %s/%s, %q", session, ns, scene, want)
		}
		b, err := access.SceneClients(r, token, ns, scene)
		if err != nil || b.Any || slices.ContainsFunc(b.IDs, func(id string) bool { return sfu.NameOf(id) == client }) {
			return err
		}
		ids := make([]string, len(b.IDs))
		for i, id := range b.IDs {
			ids[i] = sfu.NameOf(id)
		}
		return access.Refused(r, fmt.Errorf("%w: user %s may not act as client %q in scene %s/%s's SFU session: its token binds it to the client ids %q (of the userclients it was issued for)",
			httpapi.ErrForbidden, b.User, client, ns, scene, ids))
	}
}
