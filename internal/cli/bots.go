package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/topic"
)

// runBots implements `xrealm bots`: N synthetic users against a server,
// with a progress line every interval; `xrealm bots pointcloud` runs a
// point-cloud publisher on the SFU instead.
func runBots(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "pointcloud" {
		return inSubcommand("bots", "pointcloud", runPointCloudBot(ctx, args[1:]))
	}
	if len(args) > 0 && args[0] == "record" {
		return inSubcommand("bots", "record", runBotsRecord(ctx, args[1:], os.Stdout, os.Stderr))
	}
	return runBotsFleet(ctx, args, os.Stdout, os.Stderr)
}

// runBotsFleet is `xrealm bots` without a subcommand: progress lines and
// the summary go to stdout, the rest to stderr.
func runBotsFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bots", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: xrealm bots [flags]: synthetic users on the scene bus (MQTT)\n"+
			"       xrealm bots pointcloud [flags]: a point-cloud publisher on the SFU (xrealm bots pointcloud -h)\n"+
			"       xrealm bots record [flags]: record a camera's poses to a trace for --behaviour replay (xrealm bots record -h)")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:1883", "MQTT server: host:port (or mqtt://host:port) for TCP, or ws://host:port/mqtt for WebSocket")
	tokenURL := fs.String("token-url", "http://127.0.0.1:8080", "get tokens from this server's POST /user/v2/mqtt_auth (anonymous viewers): its HTTP address, xrealm serve --http-addr")
	dataDir := fs.String("data", "", "sign tokens with the keys in this server data directory instead of asking --token-url")
	bearer := fs.String("token", "", "sign in to --token-url with this token (xrealm token) for scenes anonymous users cannot read")
	noAuth := fs.Bool("no-auth", false, "connect without tokens (xrealm serve --insecure, Mosquitto)")
	users := fs.Int("users", 10, "number of bots")
	ns := fs.String("namespace", auth.PublicNamespace, "scene namespace")
	scene := fs.String("scene", "bots", "scene name; with --scenes N > 1, scenes are {scene}0 ... {scene}N-1")
	nScenes := fs.Int("scenes", 1, "spread the bots over this many scenes")
	realm := fs.String("realm", "realm", "realm")
	rate := fs.Float64("rate", 10, "poses per second per bot (above 0)")
	size := fs.Int("size", 310, fmt.Sprintf("pose message size in bytes: poses are padded up to it (ARENA's is about 310; unpadded a pose is about %d bytes, and 0 sends it so). A server drops larger messages than it takes (xrealm serve --max-payload, 1 MiB by default)", unpaddedPose))
	behaviour := fs.String("behaviour", "randomwalk", "static, randomwalk, boids or replay")
	trace := fs.String("trace", "", "pose trace file for --behaviour replay (lines: t x y z qx qy qz qw; xrealm bots record writes one)")
	area := fs.String("area", "-10,10,-10,10", "area the bots keep to: minX,maxX,minZ,maxZ in metres")
	speed := fs.Float64("speed", 3, "walking speed (randomwalk) or top speed (boids), m/s, above 0")
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	every := fs.Duration("progress", time.Second, "progress line interval")
	parallel := fs.Int("parallel", 16, "bots connecting at once")
	seed := fs.Uint64("seed", 1, "random seed")
	reconnect := fs.Bool("reconnect", false, "a bot whose connection ends joins again (waits from 0.5 s, doubled while it fails, up to 10 s), as a browser does; poses due while it is away count as missed. Without it a lost bot stays away, and the run ends when every bot is gone")
	prefix := fs.String("prefix", "", "user names and client ids are {prefix}{i} (default: bot, 4 random letters and '-', new each run: a client id two runs share is taken over, the first run's bot disconnected)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if err := checkTokenFlags(fs); err != nil {
		return err
	}
	if err := checkBotsAddr(*addr); err != nil {
		return err
	}
	if *users < 1 || *nScenes < 1 {
		return usagef("--users (%d) and --scenes (%d) must be at least 1", *users, *nScenes)
	}
	if *nScenes > *users {
		return usagef("--scenes %d is more than --users %d: bots are spread over the scenes, so %d scenes would stay empty", *nScenes, *users, *nScenes-*users)
	}
	if err := bots.CheckRate(*rate); err != nil {
		return usagef("--rate %g: want poses per second per bot above 0 (and at most %g)", *rate, float64(bots.MaxRate))
	}
	if *size < 0 || *size > maxPoseSize {
		return usagef("--size %d: want a pose message size in bytes from 0 (no padding) to %d (MQTT's largest message)", *size, maxPoseSize)
	}
	if *every <= 0 {
		return usagef("--progress %s: want an interval above 0", *every)
	}
	if *duration < 0 {
		return usagef("--duration %s: want a length of time, or 0 to run until interrupted", *duration)
	}
	if *parallel < 1 {
		return usagef("--parallel %d: want at least 1", *parallel)
	}
	if !slices.Contains(bots.Behaviours, *behaviour) {
		return usagef("--behaviour %q: want one of %s", *behaviour, strings.Join(bots.Behaviours, ", "))
	}
	if !(*speed >= 0 && *speed <= math.MaxFloat64) {
		return usagef("--speed %g: want metres per second, at least 0 (above 0 for randomwalk and boids)", *speed)
	}
	if (*behaviour == "randomwalk" || *behaviour == "boids") && *speed == 0 {
		// Spec's 0 is its default, 3 m/s.
		return usagef("--speed 0: %s bots need a speed above 0 (bots that stand still: --behaviour static)", *behaviour)
	}
	a, err := parseArea(*area)
	if err != nil {
		return usageErr(err)
	}
	switch {
	case *behaviour == "replay" && *trace == "":
		return usagef("--behaviour replay needs --trace FILE (lines: t x y z qx qy qz qw)")
	case *behaviour != "replay" && *trace != "":
		return usagef("--trace is played by --behaviour replay only (--behaviour is %s)", *behaviour)
	}
	if err := topic.ValidLevel("--realm", *realm); err != nil {
		return usageErr(err)
	}
	if *prefix == "" {
		*prefix = randomPrefix()
	} else if err := topic.ValidLevel("--prefix", *prefix); err != nil {
		return usageErr(err)
	}
	if err := topic.ValidSceneName("--namespace", *ns); err != nil {
		return usageErr(err)
	}
	scenes := []string{*scene}
	if *nScenes > 1 {
		scenes = scenes[:0]
		for i := 0; i < *nScenes; i++ {
			scenes = append(scenes, fmt.Sprintf("%s%d", *scene, i))
		}
	}
	for i, sc := range scenes {
		if err := topic.ValidSceneName("--scene", sc); err != nil {
			return usageErr(err)
		}
		scenes[i] = *ns + "/" + sc
	}
	spec := bots.Spec{Name: *behaviour, Area: a, Speed: *speed}
	if *trace != "" {
		if spec.Trace, err = bots.ReadTraceFile(*trace); err != nil {
			return err
		}
	}
	tr := &bots.MQTTTransport{Addr: *addr, PayloadSize: botsPayloadSize(*size)}
	if tr.Tokens, err = botTokens(*noAuth, *dataDir, *tokenURL, *bearer); err != nil {
		return err
	}
	if kt, ok := tr.Tokens.(*bots.KeyTokens); ok {
		// The server closes a connection when its token expires: tokens
		// outlast the run.
		kt.TTL = botsTokenTTL(*duration)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fmt.Fprintf(stderr, "connecting %d bots (%s, user names %s0...) to %s in %d scene(s)...\n", *users, *behaviour, *prefix, *addr, len(scenes))
	t0 := time.Now()
	fleet, err := bots.StartFleet(ctx, bots.FleetConfig{
		Transport: tr, Users: *users, Realm: *realm, Scenes: scenes, Rate: *rate,
		Behaviour: spec, Seed: *seed, Prefix: *prefix, Parallel: *parallel, Reconnect: *reconnect, Log: log,
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while connecting: %w", err)
		}
		return err
	}
	defer fleet.Close()
	fmt.Fprintf(stderr, "%d bots connected in %s\n", fleet.Users(), time.Since(t0).Round(time.Millisecond))
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	return botsProgress(ctx, stdout, fleet, *every, *reconnect)
}

// botsProgress prints a progress line every interval until ctx ends, then
// stops the senders, waits for the poses still on their way (botsDrain)
// and prints a summary of the whole run. Unless the bots reconnect, it
// fails when every bot has been disconnected (the server went away): the
// run measures nothing more.
func botsProgress(ctx context.Context, w io.Writer, fleet *bots.Fleet, every time.Duration, reconnect bool) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	prev, _ := fleet.Accounts().Live()
	prevT := start
	all := bots.NewHistogram()
	summary := func(now time.Time) {
		tot, h := fleet.Accounts().Live()
		all.Merge(h)
		expected, delivered := fleet.Delivery()
		ratio := "-"
		if expected > 0 {
			ratio = strconv.FormatFloat(100*float64(delivered)/float64(expected), 'f', 2, 64) + "%"
		}
		lostLine := ""
		if lost, rejoined := fleet.Lost(); lost > 0 {
			lostLine = fmt.Sprintf("  connections lost %d, joined again %d", lost, rejoined)
		}
		fmt.Fprintf(w, "total %s  users %d/%d  sent %d  received %d  missed %d  delivered %s  latency %s%s\n",
			now.Sub(start).Round(100*time.Millisecond), fleet.Connected(), fleet.Users(),
			tot.Sent, tot.Received, tot.Missed, ratio, latencies(all), lostLine)
		if tot.Sent > 0 && tot.Received == 0 {
			fmt.Fprintln(w, "no pose came back: the server dropped them all (a --size above the largest message it takes? a token that may not publish in the scene?)")
		}
	}
	for {
		select {
		case <-ctx.Done():
			end := time.Now()
			fleet.Stop()
			botsDrain(fleet, all)
			summary(end)
			return nil
		case now := <-tick.C:
			tot, h := fleet.Accounts().Live()
			all.Merge(h)
			dt := now.Sub(prevT).Seconds()
			// Ticks the senders were too late for (the generator is behind,
			// or blocked by a server that stopped reading) show only when
			// there are some.
			connected := fleet.Connected()
			missed := ""
			if m := tot.Missed - prev.Missed; m > 0 {
				why := "senders late"
				if reconnect && connected < fleet.Users() {
					why = "senders late or away"
				}
				missed = fmt.Sprintf("  MISSED %.0f/s (%s)", float64(m)/dt, why)
			}
			fmt.Fprintf(w, "%6.0fs  users %d/%d  sent %7.0f/s  received %8.0f/s  %6.2f MB/s  latency %s%s\n",
				now.Sub(start).Seconds(), connected, fleet.Users(),
				float64(tot.Sent-prev.Sent)/dt, float64(tot.Received-prev.Received)/dt, float64(tot.Bytes-prev.Bytes)/dt/1e6,
				latencies(h), missed)
			prev, prevT = tot, now
			if connected == 0 && !reconnect {
				fleet.Stop()
				summary(now)
				return fmt.Errorf("all %d bots were disconnected; the first: %v (the server stopped or closed them: another client taking over the same client ids, --prefix, or tokens that expired)", fleet.Users(), fleet.LostReason())
			}
		}
	}
}

