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
// [from, to) in send time (the time a message is stamped with: for a
// fleet's poses, when they were due), applies to all its meters at once: a
// message counts in the window if it was stamped inside it, whenever it
// arrives, so that sent and delivered counts of a window match exactly.
//
// Latencies are not recorded into a histogram per meter: hundreds of
// meters' histograms (about 20 KB each) do not stay in cache, and a
// message's record then cost a cache miss. A meter stages its latencies in
// a small array of its own and moves them into one of a few histograms the
// meters share (a shard) when its read goroutine flushes: after each read,
// or when the array is full.
type Accounts struct {
	window atomic.Pointer[[2]int64]
	live   atomic.Bool // Live has been called: meters record live latencies

	mu     sync.Mutex
	meters []*Meter
	shards [accountShards]shard

	// round trips of pings between peers (a few a second per bot: one
	// histogram under one lock)
	rttMu   sync.Mutex
	rttLive *hdrhistogram.Histogram
}

// accountShards is how many latency histograms the meters of a fleet
// share; meter i uses shard i mod accountShards.
const accountShards = 8

// shard holds the latencies of the meters that share it.
type shard struct {
	mu        sync.Mutex
	live, win *hdrhistogram.Histogram
	_         [64]byte // keep neighbouring shards' locks off one cache line
}

// NewAccounts returns empty accounts.
func NewAccounts() *Accounts {
	a := &Accounts{}
	a.window.Store(&[2]int64{0, 0})
	for i := range a.shards {
		a.shards[i].live, a.shards[i].win = NewHistogram(), NewHistogram()
	}
	a.rttLive = NewHistogram()
	return a
}

// RoundTrip records a ping's round trip through the server, sent at
// sentNanos and echoed back at recvNanos.
func (a *Accounts) RoundTrip(sentNanos, recvNanos int64) {
	a.rttMu.Lock()
	a.rttLive.RecordValue(min(max((recvNanos-sentNanos)/1000, histMin), histMax))
	a.rttMu.Unlock()
}

// LiveRoundTrips returns the round trips recorded since the previous
// call, merged.
func (a *Accounts) LiveRoundTrips() *hdrhistogram.Histogram {
	a.rttMu.Lock()
	defer a.rttMu.Unlock()
	h := a.rttLive
	a.rttLive = NewHistogram()
	return h
}

// NewMeter adds a meter, for one bot.
func (a *Accounts) NewMeter() *Meter {
	a.mu.Lock()
	m := &Meter{acc: a, shard: &a.shards[len(a.meters)%accountShards]}
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
	// The new window first: a meter's flush after this no longer adds
	// counts judged against the old one.
	a.window.Store(&[2]int64{from.UnixNano(), to.UnixNano()})
	for _, m := range a.Meters() {
		m.mu.Lock()
		m.winRecv, m.winBytes = 0, 0
		m.mu.Unlock()
		m.winSent.Store(0)
		m.winMissed.Store(0)
	}
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		s.win.Reset()
		s.mu.Unlock()
	}
}

// WindowLatencies merges the latencies of the current window, of all
// meters, into h.
func (a *Accounts) WindowLatencies(h *hdrhistogram.Histogram) {
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		h.Merge(s.win)
		s.mu.Unlock()
	}
}

// Totals are cumulative counts over all meters. Missed counts the ticks
// senders were too late for and skipped (Meter.Missed).
type Totals struct {
	Sent, Received, Bytes, Missed int64
}

// Live returns the cumulative totals and the latencies recorded since the
// previous call to Live, merged. Meters record live latencies only once
// Live has been called (a benchmark that reads windows only does not pay
// for a second histogram per message): the first call returns none.
func (a *Accounts) Live() (Totals, *hdrhistogram.Histogram) {
	a.live.Store(true)
	var t Totals
	for _, m := range a.Meters() {
		t.Sent += m.sent.Load()
		t.Missed += m.missed.Load()
		m.mu.Lock()
		t.Received += m.recv
		t.Bytes += m.bytes
		m.mu.Unlock()
	}
	h := NewHistogram()
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		h.Merge(s.live)
		s.live.Reset()
		s.mu.Unlock()
	}
	return t, h
}

// WindowCounts are what one meter counted for the current window: Missed
// is the ticks of the window its sender skipped (Meter.Missed).
type WindowCounts struct {
	Sent, Received, Bytes, Missed int64
}

// Meter accounts for one bot: what it sent, what it received and how late.
// Sent is called by the bot's sender. What the bot receives is counted
// by its transport's read goroutine, either one message at a time
// (Received) or a read's messages together (Stage for each, then Flush):
// staged counts are the read goroutine's own, without a lock or an atomic
// per message, and become visible to Window and Live at Flush.
type Meter struct {
	acc   *Accounts
	shard *shard

	sent, winSent     atomic.Int64
	missed, winMissed atomic.Int64

	mu                sync.Mutex
	recv, bytes       int64
	winRecv, winBytes int64

	pend stage // the read goroutine's only
}

// stage is what a meter's read goroutine counted since its last Flush.
type stage struct {
	win               *[2]int64 // the window the counts were judged against
	recv, bytes       int64
	winRecv, winBytes int64
	n                 int
	lat               [meterStage]int64 // latencies in µs with stageLive and stageWin flags
}

