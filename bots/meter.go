package bots

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds from 1 µs to 60 s with two
// significant digits (1% resolution): small histograms, cheap to merge
// every second across hundreds of bots.
const (
	histMin    = 1
	histMax    = 60_000_000
	histDigits = 2
)

// NewHistogram returns an empty latency histogram in microseconds, of the
// geometry every Meter uses.
func NewHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// Accounts aggregates the meters of a fleet. A measurement window,
// [from, to) in send time, applies to all its meters at once: a message
// counts in the window if it was sent inside it, whenever it arrives, so
// that sent and delivered counts of a window match exactly.
type Accounts struct {
	window atomic.Pointer[[2]int64]
	live   atomic.Bool // Live has been called: meters record live latencies

	mu     sync.Mutex
	meters []*Meter
}

// NewAccounts returns empty accounts.
func NewAccounts() *Accounts {
	a := &Accounts{}
	a.window.Store(&[2]int64{0, 0})
	return a
}

// NewMeter adds a meter, for one bot.
func (a *Accounts) NewMeter() *Meter {
	m := &Meter{acc: a, live: NewHistogram(), win: NewHistogram()}
	a.mu.Lock()
	a.meters = append(a.meters, m)
	a.mu.Unlock()
	return m
}

// Meters returns the meters in the order they were made.
func (a *Accounts) Meters() []*Meter {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*Meter(nil), a.meters...)
}

// OpenWindow starts a measurement window of messages sent in [from, to),
// clearing the previous window's counts. from should be a little in the
// future: a message stamped at or after from but counted by its sender
// before the window is open would be received but not counted as sent.
func (a *Accounts) OpenWindow(from, to time.Time) {
	for _, m := range a.Meters() {
		m.mu.Lock()
		m.win.Reset()
		m.winRecv, m.winBytes = 0, 0
		m.mu.Unlock()
		m.winSent.Store(0)
	}
	a.window.Store(&[2]int64{from.UnixNano(), to.UnixNano()})
}

// Totals are cumulative counts over all meters.
type Totals struct {
	Sent, Received, Bytes int64
}

// Live returns the cumulative totals and the latencies recorded since the
// previous call to Live, merged. Meters record live latencies only once
// Live has been called (a benchmark that reads windows only does not pay
// for a second histogram per message): the first call returns none.
func (a *Accounts) Live() (Totals, *hdrhistogram.Histogram) {
	a.live.Store(true)
	var t Totals
	h := NewHistogram()
	for _, m := range a.Meters() {
		t.Sent += m.sent.Load()
		t.Received += m.recv.Load()
		t.Bytes += m.bytes.Load()
		m.mu.Lock()
		h.Merge(m.live)
		m.live.Reset()
		m.mu.Unlock()
	}
	return t, h
}

// WindowCounts are what one meter counted for the current window.
type WindowCounts struct {
	Sent, Received, Bytes int64
}

// Meter accounts for one bot: what it sent, what it received and how late.
// Sent is called by the bot's sender, Received by its transport's read
// goroutine.
type Meter struct {
	acc *Accounts

	sent, recv, bytes atomic.Int64
	winSent           atomic.Int64
	mu                sync.Mutex
	live, win         *hdrhistogram.Histogram
	winRecv, winBytes int64
}

// Sent counts a message sent at sentNanos.
func (m *Meter) Sent(sentNanos int64) {
	m.sent.Add(1)
	if w := m.acc.window.Load(); sentNanos >= w[0] && sentNanos < w[1] {
		m.winSent.Add(1)
	}
}

// Received counts a message of size bytes sent at sentNanos (0: no
// timestamp, counted but not timed) and received at recvNanos.
func (m *Meter) Received(sentNanos, recvNanos int64, size int) {
	m.recv.Add(1)
	m.bytes.Add(int64(size))
	if sentNanos == 0 {
		return
	}
	us := (recvNanos - sentNanos) / 1000
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	w := m.acc.window.Load()
	in := sentNanos >= w[0] && sentNanos < w[1]
	live := m.acc.live.Load()
	if !in && !live {
		return
	}
	m.mu.Lock()
	if live {
		m.live.RecordValue(us)
	}
	if in {
		m.win.RecordValue(us)
		m.winRecv++
		m.winBytes += int64(size)
	}
	m.mu.Unlock()
}

// Window returns this meter's counts for the current window and merges
// its window latencies into h (if h is not nil).
func (m *Meter) Window(h *hdrhistogram.Histogram) WindowCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h != nil {
		h.Merge(m.win)
	}
	return WindowCounts{Sent: m.winSent.Load(), Received: m.winRecv, Bytes: m.winBytes}
}

// Quantile returns the q-th percentile (0..100) of h as a duration.
func Quantile(h *hdrhistogram.Histogram, q float64) time.Duration {
	return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond
}