// botsDrain waits, once the senders stopped, until the fleet receives
// nothing more for drainQuiet (the poses sent last are on their way: the
// server writes a connection's messages at most every 10 ms), at most
// drainMax, merging the latencies into all.
func botsDrain(fleet *bots.Fleet, all *hdrhistogram.Histogram) {
	const (
		drainQuiet = 200 * time.Millisecond
		drainMax   = 2 * time.Second
		poll       = 20 * time.Millisecond
	)
	end := time.Now().Add(drainMax)
	last, quiet := int64(-1), time.Duration(0)
	for time.Now().Before(end) && quiet < drainQuiet && fleet.Connected() > 0 {
		tot, h := fleet.Accounts().Live()
		all.Merge(h)
		if tot.Received == last {
			quiet += poll
		} else {
			last, quiet = tot.Received, 0
		}
		time.Sleep(poll)
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

// checkTokenFlags refuses token settings of bots and bots record that
// contradict each other: otherwise one of them would be silently ignored
// (--no-auth winning over --data and --token, and --data over --token-url
// and --token).
func checkTokenFlags(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		// --no-auth=false and --data "" choose nothing.
		if v := f.Value.String(); v != "" && v != "false" {
			set[f.Name] = true
		}
	})
	conflicts := []struct{ a, b, why string }{
		{"no-auth", "data", "connects without a token, --data signs one"},
		{"no-auth", "token", "connects without a token, --token signs in for one"},
		{"no-auth", "token-url", "connects without a token, --token-url asks a server for one"},
		{"data", "token-url", "signs tokens here, --token-url asks a server for them"},
		{"data", "token", "signs tokens here, --token signs in to --token-url for them"},
	}
	for _, c := range conflicts {
		if set[c.a] && set[c.b] {
			return usagef("--%s and --%s: choose one (--%s %s)", c.a, c.b, c.a, c.why)
		}
	}
	return nil
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
	if u, err := url.Parse(tokenURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--token-url %q: want http://host:port or https://host:port, the HTTP address of xrealm serve (--http-addr)", tokenURL)
	}
	return &bots.HTTPTokens{BaseURL: tokenURL, Bearer: bearer}, nil
}

