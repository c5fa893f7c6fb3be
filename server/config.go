package server

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/xrealm/xrealm/fanout"
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
	Replicas    int // JetStream replicas; 0 = DefaultReplicas

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

func (c *Config) replicas() int {
	if c.Replicas > 0 {
		return c.Replicas
	}
	return DefaultReplicas(c.ClusterName, c.Routes)
}

// MaxDefaultReplicas is the most JetStream replicas a node asks for when
// --replicas is not set.
const MaxDefaultReplicas = 3

// DefaultReplicas is the JetStream replica count of a node whose --replicas
// is not set: 1 alone; in a cluster, the cluster size the node is told of,
// itself and one node per distinct route, at most MaxDefaultReplicas. A
// stream cannot have more replicas than the cluster has JetStream servers:
// with 3, a two-node cluster never starts. Routes are expected to name the
// other nodes; a route to the node itself counts as another node.
func DefaultReplicas(clusterName string, routes []string) int {
	if clusterName == "" {
		return 1
	}
	seen := map[string]bool{}
	for _, r := range routes {
		if r = strings.TrimSpace(r); r != "" {
			seen[r] = true
		}
	}
	return min(1+len(seen), MaxDefaultReplicas)
}

func (c *Config) validate() error {
	if c.DataDir == "" {
		return fmt.Errorf("config: data directory is empty")
	}
	if c.Realm == "" {
		return fmt.Errorf("config: realm is empty")
	}
	if c.MaxPayload <= 0 {
		return fmt.Errorf("config: max payload %d must be positive", c.MaxPayload)
	}
	if c.ClusterName != "" && c.Name == "" {
		return fmt.Errorf("config: a cluster node needs a unique --name")
	}
	if c.ClusterName != "" && len(c.Routes) == 0 {
		// NATS refuses to start JetStream in a cluster without routes.
		return fmt.Errorf("config: a cluster node needs --routes to the cluster's other nodes, e.g. --routes nats-route://host2:6222")
	}
	return nil
}
