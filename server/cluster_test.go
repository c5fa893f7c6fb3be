package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/internal/testnet"
	"github.com/xrealm/xrealm/persist"
)

func TestDefaultReplicas(t *testing.T) {
	tests := []struct {
		name     string
		cluster  string
		routes   []string
		explicit int
		want     int
	}{
		{"alone", "", nil, 0, 1},
		{"alone, routes ignored", "", []string{"nats-route://a:6222"}, 0, 1},
		{"cluster without routes", "xr", nil, 0, 1},
		{"two nodes", "xr", []string{"nats-route://b:6222"}, 0, 2},
		{"three nodes", "xr", []string{"nats-route://b:6222", "nats-route://c:6222"}, 0, 3},
		{"five nodes: at most 3", "xr", []string{"nats-route://b:6222", "nats-route://c:6222", "nats-route://d:6222", "nats-route://e:6222"}, 0, 3},
		{"a route given twice counts once", "xr", []string{"nats-route://b:6222", " nats-route://b:6222"}, 0, 2},
		{"one node by two schemes counts once", "xr", []string{"nats-route://b:6222", "nats://user:pw@B:6222"}, 0, 2},
		{"empty routes do not count", "xr", []string{"", " "}, 0, 1},
		{"--replicas wins", "xr", []string{"nats-route://b:6222"}, 3, 3},
		{"--replicas alone", "", nil, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{ClusterName: tt.cluster, Routes: tt.routes, Replicas: tt.explicit}
			if got, _ := c.replicas(context.Background()); got != tt.want {
				t.Fatalf("replicas() = %d, want %d", got, tt.want)
			}
		})
	}
}

// fakeAddrs is a machine with the interface addresses ifaces and the names
// of hosts.
type fakeAddrs struct {
	ifaces []string
	hosts  map[string][]string
}

func (f fakeAddrs) LookupHost(_ context.Context, host string) ([]netip.Addr, error) {
	as, ok := f.hosts[host]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	return parseAddrs(as), nil
}

func (f fakeAddrs) InterfaceAddrs() ([]netip.Addr, error) { return parseAddrs(f.ifaces), nil }

func parseAddrs(as []string) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// The rule of selfRoutes on a machine with the interface addresses
// 10.0.0.5 and fd00::5.
func TestSelfRoutesRule(t *testing.T) {
	sys := fakeAddrs{
		ifaces: []string{"127.0.0.1", "::1", "10.0.0.5", "fd00::5", "fe80::5"},
		hosts: map[string][]string{
			"localhost": {"127.0.0.1", "::1"},
			"me":        {"10.0.0.5", "fd00::5"},
			"me-lo":     {"127.0.1.1"},
			"b":         {"10.0.0.6"},
			"cluster":   {"10.0.0.5", "10.0.0.6"}, // a name for every node
			"empty":     {},
		},
	}
	tests := []struct {
		name   string
		listen string
		route  string
		self   bool
	}{
		{"127.0.0.1", ":6222", "nats-route://127.0.0.1:6222", true},
		{"another loopback address", ":6222", "nats-route://127.0.0.2:6222", true},
		{"::1", ":6222", "nats-route://[::1]:6222", true},
		{"localhost", ":6222", "nats-route://localhost:6222", true},
		{"0.0.0.0", ":6222", "nats-route://0.0.0.0:6222", true},
		{"the machine's address", ":6222", "nats-route://10.0.0.5:6222", true},
		{"the machine's IPv6 address", ":6222", "nats-route://[fd00::5]:6222", true},
		{"IPv4-mapped", ":6222", "nats-route://[::ffff:10.0.0.5]:6222", true},
		{"link-local with a zone", ":6222", "nats-route://[fe80::5%25eth0]:6222", true},
		{"the machine's name", ":6222", "nats-route://me:6222", true},
		{"the machine's name on 127.0.1.1", ":6222", "nats-route://me-lo:6222", true},
		{"another scheme, with a user", ":6222", "nats://u:p@localhost:6222", true},
		{"listening on 0.0.0.0", "0.0.0.0:6222", "nats-route://me:6222", true},
		{"listening on ::", "[::]:6222", "nats-route://127.0.0.1:6222", true},

		{"another port", ":6222", "nats-route://127.0.0.1:6223", false},
		{"no port", ":6222", "nats-route://127.0.0.1", false},
		{"another host", ":6222", "nats-route://10.0.0.6:6222", false},
		{"another host by name", ":6222", "nats-route://b:6222", false},
		{"a name for the whole cluster", ":6222", "nats-route://cluster:6222", false},
		{"a name that does not resolve", ":6222", "nats-route://nowhere:6222", false},
		{"a name without addresses", ":6222", "nats-route://empty:6222", false},
		{"not a URL", ":6222", "127.0.0.1:6222", false},
		{"cluster listener on port 0", ":0", "nats-route://127.0.0.1:0", false},
		{"no cluster address", "", "nats-route://127.0.0.1:6222", false},

		// A listener on one address is reached only there: another node
		// of the same machine can listen on the same port elsewhere.
		{"listening on the machine's address, route to it", "10.0.0.5:6222", "nats-route://me:6222", false}, // me is also fd00::5
		{"listening on the machine's address, route to it by IP", "10.0.0.5:6222", "nats-route://10.0.0.5:6222", true},
		{"listening on the machine's address, route to loopback", "10.0.0.5:6222", "nats-route://127.0.0.1:6222", false},
		{"listening on the machine's name", "me:6222", "nats-route://[fd00::5]:6222", true},
		{"listening on loopback, route to loopback", "127.0.0.1:6222", "nats-route://127.0.0.1:6222", true},
		{"listening on loopback, route to the machine's address", "127.0.0.1:6222", "nats-route://10.0.0.5:6222", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := selfRoutes(context.Background(), tt.listen, []string{tt.route}, sys)
			if got[0] != tt.self {
				t.Fatalf("route %s with --cluster-addr %q: self = %v, want %v", tt.route, tt.listen, got[0], tt.self)
			}
		})
	}
}

