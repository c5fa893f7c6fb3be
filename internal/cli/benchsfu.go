package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/xrealm/xrealm/bench/tmpfiles"

	benchsfu "github.com/xrealm/xrealm/bench/sfu"
	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/sfu"
)

// benchSFUOut is bench sfu's default --out.
const benchSFUOut = "bench/sfu/results.jsonl"

// runBenchSFU runs the distributed-SFU evaluation (bench/sfu/RESULTS.md):
//
//	flock /tmp/xrealm-bench.lock xrealm bench sfu --users 8,16,32,48,64
//
// The same binary also runs the bench's child roles inside the namespaces
// (--role bus|bots); they are not meant to be started by hand.
func runBenchSFU(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench sfu", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	setups := fs.String("setups", strings.Join(benchsfu.Setups, ","), "SFU setups: central, 2sfu (sites 1, 2), 4sfu (one per site)")
	users := fs.String("users", "8,16,24,32,40,48,56,64", "user counts")
	scenarios := fs.String("scenarios", "1,2", "1: everyone sends the base description; 2: 4 senders × 3 descriptions")
	linkRate := fs.Float64("paper-link-rate", 1e9, "link capacity at the paper's scale, bit/s (divided by the scale factor)")
	delays := fs.String("delays", "10ms,10ms,15ms,15ms", "one-way delays of the links central–site 1..4")
	direct := fs.Duration("direct-delay", 5*time.Millisecond, "one-way delay of the direct links site 3–1 and 4–2")
	queue := fs.Duration("queue", 200*time.Millisecond, "queue of each link, as delay at its rate")
	warmup := fs.Duration("warmup", 15*time.Second, "time from all bots connected to the measurement window")
	measure := fs.Duration("measure", 20*time.Second, "measurement window")
	points := fs.Int("points", 1000, "points per frame of the replayed clip (the paper: 100k)")
	fps := fs.Float64("fps", 2, "frames per second of the replayed clip (the paper: 30)")
	frames := fs.Int("frames", 20, "frames in the clip's loop")
	clipDir := fs.String("clip-dir", os.TempDir(), "where the pre-encoded clip is cached (created if missing)")
	estimator := fs.String("estimator", "gcc", "bandwidth estimator towards clients: gcc or hera")
	rtcpInterval := fs.Duration("rtcp-interval", 5*time.Second, "RTCP report interval per stream of the SFUs and the bots (xrealm sfu --rtcp-interval; RFC 3550's recommended minimum, 5 s: at the bench's scaled-down rates 1 s made RTCP as many packets as the media)")
	relaySlots := fs.Int("relay-slots", sfu.DefaultRelaySlots, "relayed media as RTP on this many pre-negotiated transceivers per link (xrealm sfu --relay-slots); 0 = SCTP data channel")
	phase := fs.String("phase", "spread", "publishers' frame clocks: spread (user u captures at frac(u·φ) of the frame period, like independent cameras) or aligned (all at once: the worst case)")
	shared := fs.Bool("shared-links", true, "SFUs budget subscribers from one IP address as a group (xrealm sfu --shared-links)")
	out := fs.String("out", benchSFUOut, "results file (appended to; its directory is created)")
	logDir := fs.String("log-dir", filepath.Join(os.TempDir(), "xrsfu-logs"), "where the child processes' logs are kept, per run")
	summary := fs.String("summary", "", "print Markdown tables and write SVG plots next to this results.jsonl, then exit")
	role := fs.String("role", "", "internal: bus or bots (a child process of the bench)")
	listen := fs.String("listen", "", "internal (bus): NATS address")
	busURL := fs.String("bus", "", "internal (bots): NATS URL")
	site := fs.String("site", "", "internal (bots): site")
	near := fs.String("near", "", "internal (bots): fallback sites")
	addr := fs.String("addr", "", "internal (bots): the site's address")
	botUsers := fs.String("bot-users", "", "internal (bots): user numbers")
	n := fs.Int("n", 0, "internal (bots): users in the session")
	senders := fs.String("senders", "", "internal (bots): scenario 2 senders")
	clip := fs.String("clip", "", "internal (bots): clip file")
	botDelays := fs.String("bot-delays", "", "internal (bots): egress delay routes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *summary != "" {
		if err := summaryAlone(fs); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	switch *role {
	case "bus":
		return benchsfu.RunBus(ctx, *listen, os.Stdout, log)
	case "bots":
		us, err := ints(*botUsers)
		if err != nil {
			return usagef("--bot-users: %w", err)
		}
		ss, err := ints(*senders)
		if err != nil {
			return usagef("--senders: %w", err)
		}
		var nr []string
		if *near != "" {
			nr = strings.Split(*near, ",")
		}
		return benchsfu.RunBots(ctx, benchsfu.BotsConfig{Bus: *busURL, Site: *site, Near: nr, Addr: *addr, Users: us, N: *n, Senders: ss,
			ClipPath: *clip, Estimator: *estimator, Delays: *botDelays, Aligned: *phase == "aligned", ReportInterval: *rtcpInterval, Log: log}, os.Stdin, os.Stdout)
	case "":
	default:
		return usagef("--role %q: want bus or bots", *role)
	}
	if *phase != "spread" && *phase != "aligned" {
		return usagef("--phase %q: want spread or aligned", *phase)
	}
	if *summary != "" {
		rs, err := benchsfu.ReadResults(*summary)
		if err != nil {
			return err
		}
		benchsfu.Tables(os.Stdout, rs)
		return benchsfu.Plots(filepath.Dir(*summary), rs)
	}
	cfg := benchsfu.Config{Setups: splitList(*setups), PaperLinkRate: *linkRate, DirectDelay: *direct, Queue: *queue,
		Warmup: *warmup, Measure: *measure, Estimator: *estimator, RelaySlots: *relaySlots, RTCPInterval: *rtcpInterval, Aligned: *phase == "aligned", NoSharedLinks: !*shared, Out: *out, LogDir: *logDir, Log: log,
		Clip: bots.ClipConfig{Points: *points, Frames: *frames, FPS: *fps, Seed: 1}}
	cfg.ClipPath = filepath.Join(*clipDir, fmt.Sprintf("xrsfu-clip-%dp-%df-%gfps.gob", *points, *frames, *fps))
	var err error
	if cfg.Users, err = ints(*users); err != nil {
		return usagef("--users: %w", err)
	}
	if cfg.Scenarios, err = ints(*scenarios); err != nil {
		return usagef("--scenarios: %w", err)
	}
	ds := strings.Split(*delays, ",")
	if len(ds) != 4 {
		return usagef("--delays %q: want 4 durations", *delays)
	}
	for i, d := range ds {
		if cfg.CentralDelays[i], err = time.ParseDuration(strings.TrimSpace(d)); err != nil {
			return usagef("--delays: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return usagef("%w (see xrealm bench sfu -h)", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, veth, tc)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: it needs iproute2's ip and tc (scripts/setup-sfu.sh installs them, or apt-get install iproute2)", tool)
		}
	}
	fmt.Fprintf(os.Stderr, "%s\n", outNotice("appending results to", *out, *out == benchSFUOut, "--out FILE"))
	exe, err := privateCopy()
	if err != nil {
		return err
	}
	defer os.Remove(exe)
	cfg.Exe = exe
	defer sayInterrupted(ctx, "bench sfu", "stopping its SFUs, bots and bus and removing the namespaces")()
	rs, err := benchsfu.Run(ctx, cfg)
	benchsfu.Tables(os.Stdout, rs)
	if err != nil && ctx.Err() != nil {
		return interruptedError(len(rs), "run", *out)
	}
	if err == nil {
		fmt.Fprintf(os.Stderr, "%d runs appended to %s; xrealm bench sfu --summary %s prints the tables of all its runs and writes the plots beside it\n", len(rs), *out, *out)
	}
	return err
}

func ints(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// privateCopy copies the running binary to a temporary file, so that the
// bench's children run this build even if bin/xrealm is rebuilt meanwhile.
func privateCopy() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	f, err := tmpfiles.CreateTemp("xrsfu-xrealm-") // a copy left by a bench killed is removed by the next
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), os.Chmod(f.Name(), 0o755)
}
