// Package benchbus runs the scene-bus benchmarks of `xrealm bench bus`:
// the ARENA load experiments, side by side with Mosquitto. It starts the
// systems under test itself (xrealm as a child `xrealm serve`, Mosquitto
// with a generated configuration), drives both with the same generator
// (package bots), measures the brokers' CPU and memory from /proc, and
// writes RESULTS.md with tables and SVG plots.
package benchbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xrealm/xrealm/bots"
)

// Config is one run of the benchmark.
type Config struct {
	Out         string   // directory for RESULTS.md, results.json and the plots
	Experiments []string // ramp, isolation, security, interaction, generator
	Systems     []string // xrealm, mosquitto (the ramp and isolation experiments)

	XrealmCmd []string // the xrealm executable (and leading args); "serve ..." follows
	XrealmEnv []string
	// XrealmFlags are added to `xrealm serve`'s flags.
	XrealmFlags []string
	Mosquitto   string // mosquitto executable; "" = not run
	Python      string // python with arena-py, for the arena-py agent; "" = not run

	Rate      float64 // poses per second per user
	Size      int     // pose size in bytes
	Behaviour string
	// Trace is the pose trace file the bots play with Behaviour replay
	// (xrealm bots record makes one).
	Trace  string
	Warmup time.Duration
	Step   time.Duration // measurement window of each step
	Drain  time.Duration // wait after a window for messages in flight

	Ramp           []int // users per step of the broker-load ramp
	IsolationScene []int // numbers of scenes
	IsolationRamp  []int // users per step of each isolation ramp
	SecurityUsers  []int
	SecurityRepeat int
	// EfficiencyUsers is the load at which every system is measured
	// (EfficiencyRepeat times, alternating), whether or not its ramp got
	// that far: the efficiency and latency targets are stated there.
	EfficiencyUsers  int
	EfficiencyRepeat int
	InteractionBG    []int // background users
	Clicks           int   // clicks per interaction run
	GeneratorUsers   int   // users for the generator comparison

	// Stop a system's ramp when p99 exceeds MaxP99 or the delivery ratio
	// falls below MinRatio.
	MaxP99   time.Duration
	MinRatio float64

	Command string // the command line, for the results
	Log     *slog.Logger
}

// Experiments are the experiments a run can do, in the order of the full
// benchmark.
var Experiments = []string{"ramp", "efficiency", "isolation", "security", "interaction", "generator"}

// Behaviours are the bots' behaviours a run can use (Config.Behaviour).
var Behaviours = []string{"static", "randomwalk", "boids", "replay"}

// Defaults returns the full benchmark's configuration: the run whose
// results are committed (RESULTS.md), so that `xrealm bench bus` without
// flags repeats it. Its Out is those results, bench/bus relative to the
// repository root.
func Defaults() Config {
	return Config{
		Out:              "bench/bus",
		Experiments:      slices.Clone(Experiments),
		Systems:          []string{"mosquitto", "xrealm"},
		Rate:             10,
		Size:             310,
		Behaviour:        "randomwalk",
		Warmup:           2 * time.Second,
		Step:             10 * time.Second,
		Drain:            time.Second,
		Ramp:             seq(60, 30, 360),
		IsolationScene:   []int{1, 2, 5, 10},
		IsolationRamp:    seq(100, 50, 2000),
		SecurityUsers:    []int{120},
		SecurityRepeat:   8,
		EfficiencyUsers:  120,
		EfficiencyRepeat: 2,
		InteractionBG:    []int{0, 50, 100},
		Clicks:           100,
		GeneratorUsers:   80,
		MaxP99:           100 * time.Millisecond,
		MinRatio:         0.99,
	}
}

// joinInts writes v as a comma-separated list.
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func seq(from, step, to int) []int {
	var out []int
	for n := from; n <= to; n += step {
		out = append(out, n)
	}
	return out
}