// Self-routes on this machine, resolved as xrealm serve resolves them: a
// node given the whole cluster's routes, itself among them, counts the
// others only.
func TestDefaultReplicasSelfRoutes(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// The machine's own non-loopback address, and an address that is not
	// the machine's.
	var machineIP string
	local := map[netip.Addr]bool{}
	ifaces, err := systemAddrs{}.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ifaces {
		local[a] = true
		if machineIP == "" && a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			machineIP = a.String()
		}
	}
	var otherIP string
	for _, a := range []string{"198.51.100.7", "203.0.113.7", "192.0.2.77"} {
		if !local[netip.MustParseAddr(a)] {
			otherIP = a
			break
		}
	}
	tests := []struct {
		name   string
		routes []string
		want   int
		self   int
		skip   string
	}{
		{"two nodes, 127.0.0.1", []string{"nats-route://127.0.0.1:6222", "nats-route://b.invalid:6222"}, 2, 1, ""},
		{"two nodes, localhost", []string{"nats-route://localhost:6222", "nats-route://b.invalid:6222"}, 2, 1, ""},
		{"two nodes, the host name", []string{"nats-route://" + host + ":6222", "nats-route://b.invalid:6222"}, 2, 1, ""},
		{"two nodes, the machine's address", []string{"nats-route://" + machineIP + ":6222", "nats-route://" + otherIP + ":6222"}, 2, 1,
			map[bool]string{true: "no non-loopback IPv4 interface address"}[machineIP == ""]},
		{"three nodes, each given all", []string{"nats-route://127.0.0.1:6222", "nats-route://" + otherIP + ":6222", "nats-route://b.invalid:6222"}, 3, 1, ""},
		{"alone with a route to itself", []string{"nats-route://localhost:6222", "nats-route://127.0.0.1:6222"}, 1, 2, ""},
		{"another node on this machine", []string{"nats-route://127.0.0.1:6223"}, 2, 0, ""},
		{"other hosts", []string{"nats-route://" + otherIP + ":6222", "nats-route://b.invalid:6222"}, 3, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip != "" {
				t.Skip(tt.skip)
			}
			if otherIP == "" {
				t.Skip("every test address is this machine's")
			}
			c := Config{ClusterName: "xr", ClusterAddr: ":6222", Routes: tt.routes}
			got, self := c.replicas(context.Background())
			if got != tt.want || len(self) != tt.self {
				t.Fatalf("routes %q: replicas %d, self-routes %q; want %d replicas and %d self-routes", tt.routes, got, self, tt.want, tt.self)
			}
		})
	}
}

