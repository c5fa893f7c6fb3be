package sfu

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/transport/v4"
	"github.com/prometheus/client_golang/prometheus"

	herabwe "github.com/xrealm/xrealm/hera/bwe"
	"github.com/xrealm/xrealm/sfu/allocator"
	"github.com/xrealm/xrealm/sfu/bwe"
)

// Config configures a Node.
type Config struct {
	// NC is the bus connection; it needs publish and subscribe rights on
	// "sfu.>".
	NC *nats.Conn
	// ID names the node uniquely among nodes (for example "1"); it
	// orders relay offers (relay.Offerer).
	ID string
	// Site is where the node runs; the manager prefers nodes at the
	// client's site.
	Site string
	// Manager also runs the session manager on this node. Exactly one node
	// (xrealm serve) should.
	Manager bool
	// WebSocketURL, if set, is announced so that clients can reach this
	// node's Handler directly.
	WebSocketURL string
	// Estimator makes each subscriber's bandwidth estimator; nil means
	// bwe.NewFactory(bwe.Config{}) (GCC widened to 300 Mbit/s). Any
	// cc.BandwidthEstimator fits, such as Hera's.
	Estimator cc.BandwidthEstimatorFactory
	// Estimators are the estimators a client may pick by name in its offer
	// (Signal.Estimator), instead of Estimator; nil means DefaultEstimators().
	Estimators map[string]cc.BandwidthEstimatorFactory
	// Mode is the allocator mode for point-cloud tracks.
	Mode allocator.Mode
	// Probe times the probes for a subscriber's floors paused for budget
	// (allocator.Prober); zero values take allocator.DefaultProbeConfig's.
	Probe allocator.ProbeConfig
	// Authorize, if not nil, decides whether the WebSocket request r may
	// signal for session as client, presenting token (the first offer's
	// Signal.Token; "" when it has none, and the request's own credentials
	// apply). Handler asks at each signal before the socket's join is
	// placed; its error is sent to the client as the reply. nil lets every
	// request signal for any session as any client: for nodes reached only
	// by trusted clients, and for --insecure servers.
	Authorize func(r *http.Request, session, client, token string) error
	// Registerer receives the node's metrics; nil means none.
	Registerer prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// ICEAddresses restricts ICE to these local IPs (for example
	// 127.0.0.1 in tests, a namespace's address in the bench); empty means
	// all.
	ICEAddresses []string
	// Net, if set, is the network pion uses (for example NewDelayNet in
	// the bench); nil means the host's.
	Net transport.Net
	// UDPPortMin/Max bound ICE ports; zero means ephemeral.
	UDPPortMin, UDPPortMax uint16
	// Heartbeat is how often the node announces itself; zero means 1 s.
	// It must be below 5 s, the time after which the manager and the
	// nodes take a node that sent no heartbeat for gone.
	Heartbeat time.Duration
	// AllocateEvery is how often subscriptions are re-allocated from the
	// estimate; zero means 500 ms.
	AllocateEvery time.Duration
	// RelaySlots is the number of pre-negotiated RTP transceivers
	// ("slots") on the links this node offers, which carry relayed media
	// (package relay); a link follows its offerer (the lower node ID).
	// Zero means DefaultRelaySlots; negative carries relayed media on the
	// SCTP "media" data channel instead.
	RelaySlots int
	// NoSharedLinks turns off the budget per remote address: subscribers
	// that reach the node from one IP address share a path, and by
	// default their allocations together follow one controller of that
	// path (allocator.SharedLink, shared.go).
	NoSharedLinks bool
	// ReportInterval is how often RTCP sender and receiver reports go out
	// for each stream; zero means pion's 1 s. Each report is its own
	// packet per stream, so a subscriber with 63 streams gets 63 sender
	// reports per interval: as many packets as its media at 2 frames/s.
	ReportInterval time.Duration
	// MaxClients bounds the clients connected to the node at once; an
	// offer beyond it is refused with an error that gives the bound. Zero
	// means DefaultMaxClients.
	MaxClients int
}

// DefaultMaxClients is Config.MaxClients' default. Each client holds a
// PeerConnection, its down tracks and their readers; without a bound a
// flood of offers (any client id is new) could exhaust the node.
const DefaultMaxClients = 500

