package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	benchbus "github.com/xrealm/xrealm/bench/bus"
)

// runBenchBus implements `xrealm bench bus`: the scene-bus experiments,
// xrealm side by side with Mosquitto.
func runBenchBus(ctx context.Context, args []string) error {
	d := benchbus.Defaults()
	fs := flag.NewFlagSet("bench bus", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	out := fs.String("out", d.Out, "directory for RESULTS.md, results.json and the plots; the default is the committed results (relative to the repository root), which a run replaces")
	exps := fs.String("experiments", strings.Join(d.Experiments, ","), "comma-separated: ramp, efficiency, isolation, security, interaction, generator")
	systems := fs.String("systems", strings.Join(d.Systems, ","), "systems for the ramp, efficiency and isolation: xrealm, mosquitto, xrealm-insecure (no tokens or ACLs), and xrealm variants as xrealm:SERVE-FLAGS (e.g. xrealm:--write-linger=2ms), other builds as xrealm@EXECUTABLE")
	xbin := fs.String("xrealm", "", "xrealm executable to benchmark (default: this one)")
	mosq := fs.String("mosquitto", benchbus.LookMosquitto(), "mosquitto executable (\"\": Mosquitto not run)")
	python := fs.String("python", defaultPython(), "python with arena-py for the arena-py agent (\"\": not run)")
	fs.Float64Var(&d.Rate, "rate", d.Rate, "poses per second per user")
	fs.IntVar(&d.Size, "size", d.Size, "pose size in bytes")
	fs.StringVar(&d.Behaviour, "behaviour", d.Behaviour, "static, randomwalk, boids or replay (with --trace)")
	fs.StringVar(&d.Trace, "trace", "", "pose trace for --behaviour replay (xrealm bots record makes one)")
	fs.DurationVar(&d.Warmup, "warmup", d.Warmup, "warm-up before each measurement")
	fs.DurationVar(&d.Step, "step", d.Step, "measurement window of each step")
	fs.DurationVar(&d.Drain, "drain", d.Drain, "wait after each window for messages in flight")
	ramp := fs.String("ramp", formatInts(d.Ramp), "users per ramp step: from:step:to, or a comma-separated list")
	isoScenes := fs.String("isolation-scenes", formatInts(d.IsolationScene), "numbers of scenes for the isolation experiment")
	isoRamp := fs.String("isolation-ramp", formatInts(d.IsolationRamp), "users per isolation step: from:step:to or a list")
	secUsers := fs.String("security-users", formatInts(d.SecurityUsers), "users per security step")
	fs.IntVar(&d.SecurityRepeat, "security-repeat", d.SecurityRepeat, "repetitions of the security steps")
	fs.IntVar(&d.EfficiencyUsers, "efficiency-users", d.EfficiencyUsers, "users at which every system is measured for the efficiency and latency targets")
	fs.IntVar(&d.EfficiencyRepeat, "efficiency-repeat", d.EfficiencyRepeat, "repetitions of the efficiency step")
	bg := fs.String("interaction-bg", formatInts(d.InteractionBG), "background users for the interaction experiment")
	fs.IntVar(&d.Clicks, "clicks", d.Clicks, "clicks per interaction run")
	fs.IntVar(&d.GeneratorUsers, "generator-users", d.GeneratorUsers, "users for the generator comparison")
	fs.DurationVar(&d.MaxP99, "max-p99", d.MaxP99, "a ramp stops at the first step with a higher p99")
	fs.Float64Var(&d.MinRatio, "min-ratio", d.MinRatio, "a ramp stops at the first step with a lower delivery ratio")
	xenv := fs.String("xrealm-env", "", "extra environment for the xrealm servers, comma-separated KEY=VALUE (e.g. GOMAXPROCS=1)")
	xflags := fs.String("xrealm-flags", "", "extra `flags` for xrealm serve, space-separated (e.g. --write-linger=1ms)")
	summary := fs.Bool("summary", false, "only regenerate RESULTS.md and the plots from --out/results.json")
	profile := fs.String("profile", "", "instead of the benchmark: run xrealm in this process under the CPU profiler with --profile-users bots (a child process) and write the profile here")
	profUsers := fs.Int("profile-users", 120, "users for --profile")
	profScenes := fs.Int("profile-scenes", 1, "scenes for --profile")
	profDur := fs.Duration("profile-duration", 20*time.Second, "profiled time for --profile")
	profInsecure := fs.Bool("profile-insecure", false, "profile xrealm --insecure")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *summary {
		r, err := benchbus.ReadResults(filepath.Join(*out, "results.json"))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "regenerating RESULTS.md and the plots in %s from its results.json\n", *out)
		return benchbus.Write(*out, r)
	}
	var err error
	if *profile != "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		log, err := newLogger("info", "text")
		if err != nil {
			return err
		}
		pc := benchbus.ProfileConfig{BotsCmd: []string{self}, Users: *profUsers, Scenes: *profScenes, Rate: d.Rate,
			Size: d.Size, Duration: *profDur, Insecure: *profInsecure, Out: *profile, Log: log}
		if err := pc.Check(); err != nil {
			return usageErr(err)
		}
		return benchbus.Profile(ctx, pc)
	}
	d.Out, d.Mosquitto, d.Python = *out, *mosq, *python
	d.Experiments, d.Systems = splitList(*exps), splitList(*systems)
	if d.Ramp, err = parseInts("--ramp", *ramp); err != nil {
		return usageErr(err)
	}
	if d.IsolationScene, err = parseInts("--isolation-scenes", *isoScenes); err != nil {
		return usageErr(err)
	}
	if d.IsolationRamp, err = parseInts("--isolation-ramp", *isoRamp); err != nil {
		return usageErr(err)
	}
	if d.SecurityUsers, err = parseInts("--security-users", *secUsers); err != nil {
		return usageErr(err)
	}
	if d.InteractionBG, err = parseInts("--interaction-bg", *bg); err != nil {
		return usageErr(err)
	}
	if *xbin == "" {
		if *xbin, err = os.Executable(); err != nil {
			return fmt.Errorf("find the xrealm executable: %w", err)
		}
	}
	d.XrealmCmd = []string{*xbin}
	d.XrealmEnv = splitList(*xenv)
	for _, kv := range d.XrealmEnv {
		// Without '=' the entry would be passed on to the servers,
		// which would ignore it.
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return usagef("--xrealm-env %q: %q is not KEY=VALUE (e.g. GOMAXPROCS=1)", *xenv, kv)
		}
	}
	d.XrealmFlags = strings.Fields(*xflags)
	if d.Mosquitto == "" {
		fmt.Fprintln(os.Stderr, "mosquitto not found: the systems are measured without it (apt-get install mosquitto, or scripts/setup.sh --test)")
	}
	if d.Python != "" && slices.Contains(d.Experiments, "interaction") {
		if err := checkArenaPy(d.Python); err != nil {
			return err
		}
	}
	d.Command = strings.TrimSpace("xrealm bench bus " + shellJoin(withoutOut(args)))
	if err := d.Check(); err != nil {
		return usageErr(err)
	}
	abs, _ := filepath.Abs(d.Out)
	_, err = os.Stat(filepath.Join(d.Out, "RESULTS.md"))
	committed := filepath.Clean(d.Out) == filepath.Clean(benchbus.Defaults().Out) && err == nil
	fmt.Fprint(os.Stderr, busOutNotice(d.Out, abs, committed, d.Partial()))
	log, err := newLogger("info", "text")
	if err != nil {
		return err
	}
	d.Log = log
	start := time.Now()
	// Stopping takes seconds (the step's bots, then each server): say
	// at once that the interruption was heard.
	defer context.AfterFunc(ctx, func() {
		fmt.Fprintln(os.Stderr, "interrupted; stopping the servers it started and writing what was measured ...")
	})()
	if res, err := benchbus.Run(ctx, d); err != nil {
		return busRunError(err, ctx.Err() != nil, res, d.Out)
	}
	fmt.Fprintf(os.Stderr, "results in %s (%s)\n", filepath.Join(d.Out, "RESULTS.md"), time.Since(start).Round(time.Second))
	return nil
}

