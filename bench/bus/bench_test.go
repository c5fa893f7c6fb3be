package benchbus_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	benchbus "github.com/xrealm/xrealm/bench/bus"
	"github.com/xrealm/xrealm/internal/cli"
)

// The test binary doubles as the xrealm executable the bench starts as a
// child: with this variable set it runs the xrealm command line.
const childEnv = "XREALM_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stderr))
	}
	if mode := os.Getenv(standInEnv); mode != "" {
		standIn(mode)
	}
	os.Exit(m.Run())
}

// TestSmokeBench runs every experiment for a few seconds with a few users
// against a real xrealm child process and, when installed, a real
// Mosquitto, and checks that the results are written. It asserts nothing
// about timing.
func TestSmokeBench(t *testing.T) {
	if testing.Short() {
		t.Skip("smoke bench skipped in -short mode")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := benchbus.Defaults()
	cfg.Out = t.TempDir()
	cfg.XrealmCmd = []string{self}
	cfg.XrealmEnv = []string{childEnv + "=1"}
	cfg.Mosquitto = benchbus.LookMosquitto()
	if cfg.Mosquitto == "" {
		t.Log("mosquitto is not installed (apt-get install mosquitto, or scripts/setup.sh --test): benchmarking xrealm alone")
	}
	cfg.Python = "" // the arena-py agent needs ports 443/8883; not in the unit suite
	cfg.Warmup, cfg.Step, cfg.Drain = 200*time.Millisecond, 500*time.Millisecond, 200*time.Millisecond
	cfg.Ramp = []int{3, 6}
	cfg.IsolationScene, cfg.IsolationRamp = []int{1, 2}, []int{4}
	cfg.SecurityUsers, cfg.SecurityRepeat = []int{4}, 1
	cfg.EfficiencyUsers, cfg.EfficiencyRepeat = 4, 1
	cfg.InteractionBG, cfg.Clicks = []int{0, 3}, 3
	cfg.GeneratorUsers = 3
	// No timing limits: a slow step on a loaded machine must neither stop
	// a ramp nor be measured again.
	cfg.MaxP99, cfg.MinRatio = time.Hour, 0
	cfg.Command = "go test ./bench/bus -run TestSmokeBench"
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := benchbus.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The test binary has no VCS stamp: the commit is the working
	// directory's, marked as such.
	if _, err := os.Stat("../../.git"); err == nil && !strings.Contains(res.Machine.Commit, "the working directory's") {
		t.Errorf("machine commit %q: want the working directory's commit, marked as such", res.Machine.Commit)
	}
	systems := 1
	if cfg.Mosquitto != "" {
		systems = 2
	}
	count := map[string]int{}
	for _, r := range res.Rows {
		count[r.Experiment]++
		if r.Error != "" {
			t.Errorf("%s %s %d users: %s", r.Experiment, r.System, r.Users, r.Error)
		}
		if r.Delivered == 0 || r.Expected == 0 {
			t.Errorf("%s %s %d users: nothing delivered (%d of %d)", r.Experiment, r.System, r.Users, r.Delivered, r.Expected)
		}
	}
	for exp, want := range map[string]int{"ramp": 2 * systems, "efficiency": systems, "isolation": 2 * systems, "security": 2, "generator": 2} {
		if count[exp] != want {
			t.Errorf("%s: %d rows, want %d", exp, count[exp], want)
		}
	}
	if len(res.Interaction) != 2*systems {
		t.Errorf("%d interaction runs, want %d", len(res.Interaction), 2*systems)
	}
	for _, it := range res.Interaction {
		if it.Error != "" || it.Answered == 0 {
			t.Errorf("interaction %s/%s with %d background users: %d answered, error %q", it.System, it.Agent, it.Background, it.Answered, it.Error)
		}
		if it.Agent == "go (bots client)" && (it.EchoP50ms <= 0 || it.ToAgentP50ms <= 0 || it.FromAgentP50ms <= 0) {
			t.Errorf("interaction %s with %d background users: hops not measured (echo %v, to agent %v, from agent %v)", it.System, it.Background, it.EchoP50ms, it.ToAgentP50ms, it.FromAgentP50ms)
		}
	}

	md, err := os.ReadFile(filepath.Join(cfg.Out, "RESULTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Command", "## Machine", "## Targets (issue 3)",
		"## Broker load: N users in one scene", "| users | system | deliveries/s | ratio | p50 ms",
		"## Efficiency: every system at 4 users", "## Scene isolation", "## Security overhead", "## Interaction latency", "## The generator",
		"![ramp-latency.svg](ramp-latency.svg)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("RESULTS.md lacks %q", want)
		}
	}
	for _, f := range []string{"results.json", "ramp-latency.svg", "ramp-deliveries.svg", "ramp-cpu.svg", "isolation-latency-xrealm.svg"} {
		b, err := os.ReadFile(filepath.Join(cfg.Out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
		if strings.HasSuffix(f, ".svg") && !strings.Contains(string(b), "<polyline") {
			t.Errorf("%s has no data line", f)
		}
	}

	// The results regenerate from results.json alone.
	back, err := benchbus.ReadResults(filepath.Join(cfg.Out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != len(res.Rows) {
		t.Errorf("results.json holds %d rows, want %d", len(back.Rows), len(res.Rows))
	}
}