// checkBotsAddr checks --addr of bots and bots record as the bots dial
// it: host:port or mqtt://host:port (MQTT over TCP), or a ws:// or wss://
// URL (MQTT over WebSocket), so that a bad one is refused naming the flag
// rather than making each bot fail to connect, naming no flag.
func checkBotsAddr(addr string) error {
	const want = "want host:port or mqtt://host:port (MQTT over TCP, xrealm serve --mqtt-addr), or ws://host:port/path (MQTT over WebSocket)"
	hostPort := addr
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		switch scheme {
		case "ws", "wss":
			if u, err := url.Parse(addr); err != nil || u.Host == "" {
				return usagef("--addr %q: want ws://host:port/path or wss://host:port/path", addr)
			}
			return nil
		case "mqtt", "tcp":
			hostPort = strings.TrimSuffix(rest, "/")
		case "http", "https":
			return usagef("--addr %q: bots speak MQTT, not HTTP: %s", addr, want)
		default:
			return usagef("--addr %q: scheme %q: %s; bots do not speak MQTT over TLS", addr, scheme, want)
		}
	}
	_, port, err := net.SplitHostPort(hostPort)
	if err != nil || port == "" {
		return usagef("--addr %q: %s", addr, want)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return usagef("--addr %q: port %s: want a number from 1 to 65535", addr, port)
	}
	return nil
}

