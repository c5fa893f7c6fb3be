package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/xrealm/xrealm/cc"
	"github.com/xrealm/xrealm/hera"
)

// runCC implements
//
//	xrealm cc load hera|hera-paper [flags]
//	xrealm cc unload [hera|hera-paper]
//
// load registers Hera as a TCP congestion control (eBPF struct_ops); it stays
// registered after the command exits until unload.
func runCC(ctx context.Context, args []string) error {
	// Main names the command: "xrealm cc: ...", not "xrealm cc: cc: ...".
	return trimPrefix(ccCommand(args), "cc: ")
}

func ccCommand(args []string) error {
	names := strings.Join(cc.Names, " or ")
	usage := "usage: xrealm cc load hera|hera-paper [flags] | xrealm cc unload [hera|hera-paper]"
	if len(args) == 0 {
		return usageErr(errors.New(usage))
	}
	if isHelp(args[0]) || len(args) > 1 && args[0] == "unload" && isHelp(args[1]) {
		fmt.Fprintln(os.Stderr, usage+"\n(xrealm cc load hera -h for the load flags)")
		return flag.ErrHelp
	}
	switch args[0] {
	case "load":
		if len(args) < 2 || strings.HasPrefix(args[1], "-") {
			return usagef("load: name a congestion control (%s)\n%s", names, usage)
		}
		name := args[1]
		if !slices.Contains(cc.Names, name) {
			return usagef("unknown congestion control %q (want one of %s)", name, strings.Join(cc.Names, ", "))
		}
		p, err := hera.ForVariant(name)
		if err != nil {
			return usageErr(err)
		}
		fs := flag.NewFlagSet("cc load", flag.ContinueOnError)
		fs.SetOutput(os.Stderr)
		heraFlags(fs, &p)
		if err := parseFlags(fs, args[2:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usagef("load: unexpected arguments %q", fs.Args())
		}
		if err := p.Validate(); err != nil { // before the kernel is asked
			return usagef("load %s: %w", name, err)
		}
		if err := cc.Load(name, p); err != nil {
			return err
		}
		fmt.Printf("%s registered as TCP congestion control %q (select it with TCP_CONGESTION or iperf3 -C %s)\n",
			name, cc.KernelName(name), cc.KernelName(name))
		return nil
	case "unload":
		if len(args) > 2 {
			return usagef("unload: unexpected arguments %q\n%s", args[2:], usage)
		}
		name := ""
		if len(args) > 1 {
			name = args[1]
		}
		return cc.Unload(name)
	default:
		return usagef("unknown subcommand %q\n%s", args[0], usage)
	}
}

// trimPrefix returns err with prefix cut from the start of its message
// (a package's name, which Main's "xrealm CMD: " already says); it still
// unwraps to err.
func trimPrefix(err error, prefix string) error {
	if err == nil {
		return nil
	}
	if msg, ok := strings.CutPrefix(err.Error(), prefix); ok {
		return &trimmedError{msg: msg, err: err}
	}
	return err
}

type trimmedError struct {
	msg string
	err error
}

func (e *trimmedError) Error() string { return e.msg }
func (e *trimmedError) Unwrap() error { return e.err }

// heraFlags registers flags for every Hera parameter on fs, with p's values
// as defaults; parsing stores them in p.
func heraFlags(fs *flag.FlagSet, p *hera.Params) {
	fs.DurationVar(&p.BucketWidth, "bucket", p.BucketWidth, "bucket width B (absolute RTT for hera-paper, queueing delay for hera)")
	fs.IntVar(&p.Backlog, "backlog", p.Backlog, "backlog length N (RTT samples averaged)")
	fs.IntVar(&p.Buckets, "buckets", p.Buckets, "number of histogram buckets X")
	fs.Var(uint32Flag{&p.DeltaMax}, "delta-max", "step unit Δmax in `segments`")
	fs.Var(uint32Flag{&p.HistCap}, "hist-cap", "histogram `total` at which all buckets are halved")
	fs.Var(uint32Flag{&p.MinCwnd}, "min-cwnd", "lower window bound in `segments`")
	fs.Var(uint32Flag{&p.MaxCwnd}, "max-cwnd", "upper window bound in `segments`")
	fs.Var(uint32Flag{&p.InitCwnd}, "init-cwnd", "initial window in `segments`")
	fs.Var(uint32Flag{&p.DecreaseShift}, "decrease-shift", "hera: decrease unit is Δmax + cwnd>>`shift` (0: Δmax only)")
	fs.Var(uint32Flag{&p.LossBetaPermille}, "loss-beta", "hera: window multiplier on loss, `per-mille` (0: no loss response)")
	fs.DurationVar(&p.MinRTTWindow, "min-rtt-window", p.MinRTTWindow, "hera: how long a minimum RTT sample stays valid")
	fs.BoolVar(&p.Pacing, "pacing", p.Pacing, "ask the kernel to pace the flow at 1.2·cwnd/srtt")
	fs.Var(uint32Flag{&p.FloorGainEighths}, "floor-gain", "hera: keep the window at or above `gain`/8 × the largest delivered BDP of the last --bdp-window (0: no floor)")
	fs.DurationVar(&p.BDPWindow, "bdp-window", p.BDPWindow, "hera: how long a delivered-BDP sample stays the floor's maximum")
	fs.Var(uint32Flag{&p.BucketPackets}, "bucket-packets", "hera: a bucket is at least `n` packet times at the delivered rate (0: B only)")
	fs.Var(uint32Flag{&p.GateRTTs}, "gate-rtts", "hera: the next update is at most this many minimum `RTTs` away (0: one sample's RTT)")
	fs.Var(uint32Flag{&p.PacingMaxRTTs}, "pacing-max-rtts", "hera: pace at cwnd over min(srtt, this many minimum `RTTs`) (0: srtt)")
	fs.Var(uint32Flag{&p.OutageRTTs}, "outage-rtts", "hera: a sample this many minimum `RTTs` above the minimum is an outage (0: no outage boost)")
	fs.Var(uint32Flag{&p.OutageBoostPercent}, "outage-boost", "hera: multiply the window by this `percent` once per outage (0: off)")
}

// uint32Flag is a flag for a uint32 parameter: a value beyond 32 bits is
// refused, not cut to its low bits (--max-cwnd 4294967297 would be a
// window of 1).
type uint32Flag struct{ p *uint32 }

func (f uint32Flag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*f.p), 10)
}

func (f uint32Flag) Set(s string) error {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return fmt.Errorf("want a whole number from 0 to %d", uint32(math.MaxUint32))
	}
	*f.p = uint32(v)
	return nil
}
