package bus

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/internal/testnet"
)

func startBus(t *testing.T, mod ...func(*Config)) (*Bus, *auth.Keys) {
	t.Helper()
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: dir, Name: "t", NATSAddr: testnet.FreePorts(t, 1)[0], Verifier: keys, MaxPayload: 1 << 20}
	for _, m := range mod {
		m(&cfg)
	}
	b, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	return b, keys
}

func TestInternalAndTokenClients(t *testing.T) {
	var mu sync.Mutex
	violations := map[string]int{}
	b, keys := startBus(t, func(c *Config) {
		c.OnViolation = func(kind string) {
			mu.Lock()
			violations[kind]++
			mu.Unlock()
		}
	})
	internal, err := b.Connect("svc")
	if err != nil {
		t.Fatal(err)
	}
	defer internal.Close()
	if _, err := b.JetStream(context.Background(), internal); err != nil {
		t.Fatal(err)
	}

	viewer, _ := keys.Issue("vic", auth.SceneRights("realm", "ns", "sc", auth.RoleViewer, ""), time.Hour)
	nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("vic", viewer))
	if err != nil {
		t.Fatalf("viewer connect: %v", err)
	}
	defer nc.Close()
	errs := make(chan error, 10)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })

	// Allowed subscription receives scene traffic.
	sub, err := nc.SubscribeSync("realm.s.ns.sc.>")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	internal.Publish("realm.s.ns.sc.o.uc.box", []byte(`{}`))
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("viewer did not receive scene message: %v", err)
	}
	// Denied: subscribing elsewhere and publishing an object.
	nc.SubscribeSync("realm.s.ns.other.>")
	nc.Publish("realm.s.ns.sc.o.uc.box", []byte(`{}`))
	nc.Flush()
	deadline := time.After(2 * time.Second)
	var denied int
	for denied < 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("unexpected async error: %v", err)
			}
			denied++
		case <-deadline:
			t.Fatalf("saw %d permission violations, want 2", denied)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if violations["publish"] != 1 || violations["subscribe"] != 1 {
		t.Errorf("violations counted %v, want one publish and one subscribe", violations)
	}
	// The collector reports the two connections and the viewer's traffic.
	reg := prometheus.NewRegistry()
	reg.MustRegister(b.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if got["xrealm_nats_connections"] < 2 || got["xrealm_nats_client_messages_total"] < 2 || got["xrealm_nats_subscriptions"] < 1 {
		t.Errorf("collector reported %v", got)
	}
}

func TestRefusedClients(t *testing.T) {
	b, keys := startBus(t)
	expired, _ := keys.Issue("eve", auth.SceneRights("realm", "ns", "sc", auth.RoleEditor, ""), -time.Minute)
	good, _ := keys.Issue("ann", auth.SceneRights("realm", "ns", "sc", auth.RoleEditor, ""), time.Hour)
	for name, opt := range map[string]nats.Option{
		"no token":      nats.Name("x"),
		"expired":       nats.UserInfo("eve", expired),
		"wrong user":    nats.UserInfo("bob", good),
		"garbage token": nats.Token("abc"),
	} {
		nc, err := nats.Connect(b.ClientURL(), opt, nats.NoReconnect())
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected, want refused", name)
		}
	}
}

func TestTokenExpiryClosesConnection(t *testing.T) {
	b, keys := startBus(t)
	short, _ := keys.Issue("sam", auth.SceneRights("realm", "ns", "sc", auth.RoleEditor, ""), 1500*time.Millisecond)
	closed := make(chan struct{})
	nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("sam", short), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("connection with an expired token stayed open")
	}
}

// A scene's user may not answer the requests it receives on the scene's
// subjects: the front ends publish object messages to JetStream as such
// requests, and an answer would forge the stream's acknowledgement.
func TestSceneUserCannotAnswerRequests(t *testing.T) {
	b, keys := startBus(t)
	internal, err := b.Connect("svc")
	if err != nil {
		t.Fatal(err)
	}
	defer internal.Close()
	for _, role := range []auth.Role{auth.RoleViewer, auth.RoleEditor} {
		tok, _ := keys.Issue("vic", auth.SceneRights("realm", "ns", "sc", role, ""), time.Hour)
		nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("vic", tok))
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 10)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
		got := make(chan struct{}, 1)
		if _, err := nc.Subscribe("realm.s.ns.sc.>", func(m *nats.Msg) {
			m.Respond([]byte(`{"stream":"forged","seq":1}`))
			got <- struct{}{}
		}); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		if m, err := internal.Request("realm.s.ns.sc.o.uc.box", []byte(`{}`), 500*time.Millisecond); err == nil {
			t.Fatalf("%s: its answer %q reached the requester", role, m.Data)
		}
		select {
		case <-got:
		default:
			t.Fatalf("%s: the request did not reach the user", role)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("%s: unexpected error %v", role, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: no permission violation for the answer", role)
		}
		nc.Close()
	}
}