func TestPlacementHint(t *testing.T) {
	noPeers := &jetstream.APIError{Code: 400, ErrorCode: jsErrNoPeers, Description: "no suitable peers for placement"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"API error", noPeers, true},
		{"wrapped API error", fmt.Errorf("open scene settings bucket: %w", noPeers), true},
		{"text only", errors.New("nats: no suitable peers for placement, peer offline"), true},
		{"other API error", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, false},
		{"timeout", context.DeadlineExceeded, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := placementHint(tt.err, 3)
			if (h != "") != tt.want {
				t.Fatalf("placementHint = %q, want a hint: %v", h, tt.want)
			}
			if h != "" && (!strings.Contains(h, "needs 3 replicas") || !strings.Contains(h, "--replicas") || !strings.Contains(h, "start more nodes")) {
				t.Fatalf("hint %q does not say what to do", h)
			}
		})
	}
}

// A placement failure is logged once as a warning with the hint, not at
// every attempt, and the error once the context ends says what to do.
func TestRetryPlacementFailure(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	attempts := 0
	err := retry(ctx, log, "open scene settings", 3, func(context.Context) error {
		attempts++
		return fmt.Errorf("open scene settings bucket: %w", &jetstream.APIError{Code: 400, ErrorCode: jsErrNoPeers, Description: "no suitable peers for placement"})
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
	for _, want := range []string{"open scene settings", "needs 3 replicas", "--replicas", "no suitable peers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	// 0, 0.5, 1.5 s: the waits double.
	if attempts > 4 {
		t.Errorf("%d attempts in 2 s: the waits do not grow", attempts)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "--replicas") {
		t.Errorf("log %q: want one warning with the hint", logs.String())
	}
}

// The hint stays once an attempt has failed for want of servers, when
// later attempts fail otherwise (the meta leader being elected, timeouts),
// and the first placement failure is logged at once, as a warning.
func TestRetryKeepsPlacementHint(t *testing.T) {
	noPeers := fmt.Errorf("open scene settings bucket: %w", &jetstream.APIError{Code: 400, ErrorCode: jsErrNoPeers, Description: "no suitable peers for placement"})
	notAvailable := errors.New("nats: JetStream not available")
	tests := []struct {
		name string
		errs []error // one per attempt; the last repeats
		last string
	}{
		{"then unavailable", []error{notAvailable, noPeers, notAvailable}, "nats: JetStream not available"},
		{"then timeouts", []error{noPeers, context.DeadlineExceeded}, "context deadline exceeded"},
		{"placement last", []error{notAvailable, noPeers}, "open scene settings bucket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
			defer cancel()
			attempt := 0
			err := retry(ctx, log, "open scene settings", 3, func(context.Context) error {
				attempt++
				return tt.errs[min(attempt, len(tt.errs))-1]
			})
			if attempt < len(tt.errs) {
				t.Fatalf("%d attempts, want at least %d", attempt, len(tt.errs))
			}
			if err == nil || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want the context's", err)
			}
			for _, want := range []string{"needs 3 replicas", "start more nodes", "--replicas", "no suitable peers", "last error: " + tt.last} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			// The first attempt's line, and the first placement
			// failure's at once if that came later.
			var warned bool
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "no suitable peers") && strings.Contains(l, "--replicas") {
					warned = true
				}
			}
			if !warned {
				t.Errorf("log %q: want a warning with the placement error and the hint", logs.String())
			}
		})
	}
}

// clusterConfigs returns the configurations of n nodes of one cluster, each
// with routes to all the others and no front-end listeners, sharing one
// signing key as the README says.
func clusterConfigs(t *testing.T, n int) []Config {
	ports := testnet.FreePorts(t, n)
	cfgs := make([]Config, n)
	for i := range cfgs {
		c := Defaults()
		c.DataDir = t.TempDir()
		c.HTTPAddr, c.HTTPSAddr, c.MQTTAddr, c.MQTTSAddr, c.MQTTWSAddr, c.NATSAddr, c.NATSWSAddr = "", "", "", "", "", "", ""
		c.UbiqAddr, c.UbiqWSSAddr, c.UbiqWSAddr = "", "", ""
		c.Name, c.ClusterName, c.ClusterAddr = fmt.Sprintf("n%d", i+1), "xr", ports[i]
		for j, p := range ports {
			if j != i {
				c.Routes = append(c.Routes, "nats-route://"+p)
			}
		}
		cfgs[i] = c
	}
	for i := 1; i < n; i++ {
		shareKeys(t, cfgs[0].DataDir, cfgs[i].DataDir)
	}
	return cfgs
}

