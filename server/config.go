package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/persist"
	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/ubiq"
)

// Config is everything `xrealm serve` can be told. Addresses are host:port;
// an empty address turns that listener off.
type Config struct {
	DataDir    string
	Realm      string
	PublicHost string // host name put in /conf/defaults.json

	HTTPAddr   string // REST, health, /metrics, MQTT over WebSocket at /mqtt
	HTTPSAddr  string // the same routes over TLS
	MQTTAddr   string
	MQTTSAddr  string
	MQTTWSAddr string
	NATSAddr   string
	NATSWSAddr string

	UbiqAddr       string           // Ubiq rooms over TCP (Ubiq's default :8009)
	UbiqWSSAddr    string           // Ubiq over secure WebSocket, the server's certificate (:8010)
	UbiqWSAddr     string           // Ubiq over plain WebSocket
	UbiqICEServers []ubiq.ICEServer // ice-servers of new rooms; nil = Ubiq's default STUN server

	TLSCert, TLSKey string // empty: a self-signed certificate in DataDir/tls

	Name        string // node name, unique in a cluster
	Site        string // where this node runs; the SFU session manager prefers nodes at a client's site
	ClusterName string
	ClusterAddr string
	Routes      []string
	Replicas    int // JetStream replicas; 0 = DefaultReplicas of the routes to other nodes

	// SFUMaxClients bounds the clients the node's SFU takes at once
	// (sfu.Config.MaxClients); 0 means sfu.DefaultMaxClients, and a
	// negative value is refused (Validate).
	SFUMaxClients int

	MaxPayload int
	Writer     fanout.Options
	// UbiqLinger replaces Writer.Linger for the Ubiq front end's
	// connections (60 Hz poses batch better at a longer interval); 0 = the
	// same as Writer.Linger.
	UbiqLinger time.Duration
	// WriteBudget is the MQTT front end's budget of lingering writes per
	// second (fanout.NewBudgetClock): above it, the linger intervals of all
	// busy connections stretch alike. 0 = 12,500 per CPU the runtime uses;
	// negative = none.
	WriteBudget float64
	TokenTTL    time.Duration

	// Insecure turns off all authentication (benchmarks and development).
	Insecure bool

	// beforeClusterCheck, if not nil, is called by a cluster node just
	// before it asks the other nodes who they are: a test holds a node
	// there, as a slow machine or network would.
	beforeClusterCheck func()
}

// Defaults returns the configuration of `xrealm serve` with no flags.
func Defaults() Config {
	return Config{
		DataDir:     "./data",
		Realm:       "realm",
		PublicHost:  "localhost",
		HTTPAddr:    ":8080",
		HTTPSAddr:   ":8443",
		MQTTAddr:    ":1883",
		MQTTSAddr:   ":8883",
		MQTTWSAddr:  ":9001",
		NATSAddr:    ":4222",
		NATSWSAddr:  ":4223",
		UbiqAddr:    ":8009",
		UbiqWSSAddr: ":8010",
		ClusterAddr: ":6222",
		Site:        "default",
		MaxPayload:  1 << 20,
		TokenTTL:    12 * time.Hour,
		// A connection busy with steady pose traffic writes at most every
		// 10ms (longer above the write budget); an idle one at once; clicks
		// and edits at once to interacting clients and within 2 ms to the
		// others (docs/protocol.md, "Write timing"; bench/bus/NOTES.md).
		Writer: fanout.Options{Linger: 10 * time.Millisecond, MaxFrames: 4096},
		// Ubiq peers send poses at up to 60 Hz: a longer interval batches
		// more per write (bench/rooms/RESULTS.md).
		UbiqLinger: 20 * time.Millisecond,
	}
}

// writeBudget is WriteBudget with its default applied: 12,500 lingering
// writes per second per CPU, 12-25 % of each CPU at 10-20 µs per write
// system call. In session 7 (bench/bus/NOTES.md) 10,000 used 10-20 % less
// CPU for the same deliveries than 15,000 and 20,000 and held five scenes
// of 800 users at p99 49-53 ms against 118-160 ms; once a delivery cost
// 17 % less (session 8: queues of frame pointers), 12,500 held 800 users
// in five scenes at p99 37-39 ms against 44-45 ms for 10,000, for 4 % more
// CPU, and one scene as well.
func (c *Config) writeBudget() float64 {
	switch {
	case c.WriteBudget < 0:
		return 0
	case c.WriteBudget == 0:
		return WriteBudgetPerCPU * float64(runtime.GOMAXPROCS(0))
	}
	return c.WriteBudget
}

// WriteBudgetPerCPU is the default write budget per CPU (see writeBudget).
const WriteBudgetPerCPU = 12500

func (c *Config) nodeName() string {
	if c.Name != "" {
		return c.Name
	}
	h, _ := os.Hostname()
	return h
}

