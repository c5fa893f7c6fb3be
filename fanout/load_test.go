package fanout

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		line        string
		busy, total uint64
		err         string
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{line: "cpu  100 5 50 800 20 3 2 1 7 0\n", busy: 161, total: 981},
		{line: "cpu 10 0 10 80\n", busy: 20, total: 100},
		{line: "cpu0 100 5 50 800 20 3 2 1\n", err: "aggregate cpu line"},
		{line: "cpu 1 2\n", err: "aggregate cpu line"},
		{line: "intr 1 2 3 4 5\n", err: "aggregate cpu line"},
		{line: "cpu 1 2 x 4 5\n", err: "field 3"},
		{line: "cpu 1 2 3 -4 5\n", err: "field 4"},
		{line: "", err: "aggregate cpu line"},
	}
	for _, tt := range tests {
		busy, total, err := parseProcStat([]byte(tt.line))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseProcStat(%q) error %v, want one containing %q", tt.line, err, tt.err)
			}
			continue
		}
		if err != nil || busy != tt.busy || total != tt.total {
			t.Errorf("parseProcStat(%q) = %d, %d, %v; want %d, %d", tt.line, busy, total, err, tt.busy, tt.total)
		}
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("cpu  100 5 50 800 20 3 2 1 7 0\n"))
	f.Add([]byte("cpu 18446744073709551615 18446744073709551615 1 1\n"))
	f.Fuzz(func(t *testing.T, line []byte) {
		_, _, err := parseProcStat(line)
		if f := bytes.Fields(line); err == nil && (len(f) < 5 || string(f[0]) != "cpu") {
			t.Fatalf("accepted %q", line)
		}
	})
}

func TestStretchFor(t *testing.T) {
	tests := []struct{ busy, want float64 }{
		{0, 1},
		{LoadLow, 1},
		{(LoadLow + LoadHigh) / 2, 1 + (MaxStretch-1)/2.0},
		{LoadHigh, MaxStretch},
		{1, MaxStretch},
		{-1, 1},
		{2, MaxStretch},
	}
	for _, tt := range tests {
		if got := stretchFor(tt.busy); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("stretchFor(%v) = %v, want %v", tt.busy, got, tt.want)
		}
	}
}

// TestLoadSamples runs the real gauge on this machine: it must report a
// busy fraction in [0, 1], a stretch within bounds, and stop with its
// context.
func TestLoadSamples(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l := NewLoad(ctx)
	if s := l.Stretch(); s != 1 {
		t.Fatalf("stretch before the first sample = %v, want 1", s)
	}
	deadline := time.Now().Add(5 * time.Second)
	var s cpuSampler
	s.sample()
	for time.Now().Before(deadline) {
		time.Sleep(SampleEvery)
		b, ok := s.sample()
		if !ok {
			t.Fatal("second sample not ok")
		}
		if b < 0 || b > 1 {
			t.Fatalf("busy fraction %v out of [0, 1]", b)
		}
		if st := l.Stretch(); st < 1 || st > MaxStretch {
			t.Fatalf("stretch %v out of [1, %d]", st, MaxStretch)
		}
		if l.Busy() > 0 {
			break
		}
	}
	cancel()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Load did not stop with its context")
	}
	var nilLoad *Load
	if nilLoad.Stretch() != 1 || nilLoad.Busy() != 0 {
		t.Error("a nil Load must not stretch")
	}
}

// TestWriterFollowsLoad checks that a Writer's linger is Options.Linger
// times the shared Load's stretch.
func TestWriterFollowsLoad(t *testing.T) {
	l := &Load{done: make(chan struct{})}
	w := &Writer{opt: Options{Linger: 10 * time.Millisecond, Load: l}}
	for _, st := range []float64{1, 2.5, MaxStretch} {
		l.storeStretch(st)
		if got, want := w.linger(), time.Duration(float64(10*time.Millisecond)*st); got != want {
			t.Errorf("stretch %v: linger %v, want %v", st, got, want)
		}
	}
}