// An SFU node joining over NATS with a service token may use sfu.> and
// request/reply, and nothing else.
func TestServiceToken(t *testing.T) {
	b, keys := startBus(t)
	internal, _ := b.Connect("svc")
	defer internal.Close()
	internal.Subscribe("sfu.manager.join", func(m *nats.Msg) { m.Respond([]byte("ok")) })
	internal.Flush()
	tok, _ := keys.Issue("sfu-2", auth.ServiceRights("sfu"), time.Hour)
	nc, err := nats.Connect(b.ClientURL(), nats.Token(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if m, err := nc.Request("sfu.manager.join", nil, 2*time.Second); err != nil || string(m.Data) != "ok" {
		t.Fatalf("request on sfu.>: %v", err)
	}
	// It answers requests addressed to it, through the requester's inbox.
	nc.Subscribe("sfu.node.2.link", func(m *nats.Msg) { m.Respond([]byte("linked")) })
	nc.Flush()
	if m, err := internal.Request("sfu.node.2.link", nil, 2*time.Second); err != nil || string(m.Data) != "linked" {
		t.Fatalf("reply from the service: %v", err)
	}
	errs := make(chan error, 1)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	nc.Publish("realm.s.ns.sc.o.uc.box", []byte("{}"))
	nc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("unexpected error %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("service token could publish to a scene")
	}
}

// Each NATS listener on a port in use fails the start at once with the bind
// error, naming the listener; port 0 is a port of the system's choosing,
// not NATS's default.
func TestPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	tests := []struct {
		what string
		mod  func(*Config)
	}{
		{"nats", func(c *Config) { c.NATSAddr = addr }},
		{"nats-ws", func(c *Config) { c.NATSWSAddr = addr }},
		{"cluster", func(c *Config) { c.ClusterName, c.ClusterAddr = "xr", addr }},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), Name: "t", Insecure: true, MaxPayload: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
			tt.mod(&cfg)
			start := time.Now()
			b, err := Start(cfg)
			if err == nil {
				b.Shutdown()
				t.Fatal("started on a port in use")
			}
			if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), tt.what+" listener on "+addr) {
				t.Fatalf("err %v, want the %s listener's address in use", err, tt.what)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("failed after %s", d)
			}
			if _, err := os.Stat(filepath.Join(cfg.DataDir, "jetstream")); !os.IsNotExist(err) {
				t.Fatalf("JetStream started before the check: %v", err)
			}
		})
	}
	t.Run("port 0", func(t *testing.T) {
		b, _ := startBus(t, func(c *Config) { c.NATSAddr, c.NATSWSAddr = "127.0.0.1:0", "127.0.0.1:0" })
		if u := b.ClientURL(); u == "" || strings.HasSuffix(u, ":4222") {
			t.Fatalf("client URL %q, want a port of the system's choosing", u)
		}
		if b.Server().Addr().(*net.TCPAddr).Port == 0 {
			t.Fatal("no client port")
		}
	})
}

// Should a port be taken between the check and NATS's bind, the listen
// error NATS logs ends the start at once.
func TestListenErrorFailsFast(t *testing.T) {
	checkBinds = false
	defer func() { checkBinds = true }()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tt := range []struct {
		what string
		mod  func(*Config)
	}{
		{"nats", func(c *Config) { c.NATSAddr = taken.Addr().String() }},
		{"nats-ws", func(c *Config) { c.NATSWSAddr = taken.Addr().String() }},
		{"cluster", func(c *Config) {
			c.ClusterName, c.ClusterAddr, c.Routes = "xr", taken.Addr().String(), []string{"nats-route://127.0.0.1:1"}
		}},
	} {
		t.Run(tt.what, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), Name: "t", Insecure: true, MaxPayload: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
			tt.mod(&cfg)
			start := time.Now()
			b, err := Start(cfg)
			if err == nil {
				b.Shutdown()
				t.Fatal("started on a port in use")
			}
			if !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("err %v, want NATS's listen error", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("failed after %s", d)
			}
		})
	}
}

