package fanout

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock schedules the lingering writes of many Writers with one timer. When
// a busy connection's linger interval ends, the clock writes what it has
// queued on the timer's own goroutine, with one non-blocking system call,
// together with every other connection due at about the same time. A
// lingering write thus costs no timer and no goroutine hand-off of its own.
// A connection whose socket is full, or that is not a plain socket (TLS,
// WebSocket), is handed to its Writer's goroutine instead.
//
// One Clock serves a node's connections (Options.Clock); a Writer without
// one makes its own. A Clock needs no closing: it runs nothing while no
// write is due.
type Clock struct {
	epoch time.Time

	mu    sync.Mutex
	heap  []clockEntry // min-heap by at
	timer *time.Timer
	armed int64 // the time the timer is set for, in ns since epoch; -1 = not set

	fires atomic.Uint64

	// The write budget (NewBudgetClock): lingering writes per second that
	// the clock's writers together should stay near, and the factor by
	// which their linger intervals stretch to do so.
	budget  float64       // 0 = none
	writes  atomic.Uint64 // lingering writes so far
	stretch atomic.Uint64 // math.Float64bits of the factor, >= 1
	winAt   atomic.Int64  // start of the current rate window
	winN    atomic.Uint64 // writes at winAt
	// behind counts the lingering writes made late (clockLate after they
	// were due) or that found their socket full, and winB is its value at
	// winAt: the signs that writes fall short of the budget because the
	// node or its readers cannot keep up, not because fewer connections
	// are busy.
	behind atomic.Uint64
	winB   atomic.Uint64

	// The budget's boost (FollowLoad): while the machine's CPUs have room,
	// the budget grows by up to MaxBoost, so that the linger intervals
	// stretch less and latency falls; when they do not, it is as given.
	loadMu  sync.Mutex
	gauge   LoadGauge
	busyAvg float64       // smoothed busy share; < 0: no reading yet
	boost   atomic.Uint64 // math.Float64bits of the factor, >= 1
}

// A LoadGauge tells how busy the machine's CPUs were since its previous
// reading, as a share in [0, 1] (cpuload.Gauge); ok is false when it
// cannot tell.
type LoadGauge interface {
	Busy() (busy float64, ok bool)
}

// MaxBoost bounds how far FollowLoad raises a write budget.
const MaxBoost = 2.0

// The machine's smoothed busy share below which a followed load raises the
// budget, and above which it lowers it again; between them the boost
// holds. The budget exists for a saturated machine: near saturation it is
// as configured.
const (
	boostBelow   = 0.75
	unboostAbove = 0.85
	busySmooth   = 0.3 // weight of a window's reading in the average
)

// MaxStretch bounds how far a write budget stretches the linger intervals.
const MaxStretch = 4.0

// budgetWindow is how often the stretch follows the write rate.
const budgetWindow = 100 * time.Millisecond

// clockLate is how late a lingering write may be before it counts as
// behind.
const clockLate = 10 * time.Millisecond

// behindShare is the share of a window's lingering writes, and
// behindMin their least number, that must be behind for the window to
// count as behind: one slow reader does not move every connection's
// linger.
const (
	behindShare = 0.05
	behindMin   = 32
)

type clockEntry struct {
	at int64 // ns since the clock's epoch
	w  *Writer
}

// clockSlack is how early a write may go: a fire takes every connection
// due within it, so that nearby deadlines share a timer.
const clockSlack = 500 * time.Microsecond

// NewClock returns a clock with nothing scheduled.
func NewClock() *Clock {
	c := &Clock{epoch: time.Now(), armed: -1, busyAvg: -1}
	c.stretch.Store(math.Float64bits(1))
	c.boost.Store(math.Float64bits(1))
	c.timer = time.AfterFunc(time.Hour, c.fire)
	c.timer.Stop()
	return c
}

// NewBudgetClock returns a clock whose writers keep their lingering writes
// near perSecond in all: while more connections are busy than that allows
// at their linger intervals, every interval stretches by the same factor
// (at most MaxStretch), so that the node's write system calls, and the
// reads they cause, stay near the budget and latency grows instead. Below
// the budget the intervals are as configured. perSecond ≤ 0: no budget.
func NewBudgetClock(perSecond float64) *Clock {
	c := NewClock()
	c.budget = max(perSecond, 0)
	return c
}

// FollowLoad makes the write budget follow the machine's CPU use, read
// from g once per budget window: while the CPUs are mostly idle (below
// 75 % busy, smoothed) the budget grows step by step to up to MaxBoost
// times its size, so that busy connections write more often and their
// messages wait less; above 85 % it shrinks back, and a window whose writes
// are behind (see nextStretch) drops it at once. A budget exists to save
// the CPU that writes cost when it is scarce; when it is not, spending it
// on latency is free. Call it before the clock is used.
func (c *Clock) FollowLoad(g LoadGauge) { c.gauge = g }

// Boost is the factor by which FollowLoad currently raises the write budget
// (1: not at all).
func (c *Clock) Boost() float64 { return math.Float64frombits(c.boost.Load()) }

// Stretch is the factor by which the write budget currently stretches the
// linger intervals (1: not at all).
func (c *Clock) Stretch() float64 { return math.Float64frombits(c.stretch.Load()) }

// wrote counts a lingering write.
func (c *Clock) wrote() { c.writes.Add(1) }