// busRunError is the error of a bench bus run that stopped early
// (interrupted: by Ctrl-C or SIGTERM), saying what it left in out: the
// steps measured until then, or nothing.
func busRunError(err error, interrupted bool, res *benchbus.Results, out string) error {
	n := 0
	if res != nil {
		n = len(res.Rows) + len(res.Interaction)
	}
	what := "nothing was measured, and nothing written"
	if n > 0 {
		what = fmt.Sprintf("the %d measurements made until then are in %s (RESULTS.md, results.json and the plots)", n, out)
	}
	if interrupted {
		return fmt.Errorf("interrupted: %s", what)
	}
	return fmt.Errorf("%w\n(%s)", err, what)
}

// busOutNotice is what bench bus prints at its start about where it
// writes (out, and its absolute path abs): a line, and a loud warning when
// a run that is not the full benchmark (partial says how) is about to
// replace the committed results (committed: out is the default, bench/bus,
// and holds a RESULTS.md).
func busOutNotice(out, abs string, committed bool, partial []string) string {
	where := out
	if abs != "" && abs != out {
		where += " (" + abs + ")"
	}
	if !committed {
		return fmt.Sprintf("writing results to %s\n", where)
	}
	msg := fmt.Sprintf("writing results to %s: the committed results, which this run replaces; --out DIR writes elsewhere\n", where)
	if len(partial) == 0 {
		return msg
	}
	return msg + fmt.Sprintf("\nWARNING: this run is not the full benchmark (%s), yet it will REPLACE the committed results in %s\n"+
		"(RESULTS.md, results.json and the plots). For a trial, stop now (Ctrl-C) and pass --out DIR; "+
		"if they are already replaced, git checkout -- %s restores them.\n\n",
		strings.Join(partial, "; "), out, out)
}