// Row is one measured step: one system, one load.
type Row struct {
	Experiment string  `json:"experiment"`
	System     string  `json:"system"`
	Generator  string  `json:"generator,omitempty"`
	Users      int     `json:"users"`
	Scenes     int     `json:"scenes"`
	Seconds    float64 `json:"seconds"`
	Sent       int64   `json:"sent"`
	Missed     int64   `json:"missed,omitempty"` // poses due in the window that their senders were too late for and skipped: in Expected, never delivered
	Expected   int64   `json:"expected"`
	Delivered  int64   `json:"delivered"`
	Ratio      float64 `json:"ratio"`
	PerSec     float64 `json:"deliveries_per_s"`
	BytesPerS  float64 `json:"bytes_per_s"`
	P50ms      float64 `json:"p50_ms"`
	P90ms      float64 `json:"p90_ms"`
	P99ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	BrokerCPU  float64 `json:"broker_cpu_cores"`
	BrokerRSS  float64 `json:"broker_rss_mb"`
	GenCPU     float64 `json:"generator_cpu_cores"`
	OtherCPU   float64 `json:"other_cpu_cores"` // the rest of the machine: other engineers' builds
	// StealCPU is the CPU the hypervisor took from the machine during the
	// window (/proc/stat steal), in cores.
	StealCPU float64 `json:"steal_cpu_cores"`
	// BrokerWrites and BrokerReads are the broker's write and read system
	// calls per second in the window (0: not known). Mosquitto writes each
	// delivery with a call of its own; xrealm batches a connection's
	// deliveries into one write per linger interval.
	BrokerWrites float64 `json:"broker_write_calls_per_s,omitempty"`
	BrokerReads  float64 `json:"broker_read_calls_per_s,omitempty"`
	PerCPUSec    float64 `json:"deliveries_per_broker_cpu_s"`
	GenUsPer     float64 `json:"generator_cpu_us_per_delivery"`
	BrokerUs     float64 `json:"broker_cpu_us_per_delivery"`
	JoinMeanMs   float64 `json:"join_mean_ms"`
	JoinP99ms    float64 `json:"join_p99_ms"`
	Load1        float64 `json:"load1"`
	Lost         int64   `json:"disconnected"`
	Retry        bool    `json:"retry,omitempty"` // a second measurement after a miss
	Error        string  `json:"error,omitempty"`
}

// OK reports whether the step met the ramp's limits.
func (r Row) OK(maxP99 time.Duration, minRatio float64) bool {
	return r.Error == "" && r.Lost == 0 && r.Ratio >= minRatio && r.P99ms <= float64(maxP99)/1e6
}

// Interaction is one click-to-update measurement.
type Interaction struct {
	System     string  `json:"system"`
	Agent      string  `json:"agent"`
	Background int     `json:"background_users"`
	Clicks     int     `json:"clicks"`
	Answered   int     `json:"answered"`
	P50ms      float64 `json:"p50_ms"`
	P90ms      float64 `json:"p90_ms"`
	P99ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// The click path in hops, medians: the clicker's own click back from
	// the broker (one hop out and back, through the broker), the click to
	// the agent, and the agent's answer to the clicker (Go agent only).
	EchoP50ms      float64 `json:"echo_p50_ms,omitempty"`
	ToAgentP50ms   float64 `json:"to_agent_p50_ms,omitempty"`
	FromAgentP50ms float64 `json:"from_agent_p50_ms,omitempty"`
	Error          string  `json:"error,omitempty"`
}

// Results is everything one run measured.
type Results struct {
	Started     time.Time     `json:"started"`
	Finished    time.Time     `json:"finished"`
	Command     string        `json:"command"`
	Machine     Machine       `json:"machine"`
	Config      ConfigSummary `json:"config"`
	Rows        []Row         `json:"rows"`
	Interaction []Interaction `json:"interaction"`
	Notes       []string      `json:"notes"`
}

// ConfigSummary is the part of Config the results show.
type ConfigSummary struct {
	Rate      float64 `json:"rate_hz"`
	Size      int     `json:"size_bytes"`
	Behaviour string  `json:"behaviour"`
	Trace     string  `json:"trace,omitempty"` // the replayed pose trace's file name
	Warmup    string  `json:"warmup"`
	Step      string  `json:"step"`
	Drain     string  `json:"drain"`
	MaxP99    string  `json:"max_p99"`
	MinRatio  float64 `json:"min_ratio"`
}

