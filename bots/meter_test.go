package bots

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPoseEncoding(t *testing.T) {
	p := Pose{Pos: Vec3{1.25, 1.6, -3.5}, Rot: Quat{0, 0.7071, 0, 0.7071}}
	for _, size := range []int{0, 100, 310, 1000} {
		b := AppendPose(nil, "camera_a_a", p, 1234567890123456789, size)
		if size > 200 && len(b) != size {
			t.Errorf("size %d: payload is %d bytes", size, len(b))
		}
		if got := SentNanos(b); got != 1234567890123456789 {
			t.Errorf("size %d: SentNanos %d", size, got)
		}
		pos, ok := PositionOf(b)
		if !ok || pos.Sub(p.Pos).Len() > 1e-3 {
			t.Errorf("size %d: PositionOf %+v %v", size, pos, ok)
		}
	}
	if SentNanos([]byte(`{"object_id":"x","action":"update"}`)) != 0 {
		t.Error("SentNanos of a message without timestamp is not 0")
	}
	if got := string(ObjectIDOfTopic([]byte("realm/s/ns/sc/u/c1/camera_1"))); got != "camera_1" {
		t.Errorf("ObjectIDOfTopic: %q", got)
	}
}

func TestPoseEncodingAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 512)
	p := Pose{Pos: Vec3{1, 2, 3}, Rot: NoRotation}
	if n := testing.AllocsPerRun(100, func() { buf = AppendPose(buf[:0], "camera_x_x", p, 42, 310) }); n != 0 {
		t.Errorf("AppendPose allocates %.0f times", n)
	}
	if n := testing.AllocsPerRun(100, func() { SentNanos(buf) }); n != 0 {
		t.Errorf("SentNanos allocates %.0f times", n)
	}
}

func TestLatencyAccounting(t *testing.T) {
	acc := NewAccounts()
	a, b := acc.NewMeter(), acc.NewMeter()
	base := time.Now()
	ns := func(d time.Duration) int64 { return base.Add(d).UnixNano() }
	acc.OpenWindow(base, base.Add(time.Second))
	// Live latencies are recorded from the first call to Live on.
	if tot, live := acc.Live(); tot != (Totals{}) || live.TotalCount() != 0 {
		t.Fatalf("empty accounts: %+v, %d live values", tot, live.TotalCount())
	}

	// Sent before the window: counted live, not in the window.
	a.Sent(ns(-time.Millisecond))
	b.Received(ns(-time.Millisecond), ns(50*time.Millisecond), 300)
	// In the window: two sends, each received by both meters with known
	// latencies; one arrives after the window closed and still counts.
	lat := []time.Duration{1 * time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 900 * time.Millisecond}
	a.Sent(ns(100 * time.Millisecond))
	b.Sent(ns(800 * time.Millisecond))
	a.Received(ns(100*time.Millisecond), ns(100*time.Millisecond+lat[0]), 300)
	b.Received(ns(100*time.Millisecond), ns(100*time.Millisecond+lat[1]), 300)
	a.Received(ns(800*time.Millisecond), ns(800*time.Millisecond+lat[2]), 300)
	b.Received(ns(800*time.Millisecond), ns(800*time.Millisecond+lat[3]), 300)
	// Sent after the window.
	a.Sent(ns(time.Second))
	// No timestamp: counted, not timed.
	a.Received(0, ns(0), 10)

	h := NewHistogram()
	acc.WindowLatencies(h)
	var sent, recv, bytes int64
	for _, m := range acc.Meters() {
		c := m.Window()
		sent += c.Sent
		recv += c.Received
		bytes += c.Bytes
	}
	if sent != 2 || recv != 4 || bytes != 1200 {
		t.Errorf("window: sent %d received %d bytes %d, want 2, 4, 1200", sent, recv, bytes)
	}
	if h.TotalCount() != 4 {
		t.Fatalf("window histogram holds %d values, want 4", h.TotalCount())
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{25, lat[0]}, {50, lat[1]}, {75, lat[2]}, {100, lat[3]}} {
		got := Quantile(h, tc.q)
		if d := got - tc.want; d < -tc.want/50 || d > tc.want/50 {
			t.Errorf("p%g = %s, want %s within 2%%", tc.q, got, tc.want)
		}
	}

	tot, live := acc.Live()
	if tot.Sent != 4 || tot.Received != 6 || tot.Bytes != 1510 {
		t.Errorf("totals %+v, want sent 4 received 6 bytes 1510", tot)
	}
	if live.TotalCount() != 5 {
		t.Errorf("live histogram holds %d values, want 5", live.TotalCount())
	}
	if _, live2 := acc.Live(); live2.TotalCount() != 0 {
		t.Errorf("live histogram not reset: %d values", live2.TotalCount())
	}

	// A new window starts from zero.
	acc.OpenWindow(base.Add(time.Hour), base.Add(2*time.Hour))
	if c := a.Window(); c != (WindowCounts{}) {
		t.Errorf("after a new window: %+v", c)
	}
	h = NewHistogram()
	if acc.WindowLatencies(h); h.TotalCount() != 0 {
		t.Errorf("after a new window: %d latencies", h.TotalCount())
	}
}

func TestLiveLatenciesOnlyOnceAsked(t *testing.T) {
	acc := NewAccounts()
	m := acc.NewMeter()
	now := time.Now().UnixNano()
	m.Received(now-int64(time.Millisecond), now, 100)
	tot, live := acc.Live()
	if tot.Received != 1 || live.TotalCount() != 0 {
		t.Fatalf("before the first Live: received %d, %d live values; want 1 and 0", tot.Received, live.TotalCount())
	}
	m.Received(now-int64(time.Millisecond), now, 100)
	if tot, live := acc.Live(); tot.Received != 2 || live.TotalCount() != 1 {
		t.Fatalf("after the first Live: received %d, %d live values; want 2 and 1", tot.Received, live.TotalCount())
	}
}