// shareKeys makes the data directory dst sign with src's key, creating
// that key if src has none, as an operator copies keys/.
func shareKeys(t *testing.T, src, dst string) {
	t.Helper()
	if _, err := auth.LoadOrCreateKeys(src); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(src, "keys", auth.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dst, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "keys", auth.KeyFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startCluster starts the nodes at once, as an operator would, and returns
// each one's server or error. logs, if not nil, gets each node's log too.
func startCluster(t *testing.T, ctx context.Context, cfgs []Config, logs func(node int) io.Writer) ([]*Server, []error) {
	srvs, errs := make([]*Server, len(cfgs)), make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		log := testLogger().With("node", c.Name)
		if logs != nil {
			log = slog.New(teeHandler{log.Handler(), slog.NewTextHandler(logs(i), nil)})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = Start(ctx, c, log)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, s := range srvs {
			if s != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					s.Shutdown(ctx)
				}()
			}
		}
		wg.Wait()
	})
	return srvs, errs
}

// Two nodes started as the README shows, without --replicas, start; scene
// state has 2 replicas, and settings written on one node are read on the
// other.
func TestTwoNodeClusterStartsWithDefaultReplicas(t *testing.T) {
	testTwoNodeClusterStarts(t, false)
}

// Two nodes given the same full route list, each its own route included,
// start as well: a node does not count the route to itself.
func TestTwoNodeClusterFullRouteLists(t *testing.T) {
	testTwoNodeClusterStarts(t, true)
}