// Check returns an error if cfg names an experiment, system or behaviour
// the benchmark does not know, or has a rate it cannot send at.
func (cfg *Config) Check() error {
	if cfg.Out == "" {
		return errors.New("no output directory")
	}
	if len(cfg.Experiments) == 0 {
		return fmt.Errorf("no experiment; want some of %s", strings.Join(Experiments, ", "))
	}
	for _, e := range cfg.Experiments {
		if !slices.Contains(Experiments, e) {
			return fmt.Errorf("unknown experiment %q; want some of %s", e, strings.Join(Experiments, ", "))
		}
	}
	for _, s := range cfg.Systems {
		if err := checkSystem(s); err != nil {
			return err
		}
	}
	// The ramp, efficiency and isolation experiments measure the named
	// systems: with none that can run, a run measured nothing and wrote
	// empty results (--systems mosquitto without Mosquitto installed).
	if slices.ContainsFunc(cfg.Experiments, func(e string) bool { return e == "ramp" || e == "efficiency" || e == "isolation" }) {
		runnable := slices.DeleteFunc(slices.Clone(cfg.Systems), func(s string) bool { return s == "mosquitto" && cfg.Mosquitto == "" })
		switch {
		case len(cfg.Systems) == 0:
			return errors.New("no system to measure (--systems)")
		case len(runnable) == 0:
			return fmt.Errorf("--systems %s: Mosquitto is not installed (apt-get install mosquitto, or scripts/setup.sh --test), and no other system is named", strings.Join(cfg.Systems, ","))
		}
	}
	if !slices.Contains(Behaviours, cfg.Behaviour) {
		return fmt.Errorf("unknown behaviour %q; want one of %s", cfg.Behaviour, strings.Join(Behaviours, ", "))
	}
	if (cfg.Behaviour == "replay") != (cfg.Trace != "") {
		return fmt.Errorf("behaviour %q with trace %q: a trace goes with behaviour replay, and replay needs one (xrealm bots record makes one)", cfg.Behaviour, cfg.Trace)
	}
	if err := bots.CheckRate(cfg.Rate); err != nil {
		return err
	}
	return cfg.checkCounts()
}

// checkCounts returns an error naming the flag whose count, duration or
// limit the benchmark cannot run with: a step of 0 users or 0 scenes, a
// measurement window of 0 (its rates were NaN, and writing the results
// failed at the end of the run), a negative wait, and the like. Each was
// run before and recorded as if measured.
func (cfg *Config) checkCounts() error {
	for _, l := range []struct {
		flag string
		v    []int
		what string
	}{
		{"--ramp", cfg.Ramp, "users"},
		{"--isolation-ramp", cfg.IsolationRamp, "users"},
		{"--isolation-scenes", cfg.IsolationScene, "scenes"},
		{"--security-users", cfg.SecurityUsers, "users"},
	} {
		if len(l.v) == 0 {
			return fmt.Errorf("%s is empty; want at least one step", l.flag)
		}
		for _, n := range l.v {
			if n < 1 {
				return fmt.Errorf("%s has a step of %d %s; want at least 1", l.flag, n, l.what)
			}
		}
	}
	for _, n := range cfg.InteractionBG {
		if n < 0 {
			return fmt.Errorf("--interaction-bg has %d background users; want 0 or more", n)
		}
	}
	if len(cfg.InteractionBG) == 0 {
		return errors.New("--interaction-bg is empty; want at least one number of background users (0: none)")
	}
	for _, n := range []struct {
		flag string
		v    int
		what string
	}{
		{"--size", cfg.Size, "bytes"},
		{"--efficiency-users", cfg.EfficiencyUsers, "users"},
		{"--efficiency-repeat", cfg.EfficiencyRepeat, "repetitions"},
		{"--security-repeat", cfg.SecurityRepeat, "repetitions"},
		{"--generator-users", cfg.GeneratorUsers, "users"},
		{"--clicks", cfg.Clicks, "clicks"},
	} {
		if n.v < 1 {
			return fmt.Errorf("%s %d: want at least 1 (%s)", n.flag, n.v, n.what)
		}
	}
	switch {
	case cfg.Step <= 0:
		return fmt.Errorf("--step %v: want a measurement window above 0", cfg.Step)
	case cfg.Warmup < 0:
		return fmt.Errorf("--warmup %v: want 0 or more", cfg.Warmup)
	case cfg.Drain < 0:
		return fmt.Errorf("--drain %v: want 0 or more", cfg.Drain)
	case cfg.MaxP99 <= 0:
		return fmt.Errorf("--max-p99 %v: want a latency limit above 0", cfg.MaxP99)
	case !(cfg.MinRatio >= 0 && cfg.MinRatio <= 1):
		return fmt.Errorf("--min-ratio %g: want a delivery ratio from 0 to 1", cfg.MinRatio)
	}
	return nil
}

// checkSystem returns an error unless name is a system runner.system can
// start.
func checkSystem(name string) error {
	base, extra, variant := strings.Cut(name, ":")
	switch {
	case strings.HasPrefix(name, "xrealm@") && len(name) > len("xrealm@"):
	case variant && (base == "xrealm" || base == "xrealm-insecure") && strings.TrimSpace(extra) != "":
	case name == "xrealm", name == "xrealm-insecure", name == "mosquitto":
	default:
		return fmt.Errorf("unknown system %q (want xrealm, xrealm-insecure, mosquitto, xrealm:FLAGS or xrealm@EXECUTABLE)", name)
	}
	return nil
}