func TestLatencyAccountingQuantilesOfManyValues(t *testing.T) {
	acc := NewAccounts()
	m := acc.NewMeter()
	base := time.Now()
	acc.OpenWindow(base, base.Add(time.Minute))
	rng := rand.New(rand.NewPCG(7, 7))
	// Uniform latencies from 0 to 100 ms: p50 ≈ 50 ms, p99 ≈ 99 ms.
	for i := 0; i < 100000; i++ {
		s := base.Add(time.Duration(i) * 100 * time.Microsecond).UnixNano()
		m.Received(s, s+rng.Int64N(int64(100*time.Millisecond)), 1)
	}
	h := NewHistogram()
	acc.WindowLatencies(h)
	if n := h.TotalCount(); n != 100000 {
		t.Fatalf("window holds %d latencies, want 100000", n)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}} {
		got := Quantile(h, tc.q)
		if d := (got - tc.want).Seconds(); d < -0.0015 || d > 0.0015 {
			t.Errorf("p%g = %s, want %s ± 1.5 ms", tc.q, got, tc.want)
		}
	}
}

// Meters share latency histograms and stage what they record: every
// latency still arrives exactly once, whichever meter, goroutine and
// staging boundary it came through, while Live reads concurrently.
func TestLatencyAccountingSharedAcrossMeters(t *testing.T) {
	acc := NewAccounts()
	base := time.Now()
	acc.OpenWindow(base, base.Add(time.Hour))
	const meters, each = 2*accountShards + 3, 3*meterStage + 17
	var liveSeen atomic.Int64
	stop := make(chan struct{})
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		for {
			_, h := acc.Live()
			liveSeen.Add(h.TotalCount())
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	for range meters {
		m := acc.NewMeter()
		wg.Go(func() {
			for i := range each {
				s := base.Add(time.Duration(i) * time.Millisecond).UnixNano()
				m.Received(s, s+int64(time.Millisecond), 10)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-reading
	tot, h := acc.Live()
	liveSeen.Add(h.TotalCount())
	if tot.Received != meters*each || tot.Bytes != 10*meters*each {
		t.Errorf("totals %+v, want %d received", tot, meters*each)
	}
	// Live records only from its first call on; what it saw is at most
	// everything, and the window saw everything.
	if n := liveSeen.Load(); n > meters*each {
		t.Errorf("live histograms held %d latencies, more than the %d received", n, meters*each)
	}
	w := NewHistogram()
	acc.WindowLatencies(w)
	if w.TotalCount() != meters*each {
		t.Errorf("window holds %d latencies, want %d", w.TotalCount(), meters*each)
	}
	if p := Quantile(w, 50); p < 990*time.Microsecond || p > 1010*time.Microsecond {
		t.Errorf("window p50 %s, want 1 ms", p)
	}
}

// Staged counts are the read goroutine's until it flushes; counts staged
// against a window that was replaced before the flush count in the totals
// only.
func TestMeterStageAndFlush(t *testing.T) {
	acc := NewAccounts()
	m := acc.NewMeter()
	base := time.Now()
	ns := func(d time.Duration) int64 { return base.Add(d).UnixNano() }
	acc.OpenWindow(base, base.Add(time.Second))

	m.Stage(ns(10*time.Millisecond), ns(12*time.Millisecond), 100)
	m.Stage(ns(20*time.Millisecond), ns(25*time.Millisecond), 100)
	if c := m.Window(); c.Received != 0 {
		t.Fatalf("before Flush the window shows %d received, want 0", c.Received)
	}
	m.Flush()
	h := NewHistogram()
	acc.WindowLatencies(h)
	if c := m.Window(); c.Received != 2 || c.Bytes != 200 || h.TotalCount() != 2 {
		t.Fatalf("after Flush: %+v and %d latencies, want 2 received, 200 bytes, 2 latencies", c, h.TotalCount())
	}
	if p := Quantile(h, 100); p < 4900*time.Microsecond || p > 5100*time.Microsecond {
		t.Errorf("largest latency %s, want 5 ms", p)
	}

	// Staged in the old window, flushed after a new one opened.
	m.Stage(ns(30*time.Millisecond), ns(31*time.Millisecond), 100)
	acc.OpenWindow(base.Add(time.Hour), base.Add(2*time.Hour))
	m.Flush()
	h = NewHistogram()
	acc.WindowLatencies(h)
	if c := m.Window(); c.Received != 0 || h.TotalCount() != 0 {
		t.Errorf("new window: %+v and %d latencies, want none", c, h.TotalCount())
	}
	if tot, _ := acc.Live(); tot.Received != 3 || tot.Bytes != 300 {
		t.Errorf("totals %+v, want 3 received and 300 bytes", tot)
	}

	// Staging more than a stage holds flushes on its own.
	acc.OpenWindow(base, base.Add(time.Hour))
	for i := range meterStage + 1 {
		m.Stage(ns(time.Duration(i)*time.Millisecond), ns(time.Duration(i+1)*time.Millisecond), 1)
	}
	if c := m.Window(); c.Received != meterStage {
		t.Errorf("after %d staged without Flush the window shows %d, want %d", meterStage+1, c.Received, meterStage)
	}
}
