package fanout

import (
	"context"
	"io"
	"math"
	"testing"
	"time"
)

func TestPressureFor(t *testing.T) {
	tests := []struct {
		late time.Duration
		want float64
	}{
		{0, 0},
		{LateLow, 0},
		{(LateLow + LateHigh) / 2, 0.5},
		{LateHigh, 1},
		{time.Second, 1},
		{-time.Second, 0},
	}
	for _, tt := range tests {
		if got := pressureFor(tt.late); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("pressureFor(%v) = %v, want %v", tt.late, got, tt.want)
		}
	}
}

// TestLoadSample feeds lateness reports and checks the smoothed lateness
// and pressure window by window.
func TestLoadSample(t *testing.T) {
	l := &Load{done: make(chan struct{})}
	l.sample()
	if l.Pressure() != 0 || l.Lateness() != 0 {
		t.Fatalf("no reports: pressure %v lateness %v, want 0", l.Pressure(), l.Lateness())
	}
	// Writers far behind for many windows: the pressure reaches 1.
	for i := 0; i < 40; i++ {
		for j := 0; j < 10; j++ {
			l.observe(20 * time.Millisecond)
		}
		l.sample()
	}
	if l.Pressure() != 1 || l.Lateness() < 19*time.Millisecond {
		t.Fatalf("after 40 late windows: pressure %v lateness %v, want 1 and ~20ms", l.Pressure(), l.Lateness())
	}
	// One window half as late moves the mean by the smoothing weight.
	l.observe(10 * time.Millisecond)
	l.observe(10 * time.Millisecond)
	before := l.Lateness()
	l.sample()
	want := before + time.Duration(smoothing*float64(10*time.Millisecond-before))
	if d := l.Lateness() - want; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("lateness %v, want %v", l.Lateness(), want)
	}
	// Windows without lingering writers count as on time: the pressure
	// decays to 0. A negative report (woke early) counts as on time.
	for i := 0; i < 60; i++ {
		l.observe(-time.Millisecond)
		l.sample()
	}
	if l.Pressure() != 0 {
		t.Errorf("after idle windows: pressure %v, want 0 (lateness %v)", l.Pressure(), l.Lateness())
	}
	var nilLoad *Load
	nilLoad.observe(time.Second)
	if nilLoad.Pressure() != 0 || nilLoad.Lateness() != 0 || nilLoad.Linger(time.Millisecond) != time.Millisecond {
		t.Error("a nil Load must not change the linger")
	}
}

func TestLoadStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l := NewLoad(ctx)
	cancel()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Load did not stop with its context")
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
		l.pressure.Store(math.Float64bits(tt.pressure))
		w := &Writer{opt: Options{Linger: tt.base, Load: l}}
		if got := w.linger(); got != tt.want {
			t.Errorf("linger %v, pressure %v: got %v, want %v", tt.base, tt.pressure, got, tt.want)
		}
	}
}

// TestWriterReportsLateness runs a lingering writer on a real connection
// and checks that its wake-ups reach the shared Load.
func TestWriterReportsLateness(t *testing.T) {
	a, b := tcpPair(t)
	go io.Copy(io.Discard, b)
	l := &Load{done: make(chan struct{})}
	w := NewWriter(a, Options{Linger: time.Millisecond, Load: l}, nil)
	defer w.Close()
	for i := 0; i < 50 && l.n.Load() == 0; i++ {
		w.Enqueue(Frame{Bytes: []byte("x")})
		time.Sleep(200 * time.Microsecond)
	}
	if l.n.Load() == 0 {
		t.Fatal("a writer that lingered reported no wake-up to its Load")
	}
}