// replicas returns the JetStream replicas the node asks for: --replicas if
// set, else DefaultReplicas of the routes that lead to other nodes. self
// lists the routes left out as this node's own (see selfRoutes).
func (c *Config) replicas(ctx context.Context) (n int, self []string) {
	if c.Replicas > 0 {
		return c.Replicas, nil
	}
	if c.ClusterName == "" {
		return 1, nil
	}
	others, self := c.otherRoutes(ctx, systemAddrs{})
	return DefaultReplicas(c.ClusterName, others), self
}

// otherRoutes splits c.Routes into the routes to other nodes and those to
// this node itself.
func (c *Config) otherRoutes(ctx context.Context, sys localAddrs) (others, self []string) {
	ctx, cancel := context.WithTimeout(ctx, selfRouteLookupTimeout)
	defer cancel()
	isSelf := selfRoutes(ctx, c.ClusterAddr, c.Routes, sys)
	for i, r := range c.Routes {
		if isSelf[i] {
			self = append(self, r)
		} else {
			others = append(others, r)
		}
	}
	return others, self
}

// MaxDefaultReplicas is the most JetStream replicas a node asks for when
// --replicas is not set.
const MaxDefaultReplicas = 3

// DefaultReplicas is the JetStream replica count of a node whose --replicas
// is not set: 1 alone; in a cluster, the cluster size the node is told of,
// itself and one node per distinct route, at most MaxDefaultReplicas. A
// stream cannot have more replicas than the cluster has JetStream servers:
// with 3, a two-node cluster never starts. routes must name the other
// nodes only: a route to the node itself would count as another node
// (Config drops those first, see selfRoutes). Routes to the same host:port
// count once.
func DefaultReplicas(clusterName string, routes []string) int {
	if clusterName == "" {
		return 1
	}
	seen := map[string]bool{}
	for _, r := range routes {
		if r = strings.TrimSpace(r); r != "" {
			seen[routeKey(r)] = true
		}
	}
	return min(1+len(seen), MaxDefaultReplicas)
}

// routeKey is what identifies the node a route leads to: its host:port
// (host in lower case, without scheme or user), or the route itself if it
// has none.
func routeKey(route string) string {
	if u, err := url.Parse(route); err == nil && u.Host != "" {
		return strings.ToLower(u.Host)
	}
	return route
}

// selfRouteLookupTimeout bounds the name lookups of selfRoutes together; a
// route whose host does not resolve in time counts as another node.
const selfRouteLookupTimeout = 5 * time.Second

// localAddrs is what selfRoutes needs to know of the machine: name lookups
// and the addresses of its network interfaces.
type localAddrs interface {
	LookupHost(ctx context.Context, host string) ([]netip.Addr, error)
	InterfaceAddrs() ([]netip.Addr, error)
}

// systemAddrs is the machine's resolver and interfaces.
type systemAddrs struct{}

func (systemAddrs) LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

func (systemAddrs) InterfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, addr.Unmap())
		}
	}
	return out, nil
}

// selfRoutes reports which routes lead to this node's own cluster listener
// at clusterAddr (--cluster-addr). NATS-style configurations often give
// every node the same full route list; NATS itself notices a route to
// itself once connected and drops it, but counted as a node it would ask
// for more replicas than the cluster has servers.
//
// A route is this node's when all of:
//   - its port is the port of clusterAddr (a listener on port 0, of the
//     system's choosing, has no route of its own);
//   - its host resolves, within selfRouteLookupTimeout, to at least one
//     address, and every address it resolves to is one this node listens
//     on: with clusterAddr's host empty, 0.0.0.0 or ::, a loopback address,
//     an unspecified address (a dial to which reaches this machine) or an
//     address of one of the machine's network interfaces
//     (net.InterfaceAddrs); with any other host, the addresses that host
//     resolves to.
//
// The rule errs towards counting a route as another node: a host that does
// not resolve, resolves to several addresses of which one is not this
// node's (a name for the whole cluster), or names this machine's address
// on another port (another node on the same machine) is another node. A
// node that is counted wrongly asks for too many replicas, and says so
// (placementHint); one dropped wrongly would keep fewer copies silently.
func selfRoutes(ctx context.Context, clusterAddr string, routes []string, sys localAddrs) []bool {
	self := make([]bool, len(routes))
	lhost, lport, err := net.SplitHostPort(clusterAddr)
	if err != nil {
		return self
	}
	port, err := strconv.Atoi(lport)
	if err != nil || port <= 0 {
		return self
	}
	var ours func(netip.Addr) bool
	for i, r := range routes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Hostname() == "" {
			continue
		}
		if p, err := strconv.Atoi(u.Port()); err != nil || p != port {
			continue
		}
		if ours == nil {
			ours = listenerAccepts(ctx, lhost, sys)
		}
		addrs, err := lookup(ctx, u.Hostname(), sys)
		if err != nil || len(addrs) == 0 {
			continue
		}
		self[i] = true
		for _, a := range addrs {
			if !ours(a) {
				self[i] = false
				break
			}
		}
	}
	return self
}

