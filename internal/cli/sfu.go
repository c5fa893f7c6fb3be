package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/sfu/allocator"
)

// runSFU runs one SFU node that joins the bus of an `xrealm serve` node:
//
//	xrealm sfu --join nats://host:4222 --id 2 --site east
func runSFU(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sfu", flag.ContinueOnError)
	join := fs.String("join", "", "NATS URL of the bus to join (an xrealm serve node's --nats-addr)")
	token := fs.String("token", "", "NATS token with the rights of an SFU node (xrealm token --role sfu --data <the server's data dir>); empty for an --insecure bus")
	id := fs.String("id", "", "node ID, unique among SFU nodes; the lower ID offers on relay links")
	site := fs.String("site", "default", "site name; clients of the same site are assigned here first")
	httpAddr := fs.String("http-addr", "", "HTTP address for WebSocket signalling (/sfu/ws) and /metrics; empty = off")
	publicWS := fs.String("public-ws", "", "WebSocket URL announced to clients in heartbeats and join replies (default ws://<http-addr>/sfu/ws, with the host's first non-loopback IPv4, else its host name, when --http-addr names no host)")
	ice := fs.String("ice-addrs", "", "comma-separated local IPs for ICE (default: all)")
	ports := fs.String("udp-ports", "", "UDP port range for ICE, e.g. 50000-50100 (default: ephemeral)")
	mode := fs.String("mode", "track-selection", "allocator mode for point clouds: track-selection or layers")
	estimator := fs.String("estimator", "gcc", "default bandwidth estimator towards clients: gcc or hera (clients may pick their own in the offer)")
	delays := fs.String("egress-delays", "", "emulated one-way delays of sent UDP packets by destination, CIDR=duration,... (the bench: no netem in its kernel)")
	rtcpInterval := fs.Duration("rtcp-interval", 0, "RTCP sender/receiver report interval per stream (0 = pion's 1 s)")
	relaySlots := fs.Int("relay-slots", sfu.DefaultRelaySlots, "relayed media as RTP on this many pre-negotiated transceivers per link (links this node offers; the lower ID offers); 0 = on an SCTP data channel instead")
	shared := fs.Bool("shared-links", true, "budget subscribers that reach the node from one IP address as one group (their shared path); false = each by its own estimate only")
	logStats := fs.Duration("log-stats", 0, "log a summary of the node's metrics this often (0 = never)")
	maxClients := fs.Int("max-clients", sfu.DefaultMaxClients, "clients the node takes at once; an offer beyond them is refused as full, and the manager places clients elsewhere while another node has room")
	manager := fs.Bool("manager", false, "also run the session manager (xrealm serve runs it; use when there is none)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *join == "" || *id == "" {
		return usageErr(errors.New("--join and --id are required"))
	}
	// Settings that would otherwise be taken as their defaults, or ignored,
	// are refused: a negative --relay-slots would carry relayed media on
	// SCTP as 0 does, a negative --rtcp-interval would be pion's 1 s, a
	// negative --log-stats would never log, and --public-ws without
	// --http-addr would be announced nowhere.
	if err := checkMaxClients(*maxClients); err != nil {
		return usageErr(err)
	}
	switch {
	case *relaySlots < 0:
		return usagef("--relay-slots %d: want 0 (an SCTP data channel) or more transceivers", *relaySlots)
	case *rtcpInterval < 0:
		return usagef("--rtcp-interval %v: want 0 (pion's 1 s) or a positive interval", *rtcpInterval)
	case *logStats < 0:
		return usagef("--log-stats %v: want 0 (never) or a positive interval", *logStats)
	case *publicWS != "" && *httpAddr == "":
		return usagef("--public-ws %s needs --http-addr: it announces the WebSocket that --http-addr serves", *publicWS)
	}
	var iceAddrs []string
	if *ice != "" {
		var err error
		if iceAddrs, err = parseICEAddrs(*ice); err != nil {
			return err
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level %q: %w", *logLevel, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	m, err := allocator.ParseMode(*mode)
	if err != nil {
		return usageErr(err)
	}
	ests := sfu.DefaultEstimators()
	est, ok := ests[*estimator]
	if !ok {
		return usagef("--estimator %q: want gcc or hera", *estimator)
	}
	cfg := sfu.Config{ID: *id, Site: *site, Manager: *manager, Mode: m, Logger: log, Estimator: est, Estimators: ests, RelaySlots: cmp.Or(*relaySlots, -1), NoSharedLinks: !*shared, ReportInterval: *rtcpInterval, MaxClients: *maxClients}
	if *delays != "" {
		routes, err := sfu.ParseDelayRoutes(*delays)
		if err != nil {
			return usagef("--egress-delays: %w", err)
		}
		if cfg.Net, err = sfu.NewDelayNet(routes); err != nil {
			return err
		}
	}
	cfg.ICEAddresses = iceAddrs
	if *ports != "" {
		if cfg.UDPPortMin, cfg.UDPPortMax, err = parseUDPPorts(*ports); err != nil {
			return err
		}
	}
	nc, perms, err := connectBus(*join, *token, "xrealm-sfu-"+*id, log, nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("--join %s: %w", *join, err)
	}
	defer nc.Close()
	cfg.NC = nc
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	var ln net.Listener
	if *httpAddr != "" {
		if ln, err = net.Listen("tcp", *httpAddr); err != nil {
			return fmt.Errorf("--http-addr %s: %w", *httpAddr, err)
		}
		cfg.WebSocketURL = *publicWS
		if cfg.WebSocketURL == "" {
			cfg.WebSocketURL = announcedWS(ln.Addr(), interfaceIPs, os.Hostname)
		}
	}
	node, err := sfu.Start(ctx, cfg)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}
	defer node.Close()
	if ln != nil {
		mux := http.NewServeMux()
		mux.Handle("/sfu/ws", node.Handler())
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("sfu http", "addr", ln.Addr().String(), "websocket", cfg.WebSocketURL)
	}
	if *logStats > 0 {
		go logNodeStats(ctx, log, reg, node, *logStats)
	}
	select {
	case <-ctx.Done():
		return nil
	case pe := <-perms: // everything a node does is within its token's rights
		return pe
	}
}

// checkMaxClients checks a --max-clients value: at least 1 (0 would be
// sfu.Config's default, a negative value is refused by it).
func checkMaxClients(n int) error {
	if n < 1 {
		return fmt.Errorf("--max-clients %d: want at least 1 client (default %d)", n, sfu.DefaultMaxClients)
	}
	return nil
}

// connectBus connects to the bus at url as an SFU node or Go client named
// name, with token unless it is empty (an --insecure bus). A bus that
// refuses the token gets an error that says which token it takes. The
// channel receives the first permissions violation the bus reports (the
// token lacks the rights of an SFU service), explained; the others are
// logged.
func connectBus(url, token, name string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, <-chan *sfu.PermissionError, error) {
	perms := make(chan *sfu.PermissionError, 1)
	opts = append([]nats.Option{nats.Name(name), nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if pe := sfu.AsPermissionError(err); pe != nil {
			select {
			case perms <- pe:
			default:
			}
			return
		}
		args := []any{"err", err}
		if sub != nil {
			args = append(args, "subject", sub.Subject)
		}
		log.Warn("bus error", args...)
	})}, opts...)
	if token != "" {
		opts = append(opts, nats.Token(token))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, busConnectError(err, token != "")
	}
	return nc, perms, nil
}

