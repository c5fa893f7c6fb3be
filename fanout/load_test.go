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

func TestPressureFor(t *testing.T) {
	tests := []struct{ busy, want float64 }{
		{0, 0},
		{LoadLow, 0},
		{(LoadLow + LoadHigh) / 2, 0.5},
		{LoadHigh, 1},
		{1, 1},
		{-1, 0},
		{2, 1},
	}
	for _, tt := range tests {
		if got := pressureFor(tt.busy); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("pressureFor(%v) = %v, want %v", tt.busy, got, tt.want)
		}
	}
}

// TestLoadSamples runs the real gauge on this machine: it must report a
// busy fraction in [0, 1], a stretch within bounds, and stop with its
// context.
func TestLoadSamples(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l := NewLoad(ctx)
	if p := l.Pressure(); p != 0 {
		t.Fatalf("pressure before the first sample = %v, want 0", p)
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
		if p := l.Pressure(); p < 0 || p > 1 {
			t.Fatalf("pressure %v out of [0, 1]", p)
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
	if nilLoad.Pressure() != 0 || nilLoad.Busy() != 0 || nilLoad.Linger(time.Millisecond) != time.Millisecond {
		t.Error("a nil Load must not stretch the linger")
	}
}

// TestWriterFollowsLoad checks that a Writer's linger goes from
// Options.Linger to MaxLinger with the shared Load's pressure.
func TestWriterFollowsLoad(t *testing.T) {
	l := &Load{done: make(chan struct{})}
	tests := []struct {
		base     time.Duration
		pressure float64
		want     time.Duration
	}{
		{10 * time.Millisecond, 0, 10 * time.Millisecond},
		{10 * time.Millisecond, 0.5, 10*time.Millisecond + (MaxLinger-10*time.Millisecond)/2},
		{10 * time.Millisecond, 1, MaxLinger},
		{0, 1, 0}, // no linger configured: none under pressure either
		{2 * MaxLinger, 1, 2 * MaxLinger},
	}
	for _, tt := range tests {
		l.storePressure(tt.pressure)
		w := &Writer{opt: Options{Linger: tt.base, Load: l}}
		if got := w.linger(); got != tt.want {
			t.Errorf("linger %v, pressure %v: got %v, want %v", tt.base, tt.pressure, got, tt.want)
		}
	}
}
