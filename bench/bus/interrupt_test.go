package benchbus_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	benchbus "github.com/xrealm/xrealm/bench/bus"
)

// messages is a slog handler that records each message and calls on for
// it: the tests see what a run logged, and act at a point of the run.
type messages struct {
	mu   sync.Mutex
	msgs []string
	on   func(msg string)
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	m.msgs = append(m.msgs, r.Message)
	m.mu.Unlock()
	if m.on != nil {
		m.on(r.Message)
	}
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }

func (m *messages) has(msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.msgs {
		if s == msg {
			return true
		}
	}
	return false
}

// tinyConfig is a run of the ramp with a real xrealm child (the test
// binary) and a few users.
func tinyConfig(t *testing.T, log slog.Handler) benchbus.Config {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := benchbus.Defaults()
	cfg.Out = t.TempDir()
	cfg.XrealmCmd = []string{self}
	cfg.XrealmEnv = []string{childEnv + "=1"}
	cfg.Mosquitto, cfg.Python = "", ""
	cfg.Systems = []string{"xrealm"}
	cfg.Experiments = []string{"ramp"}
	cfg.Warmup, cfg.Step, cfg.Drain = 200*time.Millisecond, 500*time.Millisecond, 100*time.Millisecond
	cfg.Ramp = []int{2, 3, 4}
	cfg.MaxP99, cfg.MinRatio = time.Hour, 0
	cfg.Command = "go test ./bench/bus"
	cfg.Log = slog.New(log)
	return cfg
}

// children returns the processes whose parent is this one.
func children(t *testing.T) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	me := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == me {
			out = append(out, e.Name()+" "+s[:strings.LastIndexByte(s, ')')+1])
		}
	}
	return out
}

// TestInterruptKeepsSteps interrupts a run in its second step, as Ctrl-C
// does: the step measured is written (RESULTS.md and results.json,
// with a note that the run was interrupted; it was lost with the rest of
// its experiment), the error is the interruption, and the xrealm server
// the run started is gone.
func TestInterruptKeepsSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := 0
	log := &messages{on: func(msg string) {
		if msg == "step" {
			if steps++; steps == 2 {
				cancel() // in the second step's warm-up
			}
		}
	}}
	cfg := tinyConfig(t, log)
	_, err := benchbus.Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want the interruption", err)
	}
	r, err := benchbus.ReadResults(filepath.Join(cfg.Out, "results.json"))
	if err != nil {
		t.Fatalf("the measured step was not written: %v", err)
	}
	if len(r.Rows) != 1 || r.Rows[0].Users != 2 {
		t.Errorf("results hold %d rows (%+v), want the first step's", len(r.Rows), r.Rows)
	}
	md, err := os.ReadFile(filepath.Join(cfg.Out, "RESULTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "was interrupted during the experiment ramp") {
		t.Errorf("RESULTS.md does not say the run was interrupted:\n%s", md)
	}
	if c := children(t); len(c) > 0 {
		t.Errorf("processes left running: %q", c)
	}
}

// TestUnwritableOutFailsFirst checks that an output directory that cannot
// be written fails the run before any server starts (it failed when the
// first experiment's results were written, minutes into the run).
func TestUnwritableOutFailsFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	readOnly := t.TempDir()
	if err := os.Chmod(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join(file, "out")}
	if os.Geteuid() == 0 {
		dirs = append(dirs, "/proc") // root writes any mode-0500 directory
	} else {
		dirs = append(dirs, readOnly)
	}
	for _, dir := range dirs {
		log := &messages{}
		cfg := tinyConfig(t, log)
		cfg.Out = dir
		_, err := benchbus.Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "--out "+dir) {
			t.Errorf("out %s: Run: %v, want an error naming --out %s", dir, err, dir)
		}
		if log.has("step") {
			t.Errorf("out %s: a step ran before the error", dir)
		}
	}
}