// busConnectError explains a refused token: the bus (xrealm serve) takes
// tokens that its own key signed.
func busConnectError(err error, withToken bool) error {
	if !errors.Is(err, nats.ErrAuthorization) {
		return err
	}
	if !withToken {
		return fmt.Errorf("%w: the bus takes no client without a token (only an --insecure bus does): pass --token; %s", err, sfu.TokenHint)
	}
	return fmt.Errorf("%w: the bus refused the token: it must be unexpired and signed by the server's key, "+
		"which only `xrealm token` given the server's data directory with --data uses; %s", err, sfu.TokenHint)
}

// announcedWS is the WebSocket URL of a node listening on addr. A listener
// on every address (--http-addr :PORT) has no host a remote client can
// dial, so it announces the first of ips that is a non-loopback,
// non-link-local IPv4 address instead, else the host name (--public-ws
// overrides both).
func announcedWS(addr net.Addr, ips func() []net.IP, hostname func() (string, error)) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "ws://" + addr.String() + "/sfu/ws"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = reachableHost(ips(), hostname)
	}
	return "ws://" + net.JoinHostPort(host, port) + "/sfu/ws"
}

func reachableHost(ips []net.IP, hostname func() (string, error)) string {
	for _, ip := range ips {
		if ip4 := ip.To4(); ip4 != nil && !ip4.IsLoopback() && !ip4.IsLinkLocalUnicast() && !ip4.IsUnspecified() {
			return ip4.String()
		}
	}
	if h, err := hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}

// interfaceIPs returns the addresses of the host's interfaces that are up,
// in the interfaces' order.
func interfaceIPs() []net.IP {
	ifcs, _ := net.Interfaces()
	var out []net.IP
	for _, ifc := range ifcs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			switch v := a.(type) {
			case *net.IPNet:
				out = append(out, v.IP)
			case *net.IPAddr:
				out = append(out, v.IP)
			}
		}
	}
	return out
}

