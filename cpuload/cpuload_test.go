package cpuload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCPULine(t *testing.T) {
	for _, tc := range []struct {
		line       string
		busy, idle uint64
		err        string
	}{
		{line: "cpu  100 5 50 1000 20 3 7 15 0 0\n", busy: 100 + 5 + 50 + 3 + 7 + 15, idle: 1000 + 20},
		{line: "cpu 1 2 3 4\n", busy: 6, idle: 4},                                      // old kernels: four counters
		{line: "cpu  1 2 3 4 5 6 7 8 900 900\n", busy: 1 + 2 + 3 + 6 + 7 + 8, idle: 9}, // guest time is in user already
		{line: "cpu0 1 2 3 4 5\n", err: "not the aggregate"},
		{line: "intr 1 2 3 4 5\n", err: "not the aggregate"},
		{line: "cpu 1 2\n", err: "not the aggregate"},
		{line: "cpu 1 x 3 4 5\n", err: "counter 2"},
		{line: "cpu -1 2 3 4 5\n", err: "counter 1"},
		{line: "", err: "not the aggregate"},
	} {
		busy, idle, err := parseCPULine([]byte(tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseCPULine(%q): error %v, want one saying %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || busy != tc.busy || idle != tc.idle {
			t.Errorf("parseCPULine(%q) = %d, %d, %v; want %d, %d", tc.line, busy, idle, err, tc.busy, tc.idle)
		}
	}
}

func TestGaugeBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stat")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &Gauge{path: path}
	write("cpu 100 0 100 800 0 0 0 0\ncpu0 1 2 3 4\n")
	if _, ok := g.Busy(); ok {
		t.Fatal("first reading: ok, want not ok (no interval yet)")
	}
	write("cpu 160 0 120 820 0 0 0 0\n") // 80 busy, 20 idle
	if b, ok := g.Busy(); !ok || b != 0.8 {
		t.Fatalf("Busy = %v, %v; want 0.8, true", b, ok)
	}
	if _, ok := g.Busy(); ok {
		t.Fatal("no time passed: ok, want not ok")
	}
	write("cpu 170 0 120 850 0 0 0 10\n") // 10 user + 10 steal busy, 30 idle
	if b, ok := g.Busy(); !ok || b != 0.4 {
		t.Fatalf("Busy = %v, %v; want 0.4, true", b, ok)
	}
	write("cpu 10 0 0 10 0 0 0 0\n") // counters went back (another file, a reset)
	if _, ok := g.Busy(); ok {
		t.Fatal("counters went back: ok, want not ok")
	}
	write("garbage\n")
	if _, ok := g.Busy(); ok {
		t.Fatal("unreadable: ok, want not ok")
	}
	os.Remove(path)
	if _, ok := g.Busy(); ok {
		t.Fatal("missing file: ok, want not ok")
	}
}

func TestMachine(t *testing.T) {
	g, err := Machine()
	if _, statErr := os.Stat("/proc/stat"); statErr != nil {
		if err == nil {
			t.Fatal("Machine() without /proc/stat: no error")
		}
		t.Skip("no /proc/stat here")
	}
	if err != nil {
		t.Fatal(err)
	}
	g.Busy()
	// Spin a little so that some CPU time passes.
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i
	}
	_ = x
	if b, ok := g.Busy(); ok && (b < 0 || b > 1) {
		t.Fatalf("Busy = %v, outside [0, 1]", b)
	}
}

func FuzzParseCPULine(f *testing.F) {
	f.Add([]byte("cpu  100 5 50 1000 20 3 7 15 0 0\n"))
	f.Add([]byte("cpu 1 2 3 4\n"))
	f.Fuzz(func(t *testing.T, line []byte) {
		busy, idle, err := parseCPULine(line)
		if err != nil && (busy != 0 || idle != 0) {
			t.Fatalf("error %v with counters %d, %d", err, busy, idle)
		}
	})
}