// The bus's refusals, the authenticator's lines and the NATS server's own
// (authentication errors, permission violations), go through its DenyLog:
// once its lines are spent, refusals are still refused and counted but not
// logged. Each case refuses 10 times against a DenyLog of 5 lines.
func TestRefusalLinesBounded(t *testing.T) {
	const refusals, burst = 10, 5
	tests := []struct {
		name   string
		refuse func(t *testing.T, b *Bus, keys *auth.Keys, i int)
	}{
		{"bad token", func(t *testing.T, b *Bus, _ *auth.Keys, _ int) {
			nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("ann", "not-a-token"), nats.NoReconnect())
			if err == nil {
				nc.Close()
				t.Fatal("connected with a bad token")
			}
		}},
		{"publish violation", func(t *testing.T, b *Bus, keys *auth.Keys, _ int) {
			viewer, _ := keys.Issue("vic", auth.SceneRights("realm", "ns", "sc", auth.RoleViewer, ""), time.Hour)
			errs := make(chan error, 1)
			nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("vic", viewer), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				errs <- err
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Publish("realm.s.ns.sc.o.uc.box", []byte(`{}`))
			nc.Flush()
			select {
			case err := <-errs:
				if !errors.Is(err, nats.ErrPermissionViolation) {
					t.Fatalf("async error %v, want a permission violation", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no permission violation")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs testlog.Buffer
			var mu sync.Mutex
			var denied, violations int
			b, keys := startBus(t, func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				c.Denials = &auth.DenyLog{Burst: burst, Interval: time.Hour}
				c.OnDeny = func() { mu.Lock(); denied++; mu.Unlock() }
				c.OnViolation = func(string) { mu.Lock(); violations++; mu.Unlock() }
			})
			for i := range refusals {
				tt.refuse(t, b, keys, i)
			}
			// A violation reaches its client as the server logs it: wait
			// for the count, which the adapter makes after the line.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				counted := denied + violations
				mu.Unlock()
				if counted == refusals {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d refusals counted, want %d", counted, refusals)
				}
			}
			var n int
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "NATS client refused") || strings.Contains(l, "authentication error") || strings.Contains(l, "Violation") {
					n++
					if !strings.Contains(l, "level=WARN") {
						t.Errorf("refusal logged as %q, want a warning through the DenyLog", l)
					}
				}
			}
			if n != burst {
				t.Errorf("%d refusals logged in %d lines, want %d (the DenyLog's burst):\n%s", refusals, n, burst, logs.String())
			}
			// Each line is a refusal of its own: NATS's line for a client
			// the authenticator refused (and logged) is not a second one.
			if refused := strings.Count(logs.String(), "NATS client refused"); tt.name == "bad token" && refused != burst {
				t.Errorf("%d of the %d lines are the authenticator's refusals, want all:\n%s", refused, burst, logs.String())
			}
		})
	}
}

