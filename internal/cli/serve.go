package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/server"
	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/ubiq"
)

func runServe(ctx context.Context, args []string) error {
	cfg := server.Defaults()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configFile := fs.String("config", "", "JSON config file whose keys are these flags' names, e.g. {\"http-addr\": \":80\"}; flags given on the command line win")
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory (JetStream state, keys, TLS certificate)")
	fs.StringVar(&cfg.Realm, "realm", cfg.Realm, "ARENA realm served")
	fs.StringVar(&cfg.PublicHost, "public-host", cfg.PublicHost, "host name (or IP address; no scheme, port or path) clients reach this server by, sent in /conf/defaults.json")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP address (REST, /metrics, MQTT over WebSocket at /mqtt); empty = off")
	fs.StringVar(&cfg.HTTPSAddr, "https-addr", cfg.HTTPSAddr, "HTTPS address; empty = off")
	fs.StringVar(&cfg.MQTTAddr, "mqtt-addr", cfg.MQTTAddr, "MQTT over TCP address; empty = off")
	fs.StringVar(&cfg.MQTTSAddr, "mqtts-addr", cfg.MQTTSAddr, "MQTT over TLS address; empty = off")
	fs.StringVar(&cfg.MQTTWSAddr, "mqtt-ws-addr", cfg.MQTTWSAddr, "MQTT over WebSocket address; empty = off")
	fs.StringVar(&cfg.UbiqAddr, "ubiq-addr", cfg.UbiqAddr, "Ubiq rooms over TCP; empty = off")
	fs.StringVar(&cfg.UbiqWSSAddr, "ubiq-wss-addr", cfg.UbiqWSSAddr, "Ubiq rooms over secure WebSocket (the server's certificate); empty = off")
	fs.StringVar(&cfg.UbiqWSAddr, "ubiq-ws-addr", cfg.UbiqWSAddr, "Ubiq rooms over plain WebSocket; empty = off")
	fs.StringVar(&cfg.NATSAddr, "nats-addr", cfg.NATSAddr, "NATS client address; empty = off")
	fs.StringVar(&cfg.NATSWSAddr, "nats-ws-addr", cfg.NATSWSAddr, "NATS over WebSocket address; empty = off")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate file (default: self-signed, generated into the data directory)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "TLS key file (with --tls-cert)")
	fs.StringVar(&cfg.Name, "name", "", "node name, unique in a cluster (default: host name)")
	fs.StringVar(&cfg.Site, "site", cfg.Site, "site this node runs at, 1 to 64 of A-Z a-z 0-9 _ - (SFU assignment prefers a client's site; empty = default)")
	fs.IntVar(&cfg.SFUMaxClients, "max-clients", sfu.DefaultMaxClients, "SFU (WebRTC) clients this node's SFU takes at once, not a bound on MQTT, Ubiq or HTTP connections; "+
		"an offer beyond them is refused as full, and the session manager places clients elsewhere while another SFU node has room")
	fs.StringVar(&cfg.ClusterName, "cluster-name", "", "join a cluster of this name (needs --name)")
	fs.StringVar(&cfg.ClusterAddr, "cluster-addr", cfg.ClusterAddr, "address for cluster routes (with --cluster-name)")
	routes := fs.String("routes", "", "comma-separated routes to other nodes, e.g. nats-route://host:6222")
	fs.IntVar(&cfg.Replicas, "replicas", 0, "JetStream replicas for scene state (default: 1 alone; in a cluster one per node this one knows of, itself and each of --routes, at most 3, and never fewer than the existing state has)")
	fs.IntVar(&cfg.MaxPayload, "max-payload", cfg.MaxPayload, "largest message payload in bytes; larger ones are refused (at most "+strconv.Itoa(server.MaxPayloadLimit)+")")
	fs.DurationVar(&cfg.Writer.Linger, "write-linger", cfg.Writer.Linger, "a connection with steady traffic writes at most once per this interval; an idle one at once (0 = write whenever messages wait)")
	fs.DurationVar(&cfg.UbiqLinger, "ubiq-write-linger", cfg.UbiqLinger, "longest wait before a busy Ubiq peer's queued frames are written, as --write-linger for MQTT (0: as --write-linger)")
	fs.Float64Var(&cfg.WriteBudget, "write-budget", cfg.WriteBudget, fmt.Sprintf("MQTT lingering writes per second for the whole node; above it every busy connection's linger stretches alike, up to %gx (0 = %d per CPU, negative = no budget)", fanout.MaxStretch, server.WriteBudgetPerCPU))
	fs.IntVar(&cfg.Writer.MaxFrames, "queue-frames", cfg.Writer.MaxFrames, "per-connection outgoing queue bound, in messages")
	fs.Func("ice-servers", `STUN/TURN servers in every new Ubiq room's ice-servers property: comma-separated URIs, or a JSON array of {"uri","username","password"} for TURN credentials; "none" for none (default: Ubiq's, stun:stun.l.google.com:19302)`, func(v string) error {
		s, err := parseICEServers(v)
		cfg.UbiqICEServers = s
		return err
	})
	fs.DurationVar(&cfg.TokenTTL, "token-ttl", cfg.TokenTTL, "lifetime of tokens issued by /user/v2/mqtt_auth")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "DEVELOPMENT ONLY: no authentication at all")
	pprofAddr := fs.String("pprof-addr", "", "serve Go's pprof profiles on this address (e.g. 127.0.0.1:6060); empty = off")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *configFile != "" {
		if err := applyConfigFile(fs, *configFile); err != nil {
			return usageErr(err)
		}
	}
	if err := checkServeFlags(fs, cfg, *pprofAddr); err != nil {
		return usageErr(err)
	}
	var err error
	if cfg.Routes, err = parseRoutes(*routes); err != nil {
		return usageErr(err)
	}
	log, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		return usageErr(err)
	}
	if *pprofAddr != "" {
		if err := servePprof(*pprofAddr, log); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return usageErr(err)
	}
	srv, err := server.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-srv.Failed():
		log.Error("shutting down: the node failed", "err", srv.Err())
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return errors.Join(srv.Err(), srv.Shutdown(sctx))
}