// Partial returns how cfg falls short of the full benchmark, whose results
// are the committed ones: experiments left out, a system of the
// comparison missing, shorter measurement windows, fewer repetitions or
// another workload. None means a full run.
func (cfg *Config) Partial() []string {
	full := Defaults()
	var why []string
	var missing []string
	for _, e := range Experiments {
		if !slices.Contains(cfg.Experiments, e) {
			missing = append(missing, e)
		}
	}
	if len(missing) > 0 {
		why = append(why, "without the experiments "+strings.Join(missing, ", "))
	}
	for _, s := range full.Systems {
		if !slices.Contains(cfg.Systems, s) {
			why = append(why, "without the system "+s)
		} else if s == "mosquitto" && cfg.Mosquitto == "" {
			why = append(why, "without Mosquitto (not installed)")
		}
	}
	if slices.Contains(cfg.Experiments, "interaction") && cfg.Python == "" {
		why = append(why, "without the arena-py agent (no --python)")
	}
	for _, d := range []struct {
		flag      string
		got, want time.Duration
	}{{"--warmup", cfg.Warmup, full.Warmup}, {"--step", cfg.Step, full.Step}, {"--drain", cfg.Drain, full.Drain}} {
		if d.got < d.want {
			why = append(why, fmt.Sprintf("%s %v (the full run's: %v)", d.flag, d.got, d.want))
		}
	}
	for _, n := range []struct {
		flag      string
		got, want int
	}{{"--efficiency-repeat", cfg.EfficiencyRepeat, full.EfficiencyRepeat}, {"--security-repeat", cfg.SecurityRepeat, full.SecurityRepeat}, {"--clicks", cfg.Clicks, full.Clicks}} {
		if n.got < n.want {
			why = append(why, fmt.Sprintf("%s %d (the full run's: %d)", n.flag, n.got, n.want))
		}
	}
	// Loads: a run that leaves out steps of the full run's (a trial's
	// --ramp 4,8) or measures the targets at other loads replaced the
	// committed results without the warning.
	for _, l := range []struct {
		flag      string
		got, want []int
	}{
		{"--ramp", cfg.Ramp, full.Ramp}, {"--isolation-scenes", cfg.IsolationScene, full.IsolationScene},
		{"--isolation-ramp", cfg.IsolationRamp, full.IsolationRamp}, {"--security-users", cfg.SecurityUsers, full.SecurityUsers},
		{"--interaction-bg", cfg.InteractionBG, full.InteractionBG},
	} {
		for _, n := range l.want {
			if !slices.Contains(l.got, n) {
				why = append(why, fmt.Sprintf("%s without %d (the full run's: %s)", l.flag, n, joinInts(l.want)))
				break
			}
		}
	}
	for _, n := range []struct {
		flag      string
		got, want int
	}{{"--efficiency-users", cfg.EfficiencyUsers, full.EfficiencyUsers}, {"--generator-users", cfg.GeneratorUsers, full.GeneratorUsers}} {
		if n.got != n.want {
			why = append(why, fmt.Sprintf("%s %d (the full run's: %d)", n.flag, n.got, n.want))
		}
	}
	if cfg.MaxP99 != full.MaxP99 || cfg.MinRatio != full.MinRatio {
		why = append(why, fmt.Sprintf("other ramp limits (--max-p99 %v --min-ratio %g; the full run's: %v, %g)", cfg.MaxP99, cfg.MinRatio, full.MaxP99, full.MinRatio))
	}
	if cfg.Rate != full.Rate || cfg.Size != full.Size || cfg.Behaviour != full.Behaviour || cfg.Trace != full.Trace {
		why = append(why, fmt.Sprintf("another workload (%g poses/s of %d bytes, %s; the full run's: %g of %d, %s)",
			cfg.Rate, cfg.Size, cfg.Behaviour, full.Rate, full.Size, full.Behaviour))
	}
	return why
}

