package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	benchcc "github.com/xrealm/xrealm/bench/cc"
	"github.com/xrealm/xrealm/cc"
	"github.com/xrealm/xrealm/hera"
	"github.com/xrealm/xrealm/netem"
)

// benchCCDefaultTraces are the paper's 14 scenarios, relative to the traces
// directory.
var benchCCDefaultTraces = []string{
	"mmwave/UMa_a", "mmwave/UMa_b", "mmwave/UMa_c", "mmwave/UMa_d", "mmwave/UMa_e", "mmwave/UMa_f",
	"mmwave/RMa_a", "mmwave/RMa_b", "mmwave/RMa_c", "mmwave/RMa_d", "mmwave/RMa_e", "mmwave/RMa_f",
	"mmwave/humanmotion", "cellular/highwayGold",
}

// benchCCOut is bench cc's default --out.
const benchCCOut = "bench/cc/out"

// runBenchCC implements `xrealm bench cc`: the Hera evaluation over the
// trace-driven emulator. With --summary it only prints tables from an
// existing results file. Every flag is checked before anything is set up.
func runBenchCC(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench cc", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	dir := fs.String("traces-dir", "", "directory holding the mmwave/ and cellular/ Mahimahi trace folders (default: $"+benchcc.TracesEnv+
		", else ../shared/traces from the current directory, else shared/traces beside the repository)")
	traces := fs.String("traces", strings.Join(benchCCDefaultTraces, ","), "comma-separated traces, relative to --traces-dir")
	algos := fs.String("algos", "cubic,bbr,reno,hera,hera-paper", "comma-separated congestion controls: the kernel's available ones (/proc/sys/net/ipv4/tcp_available_congestion_control) and hera, hera-paper (loaded by the bench)")
	dur := fs.Duration("duration", 60*time.Second, "length of each run")
	seeds := fs.String("seeds", "1,2,3", "comma-separated seeds (one run per seed)")
	delay := fs.Duration("delay", 10*time.Millisecond, "one-way delay of the emulated link")
	queue := fs.Int("queue-packets", 1000, "drop-tail queue limit in packets")
	flows := fs.Int("flows", 1, "competing flows of the same algorithm per run (6 for the fairness experiment)")
	qoe := fs.Bool("qoe", false, "add one app-level stream of paced frames (video-like) of the same algorithm next to the bulk flows")
	qoeRate := fs.Float64("qoe-mbps", 20, "bitrate of the --qoe stream in Mbit/s")
	qoeFPS := fs.Int("qoe-fps", 60, "frames per second of the --qoe stream")
	heraArgs := fs.String("hera-args", "", "`flags` of \"xrealm cc load hera\" that change hera's parameters for this run, e.g. \"--bucket 4ms\" (needs hera in --algos; its results say them, and the tables show it as \"hera [FLAGS]\")")
	tcpInfo := fs.String("tcpinfo-dir", "", "write flow 0's TCP_INFO every 10 ms to a file per run in this directory (diagnostics)")
	out := fs.String("out", benchCCOut, "output directory (results.jsonl in it is appended to)")
	summary := fs.String("summary", "", "print Markdown tables from this results.jsonl and exit")
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
		rs, err := benchcc.ReadResults(*summary)
		if err != nil {
			return err
		}
		benchcc.Summarise(os.Stdout, rs)
		fmt.Println()
		benchcc.QoETable(os.Stdout, rs)
		fmt.Println()
		benchcc.RunsTable(os.Stdout, rs)
		return nil
	}
	cfg := benchcc.Config{
		Algos: splitList(*algos), Duration: *dur, Delay: *delay,
		QueuePackets: *queue, Flows: *flows, OutDir: *out,
		QoE: *qoe, QoERate: *qoeRate * 1e6, QoEFPS: *qoeFPS, TCPInfoDir: *tcpInfo,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	kernel, err := cc.Available()
	if err != nil {
		return err
	}
	if err := benchcc.CheckAlgos(cfg.Algos, kernel); err != nil {
		return usagef("--algos: %w", err)
	}
	switch {
	case *dur <= 0:
		return usagef("--duration %v: want a positive duration", *dur)
	case *delay < 0:
		return usagef("--delay %v: want a duration of at least 0", *delay)
	case *queue < 1:
		return usagef("--queue-packets %d: want at least 1", *queue)
	case *flows < 1 || *flows > benchcc.MaxFlows:
		return usagef("--flows %d: want 1 to %d", *flows, benchcc.MaxFlows)
	case *qoe && !(*qoeRate > 0 && *qoeRate < math.Inf(1)):
		return usagef("--qoe-mbps %g: want a positive bitrate", *qoeRate)
	case *qoe && *qoeFPS < 1:
		return usagef("--qoe-fps %d: want at least 1", *qoeFPS)
	}
	if *heraArgs != "" {
		p := hera.DefaultParams()
		hfs := flag.NewFlagSet("hera-args", flag.ContinueOnError)
		hfs.SetOutput(io.Discard) // the error says what is wrong; not the whole flag list
		heraFlags(hfs, &p)
		if err := hfs.Parse(strings.Fields(*heraArgs)); err != nil {
			return usagef("--hera-args: %w", err)
		}
		if err := p.Validate(); err != nil {
			return usagef("--hera-args: %w", err)
		}
		if !slices.Contains(cfg.Algos, "hera") {
			return usagef("--hera-args %q sets hera's parameters, and --algos %s runs no hera", *heraArgs, *algos)
		}
		cfg.HeraParams = &p
		cfg.HeraArgs = strings.Join(strings.Fields(*heraArgs), " ")
	}
	for _, s := range splitList(*seeds) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return usagef("--seeds: %q is not a non-negative integer", s)
		}
		cfg.Seeds = append(cfg.Seeds, v)
	}
	if len(cfg.Seeds) == 0 {
		return usageErr(errors.New("--seeds is empty"))
	}
	if *dir == "" {
		if *dir, err = benchcc.DefaultTraces(); err != nil {
			return err
		}
	}
	for _, t := range splitList(*traces) {
		path := filepath.Join(*dir, t)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("trace %s: %w (--traces-dir names the folder that holds mmwave/ and cellular/ with Mahimahi traces; by default $%s, else ../shared/traces, else shared/traces beside the repository)",
				path, err, benchcc.TracesEnv)
		}
		cfg.Traces = append(cfg.Traces, path)
	}
	if len(cfg.Traces) == 0 {
		return usageErr(errors.New("--traces is empty"))
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, TUN devices, BPF congestion control)")
	}
	fmt.Fprintf(os.Stderr, "traces from %s; %s\n", *dir, outNotice("appending results to", filepath.Join(*out, "results.jsonl"), *out == benchCCOut, "--out DIR"))
	// Spare Ps for the emulator's forwarding threads (see netem.Config).
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), netem.SuggestedGOMAXPROCS()))
	defer sayInterrupted(ctx, "bench cc", "ending the run under way and the emulated link")()
	rs, err := benchcc.Run(ctx, cfg)
	benchcc.Summarise(os.Stdout, rs)
	if err != nil && ctx.Err() != nil {
		return interruptedError(len(rs), "run", filepath.Join(*out, "results.jsonl"))
	}
	return err
}
