package cpuload

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTimes(t *testing.T) {
	// T is the times of counters in ticks.
	T := func(busy, idle, steal float64) Times {
		return Times{Busy: busy / ticksPerSecond, Idle: idle / ticksPerSecond, Steal: steal / ticksPerSecond}
	}
	for _, tc := range []struct {
		line string
		want Times
		err  string
	}{
		{line: "cpu  100 5 50 1000 20 3 7 15 0 0\n", want: T(100+5+50+3+7, 1000+20, 15)},
		{line: "cpu 1 2 3 4\n", want: T(6, 4, 0)}, // old kernels: four counters
		// guest time is in user already
		{line: "cpu  1 2 3 4 5 6 7 8 900 900\n", want: T(1+2+3+6+7, 9, 8)},
		// the cases of the scene-bus benchmark's parser, which this replaced
		{line: "cpu  100 5 50 1000 20 3 2 40 7 0", want: T(160, 1020, 40)},
		{line: "cpu  1 0 1 9 0 0 0", want: T(2, 9, 0)},
		{line: "cpu0 1 0 1 9 0 0 0 0", err: "not the aggregate"},
		{line: "cpu 1 2", err: "not the aggregate"},
		{line: "cpu  1 x 1 9 0 0 0 0", err: "counter 2"},
		{line: "cpu0 1 2 3 4 5\n", err: "not the aggregate"},
		{line: "intr 1 2 3 4 5\n", err: "not the aggregate"},
		{line: "cpu -1 2 3 4 5\n", err: "counter 1"},
		{line: "", err: "not the aggregate"},
	} {
		got, err := ParseTimes([]byte(tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTimes(%q): error %v, want one saying %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTimes(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
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
	if b, ok := g.Busy(); !ok || math.Abs(b-0.8) > 1e-9 {
		t.Fatalf("Busy = %v, %v; want 0.8, true", b, ok)
	}
	if _, ok := g.Busy(); ok {
		t.Fatal("no time passed: ok, want not ok")
	}
	write("cpu 170 0 120 850 0 0 0 10\n") // 10 user + 10 steal busy, 30 idle
	if b, ok := g.Busy(); !ok || math.Abs(b-0.4) > 1e-9 {
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
	if _, statErr := os.Stat(statPath); statErr != nil {
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

func FuzzParseTimes(f *testing.F) {
	f.Add([]byte("cpu  100 5 50 1000 20 3 7 15 0 0\n"))
	f.Add([]byte("cpu 1 2 3 4\n"))
	f.Fuzz(func(t *testing.T, line []byte) {
		got, err := ParseTimes(line)
		if err != nil && got != (Times{}) {
			t.Fatalf("error %v with times %+v", err, got)
		}
		if !(got.Busy >= 0 && got.Idle >= 0 && got.Steal >= 0) {
			t.Fatalf("negative times %+v from %q", got, line)
		}
	})
}
