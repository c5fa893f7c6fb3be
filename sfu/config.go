package sfu

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/prometheus/client_golang/prometheus"

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
	// Mode is the allocator mode for point-cloud tracks.
	Mode allocator.Mode
	// Registerer receives the node's metrics; nil means none.
	Registerer prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// ICEAddresses restricts ICE to these local IPs (for example
	// 127.0.0.1 in tests, a namespace's address in the bench); empty means
	// all.
	ICEAddresses []string
	// UDPPortMin/Max bound ICE ports; zero means ephemeral.
	UDPPortMin, UDPPortMax uint16
	// Heartbeat is how often the node announces itself; zero means 1 s.
	Heartbeat time.Duration
	// AllocateEvery is how often subscriptions are re-allocated from the
	// estimate; zero means 500 ms.
	AllocateEvery time.Duration
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
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
