package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/internal/testnet"
)

// A burst of refused connections is logged at most 20 lines per 10 s per
// front end (auth.DenyLog), as the README says, on MQTT and on NATS, where
// the NATS server's own line for each refusal counts too; each refusal is
// still refused.
func TestConnectRefusalsLogBounded(t *testing.T) {
	const refusals = 40
	tests := []struct {
		frontEnd string
		refuse   func(t *testing.T, cfg Config)
		lines    []string // what a refusal's lines contain
	}{
		{"mqtt", func(t *testing.T, cfg Config) {
			c := rawConnect(t, cfg.MQTTAddr, "x", "ann", "not-a-token", 60, "", "")
			b, _ := io.ReadAll(c) // the CONNACK, then EOF
			if len(b) != 4 || b[0] != 0x20 || b[3] == 0 {
				t.Fatalf("CONNACK %x, want a refusal", b)
			}
			c.Close()
		}, []string{"MQTT CONNECT refused"}},
		{"nats", func(t *testing.T, cfg Config) {
			nc, err := nats.Connect("nats://"+cfg.NATSAddr, nats.UserInfo("ann", "not-a-token"), nats.NoReconnect())
			if err == nil {
				nc.Close()
				t.Fatal("NATS client with a bad token connected")
			}
		}, []string{"NATS client refused", "authentication error"}},
	}
	for _, tt := range tests {
		t.Run(tt.frontEnd, func(t *testing.T) {
			var logs testlog.Buffer
			cfg := quietConfig(t, t.TempDir())
			p := testnet.FreePorts(t, 2)
			cfg.MQTTAddr, cfg.NATSAddr = p[0], p[1]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := Start(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			start := time.Now()
			for range refusals {
				tt.refuse(t, cfg)
			}
			// The window of 10 s starts at the first refusal: 20 lines
			// for each window the refusals took.
			allowed := 20 * (1 + int(time.Since(start)/(10*time.Second)))
			if allowed >= refusals*len(tt.lines) {
				t.Skipf("%d refusals took %s: too slow to tell a bound", refusals, time.Since(start))
			}
			var n int
			for _, l := range strings.Split(logs.String(), "\n") {
				for _, w := range tt.lines {
					if strings.Contains(l, w) {
						n++
						if !strings.Contains(l, "level=WARN") {
							t.Errorf("refusal logged as %q, want a warning", l)
						}
						break
					}
				}
			}
			if n == 0 || n > allowed {
				t.Errorf("%d refusals logged in %d lines, want 1 to %d:\n%s", refusals, n, allowed, logs.String())
			}
		})
	}
}

// A refused publish on a topic as long as a packet allows is logged with
// the topic cut short, and the node keeps working: the topic never
// reaches the bus, whose protocol lines are limited.
func TestLongTopicRefusedAndLoggedShort(t *testing.T) {
	var logs testlog.Buffer
	cfg := quietConfig(t, t.TempDir())
	cfg.Insecure = true
	cfg.MQTTAddr = testnet.FreePorts(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := mustConnect(t, "tcp://"+cfg.MQTTAddr, "u", "")
	long := "realm/s/ns/sc/u/" + strings.Repeat("x", 20<<10) + "/camera"
	publish(t, c, long, 1, "{}")
	inbox := newInbox()
	subscribe(t, c, "realm/s/ns/sc/#", inbox)
	publish(t, c, "realm/s/ns/sc/u/x/camera", 1, "{}")
	inbox.wait(t, "/u/x/camera", 5*time.Second)
	if s.Err() != nil {
		t.Fatalf("the node failed: %v", s.Err())
	}
	var found bool
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "MQTT publish denied") {
			found = true
			if len(l) > 1500 {
				t.Errorf("the refusal's log line is %d bytes long: %.300s...", len(l), l)
			}
		}
	}
	if !found {
		t.Errorf("no refusal logged:\n%.2000s", logs.String())
	}
}