// A cluster node whose routes all fail waits for JetStream, and when it
// gives up its error says why: the nodes it reached (none), its routes,
// and the last route error NATS logged.
func TestJetStreamWaitNamesRouteErrors(t *testing.T) {
	ports := testnet.FreePorts(t, 2)
	tests := []struct {
		name  string
		other func(t *testing.T) // starts what the route leads to, if anything
		want  string
	}{
		{"nothing listens", func(t *testing.T) {}, "connection refused"},
		{"another cluster's name", func(t *testing.T) {
			startBus(t, func(c *Config) {
				c.Name, c.ClusterName, c.ClusterAddr, c.Routes = "b", "other", ports[1], []string{"nats-route://" + ports[0]}
			})
		}, `cluster name "xr" does not match "other"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.other(t)
			b, _ := startBus(t, func(c *Config) {
				c.Name, c.ClusterName, c.ClusterAddr, c.Routes = "a", "xr", ports[0], []string{"nats-route://" + ports[1]}
				c.Logger = slog.New(slog.DiscardHandler)
			})
			nc, err := b.Connect("svc")
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			// Wait until NATS has logged a route error, then give up.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if last, _ := b.status.get(); strings.Contains(last, tt.want) {
					break
				}
				if time.Now().After(deadline) {
					last, _ := b.status.get()
					t.Fatalf("last route error %q, want one containing %q", last, tt.want)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err = b.JetStream(ctx, nc)
			if err == nil {
				t.Fatal("JetStream available without the other node")
			}
			for _, w := range []string{"connected to no other node", "--routes nats-route://" + ports[1], tt.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A cluster node started without JetStream carries plain NATS over its
// routes and runs no JetStream, keeping none on disk; WaitRoute waits for
// a route to another node, and says which routes it has when it gives up.
func TestNoJetStreamRoutesOnly(t *testing.T) {
	ports := testnet.FreePorts(t, 2)
	dirA, dirB := t.TempDir(), t.TempDir()
	a, _ := startBus(t, func(c *Config) {
		c.DataDir = dirA
		c.Name, c.ClusterName, c.ClusterAddr, c.Routes = "a", "xr", ports[0], []string{"nats-route://" + ports[1]}
		c.NoJetStream = true
		c.Logger = slog.New(slog.DiscardHandler)
	})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.WaitRoute(done); err == nil || !strings.Contains(err.Error(), "no route to another node") ||
		!strings.Contains(err.Error(), "--routes nats-route://"+ports[1]) {
		t.Fatalf("WaitRoute with no other node: %v, want an error naming the routes", err)
	}

	b, _ := startBus(t, func(c *Config) {
		c.DataDir = dirB
		c.Name, c.ClusterName, c.ClusterAddr, c.Routes = "b", "xr", ports[1], []string{"nats-route://" + ports[0]}
		c.Logger = slog.New(slog.DiscardHandler)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.WaitRoute(ctx); err != nil {
		t.Fatal(err)
	}
	if names := a.RouteNames(); !slices.Equal(names, []string{"b"}) {
		t.Fatalf("routes to %q, want b", names)
	}

	na, err := a.Connect("a")
	if err != nil {
		t.Fatal(err)
	}
	defer na.Close()
	nb, err := b.Connect("b")
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	if _, err := nb.Subscribe("hello", func(m *nats.Msg) { _ = m.Respond([]byte("from b")) }); err != nil {
		t.Fatal(err)
	}
	if err := nb.Flush(); err != nil {
		t.Fatal(err)
	}
	// b's interest reaches a over the route shortly after the route.
	for {
		m, err := na.Request("hello", nil, 200*time.Millisecond)
		if err == nil {
			if string(m.Data) != "from b" {
				t.Fatalf("answer %q", m.Data)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no answer from b over the route: %v", err)
		}
	}
	if a.Server().JetStreamEnabled() {
		t.Fatal("JetStream runs on a bus started with NoJetStream")
	}
	if dir := filepath.Join(dirA, "jetstream"); dirExists(dir) {
		t.Errorf("a bus without JetStream made its store directory %s", dir)
	}
	if dir := filepath.Join(dirB, "jetstream"); !dirExists(dir) {
		t.Errorf("a bus with JetStream has no store directory %s", dir)
	}
}

func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// ConnectSystem reaches the NATS system account (a server ping, which only
// that account may send, is answered); the internal connection does not,
// and a bus without authentication has no system connection.
func TestConnectSystem(t *testing.T) {
	b, _ := startBus(t)
	sys, err := b.ConnectSystem("sys")
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if _, err := sys.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second); err != nil {
		t.Fatalf("server ping from the system account: %v", err)
	}
	internal, err := b.Connect("svc")
	if err != nil {
		t.Fatal(err)
	}
	defer internal.Close()
	if _, err := internal.Request("$SYS.REQ.SERVER.PING", nil, time.Second); err == nil {
		t.Fatal("the internal connection's server ping was answered: it is in the system account")
	}

	open, _ := startBus(t, func(c *Config) { c.Insecure = true; c.Logger = slog.New(slog.DiscardHandler) })
	if nc, err := open.ConnectSystem("sys"); err == nil {
		nc.Close()
		t.Fatal("a bus without authentication opened a system connection")
	} else if !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("error %q does not say why", err)
	}
}