// logNodeStats logs sums and means of the node's metrics every period.
func logNodeStats(ctx context.Context, log *slog.Logger, reg *prometheus.Registry, node *sfu.Node, every time.Duration) {
	lag := sfu.StartLagProbe(ctx, 5*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	prev := map[string]float64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fams, err := reg.Gather()
		if err != nil {
			continue
		}
		sum, cnt := map[string]float64{}, map[string]float64{}
		minEst, minShare, maxTail := 0.0, 0.0, 0.0
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				sum[f.GetName()] += v
				cnt[f.GetName()]++
				if f.GetName() == "xrealm_sfu_relay_bytes_total" {
					for _, l := range m.GetLabel() {
						if l.GetName() == "dir" {
							sum["relay_"+l.GetValue()] += v
						}
					}
				}
				if f.GetName() == "xrealm_sfu_subscriber_estimate_bps" && (minEst == 0 || v < minEst) {
					minEst = v
				}
				if f.GetName() == "xrealm_sfu_subscriber_link_share_bps" && (minShare == 0 || v < minShare) {
					minShare = v
				}
				if f.GetName() == "xrealm_sfu_subscriber_queue_tail_seconds" {
					maxTail = max(maxTail, v)
				}
			}
		}
		// rates over the period, kbit/s
		rate := func(k string) float64 {
			r := (sum[k] - prev[k]) * 8 / every.Seconds() / 1e3
			prev[k] = sum[k]
			return max(r, 0)
		}
		mean := func(k string) float64 {
			if cnt[k] == 0 {
				return 0
			}
			return sum[k] / cnt[k]
		}
		log.Info("sfu stats", "clients", sum["xrealm_sfu_clients"], "sources", sum["xrealm_sfu_sources"],
			"mean_estimate_kbps", mean("xrealm_sfu_subscriber_estimate_bps")/1e3, "mean_allocated_kbps", mean("xrealm_sfu_subscriber_allocated_bps")/1e3,
			"active_slots", sum["xrealm_sfu_subscriber_active_slots"], "relay_dropped", sum["xrealm_sfu_relay_dropped_total"],
			"nacks", sum["xrealm_sfu_subscriber_nacks_total"], "rtx", sum["xrealm_sfu_subscriber_retransmits_total"],
			"nack_forwarded", sum["xrealm_sfu_relay_nack_forwarded_total"], "relay_links", sum["xrealm_sfu_relay_links"],
			"min_estimate_kbps", minEst/1e3, "min_share_kbps", minShare/1e3, "mean_queue_ms", mean("xrealm_sfu_subscriber_queue_delay_seconds")*1e3, "max_tail_ms", maxTail*1e3, "sent_kbps", rate("xrealm_sfu_subscriber_bytes_total"),
			"relay_out_kbps", rate("relay_out"), "relay_in_kbps", rate("relay_in"))
		// packet ages per hop and the process's scheduling lag (hops.go),
		// read by xrealm bench sfu
		h, l := node.HopStats(), lag.Take()
		log.Info("sfu hops", "in_local_p50_ms", h.InLocal.P50, "in_local_p99_ms", h.InLocal.P99, "in_relay_p50_ms", h.InRelay.P50, "in_relay_p99_ms", h.InRelay.P99,
			"out_p99_ms", h.Out.P99, "fanout_p99_ms", h.Fanout.P99, "fanout_max_ms", h.Fanout.Max, "lag_p99_ms", l.P99, "lag_max_ms", l.Max)
	}
}

// parseICEAddrs reads --ice-addrs: comma-separated IPv4 addresses, as ICE
// compares them (an address is allowed if a local one prints as it does,
// over UDP4 only). A host name, an empty entry or an IPv6 address matched
// no local address, and the node offered no candidate at all.
func parseICEAddrs(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		ip := net.ParseIP(a)
		if ip == nil || ip.To4() == nil {
			return nil, usagef("--ice-addrs %q: %q is not an IP address (want local IPv4 addresses, comma-separated)", s, a)
		}
		out = append(out, ip.To4().String())
	}
	return out, nil
}

// parseUDPPorts reads --udp-ports, MIN-MAX: two ports from 1 to 65535, the
// first not above the second, and nothing else (Sscanf let "50000-50100,60000"
// through as 50000-50100).
func parseUDPPorts(s string) (lo, hi uint16, err error) {
	a, b, ok := strings.Cut(s, "-")
	l, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 16)
	h, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 16)
	if !ok || err1 != nil || err2 != nil || l == 0 || h < l {
		return 0, 0, usagef("--udp-ports %q: want MIN-MAX, two ports from 1 to 65535 with MIN not above MAX, e.g. 50000-50100", s)
	}
	return uint16(l), uint16(h), nil
}
