package sfu

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/bus"
)

// TestConfigChecked: Start refuses a configuration it cannot run with,
// naming the value and the bound; a heartbeat period of the liveness
// timeout or more would have the manager and the nodes take the node for
// gone between its heartbeats.
func TestConfigChecked(t *testing.T) {
	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: "sfu-config-test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	c := &cluster{b: b}
	nc := c.conn(t, "node")
	tests := []struct {
		name   string
		change func(*Config)
		errHas []string // nil: Start succeeds
	}{
		{"defaults", func(*Config) {}, nil},
		{"heartbeat below the timeout", func(c *Config) { c.Heartbeat = nodeTTL - time.Millisecond }, nil},
		{"negative heartbeat means 1 s", func(c *Config) { c.Heartbeat = -time.Second }, nil},
		{"heartbeat of the timeout", func(c *Config) { c.Heartbeat = nodeTTL }, []string{"Config.Heartbeat 5s", "below 5s"}},
		{"heartbeat above the timeout", func(c *Config) { c.Heartbeat = time.Minute }, []string{"Config.Heartbeat 1m0s", "below 5s"}},
		{"no bus", func(c *Config) { c.NC = nil }, []string{"Config.NC is nil"}},
		{"bad ID", func(c *Config) { c.ID = "a.b" }, []string{`node ID "a.b"`}},
		{"bad site", func(c *Config) { c.Site = "x y" }, []string{`site "x y"`}},
		{"negative MaxClients", func(c *Config) { c.MaxClients = -1 }, []string{"Config.MaxClients -1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{NC: nc, ID: "1", Site: "a", ICEAddresses: loopback, Registerer: prometheus.NewRegistry(),
				Logger: slog.New(slog.DiscardHandler)}
			tc.change(&cfg)
			n, err := Start(context.Background(), cfg)
			if err == nil {
				n.Close()
			}
			switch {
			case tc.errHas == nil && err != nil:
				t.Fatalf("Start: %v, want success", err)
			case tc.errHas != nil && err == nil:
				t.Fatalf("Start succeeded, want an error with %q", tc.errHas)
			}
			for _, part := range tc.errHas {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("Start: %v, want an error with %q", err, part)
				}
			}
		})
	}
}