// siteRE is what the SFU takes as a site name (sfu.Config's site).
var siteRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// checkServeFlags checks what server.Config.Validate does not, before
// anything starts: listen addresses (host:port, a port 0 to 65535), the
// site name the SFU takes ("" is its "default"), the SFU's --max-clients
// (at least 1, as for `xrealm sfu`), the certificate and its key
// together, a public host that is a host name, and --cluster-addr only
// with --cluster-name. Unchecked, each would fail as the server starts
// (exit 1, after other listeners have opened), or be taken and ignored.
func checkServeFlags(fs *flag.FlagSet, cfg server.Config, pprofAddr string) error {
	for _, a := range []struct{ flag, addr string }{
		{"http-addr", cfg.HTTPAddr}, {"https-addr", cfg.HTTPSAddr}, {"mqtt-addr", cfg.MQTTAddr},
		{"mqtts-addr", cfg.MQTTSAddr}, {"mqtt-ws-addr", cfg.MQTTWSAddr}, {"ubiq-addr", cfg.UbiqAddr},
		{"ubiq-wss-addr", cfg.UbiqWSSAddr}, {"ubiq-ws-addr", cfg.UbiqWSAddr}, {"nats-addr", cfg.NATSAddr},
		{"nats-ws-addr", cfg.NATSWSAddr}, {"cluster-addr", cfg.ClusterAddr}, {"pprof-addr", pprofAddr},
	} {
		if err := checkListenAddr(a.flag, a.addr); err != nil {
			return err
		}
	}
	if cfg.Site != "" && !siteRE.MatchString(cfg.Site) { // "" is the SFU's "default"
		return fmt.Errorf("--site %q: want 1 to 64 of A-Z a-z 0-9 _ - (the SFU's site names), or \"\" for the site \"default\"", cfg.Site)
	}
	if err := checkMaxClients(cfg.SFUMaxClients); err != nil {
		return err
	}
	switch {
	case cfg.TLSCert != "" && cfg.TLSKey == "":
		return fmt.Errorf("--tls-cert without --tls-key: give both, or neither for a self-signed certificate in the data directory")
	case cfg.TLSKey != "" && cfg.TLSCert == "":
		return fmt.Errorf("--tls-key without --tls-cert: give both, or neither for a self-signed certificate in the data directory")
	}
	if h := cfg.PublicHost; strings.ContainsAny(h, "/@ \t\r\n?#") || strings.Contains(h, ":") && net.ParseIP(h) == nil {
		return fmt.Errorf("--public-host %q: want a host name or IP address, without scheme, port or path (clients add their own), e.g. xr.example.org", h)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["cluster-addr"] && cfg.ClusterName == "" {
		return fmt.Errorf("--cluster-addr without --cluster-name: only a cluster node listens for routes; leave --cluster-addr out to run alone")
	}
	return nil
}

// checkListenAddr checks the host:port a --*-addr flag listens on ("" is
// off).
func checkListenAddr(flag, addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("--%s %q: want host:port, e.g. :8080 or 127.0.0.1:8080 (\"\" for off)", flag, addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("--%s %q: port %s: want a number from 0 to 65535", flag, addr, port)
	}
	return nil
}

// applyConfigFile sets every flag named in the JSON file that was not given
// on the command line.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for k, v := range m {
		if fs.Lookup(k) == nil || k == "config" {
			return fmt.Errorf("config file %s: unknown setting %q", path, k)
		}
		if given[k] {
			continue
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case bool:
			s = strconv.FormatBool(v)
		case float64:
			s = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			return fmt.Errorf("config file %s: setting %q: %s is not a string, number or boolean; want %s", path, k, jsonText(v), expectedForm(fs.Lookup(k)))
		}
		if err := fs.Set(k, s); err != nil {
			return fmt.Errorf("config file %s: setting %q: %s is not valid; want %s (%w)", path, k, jsonText(v), expectedForm(fs.Lookup(k)), err)
		}
	}
	return nil
}

