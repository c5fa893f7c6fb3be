package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bots"
)

// runBots implements `xrealm bots`: N synthetic users against a server,
// with a progress line every interval; `xrealm bots pointcloud` runs a
// point-cloud publisher on the SFU instead.
func runBots(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "pointcloud" {
		return runPointCloudBot(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "record" {
		return runBotsRecord(ctx, args[1:], os.Stdout, os.Stderr)
	}
	fs := flag.NewFlagSet("bots", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: xrealm bots [flags]: synthetic users on the scene bus (MQTT)\n"+
			"       xrealm bots pointcloud [flags]: a point-cloud publisher on the SFU (xrealm bots pointcloud -h)\n"+
			"       xrealm bots record [flags]: record a camera's poses to a trace for --behaviour replay (xrealm bots record -h)")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:1883", "MQTT server: host:port for TCP, or ws://host:port/mqtt for WebSocket")
	tokenURL := fs.String("token-url", "http://127.0.0.1:8080", "get tokens from this server's POST /user/v2/mqtt_auth (anonymous viewers)")
	dataDir := fs.String("data", "", "sign tokens with the keys in this server data directory instead of asking --token-url")
	bearer := fs.String("token", "", "sign in to --token-url with this token (xrealm token) for scenes anonymous users cannot read")
	noAuth := fs.Bool("no-auth", false, "connect without tokens (xrealm --insecure, Mosquitto)")
	users := fs.Int("users", 10, "number of bots")
	ns := fs.String("namespace", auth.PublicNamespace, "scene namespace")
	scene := fs.String("scene", "bots", "scene name; with --scenes N > 1, scenes are {scene}0 ... {scene}N-1")
	nScenes := fs.Int("scenes", 1, "spread the bots over this many scenes")
	realm := fs.String("realm", "realm", "realm")
	rate := fs.Float64("rate", 10, "poses per second per bot (above 0)")
	size := fs.Int("size", 310, "pose message size in bytes (padded)")
	behaviour := fs.String("behaviour", "randomwalk", "static, randomwalk, boids or replay")
	trace := fs.String("trace", "", "pose trace file for --behaviour replay (lines: t x y z qx qy qz qw)")
	area := fs.String("area", "-10,10,-10,10", "area the bots keep to: minX,maxX,minZ,maxZ in metres")
	speed := fs.Float64("speed", 3, "walking speed (randomwalk) or top speed (boids), m/s")
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	every := fs.Duration("progress", time.Second, "progress line interval")
	parallel := fs.Int("parallel", 16, "bots connecting at once")
	seed := fs.Uint64("seed", 1, "random seed")
	prefix := fs.String("prefix", "bot", "user names and client ids are {prefix}{i}")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *users < 1 || *nScenes < 1 {
		return fmt.Errorf("--users (%d) and --scenes (%d) must be at least 1", *users, *nScenes)
	}
	if err := bots.CheckRate(*rate); err != nil {
		return fmt.Errorf("--rate %g: want poses per second per bot above 0 (and at most %g)", *rate, float64(bots.MaxRate))
	}
	if !(*speed >= 0 && *speed <= math.MaxFloat64) {
		return fmt.Errorf("--speed %g: want metres per second, at least 0 (0: the default, 3)", *speed)
	}
	a, err := parseArea(*area)
	if err != nil {
		return err
	}
	if *behaviour == "replay" && *trace == "" {
		return fmt.Errorf("--behaviour replay needs --trace FILE (lines: t x y z qx qy qz qw)")
	}
	spec := bots.Spec{Name: *behaviour, Area: a, Speed: *speed}
	if *trace != "" {
		if spec.Trace, err = bots.ReadTraceFile(*trace); err != nil {
			return err
		}
	}
	tr := &bots.MQTTTransport{Addr: *addr, PayloadSize: *size}
	if tr.Tokens, err = botTokens(*noAuth, *dataDir, *tokenURL, *bearer); err != nil {
		return err
	}
	scenes := []string{*ns + "/" + *scene}
	if *nScenes > 1 {
		scenes = scenes[:0]
		for i := 0; i < *nScenes; i++ {
			scenes = append(scenes, fmt.Sprintf("%s/%s%d", *ns, *scene, i))
		}
	}
	log, err := newLogger("warn", "text")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "connecting %d bots (%s) to %s in %d scene(s)...\n", *users, *behaviour, *addr, len(scenes))
	t0 := time.Now()
	fleet, err := bots.StartFleet(ctx, bots.FleetConfig{
		Transport: tr, Users: *users, Realm: *realm, Scenes: scenes, Rate: *rate,
		Behaviour: spec, Seed: *seed, Prefix: *prefix, Parallel: *parallel, Log: log,
	})
	if err != nil {
		return err
	}
	defer fleet.Close()
	fmt.Fprintf(os.Stderr, "%d bots connected in %s\n", fleet.Users(), time.Since(t0).Round(time.Millisecond))
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	return botsProgress(ctx, os.Stdout, fleet, *every)
}

// botsProgress prints a progress line every interval until ctx ends, then
// a summary of the whole run. It fails when every bot has been
// disconnected (the server went away): the run measures nothing more.
func botsProgress(ctx context.Context, w io.Writer, fleet *bots.Fleet, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	prev, _ := fleet.Accounts().Live()
	first, prevT := prev, start
	all := bots.NewHistogram()
	// summary counts to the end of the run: what came since the last
	// progress line too (a run shorter than an interval has no line).
	summary := func(now time.Time, tot bots.Totals) {
		fmt.Fprintf(w, "total %s  users %d/%d  sent %d  received %d  missed %d  latency %s\n",
			now.Sub(start).Round(time.Second), fleet.Connected(), fleet.Users(),
			tot.Sent-first.Sent, tot.Received-first.Received, tot.Missed-first.Missed, latencies(all))
	}
	for {
		select {
		case <-ctx.Done():
			tot, h := fleet.Accounts().Live()
			all.Merge(h)
			summary(time.Now(), tot)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		case now := <-tick.C:
			tot, h := fleet.Accounts().Live()
			all.Merge(h)
			dt := now.Sub(prevT).Seconds()
			// Ticks the senders were too late for (the generator is behind,
			// or blocked by a server that stopped reading) show only when
			// there are some.
			missed := ""
			if m := tot.Missed - prev.Missed; m > 0 {
				missed = fmt.Sprintf("  MISSED %.0f/s (senders late)", float64(m)/dt)
			}
			connected := fleet.Connected()
			fmt.Fprintf(w, "%6.0fs  users %d/%d  sent %7.0f/s  received %8.0f/s  %6.2f MB/s  latency %s%s\n",
				now.Sub(start).Seconds(), connected, fleet.Users(),
				float64(tot.Sent-prev.Sent)/dt, float64(tot.Received-prev.Received)/dt, float64(tot.Bytes-prev.Bytes)/dt/1e6,
				latencies(h), missed)
			prev, prevT = tot, now
			if connected == 0 {
				summary(now, tot)
				return fmt.Errorf("all %d bots were disconnected (did the server stop?)", fleet.Users())
			}
		}
	}
}

// latencies formats a histogram's p50, p99 and max, or says there were
// none (a 0 µs latency would claim messages that did not arrive).
func latencies(h *hdrhistogram.Histogram) string {
	if h.TotalCount() == 0 {
		return "p50 - p99 - max - (none received)"
	}
	return "p50 " + fmtDur(bots.Quantile(h, 50)) + " p99 " + fmtDur(bots.Quantile(h, 99)) + " max " + fmtDur(time.Duration(h.Max())*time.Microsecond)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms"
	}
	return strconv.FormatInt(d.Microseconds(), 10) + "µs"
}