// listenerAccepts returns whether a cluster listener on host accepts
// connections at an address (see selfRoutes).
func listenerAccepts(ctx context.Context, host string, sys localAddrs) func(netip.Addr) bool {
	if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
		local := map[netip.Addr]bool{}
		if as, err := sys.InterfaceAddrs(); err == nil {
			for _, a := range as {
				local[a.Unmap().WithZone("")] = true
			}
		}
		return func(a netip.Addr) bool {
			a = a.Unmap().WithZone("")
			return a.IsLoopback() || a.IsUnspecified() || local[a]
		}
	}
	as, _ := lookup(ctx, host, sys)
	set := map[netip.Addr]bool{}
	for _, a := range as {
		set[a.Unmap().WithZone("")] = true
	}
	return func(a netip.Addr) bool { return set[a.Unmap().WithZone("")] }
}

// lookup returns the addresses of host, an IP address or a name.
func lookup(ctx context.Context, host string, sys localAddrs) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	return sys.LookupHost(ctx, host)
}

// MaxPayloadLimit is the largest --max-payload: NATS refuses a message
// limit above its limit of what a client may have pending (64 MiB), and the
// bus's limit is bus.HeadroomBytes above the payload's.
const MaxPayloadLimit = 64<<20 - bus.HeadroomBytes

// Validate checks c as Start does, before anything starts: an error names
// the flag and the value.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return fmt.Errorf("config: --data is empty: give the directory the node keeps its state in")
	}
	if c.Realm == "" {
		return fmt.Errorf("config: --realm is empty: give the topic prefix, e.g. realm")
	}
	if err := persist.ValidRealm(c.Realm); err != nil {
		return fmt.Errorf("config: --realm: %w", err)
	}
	if c.MaxPayload <= 0 {
		return fmt.Errorf("config: --max-payload %d: the largest message must be positive", c.MaxPayload)
	}
	if c.MaxPayload > MaxPayloadLimit {
		return fmt.Errorf("config: --max-payload %d: at most %d (64 MiB, the most the embedded NATS server holds for a client, less %d bytes for headers)", c.MaxPayload, MaxPayloadLimit, bus.HeadroomBytes)
	}
	// 0 means something for --write-linger, --ubiq-write-linger and
	// --write-budget (a negative budget is none); for the rest it, or a
	// negative value, would be replaced by a default without a word.
	switch {
	case c.TokenTTL <= 0:
		return fmt.Errorf("config: --token-ttl %s: the lifetime of the tokens /user/v2/mqtt_auth issues must be positive, e.g. 12h", c.TokenTTL)
	case c.Writer.MaxFrames <= 0:
		return fmt.Errorf("config: --queue-frames %d: a connection's outgoing queue must hold at least 1 message", c.Writer.MaxFrames)
	case c.Writer.Linger < 0:
		return fmt.Errorf("config: --write-linger %s must not be negative (0 = write whenever messages wait)", c.Writer.Linger)
	case c.UbiqLinger < 0:
		return fmt.Errorf("config: --ubiq-write-linger %s must not be negative (0 = --write-linger)", c.UbiqLinger)
	case math.IsNaN(c.WriteBudget):
		return fmt.Errorf("config: --write-budget %v is not a number", c.WriteBudget)
	}
	if c.ClusterName == "" && len(c.Routes) > 0 {
		// NATS routes only the nodes of a cluster: the node would run
		// alone, its state apart from the nodes it was meant to join.
		return fmt.Errorf("config: --routes %s without --cluster-name: a node joins a cluster only with --cluster-name (the same on every node) and a unique --name; "+
			"leave --routes out to run alone", strings.Join(c.Routes, ","))
	}
	if c.ClusterName != "" && c.Name == "" {
		return fmt.Errorf("config: a cluster node needs a unique --name")
	}
	if c.ClusterName != "" && len(c.Routes) == 0 {
		// NATS refuses to start JetStream in a cluster without routes.
		return fmt.Errorf("config: a cluster node needs --routes to the cluster's other nodes, e.g. --routes nats-route://host2:6222")
	}
	if c.SFUMaxClients < 0 {
		return fmt.Errorf("config: --max-clients %d: the SFU (WebRTC) clients the node's SFU takes at once must not be negative (0 = %d)", c.SFUMaxClients, sfu.DefaultMaxClients)
	}
	switch {
	case c.Replicas < 0:
		return fmt.Errorf("config: --replicas %d: must be at least 1 (or left out for the default)", c.Replicas)
	case c.Replicas > 1 && c.ClusterName == "":
		// NATS refuses replicated streams outside a cluster.
		return fmt.Errorf("config: --replicas %d: a node that is not in a cluster (no --cluster-name) keeps one copy of its state; leave --replicas out or set it to 1", c.Replicas)
	}
	return nil
}