// Run runs the configured experiments and writes the results to cfg.Out.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("bench bus: %w", err)
	}
	var trace *bots.Trace
	if cfg.Trace != "" {
		var err error
		if trace, err = bots.ReadTraceFile(cfg.Trace); err != nil {
			return nil, fmt.Errorf("bench bus: %w", err)
		}
	}
	if err := writableDir(cfg.Out); err != nil {
		return nil, fmt.Errorf("bench bus: --out %s: %w", cfg.Out, err)
	}
	work, err := os.MkdirTemp("", "xrealm-bench-bus-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	res := &Results{
		Started: time.Now(), Command: cfg.Command, Machine: describeMachine(cfg),
		Config: ConfigSummary{Rate: cfg.Rate, Size: cfg.Size, Behaviour: cfg.Behaviour, Warmup: cfg.Warmup.String(),
			Step: cfg.Step.String(), Drain: cfg.Drain.String(), MaxP99: cfg.MaxP99.String(), MinRatio: cfg.MinRatio},
	}
	b := &runner{cfg: cfg, work: work, res: res, log: cfg.Log, trace: trace}
	if trace != nil {
		res.Config.Trace = filepath.Base(cfg.Trace)
	}
	defer b.stopAll()
	for _, e := range cfg.Experiments {
		var err error
		switch e {
		case "ramp":
			err = b.ramp(ctx, "ramp", []int{1}, cfg.Ramp)
		case "isolation":
			err = b.ramp(ctx, "isolation", cfg.IsolationScene, cfg.IsolationRamp)
		case "efficiency":
			err = b.efficiency(ctx)
		case "security":
			err = b.security(ctx)
		case "interaction":
			err = b.interaction(ctx)
		case "generator":
			err = b.generator(ctx)
		default:
			err = fmt.Errorf("unknown experiment %q (want one of %s)", e, strings.Join(Experiments, ", "))
		}
		if err != nil {
			// Keep the steps measured so far, also of this experiment (an
			// interrupted run lost them); a run that measured nothing
			// leaves the directory as it was.
			if len(res.Rows) > 0 || len(res.Interaction) > 0 {
				why := "failed"
				if ctx.Err() != nil {
					why = "was interrupted"
				}
				res.Notes = append(res.Notes, fmt.Sprintf("This run %s during the experiment %s: the results hold what was measured until then (%v).", why, e, err))
				res.Finished = time.Now()
				if werr := Write(cfg.Out, res); werr != nil {
					err = errors.Join(err, werr)
				}
			}
			return res, err
		}
		// Write what we have after every experiment, so that a long run
		// stopped half way still leaves results.
		res.Finished = time.Now()
		if err := Write(cfg.Out, res); err != nil {
			return res, err
		}
	}
	res.Finished = time.Now()
	return res, Write(cfg.Out, res)
}

// writableDir creates dir if missing and checks that files can be
// written in it, so that a run fails at its start, not when it writes its
// first results after minutes of measuring.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".xrealm-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write there: %w", err)
	}
	f.Close()
	return os.Remove(f.Name())
}

type runner struct {
	cfg     Config
	work    string
	res     *Results
	log     *slog.Logger
	systems map[string]*System
	trace   *bots.Trace // Config.Trace, read
}

func (b *runner) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	b.log.Warn(s)
	b.res.Notes = append(b.res.Notes, s)
}

// system returns a running system by name, starting it on first use.
func (b *runner) system(ctx context.Context, name string) (*System, error) {
	if b.systems == nil {
		b.systems = map[string]*System{}
	}
	if s := b.systems[name]; s != nil && s.Alive() {
		return s, nil
	} else if s != nil {
		b.note("%s had exited; restarted it. Its log ended with: %s", name, s.LogTail(500))
	}
	var s *System
	var err error
	switch base, extra, variant := strings.Cut(name, ":"); {
	case strings.HasPrefix(name, "xrealm@"):
		// Another build of xrealm, e.g. "xrealm@/tmp/old/xrealm", to compare
		// two builds side by side.
		bin := strings.TrimPrefix(name, "xrealm@")
		s, err = StartXrealm(ctx, b.work, XrealmOptions{Command: []string{bin}, Env: b.cfg.XrealmEnv, Flags: b.cfg.XrealmFlags,
			Name: fmt.Sprintf("xrealm-v%d", len(b.systems))})
		if s != nil {
			s.Name = name
		}
	case variant && (base == "xrealm" || base == "xrealm-insecure"):
		// A variant: xrealm with more serve flags, e.g.
		// "xrealm:--write-linger=2ms".
		flags := append(append([]string(nil), b.cfg.XrealmFlags...), strings.Fields(extra)...)
		s, err = StartXrealm(ctx, b.work, XrealmOptions{Command: b.cfg.XrealmCmd, Env: b.cfg.XrealmEnv, Flags: flags,
			Insecure: base == "xrealm-insecure", Name: fmt.Sprintf("%s-v%d", base, len(b.systems))})
		if s != nil {
			s.Name = base + " " + extra
		}
	case name == "xrealm", name == "xrealm-insecure":
		s, err = StartXrealm(ctx, b.work, XrealmOptions{Command: b.cfg.XrealmCmd, Env: b.cfg.XrealmEnv, Flags: b.cfg.XrealmFlags, Insecure: name == "xrealm-insecure", Name: name})
	case name == "mosquitto":
		if b.cfg.Mosquitto == "" {
			return nil, errNoMosquitto
		}
		s, err = StartMosquitto(ctx, b.work, b.cfg.Mosquitto)
	default:
		err = fmt.Errorf("unknown system %q (want xrealm, xrealm-insecure, mosquitto, xrealm:FLAGS or xrealm@EXECUTABLE)", name)
	}
	if err != nil {
		return nil, err
	}
	b.systems[name] = s
	return s, nil
}