// botTokens is where bots get their tokens: none (noAuth), signed with the
// keys of a server's data directory, or asked of a server's token
// endpoint, signed in with bearer if it is not empty.
func botTokens(noAuth bool, dataDir, tokenURL, bearer string) (bots.TokenSource, error) {
	switch {
	case noAuth:
		return nil, nil
	case dataDir != "":
		// Only a key the server has: a new one (a mistyped --data) would
		// sign tokens every server refuses.
		keys, err := auth.LoadKeys(dataDir)
		if err != nil {
			return nil, fmt.Errorf("--data %s: %w (the data directory of the server, where xrealm serve keeps its signing key)", dataDir, err)
		}
		return &bots.KeyTokens{Keys: keys}, nil
	}
	return &bots.HTTPTokens{BaseURL: tokenURL, Bearer: bearer}, nil
}

func parseArea(s string) (bots.Area, error) {
	f := strings.Split(s, ",")
	if len(f) != 4 {
		return bots.Area{}, fmt.Errorf("--area %q: want minX,maxX,minZ,maxZ", s)
	}
	var v [4]float64
	for i, x := range f {
		var err error
		if v[i], err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil || math.IsNaN(v[i]) || math.IsInf(v[i], 0) {
			return bots.Area{}, fmt.Errorf("--area %q: %q is not a finite number", s, x)
		}
	}
	if v[0] >= v[1] || v[2] >= v[3] {
		return bots.Area{}, fmt.Errorf("--area %q: min must be below max", s)
	}
	return bots.Area{MinX: v[0], MaxX: v[1], MinZ: v[2], MaxZ: v[3], Height: 1.6}, nil
}
