package bots

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// stallLink is a bot's link that records the stamps of the poses sent
// through it: the first send stalls for stall (a write blocked behind a
// broker that stopped reading), and after max sends it fails, which ends
// the bot's sender at once.
type stallLink struct {
	stall time.Duration
	max   int

	mu     sync.Mutex
	stamps []int64
	poses  []Pose
	done   chan struct{}
	once   sync.Once
}

var errStallLinkFull = errors.New("stall link: enough sends")

func (l *stallLink) SendPose(p Pose, sentNanos int64) error {
	l.mu.Lock()
	n := len(l.stamps)
	if n == l.max {
		l.mu.Unlock()
		return errStallLinkFull
	}
	l.stamps = append(l.stamps, sentNanos)
	l.poses = append(l.poses, p)
	l.mu.Unlock()
	if n == 0 {
		time.Sleep(l.stall)
	}
	return nil
}

func (l *stallLink) Close() error          { l.once.Do(func() { close(l.done) }); return nil }
func (l *stallLink) Done() <-chan struct{} { return l.done }

func (l *stallLink) sent() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.stamps...)
}

type stallTransport struct{ link *stallLink }

func (t stallTransport) Join(context.Context, Identity, Receiver, bool) (Link, error) {
	return t.link, nil
}

// A sender that falls behind its schedule stamps each pose with the time
// it was due, so that its lateness counts in the latency, and counts the
// ticks it skips as missed: every tick of its schedule is either sent or
// missed. It fails if a late pose is stamped when it goes out (the stall
// vanishes from the latencies) or if skipped ticks are neither sent nor
// expected (the delivery ratio does not see them).
func TestLateSenderStampsDueTimeAndCountsSkippedTicks(t *testing.T) {
	const rate = 100 // a pose every 10 ms
	period := int64(time.Second / rate)
	for _, tc := range []struct {
		name       string
		stall      time.Duration
		sends      int
		minSkipped int64
	}{
		{"stall of five periods", 5 * time.Duration(period), 8, 4},
		{"stall of under two periods", 3 * time.Duration(period) / 2, 6, 0},
		{"stall of twelve and a half periods", 25 * time.Duration(period) / 2, 5, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := &stallLink{stall: tc.stall, max: tc.sends, done: make(chan struct{})}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			f, err := StartFleet(ctx, FleetConfig{Transport: stallTransport{link}, Users: 1, Rate: rate, Behaviour: Spec{Name: "static"}, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			for len(link.sent()) < tc.sends {
				select {
				case <-ctx.Done():
					t.Fatalf("%d of %d poses sent", len(link.sent()), tc.sends)
				case <-time.After(time.Millisecond):
				}
			}
			f.Close()
			stamps := link.sent()
			for i := 1; i < len(stamps); i++ {
				if d := stamps[i] - stamps[0]; d <= 0 || d%period != 0 {
					t.Fatalf("pose %d stamped %d ns after the first, not a whole number of periods (%d ns) later: stamped when sent, not when due", i, d, period)
				}
			}
			tot, _ := f.Accounts().Live()
			ticks := (stamps[len(stamps)-1]-stamps[0])/period + 1
			if tot.Sent != int64(len(stamps)) || tot.Sent+tot.Missed != ticks {
				t.Errorf("sent %d and missed %d of %d ticks from the first pose to the last; want every tick sent or missed", tot.Sent, tot.Missed, ticks)
			}
			if tot.Missed < tc.minSkipped {
				t.Errorf("missed %d ticks after a stall of %s, want at least %d", tot.Missed, tc.stall, tc.minSkipped)
			}
		})
	}
}

// A late sender's poses are where its behaviour puts the bot at their
// stamps: between two poses a randomwalk bot moves no faster than its
// speed over the stamps' difference. It fails if the behaviour steps by
// the time that really passed while the stamp follows the schedule: the
// pose after a stall of five periods then has the bot cover five periods'
// way in one stamped period (a recording replays it at up to five times
// its speed).
func TestLateSenderPosesFollowTheirStamps(t *testing.T) {
	const rate, speed = 100, 3.0
	link := &stallLink{stall: 50 * time.Millisecond, max: 12, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := StartFleet(ctx, FleetConfig{Transport: stallTransport{link}, Users: 1, Rate: rate, Behaviour: Spec{Name: "randomwalk", Speed: speed}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for len(link.sent()) < link.max {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d poses sent", len(link.sent()), link.max)
		case <-time.After(time.Millisecond):
		}
	}
	f.Close()
	link.mu.Lock()
	defer link.mu.Unlock()
	moved := 0.0
	for i := 1; i < len(link.poses); i++ {
		d := link.poses[i].Pos.Sub(link.poses[i-1].Pos).Len()
		dt := float64(link.stamps[i]-link.stamps[i-1]) / 1e9
		if d > speed*dt*1.0001+1e-9 {
			t.Errorf("pose %d: moved %.4f m in %.0f ms of stamps, %.2f m/s, over the behaviour's %.1f m/s", i, d, dt*1e3, d/dt, speed)
		}
		moved += d
	}
	if moved == 0 {
		t.Fatal("the randomwalk bot never moved")
	}
}

// Missed ticks count in the window their due time falls in.
func TestMeterMissedInWindow(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	at := func(ms int64) int64 { return base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		name            string
		first, n, every int64 // the first tick (ms after base), the number of ticks, the period (ms)
		wantWindow      int64 // window [100 ms, 200 ms)
	}{
		{"all before", 0, 5, 10, 0},
		{"up to the window's start, excluded", 60, 4, 10, 0},
		{"from the window's start, included", 100, 3, 10, 3},
		{"across the start", 80, 5, 10, 3},
		{"inside", 120, 4, 20, 4},
		{"across the end", 180, 5, 10, 2},
		{"the window's end excluded", 200, 2, 10, 0},
		{"across the whole window", 50, 20, 10, 10},
		{"off the grid of the window", 95, 12, 10, 10},
		{"none", 150, 0, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acc := NewAccounts()
			m := acc.NewMeter()
			acc.OpenWindow(base.Add(100*time.Millisecond), base.Add(200*time.Millisecond))
			m.Missed(at(tc.first), tc.n, tc.every*ms)
			if got := m.Window().Missed; got != tc.wantWindow {
				t.Errorf("window missed %d, want %d", got, tc.wantWindow)
			}
			if tot, _ := acc.Live(); tot.Missed != tc.n {
				t.Errorf("total missed %d, want %d", tot.Missed, tc.n)
			}
			acc.OpenWindow(base.Add(time.Hour), base.Add(2*time.Hour))
			if got := m.Window().Missed; got != 0 {
				t.Errorf("a new window starts with %d missed", got)
			}
		})
	}
}

// A window's expected deliveries are of the poses due in it, sent or
// missed: each to every member of its sender's scene.
func TestCollectExpectsMissedPoses(t *testing.T) {
	f := &Fleet{acc: NewAccounts(), scenes: map[string]int{"public/a": 3, "public/b": 1}}
	for i, scene := range []string{"a", "a", "a", "b"} {
		f.bots = append(f.bots, &bot{id: Identity{Index: i, Namespace: "public", Scene: scene}, meter: f.acc.NewMeter()})
	}
	base := time.Now()
	f.acc.OpenWindow(base, base.Add(time.Second))
	in := base.Add(100 * time.Millisecond).UnixNano()
	period := int64(100 * time.Millisecond)
	f.bots[0].meter.Sent(in)
	f.bots[0].meter.Missed(in+period, 2, period) // two poses due in the window, skipped
	f.bots[3].meter.Sent(in)
	f.bots[3].meter.Missed(in+period, 1, period)
	for _, b := range f.bots[:3] {
		b.meter.Received(in, in+1000, 100) // bot 0's one pose reached its scene
	}
	f.bots[3].meter.Received(in, in+1000, 100)
	r := f.Collect(time.Second)
	if r.Sent != 2 || r.Missed != 3 || r.Expected != 3*3+2*1 || r.Delivered != 4 {
		t.Errorf("sent %d missed %d expected %d delivered %d; want 2, 3, 11, 4", r.Sent, r.Missed, r.Expected, r.Delivered)
	}
}

// blockLink's second send blocks until release is closed: a write stuck
// behind a server that stopped reading.
type blockLink struct {
	sends   int
	mu      sync.Mutex
	blocked chan struct{} // closed when the second send blocks
	release chan struct{}
	done    chan struct{}
	once    sync.Once
}

func (l *blockLink) SendPose(Pose, int64) error {
	l.mu.Lock()
	l.sends++
	n := l.sends
	l.mu.Unlock()
	if n == 2 {
		close(l.blocked)
		<-l.release
	}
	return nil
}

func (l *blockLink) Close() error          { l.once.Do(func() { close(l.done) }); return nil }
func (l *blockLink) Done() <-chan struct{} { return l.done }

type blockTransport struct{ link *blockLink }

func (t blockTransport) Join(context.Context, Identity, Receiver, bool) (Link, error) {
	return t.link, nil
}

// A sender blocked in a write through a whole window still has the poses
// its schedule had due there expected, and missed: its meter learns of
// them only once the write returns, after the window was collected (the
// delivery ratio then left them out).
func TestCollectExpectsPosesOfABlockedSender(t *testing.T) {
	link := &blockLink{blocked: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const rate = 100 // a pose every 10 ms
	f, err := StartFleet(ctx, FleetConfig{Transport: blockTransport{link}, Users: 1, Rate: rate, Behaviour: Spec{Name: "static"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // after the write is released: Close waits for the sender
	defer close(link.release)
	<-link.blocked
	r, err := f.Measure(ctx, 200*time.Millisecond, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// The schedule has exactly 20 ticks in any 200 ms window.
	if r.Sent != 0 || r.Missed != 20 || r.Expected != 20 || r.Delivered != 0 {
		t.Errorf("sent %d missed %d expected %d delivered %d; want 0, 20, 20, 0", r.Sent, r.Missed, r.Expected, r.Delivered)
	}
}