// maxPoseSize is the largest --size: MQTT's largest packet, less room
// for the PUBLISH header and topic.
const maxPoseSize = 256<<20 - 64<<10

// unpaddedPose is the size of a pose without padding, as xrealm bots
// sends it (its numbers vary in length by a few bytes).
var unpaddedPose = len(bots.AppendPose(nil, "camera_bot0_bot0", bots.Pose{Pos: bots.Vec3{X: -1.5, Y: 1.6, Z: 2.25}, Rot: bots.NoRotation}, time.Now().UnixNano(), 0))

// botsPayloadSize is the transport's PayloadSize for --size: 0 is no
// padding, where the transport's 0 is its default size.
func botsPayloadSize(size int) int { return max(size, 1) }

// randomPrefix returns "bot", four random lower-case letters and '-': the
// default --prefix, new each run, so that runs side by side (more bots
// than one process sends, on one host or several) do not share client
// ids. A server takes a client id over for the newest connection, and
// the other run's bot was disconnected.
func randomPrefix() string {
	b := []byte("bot____-")
	for i := 3; i < 7; i++ {
		b[i] = byte('a' + rand.IntN(26))
	}
	return string(b)
}

// botsTokenTTL is the lifetime of the tokens xrealm bots signs itself
// (--data) for a run of duration d (0: until interrupted): the server
// closes a connection when its token expires, so they outlast the run.
func botsTokenTTL(d time.Duration) time.Duration {
	if d <= 0 {
		return 30 * 24 * time.Hour
	}
	return d + time.Hour
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