// meterStage is how many latencies a meter stages before it flushes.
const meterStage = 256

// A staged latency's flags: record it in the live histogram, in the
// window's, or both.
const (
	stageLive = 1 << 62
	stageWin  = 1 << 61
	stageMask = stageWin - 1
)

// Sent counts a message sent at sentNanos.
func (m *Meter) Sent(sentNanos int64) {
	m.sent.Add(1)
	if w := m.acc.window.Load(); sentNanos >= w[0] && sentNanos < w[1] {
		m.winSent.Add(1)
	}
}

// Missed counts n ticks a sender was too late for and skipped, scheduled
// at first, first+period, ...: poses that were due but never sent. They
// belong to the window their scheduled time falls in, so that a generator
// that falls behind shows as deliveries missing from the window rather
// than as a smaller load that was all delivered.
func (m *Meter) Missed(first, n, period int64) {
	if n <= 0 || period <= 0 {
		return
	}
	m.missed.Add(n)
	w := m.acc.window.Load()
	// The ticks first+i*period with w[0] <= first+i*period < w[1]: i from
	// ceil((w[0]-first)/period) to ceil((w[1]-first)/period), within [0, n).
	lo := min(max(ceilDiv(w[0]-first, period), 0), n)
	hi := min(max(ceilDiv(w[1]-first, period), 0), n)
	if hi > lo {
		m.winMissed.Add(hi - lo)
	}
}

// ceilDiv returns a/b rounded up, for b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// Received counts a message of size bytes sent at sentNanos (0: no
// timestamp, counted but not timed) and received at recvNanos: Stage and
// Flush at once.
func (m *Meter) Received(sentNanos, recvNanos int64, size int) {
	m.Stage(sentNanos, recvNanos, size)
	m.Flush()
}

// Record stages what a transport received: a delivery (Stage), or a
// ping's round trip (Accounts.RoundTrip), which is not a delivery.
func (m *Meter) Record(r *Received) {
	if r.RoundTrip {
		m.acc.RoundTrip(r.SentNanos, r.RecvNanos)
		return
	}
	m.Stage(r.SentNanos, r.RecvNanos, r.Size)
}

// Stage counts a received message as Received does, for the next Flush.
// Only one goroutine (the bot's read goroutine) may call Stage and Flush.
func (m *Meter) Stage(sentNanos, recvNanos int64, size int) {
	m.stage(sentNanos, recvNanos, size, true)
}

// StageUnwindowed counts a received message as Stage does, but in the
// totals and live latencies only, never in the measurement window: a
// message that is not one of the deliveries the window measures (a fleet
// counts its own poses' only).
func (m *Meter) StageUnwindowed(sentNanos, recvNanos int64, size int) {
	m.stage(sentNanos, recvNanos, size, false)
}

func (m *Meter) stage(sentNanos, recvNanos int64, size int, windowed bool) {
	w := m.acc.window.Load()
	p := &m.pend
	if w != p.win {
		if p.recv > 0 {
			m.Flush() // counts judged against an earlier window go first
		}
		p.win = w
	}
	p.recv++
	p.bytes += int64(size)
	if sentNanos == 0 {
		return
	}
	var v int64
	if windowed && sentNanos >= w[0] && sentNanos < w[1] {
		v = stageWin
		p.winRecv++
		p.winBytes += int64(size)
	}
	if m.acc.live.Load() {
		v |= stageLive
	}
	if v == 0 {
		return
	}
	p.lat[p.n] = v | min(max((recvNanos-sentNanos)/1000, histMin), histMax)
	p.n++
	if p.n == meterStage {
		m.Flush()
	}
}

// Flush makes what was staged visible to Window and Live. Counts staged
// for a window that has since been replaced (OpenWindow) count in the
// totals only.
func (m *Meter) Flush() {
	p := &m.pend
	if p.recv == 0 {
		return
	}
	m.mu.Lock()
	current := m.acc.window.Load() == p.win // under m.mu: see OpenWindow
	m.recv += p.recv
	m.bytes += p.bytes
	if current {
		m.winRecv += p.winRecv
		m.winBytes += p.winBytes
	}
	if p.n > 0 {
		s := m.shard
		s.mu.Lock()
		for _, v := range p.lat[:p.n] {
			us := v & stageMask
			if v&stageLive != 0 {
				s.live.RecordValue(us)
			}
			if v&stageWin != 0 && current {
				s.win.RecordValue(us)
			}
		}
		s.mu.Unlock()
	}
	m.mu.Unlock()
	p.recv, p.bytes, p.winRecv, p.winBytes, p.n = 0, 0, 0, 0, 0
}

// Window returns this meter's counts for the current window (the window's
// latencies, of all meters together, are Accounts.WindowLatencies).
func (m *Meter) Window() WindowCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return WindowCounts{Sent: m.winSent.Load(), Received: m.winRecv, Bytes: m.winBytes, Missed: m.winMissed.Load()}
}

// Quantile returns the q-th percentile (0..100) of h as a duration.
func Quantile(h *hdrhistogram.Histogram, q float64) time.Duration {
	return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond
}