// rttFresh is how old a subscriber's RTT sample may be to count for its
// path's queueing delay: three report intervals.
func (c Config) rttFresh() time.Duration {
	if c.ReportInterval <= 0 {
		return rttFreshDefault
	}
	return max(rttFreshDefault, 3*c.ReportInterval)
}

// DefaultRelaySlots is Config.RelaySlots' default: RTP slots per relay
// link, i.e. how many tracks a link carries in each direction at once.
const DefaultRelaySlots = 64

// DefaultEstimators returns the estimators clients can choose by name:
// "gcc" (pion's GCC widened to 300 Mbit/s, package bwe) and "hera" (the Hera
// rule, package hera/bwe, with its range raised to 300 Mbit/s for
// volumetric flows).
func DefaultEstimators() map[string]cc.BandwidthEstimatorFactory {
	h := herabwe.DefaultOptions()
	h.MaxBitrate = 300_000_000
	return map[string]cc.BandwidthEstimatorFactory{
		"gcc":  bwe.NewFactory(bwe.Config{}),
		"hera": herabwe.NewFactory(h),
	}
}

// estimator returns the factory a client asked for; "" is Config.Estimator.
func (c *Config) estimator(name string) (cc.BandwidthEstimatorFactory, error) {
	if name == "" {
		return c.Estimator, nil
	}
	if f, ok := c.Estimators[name]; ok {
		return f, nil
	}
	names := make([]string, 0, len(c.Estimators))
	for k := range c.Estimators {
		names = append(names, k)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("sfu: estimator %q unknown; one of %v", name, names)
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// SessionOf is the SFU session of ARENA scene ns/scene: "{ns}-{scene}"
// with every character that an id may not hold replaced by '_', cut to 64
// bytes. The web client names its session the same way (sfuSession in
// web/src/sfu.ts).
func SessionOf(ns, scene string) string {
	return NameOf(ns + "-" + scene)
}

// NameOf makes s a valid session or client id ([A-Za-z0-9_-]{1,64}) as the
// web client's sfuName does (its SFU client id is NameOf(its userclient)):
// every other character becomes '_' (two for a character beyond UTF-16's
// basic plane, as JavaScript counts), cut at 64; "" becomes "_".
func NameOf(s string) string {
	if s == "" {
		return "_"
	}
	b := make([]byte, 0, 64)
	for _, c := range s {
		switch {
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-':
			b = append(b, byte(c))
		case c >= 0x10000:
			b = append(b, '_', '_') // two UTF-16 code units, as JavaScript counts
		default:
			b = append(b, '_')
		}
	}
	return string(b[:min(len(b), 64)])
}

func (c *Config) validate() error {
	if c.NC == nil {
		return fmt.Errorf("sfu: Config.NC is nil")
	}
	if !idRE.MatchString(c.ID) {
		return fmt.Errorf("sfu: node ID %q must match %s", c.ID, idRE)
	}
	if c.Site == "" {
		c.Site = "default"
	}
	if !idRE.MatchString(c.Site) {
		return fmt.Errorf("sfu: site %q must match %s", c.Site, idRE)
	}
	if c.Estimator == nil {
		c.Estimator = bwe.NewFactory(bwe.Config{})
	}
	if c.Estimators == nil {
		c.Estimators = DefaultEstimators()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.Heartbeat >= nodeTTL {
		return fmt.Errorf("sfu: Config.Heartbeat %v must be below %v: the manager and the nodes take a node whose last heartbeat is %v old for gone", c.Heartbeat, nodeTTL, nodeTTL)
	}
	if c.RelaySlots == 0 {
		c.RelaySlots = DefaultRelaySlots
	}
	if c.MaxClients < 0 {
		return fmt.Errorf("sfu: Config.MaxClients %d is negative", c.MaxClients)
	}
	if c.MaxClients == 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.AllocateEvery <= 0 {
		c.AllocateEvery = 500 * time.Millisecond
	}
	return nil
}

// validName checks a session or client name used in subjects.
func validName(what, s string) error {
	if !idRE.MatchString(s) {
		return fmt.Errorf("sfu: %s %q must match %s", what, s, idRE)
	}
	return nil
}