// Writes counts the lingering writes the clock has made (or handed to a
// writer goroutine) so far.
func (c *Clock) Writes() uint64 { return c.writes.Load() }

// Behind counts the lingering writes so far that were more than clockLate
// late or found their socket full (see nextStretch).
func (c *Clock) Behind() uint64 { return c.behind.Load() }

// tick moves the stretch, once per budgetWindow, towards what keeps the
// lingering write rate at the budget. It is called at every write (now is
// the clock's time), so the stretch follows the load while there is any.
func (c *Clock) tick(now int64) {
	if c.budget == 0 {
		return
	}
	at := c.winAt.Load()
	if now-at < int64(budgetWindow) || !c.winAt.CompareAndSwap(at, now) {
		return
	}
	n := c.writes.Load()
	written := n - c.winN.Swap(n)
	b := c.behind.Load()
	late := b - c.winB.Swap(b)
	rate := float64(written) / (float64(now-at) / float64(time.Second))
	windows := int(min((now-at)/int64(budgetWindow), 20))
	behind := late >= behindMin && float64(late) >= behindShare*float64(written)
	budget := c.budget * c.followLoad(behind)
	c.stretch.Store(math.Float64bits(nextStretch(c.Stretch(), rate, budget, windows, behind)))
}

// followLoad reads the load gauge, if any, and returns the budget's boost
// for the next window.
func (c *Clock) followLoad(behind bool) float64 {
	if c.gauge == nil {
		return 1
	}
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if b, ok := c.gauge.Busy(); ok {
		if c.busyAvg < 0 {
			c.busyAvg = b
		} else {
			c.busyAvg += busySmooth * (b - c.busyAvg)
		}
	}
	boost := nextBoost(c.Boost(), c.busyAvg, behind)
	c.boost.Store(math.Float64bits(boost))
	return boost
}

// nextBoost is the budget's boost after a window, from the current one,
// cur, and the machine's smoothed busy share (< 0: unknown). It grows by a
// quarter per window while the CPUs have room and shrinks by a third when
// they have little, so that it backs off faster than it comes; writes that
// fall behind drop it to 1 at once.
func nextBoost(cur, busy float64, behind bool) float64 {
	switch {
	case behind || busy < 0:
		return 1
	case busy < boostBelow:
		return min(cur*1.25, MaxBoost)
	case busy > unboostAbove:
		return max(cur/1.5, 1)
	}
	return cur
}

// nextStretch is the stretch after windows windows at the lingering write
// rate rate, from the current one, cur. The writes of busy connections fall
// in proportion to the stretch, so cur × rate / budget keeps them at the
// budget; each window goes halfway there, so that one window's noise moves
// it little and a quiet spell brings it back to 1.
//
// While the budget stretches the lingers (cur > 1) and the writes are
// behind (late, or into full sockets), a rate below the budget means that
// the node or its readers cannot keep up, not that fewer connections are
// busy; shortening the lingers then would ask for more writes still and
// turn a moment's overload into a lasting one. So the stretch heads for
// MaxStretch instead, shedding write work until the writes keep time
// again. Below the budget (cur = 1) a hiccup that makes writes late
// changes nothing.
func nextStretch(cur, rate, budget float64, windows int, behind bool) float64 {
	target := min(max(cur*rate/budget, 1), MaxStretch)
	if behind && cur > 1 {
		target = MaxStretch
	}
	for range max(windows, 1) {
		cur = (cur + target) / 2
	}
	return cur
}

// Fires counts the clock's timer firings.
func (c *Clock) Fires() uint64 { return c.fires.Load() }

// now is the time in ns since the clock's epoch.
func (c *Clock) now() int64 { return int64(time.Since(c.epoch)) }

// add schedules a write of w at at (ns since the epoch). The caller holds
// w.mu; the lock order is Writer, then Clock.
func (c *Clock) add(w *Writer, at int64) {
	c.mu.Lock()
	c.push(clockEntry{at: at, w: w})
	if c.armed < 0 || at < c.armed {
		c.arm(at)
	}
	c.mu.Unlock()
}

// arm sets the timer for at; c.mu is held.
func (c *Clock) arm(at int64) {
	c.armed = at
	c.timer.Reset(time.Duration(at - c.now()))
}

// fire runs on the timer's goroutine: it takes every writer due within
// clockSlack and lets each write. Fires may overlap; each Writer guards
// its own state.
func (c *Clock) fire() {
	c.fires.Add(1)
	var stack [64]clockEntry
	due := stack[:0]
	c.mu.Lock()
	c.armed = -1
	limit := c.now() + int64(clockSlack)
	for len(c.heap) > 0 && c.heap[0].at <= limit {
		due = append(due, c.pop())
	}
	if len(c.heap) > 0 {
		c.arm(c.heap[0].at)
	}
	c.mu.Unlock()
	late := uint64(0)
	for _, e := range due {
		if limit-e.at > int64(clockLate+clockSlack) {
			late++
		}
		e.w.fire(e.at)
	}
	if late > 0 {
		c.behind.Add(late)
	}
}

func (c *Clock) push(e clockEntry) {
	h := append(c.heap, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	c.heap = h
}

func (c *Clock) pop() clockEntry {
	h := c.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = clockEntry{}
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].at < h[m].at {
			m = l
		}
		if r < len(h) && h[r].at < h[m].at {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	c.heap = h
	return top
}