// fresh stops the system called name, if it runs, and removes its data, so
// that the next b.system starts it new.
func (b *runner) fresh(name string) error {
	s := b.systems[name]
	if s == nil {
		return nil
	}
	delete(b.systems, name)
	s.Stop()
	if s.DataDir != "" {
		if err := os.RemoveAll(s.DataDir); err != nil {
			return fmt.Errorf("remove the data of %s: %w", name, err)
		}
	}
	return nil
}

var errNoMosquitto = errors.New("mosquitto is not installed (apt-get install mosquitto)")

func (b *runner) stopAll() {
	for _, s := range b.systems {
		s.Stop()
	}
}

// available returns the systems of cfg.Systems that can run.
func (b *runner) available() []string {
	var out []string
	for _, s := range b.cfg.Systems {
		if s == "mosquitto" && b.cfg.Mosquitto == "" {
			continue
		}
		out = append(out, s)
	}
	return out
}

// ramp raises the users step by step, the systems side by side at each
// step, until each system misses the limits. With several scene counts (the
// isolation experiment) their ramps are interleaved step by step,
// alternating which goes first, so that every scene count meets the same
// stretches of machine weather: on this VM the hypervisor's steal time
// rises after minutes of full load, and a ramp run after another one would
// measure that, not the broker.
func (b *runner) ramp(ctx context.Context, experiment string, sceneCounts []int, users []int) error {
	going := map[int][]string{}
	for _, s := range sceneCounts {
		going[s] = b.available()
	}
	order := slices.Clone(sceneCounts)
	for _, n := range users {
		left := false
		for _, scenes := range order {
			if len(going[scenes]) == 0 {
				continue
			}
			left = true
			if n < scenes {
				continue
			}
			var still []string
			for _, name := range going[scenes] {
				sys, err := b.system(ctx, name)
				if err != nil {
					return err
				}
				ok, err := b.measure(ctx, experiment, sys, n, scenes)
				if err != nil {
					return err
				}
				if ok {
					still = append(still, name)
				}
			}
			going[scenes] = still
		}
		if !left {
			break
		}
		slices.Reverse(order)
	}
	return nil
}

// stealHigh is the steal time, in cores, above which a step is taken to
// have run on a machine short of CPU.
const stealHigh = 0.2

// measure runs one ramp step and reports whether the system held it. The
// machine is shared and virtual, so a step is measured again when it
// misses the ramp's limits (once), or when it misses either reported
// latency limit (p99 ≤ 50 ms, the capacity target's, or the ramp's) while
// the hypervisor took more than stealHigh cores; such a step is remeasured
// after the steal has calmed down, at most twice. The load is held if any
// of its measurements met the ramp's limits, as capacity counts it.
func (b *runner) measure(ctx context.Context, experiment string, sys *System, users, scenes int) (bool, error) {
	return b.measureWith(ctx, func() Row {
		return b.step(ctx, experiment, sys, users, scenes, sys.Transport(b.cfg.Size), "bots")
	}, func() { b.coolDown(ctx) })
}

// measureWith is measure with the step taken by take and the cool-down
// before a remeasurement under steal done by cool.
func (b *runner) measureWith(ctx context.Context, take func() Row, cool func()) (bool, error) {
	held := false
	for try := 0; ; try++ {
		row := take()
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		row.Retry = try > 0
		b.res.Rows = append(b.res.Rows, row)
		if row.Error != "" {
			// A failed remeasurement does not undo an earlier
			// measurement that held (capacity counts the load as held).
			return held, nil
		}
		ok := row.OK(b.cfg.MaxP99, b.cfg.MinRatio)
		// Any measurement that held holds the load: the ramp goes on
		// exactly when capacity counts the load as held (it stopped when
		// the last of the measurements missed, after an earlier one had
		// held, and capacity reported the load as held yet a limit).
		held = held || ok
		stolen := row.StealCPU >= stealHigh
		missed50 := !row.OK(min(b.cfg.MaxP99, targetP99), b.cfg.MinRatio)
		switch {
		case stolen && missed50 && try < 2:
			cool()
		case !ok && try == 0:
		default:
			return held, nil
		}
	}
}

