package fanout

import (
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testnet"
)

// The clock's heap gives entries back in time order.
func TestClockHeapOrder(t *testing.T) {
	c := NewClock()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		c.push(clockEntry{at: r.Int64N(1e6)})
	}
	prev := int64(-1)
	for len(c.heap) > 0 {
		e := c.pop()
		if e.at < prev {
			t.Fatalf("popped %d after %d", e.at, prev)
		}
		prev = e.at
	}
}

// Many sockets sharing one clock: steady traffic lingers, every frame
// arrives in order on every connection, the clock's timer writes the
// batches, and an urgent frame still goes at once.
func TestClockSharedBySockets(t *testing.T) {
	const conns, frames, size = 20, 200, 64
	clock := NewClock()
	var ws []*Writer
	var readers sync.WaitGroup
	for i := 0; i < conns; i++ {
		server, client := testnet.TCPPair(t)
		w := NewWriter(server, Options{Linger: 5 * time.Millisecond, Clock: clock}, nil)
		ws = append(ws, w)
		readers.Add(1)
		go func(c net.Conn) {
			defer readers.Done()
			readNumbered(t, c, frames, size)
		}(client)
	}
	for n := 0; n < frames; n++ {
		for _, w := range ws {
			if w.Enqueue(&Frame{Bytes: numbered(uint32(n), size), Key: "pose"}) != Queued {
				t.Fatalf("frame %d not queued", n)
			}
		}
		if n%20 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	readers.Wait()
	var batches uint64
	for _, w := range ws {
		batches += w.Stats().Batches
	}
	if batches >= conns*frames/2 {
		t.Errorf("%d writes for %d frames: the linger did not batch", batches, conns*frames)
	}
	if clock.Fires() == 0 {
		t.Error("the clock never fired: lingering writes did not go through it")
	}
	for _, w := range ws {
		w.Close()
	}
}

// A connection that is not a socket is written by its goroutine when the
// shared clock says its linger is over.
func TestClockWakesNonSocketWriter(t *testing.T) {
	clock := NewClock()
	c := &pipeConn{}
	w := NewWriter(c, Options{Linger: 10 * time.Millisecond, Clock: clock}, nil)
	w.Enqueue(&Frame{Bytes: []byte("a")}) // idle: at once
	waitFor(t, func() bool { return w.Stats().Written == 1 })
	w.Enqueue(&Frame{Bytes: []byte("b")})
	w.Enqueue(&Frame{Bytes: []byte("c")})
	waitFor(t, func() bool { return w.Stats().Written == 3 })
	if got := c.String(); got != "abc" {
		t.Fatalf("wrote %q, want abc", got)
	}
	if clock.Fires() == 0 {
		t.Error("the lingering frames were not written on the clock's schedule")
	}
	w.Close()
}

func TestNextStretch(t *testing.T) {
	for _, tc := range []struct {
		cur, rate, budget float64
		windows           int
		behind            bool
		want              float64
	}{
		{1, 500, 1000, 1, false, 1},     // under the budget: no stretch
		{1, 2000, 1000, 1, false, 1.5},  // twice the budget: halfway to 2
		{2, 1000, 1000, 1, false, 2},    // at the budget: steady
		{2, 0, 1000, 1, false, 1.5},     // idle: back towards 1
		{3, 0, 1000, 2, false, 1.5},     // two quiet windows: two steps
		{3, 0, 1000, 0, false, 2},       // at least one step
		{3, 10000, 1000, 1, false, 3.5}, // far over: towards MaxStretch only
		{MaxStretch, 5000, 1000, 1, false, MaxStretch},
		{2, 500, 1000, 1, true, 3},     // under the budget but behind: towards MaxStretch
		{1.5, 0, 1000, 2, true, 3.375}, // nothing written, all behind: two steps up
		{1, 500, 1000, 1, true, 1},     // not stretching: a hiccup changes nothing
		{MaxStretch, 0, 1000, 1, true, MaxStretch},
	} {
		if got := nextStretch(tc.cur, tc.rate, tc.budget, tc.windows, tc.behind); got != tc.want {
			t.Errorf("nextStretch(%v, %v, %v, %d, %v) = %v, want %v", tc.cur, tc.rate, tc.budget, tc.windows, tc.behind, got, tc.want)
		}
	}
}

// A window counts as behind when enough of its writes were late or found
// their socket full, not for one slow reader's.
func TestBudgetClockBehindWindows(t *testing.T) {
	c := NewBudgetClock(1000)
	now := c.now()
	c.winAt.Store(now)
	window := func(writes, behind int) float64 {
		for range writes {
			c.wrote()
		}
		c.behind.Add(uint64(behind))
		now += int64(budgetWindow)
		c.tick(now)
		return c.Stretch()
	}
	for i, tc := range []struct {
		writes, behind int
		want           float64
	}{
		{200, 0, 1.5},       // 2,000 a second: halfway to 2
		{50, 40, 2.75},      // 500 a second, but behind: towards MaxStretch
		{50, 5, 2.0625},     // a few behind: not behind; halfway to 2.75 × 500/1000
		{1000, 31, 3.03125}, // under behindMin: by the rate (10,000/s) alone, towards MaxStretch
	} {
		if got := window(tc.writes, tc.behind); got != tc.want {
			t.Fatalf("window %d (%d writes, %d behind): stretch %v, want %v", i, tc.writes, tc.behind, got, tc.want)
		}
	}
}

// Busy connections over a clock's write budget write less often: the
// stretch rises while they are over it and falls back once they are quiet.
func TestBudgetClockStretchesBusyWriters(t *testing.T) {
	clock := NewBudgetClock(200)
	var writers []*Writer
	for i := 0; i < 10; i++ {
		writers = append(writers, NewWriter(&pipeConn{}, Options{Linger: 10 * time.Millisecond, Clock: clock}, nil))
	}
	defer func() {
		for _, w := range writers {
			w.Close()
		}
	}()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // every writer gets a pose every millisecond: 1,000 writes/s unstretched
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for _, w := range writers {
				w.Enqueue(&Frame{Bytes: []byte("p"), Key: "pose"})
			}
		}
	}()
	waitFor(t, func() bool { return clock.Stretch() > 3 })
	close(stop)
	<-done
	if s := clock.Stretch(); s > MaxStretch {
		t.Fatalf("stretch %v above MaxStretch", s)
	}
	// One connection keeps a pose every 20 ms: far under the budget, so the
	// stretch falls back (it follows the rate when lingering writes fire).
	waitFor(t, func() bool {
		writers[0].Enqueue(&Frame{Bytes: []byte("p"), Key: "pose"})
		time.Sleep(20 * time.Millisecond)
		return clock.Stretch() < 1.5
	})
}