// jsonText is v as the config file gave it.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// expectedForm says what a value of flag f looks like in a config file.
func expectedForm(f *flag.Flag) string {
	switch name, _ := flag.UnquoteUsage(f); name {
	case "":
		return "true or false"
	case "int":
		return "a whole number, e.g. 4096"
	case "uint":
		return "a whole number >= 0"
	case "float":
		return "a number, e.g. 12500"
	case "duration":
		return `a duration string with a unit, e.g. "10ms", "1.5s" or "12h"`
	case "string":
		return "a string"
	}
	return "a string: " + f.Usage
}

// servePprof serves net/http/pprof on its own listener, never on the
// public HTTP port.
func servePprof(addr string, log *slog.Logger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pprof listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	log.Warn("pprof profiles served", "addr", l.Addr().String())
	go http.Serve(l, mux)
	return nil
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error (%w)", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// parseRoutes reads --routes: comma-separated URLs of the other nodes'
// cluster listeners. NATS takes a route it cannot parse as no URL at all,
// and dials one without a host or port nowhere: "host2:6222", without its
// scheme, is a URL of scheme host2 and no host, and the node waited for its
// cluster for ever.
func parseRoutes(v string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(v, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		u, err := url.Parse(r)
		if err == nil && u.Scheme != "" && u.Hostname() != "" {
			if p, perr := strconv.Atoi(u.Port()); perr == nil && p > 0 && p <= 65535 {
				out = append(out, r)
				continue
			}
		}
		example := "nats-route://host2:6222"
		if !strings.Contains(r, "://") {
			example = "nats-route://" + r
		}
		return nil, fmt.Errorf("--routes: %q is not a route URL with a host and a port, e.g. %s", r, example)
	}
	return out, nil
}

// parseICEServers reads --ice-servers: "none", comma-separated URIs, or a
// JSON array of ubiq.ICEServer.
func parseICEServers(v string) ([]ubiq.ICEServer, error) {
	v = strings.TrimSpace(v)
	switch {
	case v == "none":
		return []ubiq.ICEServer{}, nil
	case strings.HasPrefix(v, "["):
		var s []ubiq.ICEServer
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("ice servers: %w", err)
		}
		if dec.More() || dec.InputOffset() != int64(len(v)) {
			return nil, fmt.Errorf("ice servers: unexpected data after the JSON array: %q", v[dec.InputOffset():])
		}
		for _, e := range s {
			if err := checkICEURI(e.URI); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	var s []ubiq.ICEServer
	for _, u := range strings.Split(v, ",") {
		u = strings.TrimSpace(u)
		if err := checkICEURI(u); err != nil {
			return nil, err
		}
		s = append(s, ubiq.ICEServer{URI: u})
	}
	return s, nil
}

func checkICEURI(u string) error {
	for _, scheme := range []string{"stun:", "stuns:", "turn:", "turns:"} {
		if strings.HasPrefix(u, scheme) && len(u) > len(scheme) {
			return nil
		}
	}
	return fmt.Errorf("ice server %q: want a stun:, stuns:, turn: or turns: URI", u)
}