// coolDown waits, at most a minute, until the hypervisor takes less than
// a tenth of a core from the machine over 2 s.
func (b *runner) coolDown(ctx context.Context) {
	start := time.Now()
	_, s0, err := machineCPU()
	for err == nil && time.Since(start) < time.Minute {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return
		}
		var s1 time.Duration
		if _, s1, err = machineCPU(); err != nil {
			break
		}
		steal := (s1 - s0).Seconds() / 2
		s0 = s1
		if steal < 0.1 {
			break
		}
	}
	b.log.Info("cooled down before a remeasurement", "waited", time.Since(start).Round(time.Second))
}

// step runs one fleet against one system and measures it.
func (b *runner) step(ctx context.Context, experiment string, sys *System, users, scenes int, tr bots.Transport, gen string) Row {
	row := Row{Experiment: experiment, System: sys.Name, Generator: gen, Users: users, Scenes: scenes, Load1: loadAvg()}
	b.log.Info("step", "experiment", experiment, "system", sys.Name, "users", users, "scenes", scenes, "generator", gen)
	names := make([]string, scenes)
	for i := range names {
		names[i] = "public/bench" + strconv.Itoa(i)
	}
	// Fresh scene names for every step, so that no step sees another's
	// stragglers.
	stamp := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	for i := range names {
		names[i] += "x" + stamp
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	fleet, err := bots.StartFleet(sctx, bots.FleetConfig{
		Transport: tr, Users: users, Scenes: names, Rate: b.cfg.Rate,
		Behaviour: bots.Spec{Name: b.cfg.Behaviour, Trace: b.trace}, Seed: uint64(users), Prefix: "u" + stamp + "n", Log: b.log,
	})
	if err != nil {
		row.Error = err.Error()
		b.log.Warn("step failed", "system", sys.Name, "users", users, "err", err)
		return row
	}
	defer func() {
		fleet.Close()
		time.Sleep(300 * time.Millisecond) // let the broker clean up
	}()
	row.JoinMeanMs, row.JoinP99ms = joinStats(fleet.JoinTimes)
	select {
	case <-time.After(b.cfg.Warmup):
	case <-ctx.Done():
		return row
	}
	// The window opens a little in the future, so that every sender sees
	// it open before it stamps a message inside it.
	from := time.Now().Add(100 * time.Millisecond)
	fleet.Accounts().OpenWindow(from, from.Add(b.cfg.Step))
	time.Sleep(time.Until(from))
	c0, err0 := sampleCPU(sys.PID())
	select {
	case <-time.After(b.cfg.Step):
	case <-ctx.Done():
		return row
	}
	c1, err1 := sampleCPU(sys.PID())
	rss, _, _ := procMem(strconv.Itoa(sys.PID()))
	select {
	case <-time.After(b.cfg.Drain):
	case <-ctx.Done():
		return row
	}
	r := fleet.Collect(b.cfg.Step)
	if err := errors.Join(err0, err1); err != nil {
		row.Error = err.Error()
	}
	wall := c1.at.Sub(c0.at).Seconds()
	row.Seconds = b.cfg.Step.Seconds()
	row.Sent, row.Missed, row.Expected, row.Delivered = r.Sent, r.Missed, r.Expected, r.Delivered
	row.Ratio = r.Ratio()
	row.PerSec = r.PerSecond()
	row.BytesPerS = float64(r.Bytes) / r.Duration.Seconds()
	row.P50ms = ms(bots.Quantile(r.Latency, 50))
	row.P90ms = ms(bots.Quantile(r.Latency, 90))
	row.P99ms = ms(bots.Quantile(r.Latency, 99))
	row.MaxMs = float64(r.Latency.Max()) / 1000
	row.Lost = r.Disconnected
	row.BrokerCPU = (c1.broker - c0.broker).Seconds() / wall
	row.GenCPU = (c1.self - c0.self).Seconds() / wall
	row.OtherCPU = math.Max(0, (c1.machine-c0.machine).Seconds()/wall-row.BrokerCPU-row.GenCPU)
	row.StealCPU = (c1.steal - c0.steal).Seconds() / wall
	row.BrokerRSS = float64(rss) / (1 << 20)
	if c0.brokerWrites >= 0 && c1.brokerWrites >= 0 {
		row.BrokerWrites = float64(c1.brokerWrites-c0.brokerWrites) / wall
		row.BrokerReads = float64(c1.brokerReads-c0.brokerReads) / wall
	}
	// Deliveries in the window over the CPU used in it (deliveries made
	// during the drain are few: the drain only waits for stragglers).
	if cpu := (c1.broker - c0.broker).Seconds(); cpu > 0 {
		row.PerCPUSec = float64(r.Delivered) / cpu
	}
	if r.Delivered > 0 {
		row.GenUsPer = (c1.self - c0.self).Seconds() * 1e6 / float64(r.Delivered)
		row.BrokerUs = (c1.broker - c0.broker).Seconds() * 1e6 / float64(r.Delivered)
	}
	if !sys.Alive() {
		row.Error = "broker exited during the step"
	}
	b.log.Info("step done", "system", sys.Name, "users", users, "scenes", scenes, "per_s", int(row.PerSec),
		"ratio", fmt.Sprintf("%.4f", row.Ratio), "p50_ms", row.P50ms, "p99_ms", row.P99ms,
		"broker_cpu", fmt.Sprintf("%.2f", row.BrokerCPU), "gen_cpu", fmt.Sprintf("%.2f", row.GenCPU), "other_cpu", fmt.Sprintf("%.2f", row.OtherCPU), "steal", fmt.Sprintf("%.2f", row.StealCPU))
	return row
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// joinStats returns the mean and the p99 (nearest rank: the
// ceil(0.99 n)-th smallest) of the bots' join times, in ms; 0 for none.
func joinStats(times []time.Duration) (meanMs, p99Ms float64) {
	if len(times) == 0 {
		return 0, 0
	}
	joins := slices.Clone(times)
	slices.Sort(joins)
	var sum time.Duration
	for _, d := range joins {
		sum += d
	}
	return ms(sum / time.Duration(len(joins))), ms(joins[(len(joins)*99+99)/100-1])
}

// efficiency measures every system at cfg.EfficiencyUsers in one scene,
// alternating the order.
func (b *runner) efficiency(ctx context.Context) error {
	order := b.available()
	for rep := 0; rep < max(1, b.cfg.EfficiencyRepeat); rep++ {
		for _, name := range order {
			sys, err := b.system(ctx, name)
			if err != nil {
				return err
			}
			row := b.step(ctx, "efficiency", sys, b.cfg.EfficiencyUsers, 1, sys.Transport(b.cfg.Size), "bots")
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b.res.Rows = append(b.res.Rows, row)
		}
		slices.Reverse(order)
	}
	return nil
}

// security compares xrealm with and without authentication, side by side,
// alternating which runs first. Each repetition starts both servers afresh
// with empty data directories, so that both have the same history: a
// system runs on from one experiment to the next, and the secured server
// would otherwise have carried the ramp's and the isolation's hundreds of
// users (and their backlogs) while the insecure one was new, and any
// difference that made would be charged to the ACLs.
func (b *runner) security(ctx context.Context) error {
	pair := []string{"xrealm", "xrealm-insecure"}
	for rep := 0; rep < max(1, b.cfg.SecurityRepeat); rep++ {
		for _, name := range pair {
			if err := b.fresh(name); err != nil {
				return err
			}
		}
		for _, n := range b.cfg.SecurityUsers {
			for _, name := range pair {
				sys, err := b.system(ctx, name)
				if err != nil {
					return err
				}
				row := b.step(ctx, "security", sys, n, 1, sys.Transport(b.cfg.Size), "bots")
				if ctx.Err() != nil {
					return ctx.Err()
				}
				b.res.Rows = append(b.res.Rows, row)
			}
			slices.Reverse(pair)
		}
	}
	return nil
}

// generator compares the CPU the bots' lean client spends per delivery
// with a generator built on the Eclipse Paho Go client, against the same
// broker and load.
func (b *runner) generator(ctx context.Context) error {
	name := "mosquitto"
	if b.cfg.Mosquitto == "" {
		name = "xrealm-insecure"
	}
	sys, err := b.system(ctx, name)
	if err != nil {
		return err
	}
	for _, gen := range []string{"bots", "paho"} {
		var tr bots.Transport = sys.Transport(b.cfg.Size)
		if gen == "paho" {
			tr = &pahoTransport{addr: sys.MQTTAddr, size: b.cfg.Size}
		}
		row := b.step(ctx, "generator", sys, b.cfg.GeneratorUsers, 1, tr, gen)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.res.Rows = append(b.res.Rows, row)
	}
	return nil
}

// LookMosquitto returns the mosquitto executable, or "" if there is none.
func LookMosquitto() string {
	for _, p := range []string{"mosquitto", "/usr/sbin/mosquitto"} {
		if bin, err := exec.LookPath(p); err == nil {
			return bin
		}
	}
	return ""
}