// checkArenaPy returns an error unless python can import arena-py: a
// Python without it ran the whole benchmark, recorded a traceback as the
// arena-py version and the agent's runs as errors.
func checkArenaPy(python string) error {
	out, err := exec.Command(python, "-c", "import arena").CombinedOutput()
	if err == nil {
		return nil
	}
	why := err.Error()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); lines[len(lines)-1] != "" {
		why = lines[len(lines)-1]
	}
	return fmt.Errorf("--python %s cannot import arena-py (%s): scripts/setup.sh --test installs it in .venv (pip install -r tests/requirements.txt), or --python '' leaves the arena-py agent out", python, why)
}

func defaultPython() string {
	for _, p := range []string{".venv/bin/python"} {
		if _, err := os.Stat(p); err == nil {
			if exec.Command(p, "-c", "import arena").Run() == nil {
				abs, _ := filepath.Abs(p)
				return abs
			}
		}
	}
	return ""
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// maxRampSteps bounds the values of a from:step:to list.
const maxRampSteps = 10000

// parseInts parses "a,b,c" or "from:step:to" of non-negative numbers.
// formatInts writes v as parseInts reads it: from:step:to when v has more
// than two values a constant step apart, a comma-separated list otherwise.
func formatInts(v []int) string {
	if len(v) > 2 {
		step := v[1] - v[0]
		even := step > 0
		for i := 2; i < len(v) && even; i++ {
			even = v[i]-v[i-1] == step
		}
		if even {
			return fmt.Sprintf("%d:%d:%d", v[0], step, v[len(v)-1])
		}
	}
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(flagName, s string) ([]int, error) {
	if f := strings.Split(s, ":"); len(f) == 3 {
		var v [3]int
		for i, x := range f {
			n, err := strconv.Atoi(strings.TrimSpace(x))
			if err != nil {
				return nil, fmt.Errorf("%s %q: %q is not a number", flagName, s, x)
			}
			v[i] = n
		}
		if v[0] < 0 || v[1] <= 0 || v[0] > v[2] {
			return nil, fmt.Errorf("%s %q: want from:step:to with from ≥ 0, step > 0 and from ≤ to", flagName, s)
		}
		// Counted, not stepped to the end: a step past the largest int
		// wrapped around, and the list grew until memory ran out.
		steps := (v[2] - v[0]) / v[1] // one less than the values
		if steps >= maxRampSteps {
			return nil, fmt.Errorf("%s %q: more than %d values", flagName, s, maxRampSteps)
		}
		out := make([]int, steps+1)
		for i := range out {
			out[i] = v[0] + i*v[1]
		}
		return out, nil
	}
	if strings.Contains(s, ":") {
		return nil, fmt.Errorf("%s %q: want from:step:to (three numbers) or a comma-separated list", flagName, s)
	}
	var out []int
	for _, x := range splitList(s) {
		n, err := strconv.Atoi(x)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s %q: %q is not a non-negative number (want from:step:to or a comma-separated list)", flagName, s, x)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New(flagName + " is empty")
	}
	return out, nil
}

// withoutOut returns args without the --out flag and its value: where the
// results are written is not part of the experiment, and the command
// recorded with results that were copied into bench/bus must regenerate
// them there.
func withoutOut(args []string) []string {
	var kept []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			return append(kept, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if strings.HasPrefix(args[i], "-") && name == "out" {
			if !hasValue {
				i++ // the value is the next argument
			}
			continue
		}
		kept = append(kept, args[i])
	}
	return kept
}

// shellJoin joins args into a command line a POSIX shell reads back as
// args: the command recorded with results must rerun as it ran (an empty
// --python "" or a path with a space would be lost if joined plainly).
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote quotes a for a POSIX shell, only when it needs quoting.
func shellQuote(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/@%+") == "" {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}
