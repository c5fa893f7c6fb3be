package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
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
	token := fs.String("token", "", "NATS token (needs publish and subscribe on sfu.>); empty for an --insecure bus")
	id := fs.String("id", "", "node ID, unique among SFU nodes; the lower ID offers on relay links")
	site := fs.String("site", "default", "site name; clients of the same site are assigned here first")
	httpAddr := fs.String("http-addr", "", "HTTP address for WebSocket signalling (/sfu/ws) and /metrics; empty = off")
	publicWS := fs.String("public-ws", "", "WebSocket URL announced to clients (default ws://<http-addr>/sfu/ws)")
	ice := fs.String("ice-addrs", "", "comma-separated local IPs for ICE (default: all)")
	ports := fs.String("udp-ports", "", "UDP port range for ICE, e.g. 50000-50100 (default: ephemeral)")
	mode := fs.String("mode", "track-selection", "allocator mode for point clouds: track-selection or layers")
	estimator := fs.String("estimator", "gcc", "default bandwidth estimator towards clients: gcc or hera (clients may pick their own in the offer)")
	delays := fs.String("egress-delays", "", "emulated one-way delays of sent UDP packets by destination, CIDR=duration,... (the bench: no netem in its kernel)")
	manager := fs.Bool("manager", false, "also run the session manager (xrealm serve runs it; use when there is none)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *join == "" || *id == "" {
		return errors.New("--join and --id are required")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %w", *logLevel, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	m, err := allocator.ParseMode(*mode)
	if err != nil {
		return err
	}
	ests := sfu.DefaultEstimators()
	est, ok := ests[*estimator]
	if !ok {
		return fmt.Errorf("--estimator %q: want gcc or hera", *estimator)
	}
	cfg := sfu.Config{ID: *id, Site: *site, Manager: *manager, Mode: m, Logger: log, Estimator: est, Estimators: ests}
	if *delays != "" {
		routes, err := sfu.ParseDelayRoutes(*delays)
		if err != nil {
			return fmt.Errorf("--egress-delays: %w", err)
		}
		if cfg.Net, err = sfu.NewDelayNet(routes); err != nil {
			return err
		}
	}
	if *ice != "" {
		cfg.ICEAddresses = strings.Split(*ice, ",")
	}
	if *ports != "" {
		if _, err := fmt.Sscanf(*ports, "%d-%d", &cfg.UDPPortMin, &cfg.UDPPortMax); err != nil || cfg.UDPPortMin == 0 || cfg.UDPPortMax < cfg.UDPPortMin {
			return fmt.Errorf("--udp-ports %q: want MIN-MAX", *ports)
		}
	}
	opts := []nats.Option{nats.Name("xrealm-sfu-" + *id), nats.MaxReconnects(-1)}
	if *token != "" {
		opts = append(opts, nats.Token(*token))
	}
	nc, err := nats.Connect(*join, opts...)
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
			cfg.WebSocketURL = "ws://" + ln.Addr().String() + "/sfu/ws"
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
	<-ctx.Done()
	return nil
}
