package benchsfu_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	benchsfu "github.com/xrealm/xrealm/bench/sfu"
	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/internal/cli"
)

// childEnv makes the test binary the xrealm executable the bench runs in
// its namespaces (bus, SFUs, bots).
const childEnv = "XREALM_BENCH_SFU_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// TestInterruptRecordsNoCutRun interrupts a real run (one central SFU,
// two users, in the bench's namespaces) once its bus has started: Run
// returns the interruption, the cut run is not appended to the results
// (it was, with "context canceled" among its errors, and showed in the
// tables), and no namespace or child process is left.
func TestInterruptRecordsNoCutRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the bench's namespaces and processes")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the bench needs root (network namespaces, veth, tc)")
	}
	for _, tool := range []string{"ip", "tc", "draco_encoder"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (scripts/setup-sfu.sh)", tool)
		}
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), benchsfu.Prefix+"-") {
		t.Skip("skipping: another run of the bench holds its namespaces")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(childEnv, "1")
	dir := t.TempDir()
	var logged syncBuffer
	cfg := benchsfu.Config{Exe: self, Setups: []string{"central"}, Users: []int{2}, Scenarios: []int{1},
		PaperLinkRate: 1e9, CentralDelays: [4]time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond},
		DirectDelay: time.Millisecond, Queue: 200 * time.Millisecond, Warmup: 30 * time.Second, Measure: 30 * time.Second,
		Estimator: "gcc", RelaySlots: 64, RTCPInterval: 5 * time.Second, Clip: bots.ClipConfig{Points: 200, Frames: 2, FPS: 2, Seed: 1},
		ClipPath: filepath.Join(dir, "clip.gob"), Out: filepath.Join(dir, "results.jsonl"), LogDir: filepath.Join(dir, "logs"),
		Log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Interrupt once the run's bus has started (its log file appears).
	go func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(filepath.Join(cfg.LogDir, "central-s1-n2", "bus.log")); err == nil {
				time.Sleep(500 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	rs, err := benchsfu.Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want the interruption", err)
	}
	if len(rs) != 0 {
		t.Errorf("the cut run was returned: %+v", rs)
	}
	if b, err := os.ReadFile(cfg.Out); len(b) != 0 {
		t.Errorf("the cut run was appended to the results: %q (%v)", b, err)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), benchsfu.Prefix+"-") {
		t.Errorf("namespaces left behind: %s", out)
	}
	if c := children(); len(c) > 0 {
		t.Errorf("processes left running: %q", c)
	}
	if !strings.Contains(logged.String(), `msg=starting run="1 of 1" setup=central scenario=1 users=2`) {
		t.Errorf("the run's start did not log its progress:\n%s", logged.String())
	}
}

// syncBuffer is a bytes.Buffer that the bench may log to from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// children returns the processes whose parent is this one.
func children() []string {
	ents, _ := os.ReadDir("/proc")
	me := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == me && f[0] != "Z" {
			out = append(out, s[:i+1])
		}
	}
	return out
}