func testTwoNodeClusterStarts(t *testing.T, fullRoutes bool) {
	if testing.Short() {
		t.Skip("starts a two-node cluster (15-20 s)")
	}
	t.Parallel()
	cfgs := clusterConfigs(t, 2)
	if fullRoutes {
		all := []string{"nats-route://" + cfgs[0].ClusterAddr, "nats-route://" + cfgs[1].ClusterAddr}
		for i := range cfgs {
			cfgs[i].Routes = all
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	notCounted := map[int]bool{}
	srvs, errs := startCluster(t, ctx, cfgs, func(node int) io.Writer {
		return writerFunc(func(p []byte) {
			if bytes.Contains(p, []byte("not counting routes to this node's own cluster address")) {
				mu.Lock()
				defer mu.Unlock()
				notCounted[node] = true
			}
		})
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	mu.Lock()
	if fullRoutes && len(notCounted) != len(cfgs) || !fullRoutes && len(notCounted) != 0 {
		t.Errorf("nodes that logged not counting a route to themselves: %v; routes to themselves: %v", notCounted, fullRoutes)
	}
	mu.Unlock()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := auth.Settings{Namespace: "alice", Scene: "lab", Editors: []string{"bob"}}
	if err := srvs[0].Settings.Put(ctx, st); err != nil {
		t.Fatal(err)
	}
	nc, err := srvs[1].bus.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, "KV_"+auth.SettingsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if r := info.CachedInfo().Config.Replicas; r != 2 {
		t.Fatalf("settings bucket has %d replicas, want 2", r)
	}
	for {
		got, err := srvs[1].Settings.Get(ctx, "alice", "lab")
		if err == nil && len(got.Editors) == 1 && got.Editors[0] == "bob" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node 2 reads %+v, %v; want node 1's settings", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two nodes asked for 3 replicas cannot start, and say why and what to do.
func TestTwoNodeClusterTooManyReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a two-node cluster to give up")
	}
	t.Parallel()
	cfgs := clusterConfigs(t, 2)
	for i := range cfgs {
		cfgs[i].Replicas = 3
	}
	// Once both nodes have warned that the replicas cannot be placed, stop
	// them, as an operator would.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	warned := map[int]bool{}
	_, errs := startCluster(t, ctx, cfgs, func(node int) io.Writer {
		return writerFunc(func(p []byte) {
			if bytes.Contains(p, []byte("level=WARN")) && bytes.Contains(p, []byte("needs 3 replicas")) {
				mu.Lock()
				defer mu.Unlock()
				if warned[node] = true; len(warned) == len(cfgs) {
					cancel()
				}
			}
		})
	})
	for i, err := range errs {
		if err == nil {
			t.Fatalf("node %d started with 3 replicas on 2 nodes", i+1)
		}
		if !strings.Contains(err.Error(), "needs 3 replicas") || !strings.Contains(err.Error(), "--replicas") {
			t.Errorf("node %d: error %q does not say what to do", i+1, err)
		}
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("XREALM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func TestClusterConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"alone", func(c *Config) {}, ""},
		{"cluster", func(c *Config) { c.ClusterName, c.Name, c.Routes = "xr", "n1", []string{"nats-route://b:6222"} }, ""},
		{"cluster without a name", func(c *Config) { c.ClusterName, c.Routes = "xr", []string{"nats-route://b:6222"} }, "--name"},
		{"cluster without routes", func(c *Config) { c.ClusterName, c.Name = "xr", "n1" }, "--routes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			tt.mod(&c)
			err := c.Validate()
			if (err != nil) != (tt.wantErr != "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validate() = %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// teeHandler sends each record to two handlers.
type teeHandler struct{ a, b slog.Handler }

func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.a.Enabled(ctx, l) || h.b.Enabled(ctx, l)
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.a.Enabled(ctx, r.Level) {
		_ = h.a.Handle(ctx, r.Clone())
	}
	if h.b.Enabled(ctx, r.Level) {
		return h.b.Handle(ctx, r)
	}
	return nil
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{h.a.WithAttrs(as), h.b.WithAttrs(as)}
}

func (h teeHandler) WithGroup(n string) slog.Handler {
	return teeHandler{h.a.WithGroup(n), h.b.WithGroup(n)}
}

// A node started with another --realm than its cluster's refuses to start,
// saying which node serves which realm, and leaves the cluster's
// persistence stream as it was (replacing the stream's subjects with its
// own realm's would leave the other nodes' object messages unstored).
// A node with another signing key starts, but it and the nodes it asks log
// that the keys differ and what to do.
func TestClusterRefusesMismatchedNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster and two third nodes")
	}
	t.Parallel()
	cfgs := clusterConfigs(t, 3)
	for i := range cfgs {
		cfgs[i].Replicas = 2 // the third node is not always there
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	var runningLog bytes.Buffer
	srvs, errs := startCluster(t, ctx, cfgs[:2], func(int) io.Writer {
		return writerFunc(func(p []byte) { mu.Lock(); runningLog.Write(p); mu.Unlock() })
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}

	other := cfgs[2]
	other.Realm = "other"
	s, err := Start(ctx, other, testLogger().With("node", "n3"))
	if err == nil {
		s.Close()
		t.Fatal("a node of realm other joined a cluster of realm realm")
	}
	var rm *realmMismatchError
	if !errors.As(err, &rm) || !strings.Contains(err.Error(), `serves realm "realm"`) || !strings.Contains(err.Error(), "--realm realm") {
		t.Fatalf("error %q does not say which realm the cluster serves and what to do", err)
	}
	nc, err := srvs[0].bus.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, persist.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if subs := st.CachedInfo().Config.Subjects; !slices.Contains(subs, persist.StreamSubject("realm")) || slices.Contains(subs, persist.StreamSubject("other")) {
		t.Fatalf("after the refused node, stream %s captures %q", persist.StreamName, subs)
	}

	ownKey := cfgs[2]
	ownKey.DataDir = t.TempDir()
	var newLog bytes.Buffer
	log := slog.New(teeHandler{testLogger().Handler(), slog.NewTextHandler(writerFunc(func(p []byte) { mu.Lock(); newLog.Write(p); mu.Unlock() }), nil)})
	s, err = Start(ctx, ownKey, log.With("node", "n3"))
	if err != nil {
		t.Fatalf("a node with its own key: %v", err)
	}
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	if l := newLog.String(); !strings.Contains(l, "signing keys differ across the cluster") || !strings.Contains(l, "copy the keys/ directory") {
		t.Errorf("the node with its own key logged no error about it:\n%s", l)
	}
	if l := runningLog.String(); !strings.Contains(l, "a node of another realm asked to join") || !strings.Contains(l, "its_realm=other") ||
		!strings.Contains(l, "a node with another signing key asked to join") {
		t.Errorf("the running nodes did not log both mismatched nodes:\n%s", l)
	}
}

// --replicas applies to the whole cluster's state: a node given fewer than
// the state has lowers them for every node, and warns that it does.
func TestExplicitFewerReplicasWarns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster and a third node")
	}
	t.Parallel()
	cfgs := clusterConfigs(t, 3)
	for i := range cfgs {
		cfgs[i].Replicas = 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, errs := startCluster(t, ctx, cfgs[:2], nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	cfgs[2].Replicas = 1
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(teeHandler{testLogger().Handler(), slog.NewTextHandler(writerFunc(func(p []byte) { mu.Lock(); logs.Write(p); mu.Unlock() }), nil)})
	s, err := Start(ctx, cfgs[2], log.With("node", "n3"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	var warned bool
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "lowers the replicas of the whole cluster") && strings.Contains(l, "existing=2") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("a node with --replicas 1 in a cluster with state of 2 replicas did not warn:\n%s", logs.String())
	}
}

// A node refused for another realm never joins the JetStream meta group:
// it joined before its identity check, stayed in the meta group's peers
// after it stopped, and with that ghost, the loss of one real node of
// three left the other two without a meta leader ("JetStream cluster no
// metadata leader", every GET /persist answered 500). The two survivors
// still store a persisted create and answer GET /persist.
func TestRefusedNodeLeavesNoJetStreamPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster and a fourth node, then stops one")
	}
	t.Parallel()
	cfgs := clusterConfigs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srvs, errs := startCluster(t, ctx, cfgs, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}

	other := cfgs[2]
	other.Name, other.Realm, other.DataDir = "n4", "other", t.TempDir()
	other.ClusterAddr = testnet.FreePorts(t, 1)[0]
	other.Routes = nil
	for _, c := range cfgs {
		other.Routes = append(other.Routes, "nats-route://"+c.ClusterAddr)
	}
	shareKeys(t, cfgs[0].DataDir, other.DataDir)
	// A slow machine: the node waits past the meta leader's heartbeats
	// (once a second) before its check.
	other.beforeClusterCheck = func() { time.Sleep(3 * time.Second) }
	s, err := Start(ctx, other, testLogger().With("node", "n4"))
	if err == nil {
		s.Close()
		t.Fatal("a node of realm other joined a cluster of realm realm")
	}
	var rm *realmMismatchError
	if !errors.As(err, &rm) {
		t.Fatalf("node of another realm: %v, want the realm mismatch", err)
	}

	for i, n := range srvs {
		if size, peers := metaPeers(n); size != 3 || slices.Contains(peers, "n4") {
			t.Errorf("node %d after the refusal: JetStream meta group of %d peers %q, want 3 without n4", i+1, size, peers)
		}
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 30*time.Second)
	if err := srvs[2].Shutdown(stopCtx); err != nil {
		t.Logf("stopping node 3: %v", err)
	}
	stopCancel()
	srvs[2] = nil // stopped; not again at cleanup

	for i, n := range srvs[:2] {
		waitPersists(t, ctx, n, fmt.Sprintf("n%d-box", i+1))
	}
}

// waitPersists publishes a persisted create of object id on node n until
// JetStream stores it, then polls n's GET /persist until it lists it.
func waitPersists(t *testing.T, ctx context.Context, n *Server, id string) {
	t.Helper()
	nc, err := n.bus.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subject := "realm.s.lab.room1.o.ed-1." + id
	payload := []byte(`{"object_id":"` + id + `","action":"create","type":"object","persist":true,"data":{"object_type":"box"}}`)
	tok, err := n.Keys.Issue("ed", auth.SceneRights("realm", "lab", "room1", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	stored := false
	for {
		if !stored {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := js.Publish(pctx, subject, payload, jetstream.WithMsgID(id))
			cancel()
			if err == nil {
				stored = true
			} else {
				last = "publish: " + err.Error()
			}
		}
		if stored {
			req := httptest.NewRequest("GET", "/persist/lab/room1", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			rec := httptest.NewRecorder()
			n.Mux.ServeHTTP(rec, req)
			if rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), `"object_id":"`+id+`"`) {
				return
			}
			last = fmt.Sprintf("GET /persist/lab/room1: %d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %s: the persisted create of %s was never listed; last: %s", n.cfg.nodeName(), id, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// metaPeers returns the size of the JetStream meta group as node n knows
// it, and the names of its peers other than n.
func metaPeers(n *Server) (int, []string) {
	jsz, err := n.bus.Server().Jsz(&natsserver.JSzOptions{})
	if err != nil || jsz.Meta == nil {
		return 0, nil
	}
	var names []string
	for _, p := range jsz.Meta.Replicas {
		names = append(names, p.Name)
	}
	return jsz.Meta.Size, names
}

// A node that ran JetStream in the cluster and stopped for good is still a
// peer of the JetStream meta group; RemoveJetStreamPeer removes it, and
// then the loss of one node of the three leaves the other two a meta
// leader. It refuses this node, a running node and a name that is no peer.
func TestRemoveDepartedJetStreamPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster and a fourth node, then stops two")
	}
	t.Parallel()
	cfgs := clusterConfigs(t, 3)
	cfgs[1].NATSAddr = testnet.FreePorts(t, 1)[0] // for xrealm cluster remove-peer's request
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	srvs, errs := startCluster(t, ctx, cfgs, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}

	// A fourth node of the same realm and key joins, and is retired.
	fourth := cfgs[2]
	fourth.Name, fourth.DataDir = "n4", t.TempDir()
	fourth.ClusterAddr = testnet.FreePorts(t, 1)[0]
	fourth.Routes = nil
	for _, c := range cfgs {
		fourth.Routes = append(fourth.Routes, "nats-route://"+c.ClusterAddr)
	}
	shareKeys(t, cfgs[0].DataDir, fourth.DataDir)
	n4, err := Start(ctx, fourth, testLogger().With("node", "n4"))
	if err != nil {
		t.Fatal(err)
	}
	n4Stopped := false
	t.Cleanup(func() {
		if !n4Stopped {
			n4.Close()
		}
	})
	poll(t, ctx, "the meta group counts n4", func() string {
		if size, peers := metaPeers(srvs[0]); size != 4 || !slices.Contains(peers, "n4") {
			return fmt.Sprintf("node 1: meta group of %d, peers %q", size, peers)
		}
		return ""
	})

	for _, tt := range []struct{ name, want string }{
		{"n2", "it is this node"},
		{"n4", "the node is running"},
		{"n9", "not a member"},
	} {
		err := srvs[1].RemoveJetStreamPeer(ctx, tt.name)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"`+tt.name+`"`) {
			t.Errorf("removing %s: %v, want an error naming it and saying %q", tt.name, err, tt.want)
		}
	}

	stop := func(what string, n *Server) {
		stopCtx, stopCancel := context.WithTimeout(ctx, 30*time.Second)
		defer stopCancel()
		if err := n.Shutdown(stopCtx); err != nil {
			t.Logf("stopping %s: %v", what, err)
		}
	}
	stop("n4", n4)
	n4Stopped = true
	// Over the bus, as xrealm cluster remove-peer asks: a scene token may
	// not ask (the bus refuses the publish: no node answers), a token with
	// the cluster right may.
	ask := func(rights auth.Rights) (RemovePeerReply, error) {
		keys, err := auth.LoadKeys(cfgs[1].DataDir)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := keys.Issue("admin", rights, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect("nats://"+cfgs[1].NATSAddr, nats.Token(tok))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		var reply RemovePeerReply
		m, err := nc.Request(SubjectRemovePeer, []byte("n4"), 3*time.Second)
		if err == nil {
			err = json.Unmarshal(m.Data, &reply)
		}
		return reply, err
	}
	if reply, err := ask(auth.SceneRights("realm", "a", "b", auth.RoleEditor, "")); err == nil {
		t.Fatalf("a scene editor's token asked to remove n4 and got %+v", reply)
	}
	poll(t, ctx, "n4 removed", func() string {
		reply, err := ask(auth.ServiceRights("cluster"))
		if err != nil {
			return err.Error()
		}
		if !reply.OK {
			return reply.Error
		}
		return ""
	})
	for i, n := range srvs {
		poll(t, ctx, fmt.Sprintf("node %d forgets n4", i+1), func() string {
			if size, peers := metaPeers(n); size != 3 || slices.Contains(peers, "n4") {
				return fmt.Sprintf("meta group of %d, peers %q", size, peers)
			}
			return ""
		})
	}

	stop("node 3", srvs[2])
	srvs[2] = nil // stopped; not again at cleanup
	for i, n := range srvs[:2] {
		waitPersists(t, ctx, n, fmt.Sprintf("n%d-box", i+1))
	}
}

// poll calls cond until it returns "", and fails the test with its last
// answer when ctx ends.
func poll(t *testing.T, ctx context.Context, what string, cond func() string) {
	t.Helper()
	for {
		last := cond()
		if last == "" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never; last: %s", what, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