func TestNextBoost(t *testing.T) {
	for _, tc := range []struct {
		cur, busy float64
		behind    bool
		want      float64
	}{
		{1, 0.5, false, 1.25},       // room: up a quarter
		{1.8, 0.5, false, MaxBoost}, // not beyond MaxBoost
		{1.5, 0.8, false, 1.5},      // between the marks: holds
		{1.5, 0.9, false, 1},        // little room: down a third
		{1.2, 0.95, false, 1},       // not below 1
		{2, 0.5, true, 1},           // writes behind: at once to 1
		{2, -1, false, 1},           // no reading yet
	} {
		if got := nextBoost(tc.cur, tc.busy, tc.behind); got != tc.want {
			t.Errorf("nextBoost(%v, %v, %v) = %v, want %v", tc.cur, tc.busy, tc.behind, got, tc.want)
		}
	}
}

// gaugeFunc is a LoadGauge with readings from a function.
type gaugeFunc func() (float64, bool)

func (f gaugeFunc) Busy() (float64, bool) { return f() }

// A clock that follows the load stretches less while the machine has room,
// and as before once it has not.
func TestBudgetClockFollowsLoad(t *testing.T) {
	busy := 0.3
	c := NewBudgetClock(1000)
	c.FollowLoad(gaugeFunc(func() (float64, bool) { return busy, true }))
	plain := NewBudgetClock(1000)
	now := c.now()
	c.winAt.Store(now)
	plain.winAt.Store(now)
	// Busy writers that would write 3,000 times a second unstretched,
	// three times the budget: each clock gets that divided by its stretch.
	window := func() {
		for _, k := range []*Clock{c, plain} {
			for range int(300 / k.Stretch()) {
				k.wrote()
			}
			k.tick(now + int64(budgetWindow))
		}
		now += int64(budgetWindow)
	}
	// On an idle machine the boost climbs to MaxBoost, and the stretch
	// settles near 1.5 where the plain clock's settles near 3.
	for range 40 {
		window()
	}
	if b := c.Boost(); b != MaxBoost {
		t.Fatalf("boost on an idle machine %v, want %v", b, MaxBoost)
	}
	if s, p := c.Stretch(), plain.Stretch(); math.Abs(s-1.5) > 0.05 || math.Abs(p-3) > 0.05 {
		t.Fatalf("stretch with the load followed %v, without %v: want about 1.5 and 3", s, p)
	}
	// The machine gets busy: the smoothed share passes 85 % within a few
	// windows and the boost falls back to 1; the stretch follows the plain
	// clock's.
	busy = 0.95
	for range 40 {
		window()
	}
	if s, p := c.Stretch(), plain.Stretch(); math.Abs(s-p) > 0.05 {
		t.Fatalf("busy machine: stretch with the load followed %v, without %v: want the same", s, p)
	}
	if b := c.Boost(); b != 1 {
		t.Fatalf("boost on a busy machine %v, want 1", b)
	}
	if plain.Boost() != 1 {
		t.Fatalf("a clock that does not follow the load has boost %v", plain.Boost())
	}
}
