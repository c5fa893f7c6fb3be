package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/xrealm/xrealm/netem"
)

// runNetem implements
//
//	xrealm netem --up TRACE --down TRACE [--delay 20ms] [--queue-packets N | --queue-bytes N]
//	             [--loss P] [--seed S] [--log DIR] [--no-realtime] [-- CMD ARGS...]
//
// It runs CMD in an emulated client namespace whose traffic to the host
// namespace passes through a trace-driven link. Without CMD it runs an
// interactive shell there ($SHELL, else /bin/sh), like Mahimahi's shells.
func runNetem(ctx context.Context, args []string) error {
	// Main names the command: "xrealm netem: ...", not "xrealm netem: netem: ...".
	return trimPrefix(netemCommandLine(ctx, args), "netem: ")
}

func netemCommandLine(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("netem", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	up := fs.String("up", "", "uplink (client→host) Mahimahi trace `file`")
	down := fs.String("down", "", "downlink (host→client) Mahimahi trace `file`")
	delay := fs.Duration("delay", 0, "fixed one-way delay applied in each direction")
	qp := fs.Int("queue-packets", 0, "drop-tail queue limit in packets (0: unbounded)")
	qb := fs.Int("queue-bytes", 0, "drop-tail queue limit in bytes (0: unbounded)")
	loss := fs.Float64("loss", 0, "random loss probability per packet, in [0, 1)")
	seed := fs.Uint64("seed", 1, "random seed for loss")
	noRT := fs.Bool("no-realtime", false, "keep the forwarding threads at normal priority (default: SCHED_FIFO, see netem.RealtimePriority)")
	logDir := fs.String("log", "", "write per-packet logs (uplink.log, downlink.log) to this `dir`")
	fs.Usage = func() { netemUsage(fs) }
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *up == "" || *down == "" {
		fs.Usage()
		return usageErr(errors.New("--up and --down are required"))
	}
	// The link's settings are checked before the traces are read and the
	// namespaces made, naming the flag: the emulator refuses them only once
	// those are up (as root; otherwise the user hears of the namespaces),
	// without the flag.
	switch {
	case *delay < 0:
		return usagef("--delay %v: want a delay of at least 0", *delay)
	case *qp < 0:
		return usagef("--queue-packets %d: want a limit of at least 0 (0: unbounded)", *qp)
	case *qb < 0:
		return usagef("--queue-bytes %d: want a limit of at least 0 (0: unbounded)", *qb)
	case *qp > 0 && *qb > 0:
		return usagef("--queue-packets %d and --queue-bytes %d: a queue limit in packets or in bytes, not both", *qp, *qb)
	case !(*loss >= 0 && *loss < 1):
		return usagef("--loss %v: want a probability in [0, 1)", *loss)
	}
	upT, err := netem.LoadTrace(*up)
	if err != nil {
		return err
	}
	downT, err := netem.LoadTrace(*down)
	if err != nil {
		return err
	}
	cmdArgs := netemCommand(fs.Args(), os.Getenv)
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), netem.SuggestedGOMAXPROCS()))
	// Interrupt and SIGTERM end ctx already (Main); a hang-up too, here.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := netem.Start(ctx, netem.Config{
		Up: upT, Down: downT, Delay: *delay,
		QueuePackets: *qp, QueueBytes: *qb, Loss: *loss, Seed: *seed,
		LogDir: *logDir, Logger: logger, NoRealtime: *noRT,
	})
	if err != nil {
		return err
	}
	defer e.Close()
	cmd := e.Command(ctx, cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	runErr := cmd.Run()
	if err := e.Close(); err != nil {
		return err
	}
	printNetemReport(os.Stderr, e.Report())
	if err := e.Report().KeptUp(); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("%s: %w", cmdArgs[0], runErr)
	}
	return nil
}

func netemUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintln(w, "usage: xrealm netem --up TRACE --down TRACE [flags] [-- CMD ARGS...]")
	fmt.Fprintln(w, "Runs CMD in a client network namespace linked to a host namespace through an emulated link.")
	fmt.Fprintln(w, "Without CMD, runs an interactive shell there: $SHELL, else /bin/sh; the link is torn down when it exits.")
	fmt.Fprintln(w, "Inside, XREALM_NETEM_BASE is the host's address and XREALM_NETEM_HOST_NETNS the host namespace.")
	fmt.Fprintln(w, "A server that CMD reaches through the link must listen in the host namespace (ip netns exec")
	fmt.Fprintln(w, "\"$XREALM_NETEM_HOST_NETNS\" SERVER), not the machine's own: there it gets \"connection refused\".")
	fmt.Fprintln(w, "The queues are unbounded unless --queue-packets or --queue-bytes says otherwise (bench cc uses 1000 packets).")
	fmt.Fprintln(w, "Example, iperf3 over a trace (a file of millisecond timestamps, one per 1500-byte delivery opportunity):")
	fmt.Fprintln(w, "  xrealm netem --up T --down T --queue-packets 1000 -- sh -c \\")
	fmt.Fprintln(w, "    'ip netns exec \"$XREALM_NETEM_HOST_NETNS\" iperf3 -s -1 & sleep 0.5; iperf3 -c \"$XREALM_NETEM_BASE\" -t 10'")
	fs.PrintDefaults()
}

// netemCommand is the command netem runs: args, or without them the
// user's shell ($SHELL, else /bin/sh).
func netemCommand(args []string, getenv func(string) string) []string {
	if len(args) > 0 {
		return args
	}
	if sh := getenv("SHELL"); sh != "" {
		return []string{sh}
	}
	return []string{"/bin/sh"}
}

func printNetemReport(w io.Writer, r netem.Report) {
	for _, d := range []struct {
		name string
		r    netem.DirectionReport
	}{{"uplink", r.Up}, {"downlink", r.Down}} {
		mbps := 0.0
		if s := d.r.Elapsed.Seconds(); s > 0 {
			mbps = float64(d.r.DeliveredBytes) * 8 / s / 1e6
		}
		fmt.Fprintf(w, "netem %s: %d packets delivered (%.2f Mbit/s mean over %v), %d in flight and %d queued at close, %d tail drops, %d random losses, %d late (worst %v), %d kernel drops, %d reads, %d writes, real-time %v\n",
			d.name, d.r.Delivered, mbps, d.r.Elapsed.Round(1e6), d.r.InFlight, d.r.Queued, d.r.TailDrops, d.r.LossDrops, d.r.Late, d.r.MaxLate, d.r.KernelDrops, d.r.Reads, d.r.Writes, d.r.Realtime)
	}
}
