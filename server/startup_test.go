package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/internal/testnet"
)

// Configurations that can never start are refused by Start at once, with
// an error that names the setting, before anything is bound or started.
func TestStartRefusesImpossibleConfig(t *testing.T) {
	cluster := func(c *Config) { c.ClusterName, c.Name, c.Routes = "xr", "n1", []string{"nats-route://127.0.0.1:1"} }
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // "" = valid
	}{
		{"realm with a slash", func(c *Config) { c.Realm = "a/b" }, `--realm: realm "a/b" contains '/'`},
		{"realm with a dot", func(c *Config) { c.Realm = "a.b" }, `--realm: realm "a.b" contains '.'`},
		{"realm a wildcard", func(c *Config) { c.Realm = "+" }, `--realm: realm "+" contains an MQTT wildcard`},
		{"realm with #", func(c *Config) { c.Realm = "a#" }, `realm "a#" contains an MQTT wildcard`},
		{"realm with a space", func(c *Config) { c.Realm = "a b" }, `realm "a b" contains ' '`},
		{"realm with *", func(c *Config) { c.Realm = "a*" }, `realm "a*" contains '*'`},
		{"realm with >", func(c *Config) { c.Realm = ">" }, `realm ">" contains '>'`},
		{"realm with %", func(c *Config) { c.Realm = "a%2E" }, `realm "a%2E" contains '%'`},
		{"realm empty", func(c *Config) { c.Realm = "" }, "config: --realm is empty"},
		{"realm of other letters", func(c *Config) { c.Realm = "réalm-2_x" }, ""},
		{"negative replicas", func(c *Config) { c.Replicas = -1 }, "--replicas -1: must be at least 1"},
		{"replicas alone", func(c *Config) { c.Replicas = 5 }, "--replicas 5: a node that is not in a cluster"},
		{"2 replicas alone", func(c *Config) { c.Replicas = 2 }, "--replicas 2: a node that is not in a cluster"},
		{"1 replica alone", func(c *Config) { c.Replicas = 1 }, ""},
		{"default replicas alone", func(c *Config) { c.Replicas = 0 }, ""},
		{"replicas in a cluster", func(c *Config) { cluster(c); c.Replicas = 3 }, ""},
		{"negative replicas in a cluster", func(c *Config) { cluster(c); c.Replicas = -2 }, "--replicas -2"},
		// NATS ignores routes outside a cluster: the node would run
		// alone, and two such nodes would keep two copies of the state
		// that drift apart.
		{"routes alone", func(c *Config) { c.Routes = []string{"nats-route://127.0.0.1:1"} }, "--routes nats-route://127.0.0.1:1 without --cluster-name"},
		// NATS holds at most 64 MiB per client: a larger payload would be
		// refused by NATS at start, or, past 2 GiB, wait for JetStream
		// for ever.
		{"payload above the bus's limit", func(c *Config) { c.MaxPayload = 64 << 20 }, "--max-payload 67108864: at most 67043328"},
		{"payload past 2 GiB", func(c *Config) { c.MaxPayload = 1<<31 - 1 }, "--max-payload 2147483647: at most"},
		{"largest payload", func(c *Config) { c.MaxPayload = 64<<20 - 64<<10 }, ""},
		{"negative token lifetime", func(c *Config) { c.TokenTTL = -time.Hour }, "--token-ttl -1h0m0s"},
		{"no token lifetime", func(c *Config) { c.TokenTTL = 0 }, "--token-ttl 0s"},
		{"negative queue", func(c *Config) { c.Writer.MaxFrames = -3 }, "--queue-frames -3"},
		{"no queue", func(c *Config) { c.Writer.MaxFrames = 0 }, "--queue-frames 0"},
		{"negative linger", func(c *Config) { c.Writer.Linger = -5 * time.Millisecond }, "--write-linger -5ms"},
		{"no linger", func(c *Config) { c.Writer.Linger = 0 }, ""},
		{"negative Ubiq linger", func(c *Config) { c.UbiqLinger = -time.Millisecond }, "--ubiq-write-linger -1ms"},
		{"Ubiq linger of --write-linger", func(c *Config) { c.UbiqLinger = 0 }, ""},
		{"no write budget", func(c *Config) { c.WriteBudget = -1 }, ""},
		{"write budget not a number", func(c *Config) { c.WriteBudget = math.NaN() }, "--write-budget NaN"},
		{"negative SFU clients", func(c *Config) { c.SFUMaxClients = -1 }, "--max-clients -1: the SFU (WebRTC) clients"},
		{"default SFU clients", func(c *Config) { c.SFUMaxClients = 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			tt.mod(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			// Start refuses it before it binds a port or starts the bus,
			// and does not wait for ctx to end.
			c.DataDir = t.TempDir()
			c.HTTPAddr = testnet.FreePorts(t, 1)[0]
			c.HTTPSAddr, c.MQTTAddr, c.MQTTSAddr, c.MQTTWSAddr, c.NATSAddr, c.NATSWSAddr = "", "", "", "", "", ""
			c.UbiqAddr, c.UbiqWSSAddr, c.UbiqWSAddr = "", "", ""
			err = startRefused(t, c)
			if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Start: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// startRefused starts a node with c, which must fail (within 20 s), and
// returns Start's error.
func startRefused(t *testing.T, c Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Start(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		s.Close()
		t.Fatal("started")
	}
	return err
}

// An error that no attempt can get past ends the retries with that error:
// the real NATS server's refusal of replicas on a node not in a cluster.
func TestRetryStopsAtPermanentError(t *testing.T) {
	n := startNode(t, nil)
	nc, err := n.bus.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	attempts := 0
	err = retry(ctx, testLogger(), "open test bucket", 2, func(ctx context.Context) error {
		attempts++
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "test", Replicas: 2})
		return err
	})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want NATS's refusal", err)
	}
	if !strings.Contains(err.Error(), "open test bucket") || !strings.Contains(err.Error(), "replicas > 1 not supported in non-clustered mode") {
		t.Errorf("err %q: want what failed and why", err)
	}
	if attempts != 1 {
		t.Errorf("%d attempts, want 1", attempts)
	}
}

// While a node starts (here, a cluster node waiting for its other node,
// which never comes), its HTTP listener answers: /healthz with 503 and
// {"status":"starting"}, other routes with 503 too.
func TestHealthzWhileStarting(t *testing.T) {
	p := testnet.FreePorts(t, 3)
	cfg := Defaults()
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr = p[0]
	cfg.HTTPSAddr, cfg.MQTTAddr, cfg.MQTTSAddr, cfg.MQTTWSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", "", "", ""
	cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
	cfg.Name, cfg.ClusterName, cfg.ClusterAddr, cfg.Routes = "n1", "xr", p[1], []string{"nats-route://" + p[2]}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s, err := Start(ctx, cfg, testLogger())
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		for {
			resp, err := client.Get("http://" + cfg.HTTPAddr + path)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(b)
			}
			if strings.Contains(err.Error(), "connection refused") {
				select { // not bound yet
				case err := <-done:
					t.Fatalf("Start ended: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			t.Fatalf("GET %s while the node starts: %v", path, err)
		}
	}
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"status":"starting"`) || !strings.Contains(body, `"node":"n1"`) {
		t.Errorf("/healthz while starting: %d %q, want 503 starting", code, body)
	}
	if code, body := get("/conf/defaults.json"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/conf/defaults.json while starting: %d %q, want 503", code, body)
	}
	select {
	case err := <-done:
		t.Fatalf("Start ended while its other node was missing: %v", err)
	default:
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("started without its other node")
	}
}

// A cluster node whose NATS port is taken fails its start at once, naming
// the listener, as a node alone does: it waited for a route to another
// node and compared identities with the cluster first, and a node started
// before the others waited until they came up only to fail then.
func TestClusterNodeNATSPortInUse(t *testing.T) {
	p := testnet.FreePorts(t, 4)
	taken, err := net.Listen("tcp", p[0])
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	c := Defaults()
	c.DataDir = t.TempDir()
	c.ClusterName, c.Name, c.ClusterAddr = "xr", "n1", p[1]
	c.Routes = []string{"nats-route://" + p[2]} // no node there
	c.HTTPAddr, c.NATSAddr = p[3], p[0]
	c.HTTPSAddr, c.MQTTAddr, c.MQTTSAddr, c.MQTTWSAddr, c.NATSWSAddr = "", "", "", "", ""
	c.UbiqAddr, c.UbiqWSSAddr, c.UbiqWSAddr = "", "", ""
	err = startRefused(t, c)
	if want := "nats listener on " + p[0]; !strings.Contains(err.Error(), want) {
		t.Fatalf("Start: %v, want an error containing %q", err, want)
	}
}
