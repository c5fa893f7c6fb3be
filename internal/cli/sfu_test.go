package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/sfu"
)

// tokenBus starts a bus that checks xrealm tokens on a TCP port, as
// xrealm serve's, and returns it with its signing keys.
func tokenBus(t *testing.T) (*bus.Bus, *auth.Keys) {
	t.Helper()
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "cli-sfu-test", NATSAddr: "127.0.0.1:0", Verifier: keys, MaxPayload: 1 << 20,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	return b, keys
}

func issue(t *testing.T, keys *auth.Keys, user string, r auth.Rights) string {
	t.Helper()
	tok, err := keys.Issue(user, r, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func viewerRights() auth.Rights { return auth.SceneRights("realm", "ns", "sc", auth.RoleViewer, "") }

// runFor runs f with a context that ends after d and returns its error and
// how long it took.
func runFor(d time.Duration, f func(context.Context) error) (error, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	return err, time.Since(start)
}

// TestSFUViewerToken: `xrealm sfu` with a scene viewer's token fails at
// once, naming the refused subject and the token it needs, instead of
// running without working.
func TestSFUViewerToken(t *testing.T) {
	b, keys := tokenBus(t)
	tok := issue(t, keys, "alice", viewerRights())
	err, took := runFor(20*time.Second, func(ctx context.Context) error {
		return runSFU(ctx, []string{"--join", b.ClientURL(), "--id", "9", "--token", tok, "--log-level", "warn"})
	})
	var pe *sfu.PermissionError
	if !errors.As(err, &pe) {
		t.Fatalf("err %v, want a *sfu.PermissionError", err)
	}
	for _, want := range []string{`"sfu.node.9.signal"`, "xrealm token --role sfu", "--data"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not say %q", err, want)
		}
	}
	if took > 5*time.Second {
		t.Errorf("failed after %s, want at once", took)
	}
}

// TestSFUDuplicateID: `xrealm sfu --id X` where a node X runs (here one
// on the bus's internal connection, as xrealm serve's) refuses to start.
func TestSFUDuplicateID(t *testing.T) {
	b, keys := tokenBus(t)
	nc, err := b.Connect("serve-sfu")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	node, err := sfu.Start(context.Background(), sfu.Config{NC: nc, ID: "myhost", Site: "home", Manager: true, Logger: slog.New(slog.DiscardHandler),
		ICEAddresses: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	tok := issue(t, keys, "sfu-2", auth.ServiceRights("sfu"))
	err, took := runFor(20*time.Second, func(ctx context.Context) error {
		return runSFU(ctx, []string{"--join", b.ClientURL(), "--id", "myhost", "--token", tok, "--log-level", "warn"})
	})
	if want := "an SFU node with id myhost is already running (site home); choose another --id"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want one saying %q", err, want)
	}
	if took > 5*time.Second {
		t.Errorf("failed after %s, want at once", took)
	}
}

// TestSFUAnnouncesReachableWebSocket: `xrealm sfu --http-addr :0` announces
// a WebSocket URL with a host a remote client can dial, not [::].
func TestSFUAnnouncesReachableWebSocket(t *testing.T) {
	b, keys := tokenBus(t)
	hbs := heartbeats(t, b, "7", 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runSFU(ctx, []string{"--join", b.ClientURL(), "--id", "7", "--token", issue(t, keys, "sfu-7", auth.ServiceRights("sfu")),
			"--http-addr", ":0", "--ice-addrs", "127.0.0.1", "--log-level", "warn"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("xrealm sfu: %v", err)
		}
	}()
	var info sfu.NodeInfo
	select {
	case info = <-hbs:
	case err := <-done:
		t.Fatalf("xrealm sfu ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat of node 7")
	}
	if strings.Contains(info.WebSocket, "[::]") || strings.Contains(info.WebSocket, "0.0.0.0") {
		t.Fatalf("announced %q, an address no remote client can dial", info.WebSocket)
	}
	if want := "ws://" + reachableHost(interfaceIPs(), os.Hostname) + ":"; !strings.HasPrefix(info.WebSocket, want) {
		t.Errorf("announced %q, want %s...", info.WebSocket, want)
	}
	if !strings.HasSuffix(info.WebSocket, "/sfu/ws") {
		t.Errorf("announced %q, want .../sfu/ws", info.WebSocket)
	}
}

func TestAnnouncedWS(t *testing.T) {
	ips := func(s ...string) func() []net.IP {
		return func() []net.IP {
			var out []net.IP
			for _, a := range s {
				out = append(out, net.ParseIP(a))
			}
			return out
		}
	}
	host := func() (string, error) { return "box", nil }
	noHost := func() (string, error) { return "", errors.New("no name") }
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	for _, tt := range []struct {
		addr     net.Addr
		ips      func() []net.IP
		hostname func() (string, error)
		want     string
	}{
		{tcp("[::]:28445"), ips("fe80::1", "169.254.3.4", "2001:db8::1", "192.168.1.20", "10.0.0.2"), host, "ws://192.168.1.20:28445/sfu/ws"},
		{tcp("0.0.0.0:8445"), ips("10.0.0.2"), host, "ws://10.0.0.2:8445/sfu/ws"},
		{tcp("[::]:8445"), ips("fe80::1", "2001:db8::1"), host, "ws://box:8445/sfu/ws"},
		{tcp("[::]:8445"), ips(), noHost, "ws://localhost:8445/sfu/ws"},
		{tcp("127.0.0.1:8445"), ips("10.0.0.2"), host, "ws://127.0.0.1:8445/sfu/ws"},
		{tcp("[2001:db8::5]:8445"), ips("10.0.0.2"), host, "ws://[2001:db8::5]:8445/sfu/ws"},
	} {
		if got := announcedWS(tt.addr, tt.ips, tt.hostname); got != tt.want {
			t.Errorf("announcedWS(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

// TestConnectBusRefusedToken: a token signed with another key (made with
// another --data) or none at all gets the hint of which token the bus takes.
func TestConnectBusRefusedToken(t *testing.T) {
	b, _ := tokenBus(t)
	other, err := auth.LoadOrCreateKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		token string
		want  []string
	}{
		{issue(t, other, "sfu-2", auth.ServiceRights("sfu")), []string{"signed by the server's key", "the server's data directory with --data", "--role sfu"}},
		{"", []string{"pass --token", "--role sfu"}},
	} {
		nc, _, err := connectBus(b.ClientURL(), tt.token, "test", log, nats.NoReconnect())
		if err == nil {
			nc.Close()
			t.Fatalf("token %q: connected", tt.token)
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("err %v, want nats.ErrAuthorization", err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("err %q does not say %q", err, w)
			}
		}
	}
	if err := busConnectError(nats.ErrNoServers, true); err != nats.ErrNoServers {
		t.Errorf("busConnectError(ErrNoServers) = %v, want it unchanged", err)
	}
}

// TestPointCloudBotViewerToken: `xrealm bots pointcloud` with a scene
// viewer's token fails at once instead of waiting for its 30 s join
// timeout.
func TestPointCloudBotViewerToken(t *testing.T) {
	b, keys := tokenBus(t)
	tok := issue(t, keys, "alice", viewerRights())
	err, took := runFor(40*time.Second, func(ctx context.Context) error {
		return runPointCloudBot(ctx, []string{"--bus", b.ClientURL(), "--token", tok, "--session", "s1", "--points", "500", "--frames", "2"})
	})
	if err == nil {
		t.Skip("no Draco tools: the bot skipped")
	}
	var pe *sfu.PermissionError
	if !errors.As(err, &pe) {
		t.Fatalf("err %v, want a *sfu.PermissionError", err)
	}
	if !strings.Contains(err.Error(), "xrealm token --role sfu") || !strings.HasPrefix(pe.Subject, "sfu.") && !strings.HasPrefix(pe.Subject, "_INBOX.") {
		t.Errorf("err %q: want the refused subject and the token to make", err)
	}
	if took > 15*time.Second {
		t.Errorf("failed after %s, want long before the 30 s join timeout", took)
	}
}

// TestSFUMaxClients: `xrealm sfu --max-clients N` gives the node's
// Config.MaxClients, which its heartbeat announces (default 500); a value
// below 1 is refused with exit code 2 and an error naming the flag.
func TestSFUMaxClients(t *testing.T) {
	for _, tc := range []struct {
		value   string
		refused bool
		want    int
	}{
		{value: "", want: sfu.DefaultMaxClients},
		{value: "3", want: 3},
		{value: "0", refused: true},
		{value: "-1", refused: true},
	} {
		t.Run(cmp.Or(tc.value, "default"), func(t *testing.T) {
			if tc.refused {
				var out bytes.Buffer
				args := []string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--max-clients", tc.value}
				if rc := Main(args, &out); rc != 2 || !strings.Contains(out.String(), "--max-clients "+tc.value) {
					t.Fatalf("exit code %d, output %q; want 2 and an error naming --max-clients %s", rc, out.String(), tc.value)
				}
				return
			}
			args := []string{}
			if tc.value != "" {
				args = append(args, "--max-clients", tc.value)
			}
			if info := sfuHeartbeat(t, args...); info.MaxClients != tc.want {
				t.Fatalf("heartbeat %+v: max_clients %d, want %d", info, info.MaxClients, tc.want)
			}
		})
	}
}

// sfuHeartbeat runs `xrealm sfu` with args on a bus of its own as node 9
// and returns its first heartbeat; the node stops when the test ends. If
// the command ends before its first heartbeat, the test fails with its
// error.
func sfuHeartbeat(t *testing.T, args ...string) sfu.NodeInfo {
	t.Helper()
	b, keys := tokenBus(t)
	hbs := heartbeats(t, b, "9", 1)
	tok := issue(t, keys, "sfu-9", auth.ServiceRights("sfu"))
	cmd := startRunning(t, fmt.Sprintf("xrealm sfu %v", args), func(ctx context.Context) error {
		return runSFU(ctx, append([]string{"--join", b.ClientURL(), "--id", "9", "--token", tok,
			"--ice-addrs", "127.0.0.1", "--log-level", "warn"}, args...))
	})
	select {
	case info := <-hbs:
		return info
	case <-cmd.ended:
		cmd.endedEarly(t, "its first heartbeat")
	case <-time.After(20 * time.Second):
		t.Fatalf("no heartbeat of node 9 (xrealm sfu %v)", args)
	}
	return sfu.NodeInfo{}
}

// earlyExitEnv, when set, makes TestHeartbeatEarlyExit run the helper it
// names (sfu: sfuHeartbeat, serve: serveHeartbeat) with a command that
// ends at once, in a process of its own.
const earlyExitEnv = "XREALM_CLI_EARLY_EXIT"

// TestHeartbeatEarlyExit: when `xrealm sfu` or `xrealm serve` ends before
// its first heartbeat (here --max-clients 0 is refused), sfuHeartbeat and
// serveHeartbeat fail the test with the command's error, reported once,
// and the test ends. Each helper runs in a process of its own, whose
// failure is the expected outcome, with a test timeout that turns a hang
// into a panic.
func TestHeartbeatEarlyExit(t *testing.T) {
	switch os.Getenv(earlyExitEnv) {
	case "sfu":
		sfuHeartbeat(t, "--max-clients", "0")
		return
	case "serve":
		serveHeartbeat(t, "--max-clients", "0")
		return
	}
	for _, tc := range []struct{ helper, before string }{
		{"sfu", "xrealm sfu [--max-clients 0] ended before its first heartbeat"},
		{"serve", "xrealm serve [--max-clients 0] ended before its bus answered"},
	} {
		t.Run(tc.helper, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHeartbeatEarlyExit$", "-test.timeout=60s", "-test.v")
			cmd.Env = append(os.Environ(), earlyExitEnv+"="+tc.helper)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("helper process: %v, want it to fail; output:\n%s", err, out)
			}
			if strings.Contains(string(out), "test timed out") {
				t.Fatalf("the helper hung after the command ended; output:\n%s", out)
			}
			for _, want := range []string{"--- FAIL: TestHeartbeatEarlyExit", tc.before} {
				if !strings.Contains(string(out), want) {
					t.Errorf("helper output does not say %q:\n%s", want, out)
				}
			}
			if n := strings.Count(string(out), "--max-clients 0: want at least 1 client"); n != 1 {
				t.Errorf("helper output gives the command's error %d times, want once:\n%s", n, out)
			}
		})
	}
}

// heartbeats returns the heartbeats of SFU node id on bus b (not those of
// its leaving), in a channel of capacity n that drops what does not fit.
func heartbeats(t *testing.T, b *bus.Bus, id string, n int) <-chan sfu.NodeInfo {
	t.Helper()
	watch, err := b.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Close)
	hbs := make(chan sfu.NodeInfo, n)
	if _, err := watch.Subscribe("sfu.nodes", func(m *nats.Msg) {
		var info sfu.NodeInfo
		if json.Unmarshal(m.Data, &info) == nil && info.ID == id && !info.Leaving {
			select {
			case hbs <- info:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	return hbs
}
